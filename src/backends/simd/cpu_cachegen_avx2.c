/* SPDX-License-Identifier: BSD-3-Clause */
/* AVX2 CacheGen kernels: the coder with a SIMD compare-and-count symbol search, and the quantiser
 * rows with in-register fp16/bf16 conversion. Compiled with the avx2 tier's flags (Makefile.am,
 * KVC_AVX2_FLAGS: AVX2, FMA, F16C, BMI1/2, LZCNT, POPCNT, which the tier requires) and used for the
 * avx2 and avx512 tiers. Every result equals the scalar kernels' bit for bit. */
#include "config.h"

#include "common/halfs.h"
#include "cpu_cachegen.h"

#include <immintrin.h>

/* ------------------------------------------------------------------ coder */

/* Entries of tab[0..32) that are <= count: unsigned 16-bit compare as max(x, c) == c. */
static inline __attribute__((always_inline)) unsigned cg_search32_avx2(const uint16_t *tab, uint32_t count)
{
    const __m256i c = _mm256_set1_epi16((short)count);
    const __m256i a = _mm256_load_si256((const __m256i *)tab), b = _mm256_load_si256((const __m256i *)(tab + 16));
    const __m256i le = _mm256_packs_epi16(_mm256_cmpeq_epi16(_mm256_max_epu16(a, c), c),
                                          _mm256_cmpeq_epi16(_mm256_max_epu16(b, c), c));
    return (unsigned)__builtin_popcount((unsigned)_mm256_movemask_epi8(le));
}

static inline __attribute__((always_inline)) unsigned cg_search64_avx2(const uint16_t *tab, uint32_t count)
{
    return cg_search32_avx2(tab, count) + cg_search32_avx2(tab + 32, count);
}

#define CG_SEARCH32(tab, count) cg_search32_avx2((tab), (count))
#define CG_SEARCH64(tab, count) cg_search64_avx2((tab), (count))
#include "cpu_cachegen_coder.h"
CG_DEFINE_CODER(avx2)

/* ------------------------------------------------------------------ quantiser rows */

#define CG_ROW_INLINE static inline __attribute__((always_inline))

CG_ROW_INLINE __m256 load8(kvc_dtype_t dt, const void *x, size_t i)
{
    switch (dt) {
    case KVC_DTYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)x + i)));
    case KVC_DTYPE_BF16:
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)x + i))), 16));
    default: return _mm256_loadu_ps((const float *)x + i);
    }
}

/* Round to nearest even into dt. bf16 by integer rounding of the bit pattern (the values come
 * from dequantisation, never NaN). */
CG_ROW_INLINE void store8(kvc_dtype_t dt, void *x, size_t i, __m256 v)
{
    switch (dt) {
    case KVC_DTYPE_F16:
        _mm_storeu_si128((__m128i *)((uint16_t *)x + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        break;
    case KVC_DTYPE_BF16: {
        const __m256i u = _mm256_castps_si256(v);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
        _mm_storeu_si128((__m128i *)((uint16_t *)x + i),
                         _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
        break;
    }
    default: _mm256_storeu_ps((float *)x + i, v); break;
    }
}

static size_t esize(kvc_dtype_t dt) { return dt == KVC_DTYPE_F32 ? 4 : 2; }

CG_ROW_INLINE float absmax_t(kvc_dtype_t dt, const void *x, size_t n)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), inf = _mm256_set1_ps(__builtin_inff());
    __m256 m = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_and_ps(load8(dt, x, i), absmask);
        m = _mm256_max_ps(m, _mm256_and_ps(v, _mm256_cmp_ps(v, inf, _CMP_LT_OQ))); /* NaN, inf -> 0 */
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    const float head = _mm_cvtss_f32(h);
    const float tail = i < n ? cg_row_absmax_scalar(dt, (const char *)x + i * esize(dt), n - i) : 0.0f;
    return head > tail ? head : tail;
}

CG_ROW_INLINE void quantise_t(kvc_dtype_t dt, const cg_quant_row_t *r, float scale)
{
    const float m = (float)r->m, f = cg_prescale(scale);
    const __m256 vf = _mm256_set1_ps(f), vinv = _mm256_set1_ps(scale > 0.0f ? m / (scale * f) : 0.0f);
    const __m256 vm = _mm256_set1_ps(m), vnegm = _mm256_set1_ps(-m);
    const __m256i vmi = _mm256_set1_epi32((int)r->m);
    uint8_t *q = r->out;
    size_t i = 0;
    for (; i + 8 <= r->channels; i += 8) {
        __m256 y = _mm256_mul_ps(_mm256_mul_ps(load8(dt, r->in, i), vf), vinv);
        y = _mm256_and_ps(y, _mm256_cmp_ps(y, y, _CMP_ORD_Q)); /* NaN -> 0 */
        y = _mm256_min_ps(_mm256_max_ps(y, vnegm), vm);
        const __m256i s = _mm256_add_epi32(
            _mm256_cvtps_epi32(_mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), vmi);
        const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        _mm_storel_epi64((__m128i *)(q + i), _mm_packus_epi16(w, w));
    }
    if (i < r->channels) {
        const cg_quant_row_t tail = { .in = (const char *)r->in + i * esize(dt), .out = q + i,
                                      .channels = r->channels - i, .m = r->m };
        cg_quantise_row_scalar(dt, &tail, scale);
    }
}

CG_ROW_INLINE void dequantise_t(kvc_dtype_t dt, const cg_dequant_rows_t *r)
{
    const __m256i vmi = _mm256_set1_epi32((int)r->m);
    const size_t C = r->channels;
    for (size_t row = 0; row < r->rows; row++) {
        const float scale = r->scales[row], f = cg_prescale(scale);
        const uint8_t *q = r->in + row * C;
        void *out = (char *)r->out + row * C * esize(dt);
        size_t i = 0;
        if (f == 1.0f) { /* a scale in [2^-64, 2^64]: (x * step) * 1 is x * step bit for bit, so one multiply and no 1 / f */
            const __m256 step = _mm256_set1_ps(scale / (float)r->m);
            for (; i + 8 <= C; i += 8) {
                const __m256i s = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + i))), vmi);
                store8(dt, out, i, _mm256_mul_ps(_mm256_cvtepi32_ps(s), step));
            }
        } else {
            const __m256 step = _mm256_set1_ps(scale * f / (float)r->m), unscale = _mm256_set1_ps(1.0f / f);
            for (; i + 8 <= C; i += 8) {
                const __m256i s = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + i))), vmi);
                store8(dt, out, i, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s), step), unscale));
            }
        }
        if (i < C) {
            const cg_quant_row_t tail = { .in = q + i, .out = (char *)out + i * esize(dt), .channels = C - i, .m = r->m };
            cg_dequantise_row_scalar(dt, &tail, scale);
        }
    }
}

