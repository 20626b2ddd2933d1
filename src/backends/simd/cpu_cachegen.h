/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU CacheGen ops (cpu_cachegen*.c) and the per-ISA kernels behind them. */
#ifndef KVC_CPU_CACHEGEN_H
#define KVC_CPU_CACHEGEN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <kvcore/cachegen.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

#include "common/scales.h"
#include "cpu_backend.h"

kvc_status_t cpu_cg_cdf(kvc_backend_ctx_t *b, const struct kvc_cdf_args *a);
kvc_status_t cpu_cg_encode(kvc_backend_ctx_t *b, const struct kvc_encode_args *a);
kvc_status_t cpu_cg_decode(kvc_backend_ctx_t *b, const struct kvc_decode_args *a);
kvc_status_t cpu_cg_decode_packed(kvc_backend_ctx_t *b, const struct kvc_decode_packed_args *a);
kvc_status_t cpu_quantise(kvc_backend_ctx_t *b, const struct kvc_quant_args *a);
kvc_status_t cpu_dequantise(kvc_backend_ctx_t *b, const struct kvc_quant_args *a);
/* The dequantiser's work after its checks (trusted data), as an orphaned `omp for` over blocks of
 * ~8 K values: called inside a parallel region it shares the blocks among the team (the rANS
 * decode's, then_dequantise), outside one it runs them on the calling thread. halves: NULL, or
 * the scales as fp16 / bf16 bytes (kvc_rans_decode_args.then_scales), each block's converted
 * into a->scales first. */
void cpu_dequantise_blocks(kvc_backend_ctx_t *b, const struct kvc_quant_args *a, const uint8_t *halves);

/* ---- shared between the driver (cpu_cachegen.c) and the per-ISA kernels ---- */

/* Streams per interleaved group: independent state machines advanced token by token so their
 * latency chains (multiply, divide, count-leading-zeros) overlap. */
#define CG_GROUP 4

/* Rows of symbols the coder kernels prefetch ahead (rows are `channels` bytes apart). */
#define CG_PREFETCH_ROWS 16

/* Calls smaller than this (symbols or values) run on the calling thread: waking a team costs more. */
#define CG_PARALLEL_MIN (1u << 15)

/* What an encoder kernel needs (validated input). */
typedef struct cg_enc_job {
    const uint16_t *cdf;
    const uint8_t *symbols;
    uint8_t *streams;
    int32_t *lengths;
    size_t tokens, channels, capacity;
    unsigned num_bins;
} cg_enc_job_t;

/* What a decoder kernel needs: stream k is base + k*stride with lengths[k] bytes (per-stream
 * buffers), or base + prefsum[k-1] .. base + prefsum[k] when prefsum is set (packed). */
typedef struct cg_dec_job {
    const uint16_t *cdf;
    const uint8_t *base;
    size_t stride;
    const int32_t *lengths;
    const int64_t *prefsum;
    uint8_t *symbols;
    size_t tokens, channels;
    unsigned num_bins;
} cg_dec_job_t;

/* One row of the quantiser: `channels` values of one (layer, token). */
typedef struct cg_quant_row {
    const void *in;  /* quantise: values; dequantise: symbols */
    void *out;       /* quantise: symbols; dequantise: values */
    size_t channels;
    unsigned m;      /* bins/2 - 1 */
} cg_quant_row_t;

/* Rows of one layer for the dequantiser: row r is in[r * channels ..] to out (same index), scale
 * scales[r]. Whole blocks per call: per-row calls cost as much as the values of a short row. */
typedef struct cg_dequant_rows {
    const uint8_t *in;
    void *out;
    const float *scales;
    size_t rows, channels;
    unsigned m; /* bins/2 - 1 */
} cg_dequant_rows_t;

/* Rows of one layer for the quantiser: row r is in[r * channels ..] to out (same index); its scale,
 * the largest finite |x| of the row (0 if none), to scales[r]. */
typedef struct cg_quant_rows {
    const void *in;
    uint8_t *out;
    float *scales;
    size_t rows, channels;
    unsigned m; /* bins/2 - 1 */
} cg_quant_rows_t;

typedef struct cg_kernels {
    /* Streams (layer, c0 .. c0+n-1). */
    void (*encode)(const cg_enc_job_t *j, size_t layer, size_t c0, size_t n);
    void (*decode)(const cg_dec_job_t *j, size_t layer, size_t c0, size_t n);
    /* Whole blocks of rows per call: per-row calls (two calls through the table a row) took as
     * long as the values of the real K/V's 32-channel rows. */
    void (*quantise_rows)(kvc_dtype_t dtype, const cg_quant_rows_t *r);
    void (*dequantise_rows)(kvc_dtype_t dtype, const cg_dequant_rows_t *r);
    /* n fp16 (or bf16) little-endian finite values to fp32, exactly (common/halfs.h's values). */
    void (*halves_to_f32)(const uint8_t *p, size_t n, int bf16, float *out);
} cg_kernels_t;

