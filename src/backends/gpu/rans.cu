/* SPDX-License-Identifier: BSD-3-Clause */
/* Interleaved rANS tables / encode / decode on the GPU (cachegen.h kvc_rans_*, docs/GPU.md).
 *
 * One thread per stream (up to 32 channels of a layer, 4 groups of 8 coded one after another by
 * 8 states: the format's unit; the states never leave the thread), 128-thread blocks over
 * consecutive streams, grid-stride; the per-stream code is gpu_rans.h. A full group's code is
 * called with a constant 8 lanes, so its states can live in registers. The tables kernel is one thread per (layer, channel) with its histogram a column of
 * shared memory ([bin][thread]), as the arithmetic coder's cdf kernel. Not measured on a GPU yet
 * (none was lent while this was written); tests run this file on the CPU through
 * tests/modules/gpu_host.so.
 *
 * The data checks the core leaves to backends (symbols against the tables, the tables, the end
 * offsets) run first as kernels that record the first offending index (atomicMin) in a staging
 * slot; the host reads it back and fails with the CPU backend's status and message before any
 * output is written. A damaged stream is found while decoding (the first one is named, as the CPU
 * backend does). No stream argument: the default stream, returning when done. */
#include <stdio.h>
#include <string.h>

#include <kvcore/cachegen.h>

#include "gpu_backend.h"
#include "gpu_rans.h"

#define RANS_THREADS 128
#define CHECK_THREADS 256
#define RANS_NONE (~0ull)

typedef struct rans_result {
    unsigned long long bad_sym;    /* first symbol >= num_bins (tables) or without frequency (encode) */
    unsigned long long bad_row;    /* first table that is not one */
    unsigned long long bad_end;    /* first bad end offset */
    unsigned long long bad_stream; /* first damaged stream */
} rans_result_t;

/* ------------------------------------------------------------------ check kernels */

/* mode 0: a symbol >= num_bins; mode 1: a symbol without frequency in its channel's table. */
static __global__ void check_symbols_kernel(const uint8_t *sym, const uint16_t *cum, uint64_t T, uint64_t C, uint64_t n,
                                            unsigned bins, int mode, unsigned long long *bad)
{
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const unsigned s = sym[i];
        const int ok = mode ? kvc_gpu_rans_has_freq(cum + (i / (T * C) * C + i % C) * (bins + 1), bins, s) : s < bins;
        if (!ok) { /* the first hit of this thread is its smallest index */
            atomicMin(bad, (unsigned long long)i);
            return;
        }
    }
}

static __global__ void check_tables_kernel(const uint16_t *cum, uint64_t n, unsigned bins, unsigned long long *bad)
{
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t k = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
        if (!kvc_rans_table_ok(cum + k * (bins + 1), bins)) {
            atomicMin(bad, (unsigned long long)k);
            return;
        }
}

static __global__ void check_ends_kernel(const int64_t *ends, uint64_t n, uint64_t nbytes, unsigned long long *bad)
{
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t k = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
        if (kvc_gpu_rans_end_bad(ends, k, nbytes)) {
            atomicMin(bad, (unsigned long long)k);
            return;
        }
}

/* ------------------------------------------------------------------ coder kernels */

static __global__ void __launch_bounds__(RANS_THREADS)
    tables_kernel(const uint8_t *sym, uint16_t *cum, uint64_t L, uint64_t T, uint64_t C, unsigned bins)
{
    __shared__ uint32_t hist[KVC_CG_MAX_BINS * RANS_THREADS]; /* [bin][thread]: one column per thread */
    const unsigned tid = threadIdx.x;
    for (uint64_t k = (uint64_t)blockIdx.x * RANS_THREADS + tid; k < L * C; k += (uint64_t)gridDim.x * RANS_THREADS)
        kvc_gpu_rans_table(sym + k / C * T * C + k % C, C, T, bins, &hist[tid], RANS_THREADS, cum + k * (bins + 1));
}

