/* RoPE kernels for the AVX-512 tier (F/BW/DQ/VL + FMA + F16C; built with the matching -m flags).
 * 16 fp32 lanes; tails use masked loads and stores, so every element goes through the vector code.
 * Whole vectors use plain loads and stores: masked memory operations are several times slower on
 * some CPUs (measured 3.7 vs 21 GB/s for fp16 keys on an AMD EPYC with AVX-512). */
#include "config.h"

#include <immintrin.h>

#include <sleef.h>

#include "cpu_rope.h"

static inline __mmask16 mask16(size_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }
static inline __mmask8 mask8(size_t n) { return n >= 8 ? (__mmask8)0xff : (__mmask8)((1u << n) - 1); }

static inline __m512 loadf(const float *p, __mmask16 m)
{
    return m == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

static inline void storef(float *p, __m512 v, __mmask16 m)
{
    if (m == 0xffff) _mm512_storeu_ps(p, v);
    else _mm512_mask_storeu_ps(p, m, v);
}

static inline __m256 load8f(const float *p, __mmask8 m)
{
    return m == 0xff ? _mm256_loadu_ps(p) : _mm256_maskz_loadu_ps(m, p);
}

static inline __m256i load_u16(const void *p, __mmask16 m)
{
    return m == 0xffff ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(m, p);
}

static inline void store_u16(void *p, __m256i v, __mmask16 m)
{
    if (m == 0xffff) _mm256_storeu_si256((__m256i *)p, v);
    else _mm256_mask_storeu_epi16(p, m, v);
}

static inline __m512 load16(const void *p, kvc_dtype_t dt, __mmask16 m)
{
    switch (dt) {
    case KVC_DTYPE_F16: return _mm512_cvtph_ps(load_u16(p, m));
    case KVC_DTYPE_BF16: return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load_u16(p, m)), 16));
    default: return loadf(p, m);
    }
}

/* fp32 -> bf16, round to nearest even; NaNs stay quiet NaNs. */
static inline __m256i f2bf16(__m512 v)
{
    const __m512i x = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), quiet);
    return _mm512_cvtepi32_epi16(r);
}

static inline void store16(void *p, kvc_dtype_t dt, __m512 v, __mmask16 m)
{
    switch (dt) {
    case KVC_DTYPE_F16: store_u16(p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), m); break;
    case KVC_DTYPE_BF16: store_u16(p, f2bf16(v), m); break;
    default: storef(p, v, m); break;
    }
}

/* kvc_rope_combine1 on eight pairs, in double. */
static inline __m256 combine8(__m256 co8, __m256 so8, __m256 cn8, __m256 sn8, __m256 *s_out)
{
    const __m512d co = _mm512_cvtps_pd(co8), so = _mm512_cvtps_pd(so8);
    const __m512d cn = _mm512_cvtps_pd(cn8), sn = _mm512_cvtps_pd(sn8);
    const __m512d cd = _mm512_add_pd(_mm512_mul_pd(cn, co), _mm512_mul_pd(sn, so));
    const __m512d sd = _mm512_sub_pd(_mm512_mul_pd(sn, co), _mm512_mul_pd(cn, so));
    const __m512d h = _mm512_sqrt_pd(_mm512_add_pd(_mm512_mul_pd(cd, cd), _mm512_mul_pd(sd, sd)));
    /* 1/h, or 0 where h == 0 (a zero row, or a lane past the end: masked loads give zeros) */
    const __m512d inv = _mm512_maskz_div_pd(_mm512_cmp_pd_mask(h, _mm512_setzero_pd(), _CMP_NEQ_UQ),
                                            _mm512_set1_pd(1.0), h);
    *s_out = _mm512_cvtpd_ps(_mm512_mul_pd(sd, inv));
    return _mm512_cvtpd_ps(_mm512_mul_pd(cd, inv));
}

static inline __m256 lo8(__m512 v) { return _mm512_castps512_ps256(v); }
static inline __m256 hi8(__m512 v) { return _mm512_extractf32x8_ps(v, 1); }
static inline __m512 join16(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }

static void avx512_factors(const void *row_old, const void *row_new, kvc_dtype_t dt, size_t half, float *c,
                           float *s)
{
    const size_t es = kvc_dtype_size(dt);
    const char *ro = row_old, *rn = row_new;
    for (size_t i = 0; i < half; i += 16) {
        const __mmask16 m = mask16(half - i);
        const __m512 co = load16(ro + i * es, dt, m), so = load16(ro + (half + i) * es, dt, m);
        const __m512 cn = load16(rn + i * es, dt, m), sn = load16(rn + (half + i) * es, dt, m);
        __m256 s0, s1;
        const __m256 c0 = combine8(lo8(co), lo8(so), lo8(cn), lo8(sn), &s0);
        const __m256 c1 = combine8(hi8(co), hi8(so), hi8(cn), hi8(sn), &s1);
        storef(c + i, join16(c0, c1), m);
        storef(s + i, join16(s0, s1), m);
    }
}

