/* SPDX-License-Identifier: BSD-3-Clause */
/* CacheGen cdf / encode / decode / decode_packed on the GPU (docs/LMCACHE.md).
 *
 * One thread per (layer, channel) stream, 128-thread blocks over consecutive streams, grid-stride:
 * neighbouring threads read neighbouring channels of a token row (coalesced). The encoder and
 * decoders keep their block's CDF rows transposed in shared memory ([bin][thread]); the cdf
 * kernel keeps a private histogram column per thread in shared memory, so no kernel needs a
 * barrier inside a stream's work and nothing depends on the warp / wavefront width. The
 * per-stream arithmetic is gpu_coder.h, shared with the CPU-side tests.
 *
 * The data checks the core leaves to backends (symbol ranges, CDF monotonicity, lengths, prefix
 * sums) run first as kernels that record the first offending index (atomicMin) in a staging
 * slot; the host reads it back and fails with the CPU backend's status and message before any
 * output is written. These ops have no stream argument: they run on the default stream and
 * return when done (the checks and the encoder's lengths must be read back anyway). */
#include <stdio.h>
#include <string.h>

#include <kvcore/cachegen.h>

#include "gpu_backend.h"
#include "gpu_coder.h"

#define CG_THREADS 128
#define CHECK_THREADS 256
#define CG_NONE (~0ull)

typedef struct cg_result {
    unsigned long long bad_sym;    /* first symbol >= num_bins */
    unsigned long long bad_row;    /* first stream with a CDF that is not strictly increasing */
    unsigned long long bad_len;    /* first bad length / prefix sum */
    unsigned long long longest;    /* encoder: longest stream */
    unsigned long long first_over; /* encoder: first stream longer than the capacity */
} cg_result_t;

/* ------------------------------------------------------------------ check kernels */

static __global__ void check_symbols_kernel(const uint8_t *sym, uint64_t n, unsigned num_bins, unsigned long long *bad)
{
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        if (sym[i] >= num_bins) { /* the first hit of this thread is its smallest index */
            atomicMin(bad, (unsigned long long)i);
            return;
        }
}

static __global__ void check_cdf_kernel(const uint16_t *cdf, uint64_t nstreams, unsigned num_bins, unsigned long long *bad)
{
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t k = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; k < nstreams; k += stride) {
        const uint16_t *row = cdf + k * (num_bins + 1);
        for (unsigned s = 1; s < num_bins; s++)
            if (row[s] <= row[s - 1]) {
                atomicMin(bad, (unsigned long long)k);
                return;
            }
    }
}

static __global__ void check_lengths_kernel(const int32_t *len, uint64_t n, uint64_t cap, unsigned long long *bad)
{
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t k = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
        if (len[k] < 0 || (uint64_t)len[k] > cap) {
            atomicMin(bad, (unsigned long long)k);
            return;
        }
}

/* Bad where the CPU backend's sequential check stops: p below its predecessor (0 before the
 * first) or past nbytes. Every entry before the first bad one is good, so "predecessor" is the
 * same value in both. */
static __global__ void check_prefsum_kernel(const int64_t *ps, uint64_t n, uint64_t nbytes, unsigned long long *bad)
{
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t k = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
        const int64_t p = ps[k], prev = k ? ps[k - 1] : 0;
        if (p < prev || (uint64_t)p > nbytes) {
            atomicMin(bad, (unsigned long long)k);
            return;
        }
    }
}

/* ------------------------------------------------------------------ coder kernels */

static __global__ void __launch_bounds__(CG_THREADS)
    cdf_kernel(const uint8_t *sym, uint16_t *cdf, uint64_t L, uint64_t T, uint64_t C, unsigned num_bins)
{
    __shared__ uint32_t hist[KVC_CG_MAX_BINS * CG_THREADS]; /* [bin][thread]: one column per thread */
    const unsigned tid = threadIdx.x;
    for (uint64_t k = (uint64_t)blockIdx.x * CG_THREADS + tid; k < L * C; k += (uint64_t)gridDim.x * CG_THREADS) {
        for (unsigned s = 0; s < num_bins; s++) hist[s * CG_THREADS + tid] = 0;
        uint64_t l, c;
        kvc_divmod(k, C, &l, &c);
        const uint8_t *row = sym + l * T * C + c;
        for (uint64_t t = 0; t < T; t++) hist[row[t * C] * CG_THREADS + tid]++;
        kvc_cdf_from_hist(&hist[tid], CG_THREADS, num_bins, T, NULL, cdf + k * (num_bins + 1), 1);
    }
}