extern const cg_kernels_t cg_kernels_scalar;
#ifdef KVC_HAVE_X86_SIMD
extern const cg_kernels_t cg_kernels_avx2; /* cpu_cachegen_avx2.c, the avx2 tier's flags */
extern const cg_kernels_t cg_kernels_avx512; /* cpu_cachegen_avx512.c's kernels: */
void cg_encode_lanes_avx2(const cg_enc_job_t *j, size_t layer, size_t c0, size_t n);
void cg_decode_lanes_avx2(const cg_dec_job_t *j, size_t layer, size_t c0, size_t n);
void cg_encode_lanes_avx512(const cg_enc_job_t *j, size_t layer, size_t c0, size_t n);
void cg_decode_lanes_avx512(const cg_dec_job_t *j, size_t layer, size_t c0, size_t n);
void cg_quantise_rows_avx512(kvc_dtype_t dtype, const cg_quant_rows_t *r);
void cg_dequantise_rows_avx512(kvc_dtype_t dtype, const cg_dequant_rows_t *r);
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define KVC_CG_HAVE_NEON 1
extern const cg_kernels_t cg_kernels_neon; /* cpu_cachegen_neon.c: the lane-parallel coder */
void cg_encode_lanes_neon(const cg_enc_job_t *j, size_t layer, size_t c0, size_t n);
void cg_decode_lanes_neon(const cg_dec_job_t *j, size_t layer, size_t c0, size_t n);
#endif

/* The kernels for the context's ISA tier. */
const cg_kernels_t *cg_kernels_for(const kvc_backend_ctx_t *b);

/* Scalar row quantiser pieces, shared so every ISA computes the same fp32 operations. */
float cg_row_absmax_scalar(kvc_dtype_t dtype, const void *x, size_t n);
void cg_quantise_row_scalar(kvc_dtype_t dtype, const cg_quant_row_t *r, float scale);
void cg_quantise_rows_scalar(kvc_dtype_t dtype, const cg_quant_rows_t *r);
void cg_dequantise_row_scalar(kvc_dtype_t dtype, const cg_quant_row_t *r, float scale);
void cg_dequantise_rows_scalar(kvc_dtype_t dtype, const cg_dequant_rows_t *r);

/* 1 when some p[i] >= bound: running byte maxima (one instruction per 16 bytes: SSE2 / NEON),
 * compared once; the portable loop elsewhere. */
static inline int cg_any_at_least(const uint8_t *p, size_t n, uint8_t bound)
{
    size_t i = 0;
    int any = 0;
#if defined(__SSE2__)
    __m128i m0 = _mm_setzero_si128(), m1 = m0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm_max_epu8(m0, _mm_loadu_si128((const __m128i *)(const void *)(p + i)));
        m1 = _mm_max_epu8(m1, _mm_loadu_si128((const __m128i *)(const void *)(p + i + 16)));
    }
    m0 = _mm_max_epu8(m0, m1);
    if (i) any = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(m0, _mm_set1_epi8((char)bound)), m0)) != 0; /* some m0 >= bound */
#elif defined(__ARM_NEON)
    uint8x16_t m0 = vdupq_n_u8(0), m1 = m0;
    for (; i + 32 <= n; i += 32) {
        m0 = vmaxq_u8(m0, vld1q_u8(p + i));
        m1 = vmaxq_u8(m1, vld1q_u8(p + i + 16));
    }
    if (i) any = vmaxvq_u8(vmaxq_u8(m0, m1)) >= bound;
#endif
    for (; i < n; i++) any |= p[i] >= bound;
    return any;
}

/* Every symbol of [layers, tokens, channels] below num_bins, else KVC_ERR_OUT_OF_RANGE naming the
 * first: one pass of running byte maxima over chunks, the exact index only in a chunk that has a
 * bad symbol. The arithmetic coder's check, and the rANS tables' (cpu_rans.c). */
static inline kvc_status_t cg_check_symbols(kvc_backend_ctx_t *b, const char *op, const uint8_t *sym, size_t layers,
                                            size_t tokens, size_t channels, unsigned num_bins)
{
    const size_t n = layers * tokens * channels;
    if (n == 0) return KVC_OK;
    const size_t chunk = 1 << 16, nchunks = (n + chunk - 1) / chunk;
    size_t first_bad = n;
#pragma omp parallel for schedule(static) num_threads(b->num_threads) reduction(min : first_bad) if (n >= CG_PARALLEL_MIN)
    for (size_t ci = 0; ci < nchunks; ci++) {
        const uint8_t *p = sym + ci * chunk;
        const size_t m = ci + 1 < nchunks ? chunk : n - ci * chunk;
        if (cg_any_at_least(p, m, (uint8_t)num_bins))
            for (size_t i = 0; i < m; i++)
                if (p[i] >= num_bins) {
                    first_bad = ci * chunk + i < first_bad ? ci * chunk + i : first_bad;
                    break;
                }
    }
    if (first_bad == n) return KVC_OK;
    const size_t c = first_bad % channels, t = first_bad / channels % tokens, l = first_bad / channels / tokens;
    return b->svc->set_error(KVC_ERR_OUT_OF_RANGE,
                             "%s: symbols[%zu] (layer %zu, token %zu, channel %zu) = %u is not below num_bins %u", op,
                             first_bad, l, t, c, sym[first_bad], num_bins);
}

/* Power-of-two factor f applied to both x and scale before M / scale (see cachegen.h). */
static inline float cg_prescale(float scale)
{
    if (scale < 0x1p-64f) return 0x1p64f;
    if (scale > 0x1p64f) return 0x1p-64f;
    return 1.0f;
}

#endif