/* Eight angles d*theta reduced to [-pi, pi] in double (see kvc_rope_reduce). */
static inline __m512d reduce8(__m512d d, const double *theta, __mmask8 m)
{
    const __m512d a = _mm512_mul_pd(d, m == 0xff ? _mm512_loadu_pd(theta) : _mm512_maskz_loadu_pd(m, theta));
    const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(a, _mm512_set1_pd(KVC_ROPE_INV_2PI)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(KVC_ROPE_2PI_HI), a);
    return _mm512_fnmadd_pd(k, _mm512_set1_pd(KVC_ROPE_2PI_LO), r);
}

static void avx512_sincos(double d, const double *theta, size_t half, float *c, float *s)
{
    const __m512d dv = _mm512_set1_pd(d);
    for (size_t i = 0; i < half; i += 16) {
        const size_t n = half - i;
        const __m512d r0 = reduce8(dv, theta + i, mask8(n));
        const __m512d r1 = reduce8(dv, theta + i + 8, mask8(n > 8 ? n - 8 : 0));
        const __m256 h0 = _mm512_cvtpd_ps(r0), h1 = _mm512_cvtpd_ps(r1);
        const __m256 l0 = _mm512_cvtpd_ps(_mm512_sub_pd(r0, _mm512_cvtps_pd(h0)));
        const __m256 l1 = _mm512_cvtpd_ps(_mm512_sub_pd(r1, _mm512_cvtps_pd(h1)));
        const __m512 hi = _mm512_insertf32x8(_mm512_castps256_ps512(h0), h1, 1);
        const __m512 lo = _mm512_insertf32x8(_mm512_castps256_ps512(l0), l1, 1);
        const Sleef___m512_2 sc = Sleef_sincosf16_u10avx512f(hi); /* x: sin, y: cos */
        /* first-order correction for the part of the angle lost when rounding it to fp32 */
        const __mmask16 m = mask16(n);
        storef(s + i, _mm512_add_ps(sc.x, _mm512_mul_ps(sc.y, lo)), m);
        storef(c + i, _mm512_sub_ps(sc.y, _mm512_mul_ps(sc.x, lo)), m);
    }
}

static void avx512_rotate(void *key, kvc_dtype_t dt, size_t num_heads, size_t head_stride, size_t half,
                          int is_neox, const float *c, const float *s)
{
    const size_t es = kvc_dtype_size(dt);
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    for (size_t h = 0; h < num_heads; h++) {
        char *head = (char *)key + h * head_stride * es;
        if (is_neox) {
            for (size_t i = 0; i < half; i += 16) {
                const __mmask16 m = mask16(half - i);
                const __m512 x = load16(head + i * es, dt, m), y = load16(head + (half + i) * es, dt, m);
                const __m512 cv = loadf(c + i, m), sv = loadf(s + i, m);
                store16(head + i * es, dt, _mm512_fmsub_ps(x, cv, _mm512_mul_ps(y, sv)), m);
                store16(head + (half + i) * es, dt, _mm512_fmadd_ps(y, cv, _mm512_mul_ps(x, sv)), m);
            }
        } else {
            /* 8 interleaved pairs per vector: even lanes x*c - y*s, odd lanes y*c + x*s */
            for (size_t i = 0; i < half; i += 8) {
                const __mmask8 mp = mask8(half - i);
                const __mmask16 m = mask16(2 * (half - i));
                const __m512 v = load16(head + 2 * i * es, dt, m);
                const __m512 cd = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(load8f(c + i, mp)));
                const __m512 sd = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(load8f(s + i, mp)));
                const __m512 swapped = _mm512_permute_ps(v, 0xb1);
                store16(head + 2 * i * es, dt, _mm512_fmaddsub_ps(v, cd, _mm512_mul_ps(swapped, sd)), m);
            }
        }
    }
}

static void avx512_store(void *dst, kvc_dtype_t dt, const float *src, size_t n)
{
    const size_t es = kvc_dtype_size(dt);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = mask16(n - i);
        store16((char *)dst + i * es, dt, loadf(src + i, m), m);
    }
}

const kvc_rope_kernels_t kvc_rope_kernels_avx512 = {
    .factors = avx512_factors,
    .sincos = avx512_sincos,
    .rotate = avx512_rotate,
    .store = avx512_store,
};
