/* SPDX-License-Identifier: BSD-3-Clause */
/* The AVX-512 tier's quantiser and dequantiser rows (the tier's coder is the AVX2 one,
 * cpu_cachegen_avx2.c): 16 values a step, a row's last values through masked loads and stores
 * instead of the scalar tail. The same operations as the scalar rows (cpu_cachegen_quant.c): the
 * scale is the largest finite |x|, a symbol x * f * (M / (scale * f)) clamped to [-M, M] and
 * rounded to nearest even, plus M; a value (q - M) * step * (1 / f) in fp32, rounded to nearest
 * even into the dtype. */
#include "config.h"

#include <immintrin.h>

#include "cpu_cachegen.h"

#define ROW_INLINE static inline __attribute__((always_inline))

/* bf16 by integer rounding of the bit pattern (the values come from dequantisation, never NaN). */
ROW_INLINE void store16(kvc_dtype_t dt, void *x, size_t i, __m512 v, __mmask16 k)
{
    switch (dt) {
    case KVC_DTYPE_F16: _mm256_mask_storeu_epi16((uint16_t *)x + i, k, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); break;
    case KVC_DTYPE_BF16: {
        const __m512i u = _mm512_castps_si512(v);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
        _mm256_mask_storeu_epi16((uint16_t *)x + i, k, _mm512_cvtepi32_epi16(r));
        break;
    }
    default: _mm512_mask_storeu_ps((float *)x + i, k, v); break;
    }
}

/* Values i .. i + 15 of x (the lanes of k; zero elsewhere) in fp32. */
ROW_INLINE __m512 load16(kvc_dtype_t dt, const void *x, size_t i, __mmask16 k)
{
    switch (dt) {
    case KVC_DTYPE_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)x + i));
    case KVC_DTYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)x + i)), 16));
    default: return _mm512_maskz_loadu_ps(k, (const float *)x + i);
    }
}

/* A row's 16 symbols of values v (lanes of k) to q + i. */
ROW_INLINE void quantise16(__m512 v, __m512 vf, __m512 vinv, __m512 vm, __m512i vmi, uint8_t *q, size_t i, __mmask16 k)
{
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(v, vf), vinv);
    y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, y, _CMP_ORD_Q), y); /* NaN -> 0 */
    y = _mm512_min_ps(_mm512_max_ps(y, _mm512_sub_ps(_mm512_setzero_ps(), vm)), vm);
    const __m512i s = _mm512_add_epi32(_mm512_cvt_roundps_epi32(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vmi);
    _mm_mask_storeu_epi8(q + i, k, _mm512_cvtepi32_epi8(s));
}

ROW_INLINE void quantise_t(kvc_dtype_t dt, const cg_quant_rows_t *r)
{
    const size_t C = r->channels, es = dt == KVC_DTYPE_F32 ? 4 : 2;
    const __mmask16 tail = (__mmask16)((1u << (C % 16)) - 1);
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF)), inf = _mm512_set1_ps(__builtin_inff());
    const __m512 vm = _mm512_set1_ps((float)r->m);
    const __m512i vmi = _mm512_set1_epi32((int)r->m);
    for (size_t row = 0; row < r->rows; row++) {
        const void *x = (const char *)r->in + row * C * es;
        uint8_t *q = r->out + row * C;
        __m512 mx = _mm512_setzero_ps();
        size_t i = 0;
        for (; i + 16 <= C; i += 16) { /* largest finite |x|: NaN and inf compare false */
            const __m512 v = _mm512_and_ps(load16(dt, x, i, (__mmask16)0xFFFF), absmask);
            mx = _mm512_mask_max_ps(mx, _mm512_cmp_ps_mask(v, inf, _CMP_LT_OQ), mx, v);
        }
        if (tail) {
            const __m512 v = _mm512_and_ps(load16(dt, x, i, tail), absmask);
            mx = _mm512_mask_max_ps(mx, _mm512_cmp_ps_mask(v, inf, _CMP_LT_OQ), mx, v);
        }
        const float scale = _mm512_reduce_max_ps(mx), f = cg_prescale(scale);
        const __m512 vf = _mm512_set1_ps(f), vinv = _mm512_set1_ps(scale > 0.0f ? (float)r->m / (scale * f) : 0.0f);
        for (i = 0; i + 16 <= C; i += 16) quantise16(load16(dt, x, i, (__mmask16)0xFFFF), vf, vinv, vm, vmi, q, i, (__mmask16)0xFFFF);
        if (tail) quantise16(load16(dt, x, i, tail), vf, vinv, vm, vmi, q, i, tail);
        r->scales[row] = scale;
    }
}

void cg_quantise_rows_avx512(kvc_dtype_t dt, const cg_quant_rows_t *r)
{
    switch (dt) {
    case KVC_DTYPE_F16: quantise_t(KVC_DTYPE_F16, r); break;
    case KVC_DTYPE_BF16: quantise_t(KVC_DTYPE_BF16, r); break;
    default: quantise_t(KVC_DTYPE_F32, r); break;
    }
}

ROW_INLINE void dequantise_t(kvc_dtype_t dt, const cg_dequant_rows_t *r)
{
    const size_t C = r->channels, es = dt == KVC_DTYPE_F32 ? 4 : 2;
    const __m512i vmi = _mm512_set1_epi32((int)r->m);
    const __mmask16 tail = (__mmask16)((1u << (C % 16)) - 1);
    for (size_t row = 0; row < r->rows; row++) {
        const float scale = r->scales[row], f = cg_prescale(scale);
        const __m512 step = _mm512_set1_ps(scale * f / (float)r->m), unscale = _mm512_set1_ps(1.0f / f);
        const uint8_t *q = r->in + row * C;
        void *out = (char *)r->out + row * C * es;
        size_t i = 0;
        for (; i + 16 <= C; i += 16) {
            const __m512i s = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(q + i))), vmi);
            store16(dt, out, i, _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), step), unscale), (__mmask16)0xFFFF);
        }
        if (tail) {
            const __m512i s = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(tail, q + i)), vmi);
            store16(dt, out, i, _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), step), unscale), tail);
        }
    }
}

void cg_dequantise_rows_avx512(kvc_dtype_t dt, const cg_dequant_rows_t *r)
{
    switch (dt) {
    case KVC_DTYPE_F16: dequantise_t(KVC_DTYPE_F16, r); break;
    case KVC_DTYPE_BF16: dequantise_t(KVC_DTYPE_BF16, r); break;
    default: dequantise_t(KVC_DTYPE_F32, r); break;
    }
}