/* Load the CDF rows of streams [k0, k0 + nk) into shared memory as [bin][thread]. */
static __device__ void load_cdf_rows(uint16_t *sh, const uint16_t *cdf, uint64_t k0, unsigned nk, unsigned num_bins)
{
    const unsigned w = num_bins + 1;
    const uint16_t *src = cdf + k0 * w;
    for (unsigned i = threadIdx.x; i < nk * w; i += blockDim.x) {
        const unsigned kk = i / w, s = i - kk * w;
        sh[s * CG_THREADS + kk] = src[i];
    }
}

static __global__ void __launch_bounds__(CG_THREADS)
    encode_kernel(const uint16_t *cdf, const uint8_t *sym, uint8_t *streams, int32_t *lengths, uint64_t L, uint64_t T,
                  uint64_t C, uint64_t cap, unsigned num_bins, cg_result_t *res)
{
    __shared__ uint16_t sh[(KVC_CG_MAX_BINS + 1) * CG_THREADS];
    const uint64_t n = L * C;
    for (uint64_t k0 = (uint64_t)blockIdx.x * CG_THREADS; k0 < n; k0 += (uint64_t)gridDim.x * CG_THREADS) {
        const unsigned nk = (unsigned)(n - k0 < CG_THREADS ? n - k0 : CG_THREADS);
        __syncthreads(); /* the previous round's readers are done with sh */
        load_cdf_rows(sh, cdf, k0, nk, num_bins);
        __syncthreads();
        if (threadIdx.x >= nk) continue;
        const uint64_t k = k0 + threadIdx.x;
        uint64_t l, c;
        kvc_divmod(k, C, &l, &c);
        const uint64_t len = kvc_cg_encode_stream(&sh[threadIdx.x], CG_THREADS, num_bins, sym + l * T * C + c, C, T,
                                                  streams ? streams + k * cap : NULL, cap);
        lengths[k] = (int32_t)len;
        atomicMax(&res->longest, (unsigned long long)len);
        if (len > cap) atomicMin(&res->first_over, (unsigned long long)k);
    }
}

/* Per-stream buffers (prefsum NULL: stream k at bytes + k*cap, lengths[k] bytes) or one packed
 * array (stream k at bytes + prefsum[k-1] .. prefsum[k]). */
static __global__ void __launch_bounds__(CG_THREADS)
    decode_kernel(const uint16_t *cdf, const uint8_t *bytes, uint64_t cap, const int32_t *lengths,
                  const int64_t *prefsum, uint8_t *sym, uint64_t L, uint64_t T, uint64_t C, unsigned num_bins)
{
    __shared__ uint16_t sh[(KVC_CG_MAX_BINS + 1) * CG_THREADS];
    const uint64_t n = L * C;
    for (uint64_t k0 = (uint64_t)blockIdx.x * CG_THREADS; k0 < n; k0 += (uint64_t)gridDim.x * CG_THREADS) {
        const unsigned nk = (unsigned)(n - k0 < CG_THREADS ? n - k0 : CG_THREADS);
        __syncthreads();
        load_cdf_rows(sh, cdf, k0, nk, num_bins);
        __syncthreads();
        if (threadIdx.x >= nk) continue;
        const uint64_t k = k0 + threadIdx.x;
        uint64_t l, c, start, len;
        kvc_divmod(k, C, &l, &c);
        if (prefsum) {
            start = k ? (uint64_t)prefsum[k - 1] : 0;
            len = (uint64_t)prefsum[k] - start;
        } else {
            start = k * cap;
            len = (uint64_t)lengths[k];
        }
        kvc_cg_decode_stream(&sh[threadIdx.x], CG_THREADS, num_bins, bytes ? bytes + start : NULL, len,
                             sym + l * T * C + c, C, T);
    }
}

/* ------------------------------------------------------------------ host side */

static kvc_status_t read_back(kvc_backend_ctx_t *b, void *dst, const void *src, size_t n)
{
    return KVC_GPU_CALL(b, gpuMemcpy(dst, src, n, gpuMemcpyDeviceToHost), 1);
}

/* A staging slot holding a cg_result_t initialised to "nothing found", uploaded (released again
 * on failure). */