static __global__ void __launch_bounds__(RANS_THREADS)
    encode_kernel(const uint16_t *cum, const uint8_t *sym, uint8_t *streams, int32_t *lengths, uint64_t L, uint64_t T,
                  uint64_t C, uint64_t cap, unsigned groups, unsigned bins)
{
    const uint64_t span = (uint64_t)KVC_RANS_GROUP * groups, Q = kvc_rans_streams(C, groups), n = L * Q;
    for (uint64_t k = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t l = k / Q, c0 = k % Q * span;
        const unsigned nch = (unsigned)(C - c0 < span ? C - c0 : span);
        const uint8_t *s = T ? sym + l * T * C + c0 : sym;
        lengths[k] = (int32_t)kvc_gpu_rans_encode_stream(s, C, T, nch, cum + (l * C + c0) * (bins + 1), bins, streams + k * cap, cap);
    }
}

static __global__ void __launch_bounds__(RANS_THREADS)
    decode_kernel(const uint16_t *cum, const uint8_t *bytes, const int64_t *ends, uint8_t *sym, uint64_t L, uint64_t T,
                  uint64_t C, unsigned groups, unsigned bins, unsigned long long *bad)
{
    const uint64_t span = (uint64_t)KVC_RANS_GROUP * groups, Q = kvc_rans_streams(C, groups), n = L * Q;
    for (uint64_t k = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t l = k / Q, c0 = k % Q * span, start = k ? (uint64_t)ends[k - 1] : 0;
        const unsigned nch = (unsigned)(C - c0 < span ? C - c0 : span);
        uint8_t *out = T ? sym + l * T * C + c0 : sym;
        if (kvc_gpu_rans_decode_stream(bytes + start, (uint64_t)ends[k] - start, T, nch, cum + (l * C + c0) * (bins + 1), bins, out, C))
            atomicMin(bad, (unsigned long long)k);
    }
}

/* ------------------------------------------------------------------ host side */

static kvc_status_t read_back(kvc_backend_ctx_t *b, void *dst, const void *src, size_t n)
{
    return KVC_GPU_CALL(b, gpuMemcpy(dst, src, n, gpuMemcpyDeviceToHost), 1);
}

/* A staging slot holding a rans_result_t set to "nothing found", uploaded (released on failure). */
static kvc_status_t result_begin(kvc_backend_ctx_t *b, gpu_stage_t *s, rans_result_t **dev)
{
    kvc_status_t st = kvc_gpu_stage_begin(b, sizeof(rans_result_t), s);
    if (st != KVC_OK) return st;
    rans_result_t *h = (rans_result_t *)s->host;
    h->bad_sym = h->bad_row = h->bad_end = h->bad_stream = RANS_NONE;
    *dev = (rans_result_t *)s->dev;
    st = kvc_gpu_stage_upload(b, s, sizeof(rans_result_t), 0);
    return st == KVC_OK ? st : kvc_gpu_stage_end(b, s, 0, st);
}

static kvc_status_t checks_done(kvc_backend_ctx_t *b, gpu_stage_t *s, const char *op)
{
    kvc_status_t st = kvc_gpu_launch_status(b, op);
    return st == KVC_OK ? kvc_gpu_stage_download(b, s, sizeof(rans_result_t), 0) : st;
}

static kvc_status_t symbol_error(kvc_backend_ctx_t *b, const char *op, const uint8_t *sym, const uint16_t *cum, uint64_t i,
                                 size_t T, size_t C, unsigned bins)
{
    uint8_t v = 0;
    kvc_status_t st = read_back(b, &v, sym + i, 1);
    if (st != KVC_OK) return st;
    const size_t c = (size_t)i % C, t = (size_t)i / C % T, l = (size_t)i / C / T;
    char why[256];
    if (!cum) /* the tables' check: the arithmetic coder's words */
        return b->svc->set_error(KVC_ERR_OUT_OF_RANGE,
                                 "%s: symbols[%zu] (layer %zu, token %zu, channel %zu) = %u is not below num_bins %u", op,
                                 (size_t)i, l, t, c, v, bins);
    kvc_rans_symbol_why((size_t)i, l, t, c, v, bins, why, sizeof why);
    return b->svc->set_error(KVC_ERR_OUT_OF_RANGE, "%s: %s", op, why);
}

