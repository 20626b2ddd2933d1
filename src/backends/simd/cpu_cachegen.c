/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU CacheGen ops: data validation (before any output is written), OpenMP over blocks of
 * streams, and the scalar instantiation of the coder kernels. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/cdf.h"
#include "common/halfs.h"
#include "cpu_cachegen.h"

/* Channels per parallel work item: 64 adjacent channels share every 64-byte row segment of the
 * [L, T, C] symbol tensor, so one thread reads (or writes) each cache line once. */
#define CG_BLOCK 64

/* ------------------------------------------------------------------ scalar coder instance */

/* Branch-free count of entries <= count in a sorted table of w entries (w a power of two). */
static inline unsigned cg_search_scalar(const uint16_t *tab, uint32_t count, unsigned w)
{
    unsigned pos = 0;
    for (unsigned step = w / 2; step; step >>= 1) pos += tab[pos + step - 1] <= count ? step : 0;
    return pos + (tab[pos] <= count);
}
#define CG_SEARCH32(tab, count) cg_search_scalar((tab), (count), 32)
#define CG_SEARCH64(tab, count) cg_search_scalar((tab), (count), 64)
#include "cpu_cachegen_coder.h"
CG_DEFINE_CODER(scalar)

const cg_kernels_t cg_kernels_scalar = {
    .encode = cg_encode_streams_scalar,
    .decode = cg_decode_streams_scalar,
    .quantise_rows = cg_quantise_rows_scalar,
    .dequantise_rows = cg_dequantise_rows_scalar,
    .halves_to_f32 = kvc_halfs_to_f32,
};

const cg_kernels_t *cg_kernels_for(const kvc_backend_ctx_t *b)
{
#ifdef KVC_HAVE_X86_SIMD
    if (b->isa >= KVC_ISA_AVX512) return &cg_kernels_avx512;
    if (b->isa >= KVC_ISA_AVX2) return &cg_kernels_avx2;
#elif defined(KVC_CG_HAVE_NEON)
    if (b->isa >= KVC_ISA_NEON) return &cg_kernels_neon;
#else
    (void)b;
#endif
    return &cg_kernels_scalar;
}

/* ------------------------------------------------------------------ data validation */

/* cdf[0..num_bins-1] strictly increasing in every row; else the first offending row. */
static kvc_status_t check_cdf(kvc_backend_ctx_t *b, const char *op, kvc_status_t status, const uint16_t *cdf,
                              size_t nstreams, size_t channels, unsigned num_bins)
{
    size_t first_bad = nstreams;
#pragma omp parallel for schedule(static) num_threads(b->num_threads) reduction(min : first_bad) \
    if (nstreams * num_bins >= CG_PARALLEL_MIN)
    for (size_t k = 0; k < nstreams; k++) {
        const uint16_t *row = cdf + k * (num_bins + 1);
        unsigned ok = 1;
        for (unsigned s = 1; s < num_bins; s++) ok &= row[s] > row[s - 1];
        if (!ok && k < first_bad) first_bad = k;
    }
    if (first_bad == nstreams) return KVC_OK;
    const uint16_t *row = cdf + first_bad * (num_bins + 1);
    unsigned s = 1;
    while (row[s] > row[s - 1]) s++;
    return b->svc->set_error(status,
                             "%s: cdf of stream %zu (layer %zu, channel %zu) is not strictly increasing: cdf[%u] = %u, "
                             "cdf[%u] = %u",
                             op, first_bad, first_bad / channels, first_bad % channels, s - 1, row[s - 1], s, row[s]);
}

/* ------------------------------------------------------------------ cdf */

kvc_status_t cpu_cg_cdf(kvc_backend_ctx_t *b, const struct kvc_cdf_args *a)
{
    const size_t L = a->layers, T = a->tokens, C = a->channels;
    const unsigned B = a->num_bins;
    kvc_status_t st = cg_check_symbols(b, "cg_cdf", a->symbols, L, T, C, B);
    if (st != KVC_OK) return st;
    /* The divisor is the same for every stream, so tabulate kvc_cdf_scaled once for usual token
     * counts; beyond that divide per entry (still cheap next to T symbols). */
    uint16_t *norm = NULL;
    if (T > 0 && T <= (1u << 16)) {
        norm = malloc((T + 1) * sizeof(*norm));
        if (!norm) return b->svc->set_error(KVC_ERR_NO_MEMORY, "cg_cdf: %zu bytes of scratch", (T + 1) * sizeof(*norm));
        for (size_t cum = 0; cum <= T; cum++) norm[cum] = (uint16_t)kvc_cdf_scaled(cum, B, T);
    }
    const size_t nblk = (C + CG_BLOCK - 1) / CG_BLOCK;
#pragma omp parallel for schedule(dynamic, 1) num_threads(b->num_threads) if (L * T * C >= CG_PARALLEL_MIN)
    for (size_t item = 0; item < L * nblk; item++) {
        const size_t l = item / nblk, c0 = item % nblk * CG_BLOCK;
        const size_t w = C - c0 < CG_BLOCK ? C - c0 : CG_BLOCK;
        uint32_t hist[CG_BLOCK][KVC_CG_MAX_BINS];
        memset(hist, 0, sizeof(hist));
        const uint8_t *row = T ? a->symbols + l * T * C + c0 : NULL;
        for (size_t t = 0; t < T; t++, row += C)
            for (size_t i = 0; i < w; i++) hist[i][row[i]]++;
        for (size_t i = 0; i < w; i++) kvc_cdf_from_hist(hist[i], 1, B, T, norm, a->cdf + (l * C + c0 + i) * (B + 1), 1);
    }
    free(norm);
    return KVC_OK;
}