static kvc_status_t result_begin(kvc_backend_ctx_t *b, gpu_stage_t *s, cg_result_t **dev)
{
    kvc_status_t st = kvc_gpu_stage_begin(b, sizeof(cg_result_t), s);
    if (st != KVC_OK) return st;
    cg_result_t *h = (cg_result_t *)s->host;
    h->bad_sym = h->bad_row = h->bad_len = h->first_over = CG_NONE;
    h->longest = 0;
    *dev = (cg_result_t *)s->dev;
    st = kvc_gpu_stage_upload(b, s, sizeof(cg_result_t), 0);
    return st == KVC_OK ? st : kvc_gpu_stage_end(b, s, 0, st);
}

static kvc_status_t symbols_error(kvc_backend_ctx_t *b, const char *op, const uint8_t *sym, uint64_t i, size_t T,
                                  size_t C, unsigned num_bins)
{
    uint8_t v = 0;
    kvc_status_t st = read_back(b, &v, sym + i, 1);
    if (st != KVC_OK) return st;
    const size_t c = i % C, t = i / C % T, l = i / C / T;
    return b->svc->set_error(KVC_ERR_OUT_OF_RANGE,
                             "%s: symbols[%zu] (layer %zu, token %zu, channel %zu) = %u is not below num_bins %u", op,
                             (size_t)i, l, t, c, v, num_bins);
}

static kvc_status_t cdf_error(kvc_backend_ctx_t *b, const char *op, kvc_status_t status, const uint16_t *cdf, uint64_t k,
                              size_t C, unsigned num_bins)
{
    uint16_t row[KVC_CG_MAX_BINS + 1];
    kvc_status_t st = read_back(b, row, cdf + k * (num_bins + 1), 2 * (size_t)(num_bins + 1));
    if (st != KVC_OK) return st;
    unsigned s = 1;
    while (s < num_bins && row[s] > row[s - 1]) s++;
    return b->svc->set_error(status,
                             "%s: cdf of stream %zu (layer %zu, channel %zu) is not strictly increasing: cdf[%u] = %u, "
                             "cdf[%u] = %u",
                             op, (size_t)k, (size_t)k / C, (size_t)k % C, s - 1, row[s - 1], s, row[s]);
}

/* Symbol and CDF checks (either may be skipped with a NULL pointer); results read back. */
static kvc_status_t run_checks(kvc_backend_ctx_t *b, gpu_stage_t *s, cg_result_t *dres, const uint8_t *sym,
                               uint64_t nsym, const uint16_t *cdf, uint64_t nstreams, unsigned num_bins)
{
    if (sym && nsym)
        gpuLaunch(check_symbols_kernel, kvc_gpu_grid(b, nsym, CHECK_THREADS), CHECK_THREADS, 0)(
            sym, nsym, num_bins, &dres->bad_sym);
    if (cdf)
        gpuLaunch(check_cdf_kernel, kvc_gpu_grid(b, nstreams, CHECK_THREADS), CHECK_THREADS, 0)(cdf, nstreams, num_bins,
                                                                                      &dres->bad_row);
    kvc_status_t st = kvc_gpu_launch_status(b, "cachegen checks");
    if (st == KVC_OK) st = kvc_gpu_stage_download(b, s, sizeof(cg_result_t), 0);
    return st;
}

static kvc_status_t cg_cdf_on_device(kvc_backend_ctx_t *b, const struct kvc_cdf_args *a)
{
    const uint64_t L = a->layers, T = a->tokens, C = a->channels;
    gpu_stage_t s;
    cg_result_t *dres = NULL;
    kvc_status_t st = result_begin(b, &s, &dres);
    if (st != KVC_OK) return st;
    st = run_checks(b, &s, dres, a->symbols, L * T * C, NULL, 0, a->num_bins);
    const cg_result_t *h = (const cg_result_t *)s.host;
    if (st == KVC_OK && h->bad_sym != CG_NONE)
        st = symbols_error(b, "cg_cdf", a->symbols, h->bad_sym, a->tokens, a->channels, a->num_bins);
    if (st == KVC_OK) {
        gpuLaunch(cdf_kernel, kvc_gpu_grid(b, L * C, CG_THREADS), CG_THREADS, 0)(
            a->symbols, a->cdf, L, T, C, a->num_bins);
        st = kvc_gpu_launch_status(b, "cg_cdf");
        if (st == KVC_OK) st = KVC_GPU_CALL(b, gpuStreamSynchronize(0), 1);
    }
    return kvc_gpu_stage_end(b, &s, 0, st);
}