static kvc_status_t table_error(kvc_backend_ctx_t *b, const char *op, kvc_status_t status, const uint16_t *cum, uint64_t k,
                                size_t C, unsigned bins)
{
    uint16_t row[KVC_CG_MAX_BINS + 1];
    kvc_status_t st = read_back(b, row, cum + k * (bins + 1), 2 * (size_t)(bins + 1));
    if (st != KVC_OK) return st;
    char why[96];
    kvc_rans_table_why(row, bins, why, sizeof why);
    return b->svc->set_error(status, "%s: cum of layer %zu, channel %zu is not a frequency table: %s", op, (size_t)k / C,
                             (size_t)k % C, why);
}

static kvc_status_t rans_tables_on_device(kvc_backend_ctx_t *b, const struct kvc_rans_tables_args *a)
{
    const uint64_t L = a->layers, T = a->tokens, C = a->channels, nsym = L * T * C;
    gpu_stage_t s;
    rans_result_t *dres = NULL;
    kvc_status_t st = result_begin(b, &s, &dres);
    if (st != KVC_OK) return st;
    gpuLaunch(check_symbols_kernel, kvc_gpu_grid(b, nsym, CHECK_THREADS), CHECK_THREADS, 0)(a->symbols, NULL, T, C, nsym,
                                                                                             a->num_bins, 0, &dres->bad_sym);
    st = checks_done(b, &s, "rans_tables checks");
    const rans_result_t *h = (const rans_result_t *)s.host;
    if (st == KVC_OK && h->bad_sym != RANS_NONE)
        st = symbol_error(b, "rans_tables", a->symbols, NULL, h->bad_sym, a->tokens, a->channels, a->num_bins);
    if (st == KVC_OK) {
        gpuLaunch(tables_kernel, kvc_gpu_grid(b, L * C, RANS_THREADS), RANS_THREADS, 0)(a->symbols, a->cum, L, T, C,
                                                                                         a->num_bins);
        st = kvc_gpu_launch_status(b, "rans_tables");
        if (st == KVC_OK) st = KVC_GPU_CALL(b, gpuStreamSynchronize(0), 1);
    }
    return kvc_gpu_stage_end(b, &s, 0, st);
}

static kvc_status_t rans_encode_on_device(kvc_backend_ctx_t *b, const struct kvc_rans_encode_args *a)
{
    const uint64_t L = a->layers, T = a->tokens, C = a->channels, nsym = L * T * C, G = kvc_rans_streams(C, KVC_RANS_STREAM_GROUPS);
    gpu_stage_t s;
    rans_result_t *dres = NULL;
    kvc_status_t st = result_begin(b, &s, &dres);
    if (st != KVC_OK) return st;
    gpuLaunch(check_tables_kernel, kvc_gpu_grid(b, L * C, CHECK_THREADS), CHECK_THREADS, 0)(a->cum, L * C, a->num_bins,
                                                                                             &dres->bad_row);
    if (nsym)
        gpuLaunch(check_symbols_kernel, kvc_gpu_grid(b, nsym, CHECK_THREADS), CHECK_THREADS, 0)(
            a->symbols, a->cum, T, C, nsym, a->num_bins, 1, &dres->bad_sym);
    st = checks_done(b, &s, "rans_encode checks");
    const rans_result_t *h = (const rans_result_t *)s.host;
    if (st == KVC_OK && h->bad_row != RANS_NONE)
        st = table_error(b, "rans_encode", KVC_ERR_INVALID_ARG, a->cum, h->bad_row, a->channels, a->num_bins);
    if (st == KVC_OK && h->bad_sym != RANS_NONE)
        st = symbol_error(b, "rans_encode", a->symbols, a->cum, h->bad_sym, a->tokens, a->channels, a->num_bins);
    if (st == KVC_OK) {
        gpuLaunch(encode_kernel, kvc_gpu_grid(b, L * G, RANS_THREADS), RANS_THREADS, 0)(
            a->cum, a->symbols, a->streams, a->lengths, L, T, C, a->capacity, KVC_RANS_STREAM_GROUPS, a->num_bins);
        st = kvc_gpu_launch_status(b, "rans_encode");
        if (st == KVC_OK) st = KVC_GPU_CALL(b, gpuStreamSynchronize(0), 1);
    }
    return kvc_gpu_stage_end(b, &s, 0, st);
}

