/* RoPE kernels for the AVX2 tier (AVX2 + FMA + F16C; built with -mavx2 -mfma -mf16c). 8 fp32
 * lanes; fp16 converted with F16C, bf16 with integer shifts; tails shorter than a vector go through
 * the scalar helpers with the same operation order. */
#include "config.h"

#include <immintrin.h>

#include <sleef.h>

#include "cpu_rope.h"

static inline __m256 load8(const void *p, kvc_dtype_t dt)
{
    switch (dt) {
    case KVC_DTYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    case KVC_DTYPE_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    default: return _mm256_loadu_ps((const float *)p);
    }
}

/* fp32 -> bf16, round to nearest even; NaNs stay quiet NaNs. */
static inline __m128i f2bf8(__m256 v)
{
    const __m256i x = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

static inline void store8(void *p, kvc_dtype_t dt, __m256 v)
{
    switch (dt) {
    case KVC_DTYPE_F16:
        _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        break;
    case KVC_DTYPE_BF16: _mm_storeu_si128((__m128i *)p, f2bf8(v)); break;
    default: _mm256_storeu_ps((float *)p, v); break;
    }
}

/* kvc_rope_combine1 on four pairs, in double. */
static inline void combine4(__m128 co4, __m128 so4, __m128 cn4, __m128 sn4, float *c, float *s)
{
    const __m256d co = _mm256_cvtps_pd(co4), so = _mm256_cvtps_pd(so4);
    const __m256d cn = _mm256_cvtps_pd(cn4), sn = _mm256_cvtps_pd(sn4);
    const __m256d cd = _mm256_add_pd(_mm256_mul_pd(cn, co), _mm256_mul_pd(sn, so));
    const __m256d sd = _mm256_sub_pd(_mm256_mul_pd(sn, co), _mm256_mul_pd(cn, so));
    const __m256d zero = _mm256_setzero_pd();
    const __m256d h = _mm256_sqrt_pd(_mm256_add_pd(_mm256_mul_pd(cd, cd), _mm256_mul_pd(sd, sd)));
    /* 1/h, or 0 where h == 0 (a zero row) */
    const __m256d inv = _mm256_blendv_pd(_mm256_div_pd(_mm256_set1_pd(1.0), h), zero, _mm256_cmp_pd(h, zero, _CMP_EQ_OQ));
    _mm_storeu_ps(c, _mm256_cvtpd_ps(_mm256_mul_pd(cd, inv)));
    _mm_storeu_ps(s, _mm256_cvtpd_ps(_mm256_mul_pd(sd, inv)));
}

static void avx2_factors(const void *row_old, const void *row_new, kvc_dtype_t dt, size_t half, float *c,
                         float *s)
{
    const size_t es = kvc_dtype_size(dt);
    const char *ro = row_old, *rn = row_new;
    size_t i = 0;
    for (; i + 8 <= half; i += 8) {
        const __m256 co = load8(ro + i * es, dt), so = load8(ro + (half + i) * es, dt);
        const __m256 cn = load8(rn + i * es, dt), sn = load8(rn + (half + i) * es, dt);
        combine4(_mm256_castps256_ps128(co), _mm256_castps256_ps128(so), _mm256_castps256_ps128(cn),
                 _mm256_castps256_ps128(sn), c + i, s + i);
        combine4(_mm256_extractf128_ps(co, 1), _mm256_extractf128_ps(so, 1), _mm256_extractf128_ps(cn, 1),
                 _mm256_extractf128_ps(sn, 1), c + i + 4, s + i + 4);
    }
    for (; i < half; i++) {
        const float co = kvc_rope_load1(ro, dt, i), so = kvc_rope_load1(ro, dt, half + i);
        const float cn = kvc_rope_load1(rn, dt, i), sn = kvc_rope_load1(rn, dt, half + i);
        kvc_rope_combine1(co, so, cn, sn, c + i, s + i);
    }
}

/* Four angles d*theta reduced to [-pi, pi] in double (see kvc_rope_reduce). */
static inline __m256d reduce4(__m256d d, const double *theta)
{
    const __m256d a = _mm256_mul_pd(d, _mm256_loadu_pd(theta));
    const __m256d k =
        _mm256_round_pd(_mm256_mul_pd(a, _mm256_set1_pd(KVC_ROPE_INV_2PI)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(KVC_ROPE_2PI_HI), a);
    return _mm256_fnmadd_pd(k, _mm256_set1_pd(KVC_ROPE_2PI_LO), r);
}

static inline void sincos8(__m256d d, const double *theta, float *c, float *s)
{
    const __m256d r0 = reduce4(d, theta), r1 = reduce4(d, theta + 4);
    const __m128 h0 = _mm256_cvtpd_ps(r0), h1 = _mm256_cvtpd_ps(r1);
    const __m128 l0 = _mm256_cvtpd_ps(_mm256_sub_pd(r0, _mm256_cvtps_pd(h0)));
    const __m128 l1 = _mm256_cvtpd_ps(_mm256_sub_pd(r1, _mm256_cvtps_pd(h1)));
    const __m256 hi = _mm256_set_m128(h1, h0), lo = _mm256_set_m128(l1, l0);
    const Sleef___m256_2 sc = Sleef_sincosf8_u10avx2(hi); /* x: sin, y: cos */
    /* first-order correction for the part of the angle lost when rounding it to fp32 */
    _mm256_storeu_ps(s, _mm256_add_ps(sc.x, _mm256_mul_ps(sc.y, lo)));
    _mm256_storeu_ps(c, _mm256_sub_ps(sc.y, _mm256_mul_ps(sc.x, lo)));
}

static void avx2_sincos(double d, const double *theta, size_t half, float *c, float *s)
{
    const __m256d dv = _mm256_set1_pd(d);
    size_t i = 0;
    for (; i + 8 <= half; i += 8) sincos8(dv, theta + i, c + i, s + i);
    if (i < half) { /* pad the tail so every lane goes through the same vector code */
        double t[8] = { 0 };
        float ct[8], st[8];
        memcpy(t, theta + i, (half - i) * sizeof(double));
        sincos8(dv, t, ct, st);
        memcpy(c + i, ct, (half - i) * sizeof(float));
        memcpy(s + i, st, (half - i) * sizeof(float));
    }
}

static inline void rotate_pair_tail(void *head, kvc_dtype_t dt, size_t xi, size_t yi, float c, float s)
{
    const float x = kvc_rope_load1(head, dt, xi), y = kvc_rope_load1(head, dt, yi);
    kvc_rope_store1(head, dt, xi, fmaf(x, c, -(y * s)));
    kvc_rope_store1(head, dt, yi, fmaf(y, c, x * s));
}

static void avx2_rotate(void *key, kvc_dtype_t dt, size_t num_heads, size_t head_stride, size_t half,
                        int is_neox, const float *c, const float *s)
{
    const size_t es = kvc_dtype_size(dt);
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    for (size_t h = 0; h < num_heads; h++) {
        char *head = (char *)key + h * head_stride * es;
        size_t i = 0;
        if (is_neox) {
            for (; i + 8 <= half; i += 8) {
                const __m256 x = load8(head + i * es, dt), y = load8(head + (half + i) * es, dt);
                const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
                store8(head + i * es, dt, _mm256_fmsub_ps(x, cv, _mm256_mul_ps(y, sv)));
                store8(head + (half + i) * es, dt, _mm256_fmadd_ps(y, cv, _mm256_mul_ps(x, sv)));
            }
            for (; i < half; i++) rotate_pair_tail(head, dt, i, half + i, c[i], s[i]);
        } else {
            /* 4 interleaved pairs per vector: even lanes x*c - y*s, odd lanes y*c + x*s */
            for (; i + 4 <= half; i += 4) {
                const __m256 v = load8(head + 2 * i * es, dt);
                const __m256 cd = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(c + i)), dup);
                const __m256 sd = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(s + i)), dup);
                const __m256 swapped = _mm256_permute_ps(v, 0xb1);
                store8(head + 2 * i * es, dt, _mm256_fmaddsub_ps(v, cd, _mm256_mul_ps(swapped, sd)));
            }
            for (; i < half; i++) rotate_pair_tail(head, dt, 2 * i, 2 * i + 1, c[i], s[i]);
        }
    }
}

static void avx2_store(void *dst, kvc_dtype_t dt, const float *src, size_t n)
{
    const size_t es = kvc_dtype_size(dt);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) store8((char *)dst + i * es, dt, _mm256_loadu_ps(src + i));
    for (; i < n; i++) kvc_rope_store1(dst, dt, i, src[i]);
}

const kvc_rope_kernels_t kvc_rope_kernels_avx2 = {
    .factors = avx2_factors,
    .sincos = avx2_sincos,
    .rotate = avx2_rotate,
    .store = avx2_store,
};