/* ------------------------------------------------------------------ encode */

kvc_status_t cpu_cg_encode(kvc_backend_ctx_t *b, const struct kvc_encode_args *a)
{
    const size_t L = a->layers, T = a->tokens, C = a->channels;
    kvc_status_t st = cg_check_symbols(b, "cg_encode", a->symbols, L, T, C, a->num_bins);
    if (st == KVC_OK) st = check_cdf(b, "cg_encode", KVC_ERR_INVALID_ARG, a->cdf, L * C, C, a->num_bins);
    if (st != KVC_OK) return st;
    const cg_kernels_t *k = cg_kernels_for(b);
    const cg_enc_job_t job = { .cdf = a->cdf, .symbols = a->symbols, .streams = a->streams, .lengths = a->lengths,
                               .tokens = T, .channels = C, .capacity = a->capacity, .num_bins = a->num_bins };
    const size_t nblk = (C + CG_BLOCK - 1) / CG_BLOCK;
#pragma omp parallel for schedule(dynamic, 1) num_threads(b->num_threads) if (L * T * C >= CG_PARALLEL_MIN)
    for (size_t item = 0; item < L * nblk; item++) {
        const size_t l = item / nblk, c0 = item % nblk * CG_BLOCK;
        k->encode(&job, l, c0, C - c0 < CG_BLOCK ? C - c0 : CG_BLOCK);
    }
    size_t longest = 0, first_over = L * C;
    for (size_t s = 0; s < L * C; s++) {
        const size_t len = (size_t)a->lengths[s];
        if (len > longest) longest = len;
        if (len > a->capacity && first_over == L * C) first_over = s;
    }
    *a->needed = longest;
    if (first_over < L * C)
        return b->svc->set_error(KVC_ERR_NO_SPACE,
                                 "cg_encode: stream %zu (layer %zu, channel %zu) needs %d bytes, capacity is %zu; "
                                 "the longest stream needs %zu",
                                 first_over, first_over / C, first_over % C, a->lengths[first_over], a->capacity,
                                 longest);
    return KVC_OK;
}

/* ------------------------------------------------------------------ decode */

static void run_decode(kvc_backend_ctx_t *b, const cg_dec_job_t *job, size_t L, size_t C)
{
    const cg_kernels_t *k = cg_kernels_for(b);
    const size_t nblk = (C + CG_BLOCK - 1) / CG_BLOCK;
#pragma omp parallel for schedule(dynamic, 1) num_threads(b->num_threads) if (L * job->tokens * C >= CG_PARALLEL_MIN)
    for (size_t item = 0; item < L * nblk; item++) {
        const size_t l = item / nblk, c0 = item % nblk * CG_BLOCK;
        k->decode(job, l, c0, C - c0 < CG_BLOCK ? C - c0 : CG_BLOCK);
    }
}

kvc_status_t cpu_cg_decode(kvc_backend_ctx_t *b, const struct kvc_decode_args *a)
{
    const size_t L = a->layers, C = a->channels, n = L * C;
    kvc_status_t st = check_cdf(b, "cg_decode", KVC_ERR_CORRUPT, a->cdf, n, C, a->num_bins);
    if (st != KVC_OK) return st;
    for (size_t s = 0; s < n; s++)
        if (a->lengths[s] < 0 || (size_t)a->lengths[s] > a->capacity)
            return b->svc->set_error(KVC_ERR_CORRUPT,
                                     "cg_decode: lengths[%zu] (layer %zu, channel %zu) = %d outside [0, capacity %zu]",
                                     s, s / C, s % C, a->lengths[s], a->capacity);
    const cg_dec_job_t job = { .cdf = a->cdf, .base = a->streams, .stride = a->capacity, .lengths = a->lengths,
                               .symbols = a->symbols, .tokens = a->tokens, .channels = C, .num_bins = a->num_bins };
    run_decode(b, &job, L, C);
    return KVC_OK;
}

kvc_status_t cpu_cg_decode_packed(kvc_backend_ctx_t *b, const struct kvc_decode_packed_args *a)
{
    const size_t L = a->layers, C = a->channels, n = L * C;
    kvc_status_t st = check_cdf(b, "cg_decode_packed", KVC_ERR_CORRUPT, a->cdf, n, C, a->num_bins);
    if (st != KVC_OK) return st;
    int64_t prev = 0;
    for (size_t s = 0; s < n; s++) {
        const int64_t p = a->prefsum[s];
        if (p < prev || (uint64_t)p > a->nbytes)
            return b->svc->set_error(KVC_ERR_CORRUPT,
                                     "cg_decode_packed: prefsum[%zu] (layer %zu, channel %zu) = %lld %s (previous %lld, "
                                     "%zu bytes given)",
                                     s, s / C, s % C, (long long)p, p < prev ? "decreases" : "is past the end",
                                     (long long)prev, a->nbytes);
        prev = p;
    }
    const cg_dec_job_t job = { .cdf = a->cdf, .base = a->bytes, .prefsum = a->prefsum, .symbols = a->symbols,
                               .tokens = a->tokens, .channels = C, .num_bins = a->num_bins };
    run_decode(b, &job, L, C);
    return KVC_OK;
}