static kvc_status_t cg_encode_on_device(kvc_backend_ctx_t *b, const struct kvc_encode_args *a)
{
    const uint64_t L = a->layers, T = a->tokens, C = a->channels, n = L * C;
    gpu_stage_t s;
    cg_result_t *dres = NULL;
    kvc_status_t st = result_begin(b, &s, &dres);
    if (st != KVC_OK) return st;
    st = run_checks(b, &s, dres, a->symbols, L * T * C, a->cdf, n, a->num_bins);
    const cg_result_t *h = (const cg_result_t *)s.host;
    if (st == KVC_OK && h->bad_sym != CG_NONE)
        st = symbols_error(b, "cg_encode", a->symbols, h->bad_sym, a->tokens, a->channels, a->num_bins);
    if (st == KVC_OK && h->bad_row != CG_NONE)
        st = cdf_error(b, "cg_encode", KVC_ERR_INVALID_ARG, a->cdf, h->bad_row, a->channels, a->num_bins);
    if (st == KVC_OK) {
        gpuLaunch(encode_kernel, kvc_gpu_grid(b, n, CG_THREADS), CG_THREADS, 0)(
            a->cdf, a->symbols, a->streams, a->lengths, L, T,
                                                                      C, a->capacity, a->num_bins, dres);
        st = kvc_gpu_launch_status(b, "cg_encode");
        if (st == KVC_OK) st = kvc_gpu_stage_download(b, &s, sizeof(cg_result_t), 0);
    }
    if (st == KVC_OK) {
        *a->needed = (size_t)h->longest;
        if (h->first_over != CG_NONE) {
            const size_t k = (size_t)h->first_over;
            int32_t len = 0;
            st = read_back(b, &len, a->lengths + k, 4);
            if (st == KVC_OK)
                st = b->svc->set_error(KVC_ERR_NO_SPACE,
                                       "cg_encode: stream %zu (layer %zu, channel %zu) needs %d bytes, capacity is %zu; "
                                       "the longest stream needs %zu",
                                       k, k / a->channels, k % a->channels, len, a->capacity, (size_t)h->longest);
        }
    }
    return kvc_gpu_stage_end(b, &s, 0, st);
}

static kvc_status_t cg_decode_on_device(kvc_backend_ctx_t *b, const struct kvc_decode_args *a)
{
    const uint64_t L = a->layers, C = a->channels, n = L * C;
    gpu_stage_t s;
    cg_result_t *dres = NULL;
    kvc_status_t st = result_begin(b, &s, &dres);
    if (st != KVC_OK) return st;
    gpuLaunch(check_lengths_kernel, kvc_gpu_grid(b, n, CHECK_THREADS), CHECK_THREADS, 0)(a->lengths, n, a->capacity,
                                                                               &dres->bad_len);
    st = run_checks(b, &s, dres, NULL, 0, a->cdf, n, a->num_bins);
    const cg_result_t *h = (const cg_result_t *)s.host;
    if (st == KVC_OK && h->bad_row != CG_NONE)
        st = cdf_error(b, "cg_decode", KVC_ERR_CORRUPT, a->cdf, h->bad_row, a->channels, a->num_bins);
    if (st == KVC_OK && h->bad_len != CG_NONE) {
        const size_t k = (size_t)h->bad_len;
        int32_t len = 0;
        st = read_back(b, &len, a->lengths + k, 4);
        if (st == KVC_OK)
            st = b->svc->set_error(KVC_ERR_CORRUPT,
                                   "cg_decode: lengths[%zu] (layer %zu, channel %zu) = %d outside [0, capacity %zu]", k,
                                   k / a->channels, k % a->channels, len, a->capacity);
    }
    if (st == KVC_OK) {
        gpuLaunch(decode_kernel, kvc_gpu_grid(b, n, CG_THREADS), CG_THREADS, 0)(
            a->cdf, a->streams, a->capacity, a->lengths, NULL,
                                                                      a->symbols, L, a->tokens, C, a->num_bins);
        st = kvc_gpu_launch_status(b, "cg_decode");
        if (st == KVC_OK) st = KVC_GPU_CALL(b, gpuStreamSynchronize(0), 1);
    }
    return kvc_gpu_stage_end(b, &s, 0, st);
}