CG_ROW_INLINE void quantise_rows_t(kvc_dtype_t dt, const cg_quant_rows_t *r)
{
    for (size_t i = 0; i < r->rows; i++) {
        const void *x = (const char *)r->in + i * r->channels * esize(dt);
        const cg_quant_row_t row = { .in = x, .out = r->out + i * r->channels, .channels = r->channels, .m = r->m };
        const float scale = absmax_t(dt, x, r->channels);
        quantise_t(dt, &row, scale);
        r->scales[i] = scale;
    }
}

static void quantise_rows_avx2(kvc_dtype_t dt, const cg_quant_rows_t *r)
{
    switch (dt) {
    case KVC_DTYPE_F16: quantise_rows_t(KVC_DTYPE_F16, r); break;
    case KVC_DTYPE_BF16: quantise_rows_t(KVC_DTYPE_BF16, r); break;
    default: quantise_rows_t(KVC_DTYPE_F32, r); break;
    }
}

static void dequantise_rows_avx2(kvc_dtype_t dt, const cg_dequant_rows_t *r)
{
    switch (dt) {
    case KVC_DTYPE_F16: dequantise_t(KVC_DTYPE_F16, r); break;
    case KVC_DTYPE_BF16: dequantise_t(KVC_DTYPE_BF16, r); break;
    default: dequantise_t(KVC_DTYPE_F32, r); break;
    }
}

/* F16C (every AVX2 CPU has it): 8 fp16 a conversion, exact for every input (subnormals too, DAZ
 * does not apply to it); bf16 is its bits shifted up. The tail by the portable code. */
static void halves_to_f32_avx2(const uint8_t *p, size_t n, int bf16, float *out)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i));
        const __m256 f = bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
        _mm256_storeu_ps(out + i, f);
    }
    kvc_halfs_to_f32(p + 2 * i, n - i, bf16, out + i);
}

const cg_kernels_t cg_kernels_avx2 = {
    .encode = cg_encode_streams_avx2,
    .decode = cg_decode_streams_avx2,
    .quantise_rows = quantise_rows_avx2,
    .dequantise_rows = dequantise_rows_avx2,
    .halves_to_f32 = halves_to_f32_avx2,
};

/* The AVX-512 tier: the lane-parallel coder (this one for channels left over), and 16-lane
 * quantiser rows with masked tails. */
const cg_kernels_t cg_kernels_avx512 = {
    .encode = cg_encode_streams_avx512,
    .decode = cg_decode_streams_avx512,
    .quantise_rows = cg_quantise_rows_avx512,
    .dequantise_rows = cg_dequantise_rows_avx512,
    .halves_to_f32 = halves_to_f32_avx2,
};