static kvc_status_t rans_decode_on_device(kvc_backend_ctx_t *b, const struct kvc_rans_decode_args *a)
{
    const uint64_t L = a->layers, T = a->tokens, C = a->channels, G = kvc_rans_streams(C, KVC_RANS_STREAM_GROUPS);
    gpu_stage_t s;
    rans_result_t *dres = NULL;
    kvc_status_t st = result_begin(b, &s, &dres);
    if (st != KVC_OK) return st;
    gpuLaunch(check_tables_kernel, kvc_gpu_grid(b, L * C, CHECK_THREADS), CHECK_THREADS, 0)(a->cum, L * C, a->num_bins,
                                                                                             &dres->bad_row);
    gpuLaunch(check_ends_kernel, kvc_gpu_grid(b, L * G, CHECK_THREADS), CHECK_THREADS, 0)(a->ends, L * G, a->nbytes,
                                                                                           &dres->bad_end);
    st = checks_done(b, &s, "rans_decode checks");
    const rans_result_t *h = (const rans_result_t *)s.host;
    if (st == KVC_OK && h->bad_row != RANS_NONE)
        st = table_error(b, "rans_decode", KVC_ERR_CORRUPT, a->cum, h->bad_row, a->channels, a->num_bins);
    if (st == KVC_OK && h->bad_end != RANS_NONE) {
        const size_t k = (size_t)h->bad_end;
        int64_t v[2] = { 0, 0 }; /* previous, this */
        st = k ? read_back(b, v, a->ends + k - 1, 16) : read_back(b, v + 1, a->ends, 8);
        if (st == KVC_OK)
            st = b->svc->set_error(KVC_ERR_CORRUPT,
                                   "rans_decode: ends[%zu] (layer %zu, stream %zu) = %lld %s (previous %lld, %zu bytes given)",
                                   k, k / (size_t)G, k % (size_t)G, (long long)v[1],
                                   v[1] < v[0] ? "decreases" : "is past the end", (long long)v[0], a->nbytes);
    }
    if (st == KVC_OK) {
        gpuLaunch(decode_kernel, kvc_gpu_grid(b, L * G, RANS_THREADS), RANS_THREADS, 0)(
            a->cum, a->bytes, a->ends, a->symbols, L, T, C, KVC_RANS_STREAM_GROUPS, a->num_bins, &dres->bad_stream);
        st = checks_done(b, &s, "rans_decode");
    }
    if (st == KVC_OK && h->bad_stream != RANS_NONE) {
        char why[192];
        kvc_rans_corrupt_why((size_t)h->bad_stream, (size_t)G, (size_t)KVC_RANS_GROUP * KVC_RANS_STREAM_GROUPS, (size_t)C, why, sizeof why);
        st = b->svc->set_error(KVC_ERR_CORRUPT, "%s", why);
    }
    return kvc_gpu_stage_end(b, &s, 0, st);
}

/* The slots: every data pointer checked and translated as cachegen.cu does. */

kvc_status_t kvc_gpu_rans_tables(kvc_backend_ctx_t *b, const struct kvc_rans_tables_args *a_in)
{
    struct kvc_rans_tables_args a = *a_in;
    KVC_GPU_REACH(b, "rans_tables", a, symbols);
    KVC_GPU_REACH(b, "rans_tables", a, cum);
    return rans_tables_on_device(b, &a);
}

kvc_status_t kvc_gpu_rans_encode(kvc_backend_ctx_t *b, const struct kvc_rans_encode_args *a_in)
{
    struct kvc_rans_encode_args a = *a_in;
    KVC_GPU_REACH(b, "rans_encode", a, cum);
    KVC_GPU_REACH(b, "rans_encode", a, symbols);
    KVC_GPU_REACH(b, "rans_encode", a, streams);
    KVC_GPU_REACH(b, "rans_encode", a, lengths);
    return rans_encode_on_device(b, &a);
}

kvc_status_t kvc_gpu_rans_decode(kvc_backend_ctx_t *b, const struct kvc_rans_decode_args *a_in)
{
    struct kvc_rans_decode_args a = *a_in;
    KVC_GPU_REACH(b, "rans_decode", a, cum);
    KVC_GPU_REACH(b, "rans_decode", a, bytes);
    KVC_GPU_REACH(b, "rans_decode", a, ends);
    KVC_GPU_REACH(b, "rans_decode", a, symbols);
    return rans_decode_on_device(b, &a);
}