static kvc_status_t cg_decode_packed_on_device(kvc_backend_ctx_t *b, const struct kvc_decode_packed_args *a)
{
    const uint64_t L = a->layers, C = a->channels, n = L * C;
    gpu_stage_t s;
    cg_result_t *dres = NULL;
    kvc_status_t st = result_begin(b, &s, &dres);
    if (st != KVC_OK) return st;
    gpuLaunch(check_prefsum_kernel, kvc_gpu_grid(b, n, CHECK_THREADS), CHECK_THREADS, 0)(a->prefsum, n, a->nbytes,
                                                                               &dres->bad_len);
    st = run_checks(b, &s, dres, NULL, 0, a->cdf, n, a->num_bins);
    const cg_result_t *h = (const cg_result_t *)s.host;
    if (st == KVC_OK && h->bad_row != CG_NONE)
        st = cdf_error(b, "cg_decode_packed", KVC_ERR_CORRUPT, a->cdf, h->bad_row, a->channels, a->num_bins);
    if (st == KVC_OK && h->bad_len != CG_NONE) {
        const size_t k = (size_t)h->bad_len;
        int64_t v[2] = { 0, 0 }; /* previous, this */
        st = k ? read_back(b, v, a->prefsum + k - 1, 16) : read_back(b, v + 1, a->prefsum, 8);
        if (st == KVC_OK)
            st = b->svc->set_error(KVC_ERR_CORRUPT,
                                   "cg_decode_packed: prefsum[%zu] (layer %zu, channel %zu) = %lld %s (previous %lld, "
                                   "%zu bytes given)",
                                   k, k / a->channels, k % a->channels, (long long)v[1],
                                   v[1] < v[0] ? "decreases" : "is past the end", (long long)v[0], a->nbytes);
    }
    if (st == KVC_OK) {
        gpuLaunch(decode_kernel, kvc_gpu_grid(b, n, CG_THREADS), CG_THREADS, 0)(
            a->cdf, a->bytes, 0, NULL, a->prefsum, a->symbols,
                                                                      L, a->tokens, C, a->num_bins);
        st = kvc_gpu_launch_status(b, "cg_decode_packed");
        if (st == KVC_OK) st = KVC_GPU_CALL(b, gpuStreamSynchronize(0), 1);
    }
    return kvc_gpu_stage_end(b, &s, 0, st);
}

/* The public slots: every data pointer checked and translated as transfer.cu does (device and
 * managed memory as is, registered host memory through its device address, pageable host memory
 * refused with KVC_ERR_INVALID_ARG naming it). The core never sends pageable host memory here (it
 * routes host-only calls to its CPU ops and refuses device + pageable mixes); the check keeps the
 * module safe on its own, as transfer.cu is. */

kvc_status_t kvc_gpu_cg_cdf(kvc_backend_ctx_t *b, const struct kvc_cdf_args *a_in)
{
    struct kvc_cdf_args a = *a_in;
    KVC_GPU_REACH(b, "cg_cdf", a, symbols);
    KVC_GPU_REACH(b, "cg_cdf", a, cdf);
    return cg_cdf_on_device(b, &a);
}

kvc_status_t kvc_gpu_cg_encode(kvc_backend_ctx_t *b, const struct kvc_encode_args *a_in)
{
    struct kvc_encode_args a = *a_in;
    KVC_GPU_REACH(b, "cg_encode", a, cdf);
    KVC_GPU_REACH(b, "cg_encode", a, symbols);
    KVC_GPU_REACH(b, "cg_encode", a, streams);
    KVC_GPU_REACH(b, "cg_encode", a, lengths);
    return cg_encode_on_device(b, &a);
}

kvc_status_t kvc_gpu_cg_decode(kvc_backend_ctx_t *b, const struct kvc_decode_args *a_in)
{
    struct kvc_decode_args a = *a_in;
    KVC_GPU_REACH(b, "cg_decode", a, cdf);
    KVC_GPU_REACH(b, "cg_decode", a, streams);
    KVC_GPU_REACH(b, "cg_decode", a, lengths);
    KVC_GPU_REACH(b, "cg_decode", a, symbols);
    return cg_decode_on_device(b, &a);
}

kvc_status_t kvc_gpu_cg_decode_packed(kvc_backend_ctx_t *b, const struct kvc_decode_packed_args *a_in)
{
    struct kvc_decode_packed_args a = *a_in;
    KVC_GPU_REACH(b, "cg_decode_packed", a, cdf);
    KVC_GPU_REACH(b, "cg_decode_packed", a, bytes);
    KVC_GPU_REACH(b, "cg_decode_packed", a, prefsum);
    KVC_GPU_REACH(b, "cg_decode_packed", a, symbols);
    return cg_decode_packed_on_device(b, &a);
}
