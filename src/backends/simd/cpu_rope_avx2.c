/* SPDX-License-Identifier: BSD-3-Clause */
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

/* kvc_rope_sop / kvc_rope_dop on 8 lanes */
static inline __m256 sop8(__m256 a, __m256 b, __m256 c, __m256 d)
{
    const __m256 w = _mm256_mul_ps(c, d);
    return _mm256_add_ps(_mm256_fmadd_ps(a, b, w), _mm256_fmsub_ps(c, d, w));
}

static inline __m256 dop8(__m256 a, __m256 b, __m256 c, __m256 d)
{
    const __m256 p = _mm256_mul_ps(a, b), q = _mm256_mul_ps(c, d);
    return _mm256_add_ps(_mm256_sub_ps(p, q), _mm256_sub_ps(_mm256_fmsub_ps(a, b, p), _mm256_fmsub_ps(c, d, q)));
}

/* kvc_rope_combine1 on 8 pairs; lanes whose n is out of range take the double fallback, as in the
 * scalar helper; the tail goes through the scalar helper. */
static void avx2_factors(const void *row_old, const void *row_new, kvc_dtype_t dt, size_t half, float *c,
                         float *s)
{
    const size_t es = kvc_dtype_size(dt);
    const char *ro = row_old, *rn = row_new;
    size_t i = 0;
    for (; i + 8 <= half; i += 8) {
        const __m256 co = load8(ro + i * es, dt), so = load8(ro + (half + i) * es, dt);
        const __m256 cn = load8(rn + i * es, dt), sn = load8(rn + (half + i) * es, dt);
        const __m256 cd = sop8(cn, co, sn, so), sd = dop8(sn, co, cn, so);
        const __m256 n = _mm256_fmadd_ps(cd, cd, _mm256_mul_ps(sd, sd));
        const __m256 ok = _mm256_and_ps(_mm256_cmp_ps(n, _mm256_set1_ps(KVC_ROPE_NORM_MIN), _CMP_GE_OQ),
                                        _mm256_cmp_ps(n, _mm256_set1_ps(KVC_ROPE_NORM_MAX), _CMP_LE_OQ));
        const __m256 h = _mm256_sqrt_ps(n);
        _mm256_storeu_ps(c + i, _mm256_div_ps(cd, h));
        _mm256_storeu_ps(s + i, _mm256_div_ps(sd, h));
        for (unsigned bad = (unsigned)_mm256_movemask_ps(ok) ^ 0xffu; bad; bad &= bad - 1) {
            const size_t j = i + (size_t)__builtin_ctz(bad);
            kvc_rope_combine1_f64(kvc_rope_load1(ro, dt, j), kvc_rope_load1(ro, dt, half + j), kvc_rope_load1(rn, dt, j),
                                  kvc_rope_load1(rn, dt, half + j), c + j, s + j);
        }
    }
    for (; i < half; i++) {
        const float co = kvc_rope_load1(ro, dt, i), so = kvc_rope_load1(ro, dt, half + i);
        const float cn = kvc_rope_load1(rn, dt, i), sn = kvc_rope_load1(rn, dt, half + i);
        kvc_rope_combine1(co, so, cn, sn, c + i, s + i);
    }
}

/* cos/sin of d*theta in double, rounded once to fp32 (see kvc_rope_sincos_scalar). */
static inline void sincos4(__m256d d, const double *theta, float *c, float *s)
{
    const Sleef___m256d_2 sc = Sleef_sincosd4_u35avx2(_mm256_mul_pd(d, _mm256_loadu_pd(theta))); /* x: sin, y: cos */
    _mm_storeu_ps(s, _mm256_cvtpd_ps(sc.x));
    _mm_storeu_ps(c, _mm256_cvtpd_ps(sc.y));
}

static void avx2_sincos(double d, const double *theta, size_t half, float *c, float *s)
{
    const __m256d dv = _mm256_set1_pd(d);
    size_t i = 0;
    for (; i + 4 <= half; i += 4) sincos4(dv, theta + i, c + i, s + i);
    if (i < half) { /* pad the tail so every lane goes through the same vector code */
        double t[4] = { 0 };
        float ct[4], st[4];
        memcpy(t, theta + i, (half - i) * sizeof(double));
        sincos4(dv, t, ct, st);
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

/* Any shape: scalar tails, the dtype switched per vector. */
static void rotate_generic(void *key, kvc_dtype_t dt, size_t num_heads, size_t head_stride, size_t half,
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

/* The fast paths below compute every element with the operations of rotate_generic, in the same
 * order (so the results are bit-identical), on whole vectors with the dtype fixed per loop. They
 * take the factors in a layout that avx2_prepare writes once per token (per change of the
 * factors), not once per head or per call:
 * - GPT-J: the factors are duplicated per pair, with the sine negated (exactly, by its sign bit) in
 *   the even lanes: fmadd(v, cd, swapped * sd') is fmaddsub(v, cd, swapped * sd) lane for lane.
 * - bf16: 16 values are widened into their even and odd elements (a bf16 is the high half of its
 *   fp32: a shift left and a mask, no shuffle) and narrowed back by one word blend. For GPT-J the
 *   even elements are the pairs' x and the odd ones their y, so the rotation needs neither a pair
 *   swap nor a factor layout; for NeoX the factors are split into even and odd elements. */
/* bf16 round to nearest even of fp32 lanes, in the low 16 bits of each 32-bit lane (as f2bf8). */
static inline __m256i bf16_bits(__m256 v)
{
    const __m256i x = _mm256_castps_si256(v), top = _mm256_srli_epi32(x, 16);
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(x, _mm256_add_epi32(_mm256_and_si256(top, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff))), 16);
    const __m256i quiet = _mm256_or_si256(top, _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}

/* bf16_bits without the NaN case, the result left in the high half: +0x7fff, +1 more where the
 * kept part is odd (bit 16, turned into 1 by an unsigned min rather than a shift: shifts share
 * fewer execution ports than plain integer operations on common x86 cores) */
static inline __m256i bf16_round_hi(__m256 v)
{
    const __m256i x = _mm256_castps_si256(v);
    const __m256i odd = _mm256_min_epu32(_mm256_and_si256(x, _mm256_set1_epi32(0x10000)), _mm256_set1_epi32(1));
    return _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd);
}

/* The even and odd elements of 16 bf16, as fp32. */
static inline __m256 bf16_even(__m256i w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); }
static inline __m256 bf16_odd(__m256i w)
{
    return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
}

/* 16 bf16 from their even and odd elements in fp32. One unordered compare tells whether either
 * vector holds a NaN (rare): only then the quieting. */
static inline __m256i bf16_join(__m256 even, __m256 odd)
{
    if (_mm256_movemask_ps(_mm256_cmp_ps(even, odd, _CMP_UNORD_Q)))
        return _mm256_or_si256(bf16_bits(even), _mm256_slli_epi32(bf16_bits(odd), 16));
    return _mm256_blend_epi16(_mm256_srli_epi32(bf16_round_hi(even), 16), bf16_round_hi(odd), 0xaa);
}

static void rotate_neox_f16(char *key, size_t num_heads, size_t hstride, size_t half, const float *c, const float *s)
{
    for (size_t h = 0; h < num_heads; h++) {
        uint16_t *x = (uint16_t *)key + h * hstride, *y = x + half;
        for (size_t i = 0; i < half; i += 8) {
            const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
            const __m256 yv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i)));
            const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
            _mm_storeu_si128((__m128i *)(x + i), _mm256_cvtps_ph(_mm256_fmsub_ps(xv, cv, _mm256_mul_ps(yv, sv)),
                                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_fmadd_ps(yv, cv, _mm256_mul_ps(xv, sv)),
                                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }
}

static void rotate_neox_f32(char *key, size_t num_heads, size_t hstride, size_t half, const float *c, const float *s)
{
    for (size_t h = 0; h < num_heads; h++) {
        float *x = (float *)key + h * hstride, *y = x + half;
        for (size_t i = 0; i < half; i += 8) {
            const __m256 xv = _mm256_loadu_ps(x + i), yv = _mm256_loadu_ps(y + i);
            const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
            _mm256_storeu_ps(x + i, _mm256_fmsub_ps(xv, cv, _mm256_mul_ps(yv, sv)));
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(yv, cv, _mm256_mul_ps(xv, sv)));
        }
    }
}

/* half a multiple of 16; cp/sp: per 16 pairs, the factors of the 8 even pairs, then the 8 odd. */
static void rotate_neox_bf16(char *key, size_t num_heads, size_t hstride, size_t half, const float *cp, const float *sp)
{
    for (size_t h = 0; h < num_heads; h++) {
        uint16_t *x = (uint16_t *)key + h * hstride, *y = x + half;
        for (size_t i = 0; i < half; i += 16) {
            const __m256i xw = _mm256_loadu_si256((const __m256i *)(x + i)), yw = _mm256_loadu_si256((const __m256i *)(y + i));
            const __m256 xe = bf16_even(xw), xo = bf16_odd(xw), ye = bf16_even(yw), yo = bf16_odd(yw);
            const __m256 ce = _mm256_loadu_ps(cp + i), co = _mm256_loadu_ps(cp + i + 8);
            const __m256 se = _mm256_loadu_ps(sp + i), so = _mm256_loadu_ps(sp + i + 8);
            _mm256_storeu_si256((__m256i *)(x + i), bf16_join(_mm256_fmsub_ps(xe, ce, _mm256_mul_ps(ye, se)),
                                                              _mm256_fmsub_ps(xo, co, _mm256_mul_ps(yo, so))));
            _mm256_storeu_si256((__m256i *)(y + i), bf16_join(_mm256_fmadd_ps(ye, ce, _mm256_mul_ps(xe, se)),
                                                              _mm256_fmadd_ps(yo, co, _mm256_mul_ps(xo, so))));
        }
    }
}

/* 2*half elements; cd/sd: per-element factors (c duplicated, s negated in even lanes). */
static void rotate_gptj_f16(char *key, size_t num_heads, size_t hstride, size_t half, const float *cd, const float *sd)
{
    for (size_t h = 0; h < num_heads; h++) {
        uint16_t *k = (uint16_t *)key + h * hstride;
        for (size_t i = 0; i < 2 * half; i += 8) {
            const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i)));
            const __m256 r = _mm256_fmadd_ps(v, _mm256_loadu_ps(cd + i),
                                             _mm256_mul_ps(_mm256_permute_ps(v, 0xb1), _mm256_loadu_ps(sd + i)));
            _mm_storeu_si128((__m128i *)(k + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }
}

static void rotate_gptj_f32(char *key, size_t num_heads, size_t hstride, size_t half, const float *cd, const float *sd)
{
    for (size_t h = 0; h < num_heads; h++) {
        float *k = (float *)key + h * hstride;
        for (size_t i = 0; i < 2 * half; i += 8) {
            const __m256 v = _mm256_loadu_ps(k + i);
            _mm256_storeu_ps(k + i, _mm256_fmadd_ps(v, _mm256_loadu_ps(cd + i),
                                                    _mm256_mul_ps(_mm256_permute_ps(v, 0xb1), _mm256_loadu_ps(sd + i))));
        }
    }
}

/* 2*half a multiple of 16; c/s as they are: the even elements are x, the odd ones y. */
static void rotate_gptj_bf16(char *key, size_t num_heads, size_t hstride, size_t half, const float *c, const float *s)
{
    for (size_t h = 0; h < num_heads; h++) {
        uint16_t *k = (uint16_t *)key + h * hstride;
        for (size_t i = 0; i < half; i += 8) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(k + 2 * i));
            const __m256 x = bf16_even(w), y = bf16_odd(w);
            const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
            _mm256_storeu_si256((__m256i *)(k + 2 * i), bf16_join(_mm256_fmsub_ps(x, cv, _mm256_mul_ps(y, sv)),
                                                                  _mm256_fmadd_ps(y, cv, _mm256_mul_ps(x, sv))));
        }
    }
}

/* Which loop rotates (dt, half, is_neox), hence the layout prepare writes. */
enum { PATH_GENERIC, PATH_NEOX, PATH_NEOX_BF16, PATH_GPTJ, PATH_GPTJ_BF16 };

static int path_of(kvc_dtype_t dt, size_t half, int is_neox)
{
    const int bf = dt == KVC_DTYPE_BF16;
    if (half % (is_neox ? (bf ? 16 : 8) : (bf ? 8 : 4))) return PATH_GENERIC;
    if (is_neox) return bf ? PATH_NEOX_BF16 : PATH_NEOX;
    return bf ? PATH_GPTJ_BF16 : PATH_GPTJ;
}

static int avx2_prepare(kvc_dtype_t dt, size_t half, int is_neox, const float *c, const float *s, float *cd,
                        float *sd)
{
    /* even lanes: -s (sign bit flipped, exact also for zeros) */
    const __m256 neg_even = _mm256_castsi256_ps(_mm256_set1_epi64x(0x80000000u));
    switch (path_of(dt, half, is_neox)) {
    case PATH_NEOX_BF16:
        for (size_t i = 0; i < half; i += 16) {
            const __m256 c0 = _mm256_loadu_ps(c + i), c1 = _mm256_loadu_ps(c + i + 8);
            const __m256 s0 = _mm256_loadu_ps(s + i), s1 = _mm256_loadu_ps(s + i + 8);
            /* shuffle_ps takes elements {0,2} (or {1,3}) of each 128-bit lane of c0 then c1; the
             * 64-bit permute puts the lanes back in order */
            _mm256_storeu_ps(cd + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(c0, c1, 0x88)), 0xd8)));
            _mm256_storeu_ps(cd + i + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(c0, c1, 0xdd)), 0xd8)));
            _mm256_storeu_ps(sd + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(s0, s1, 0x88)), 0xd8)));
            _mm256_storeu_ps(sd + i + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(s0, s1, 0xdd)), 0xd8)));
        }
        return 1;
    case PATH_GPTJ: {
        const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
        const __m256i dup_hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
        size_t i = 0;
        /* whole 32-byte loads of what the factors just stored with 32-byte stores */
        for (; i + 8 <= half; i += 8) {
            const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
            _mm256_storeu_ps(cd + 2 * i, _mm256_permutevar8x32_ps(cv, dup));
            _mm256_storeu_ps(cd + 2 * i + 8, _mm256_permutevar8x32_ps(cv, dup_hi));
            _mm256_storeu_ps(sd + 2 * i, _mm256_xor_ps(_mm256_permutevar8x32_ps(sv, dup), neg_even));
            _mm256_storeu_ps(sd + 2 * i + 8, _mm256_xor_ps(_mm256_permutevar8x32_ps(sv, dup_hi), neg_even));
        }
        for (; i < half; i += 4) {
            _mm256_storeu_ps(cd + 2 * i, _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(c + i)), dup));
            _mm256_storeu_ps(sd + 2 * i, _mm256_xor_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(s + i)), dup),
                                                       neg_even));
        }
        return 1;
    }
    default: return 0; /* rotate takes (c, s) as they are */
    }
}

static void avx2_rotate(void *key, kvc_dtype_t dt, size_t num_heads, size_t head_stride, size_t half,
                        int is_neox, const float *c, const float *s)
{
    switch (path_of(dt, half, is_neox)) {
    case PATH_NEOX:
        (dt == KVC_DTYPE_F16 ? rotate_neox_f16 : rotate_neox_f32)(key, num_heads, head_stride, half, c, s);
        break;
    case PATH_NEOX_BF16: rotate_neox_bf16(key, num_heads, head_stride, half, c, s); break;
    case PATH_GPTJ:
        (dt == KVC_DTYPE_F16 ? rotate_gptj_f16 : rotate_gptj_f32)(key, num_heads, head_stride, half, c, s);
        break;
    case PATH_GPTJ_BF16: rotate_gptj_bf16(key, num_heads, head_stride, half, c, s); break;
    default: rotate_generic(key, dt, num_heads, head_stride, half, is_neox, c, s); break;
    }
}

static void avx2_store(void *dst, kvc_dtype_t dt, const float *src, size_t n)
{
    const size_t es = kvc_dtype_size(dt);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) store8((char *)dst + i * es, dt, _mm256_loadu_ps(src + i));
    for (; i < n; i++) kvc_rope_store1(dst, dt, i, src[i]);
}

static void avx2_sincos_f64(double d, const double *theta, size_t half, double *c, double *s)
{
    const __m256d dv = _mm256_set1_pd(d);
    size_t i = 0;
    for (; i + 4 <= half; i += 4) {
        const Sleef___m256d_2 sc = Sleef_sincosd4_u35avx2(_mm256_mul_pd(dv, _mm256_loadu_pd(theta + i)));
        _mm256_storeu_pd(s + i, sc.x);
        _mm256_storeu_pd(c + i, sc.y);
    }
    if (i < half) { /* pad the tail so every lane goes through the same vector code */
        double t[4] = { 0 }, ct[4], st[4];
        memcpy(t, theta + i, (half - i) * sizeof(double));
        const Sleef___m256d_2 sc = Sleef_sincosd4_u35avx2(_mm256_mul_pd(dv, _mm256_loadu_pd(t)));
        _mm256_storeu_pd(st, sc.x);
        _mm256_storeu_pd(ct, sc.y);
        memcpy(c + i, ct, (half - i) * sizeof(double));
        memcpy(s + i, st, (half - i) * sizeof(double));
    }
}

/* kvc_rope_angle_sum1 on 4 entries, rounded to fp32 */
static inline void angle_sum4(__m256d a_c, __m256d a_s, __m256d b_c, __m256d b_s, __m128 *c, __m128 *s)
{
    *c = _mm256_cvtpd_ps(_mm256_fmsub_pd(a_c, b_c, _mm256_mul_pd(a_s, b_s)));
    *s = _mm256_cvtpd_ps(_mm256_fmadd_pd(a_s, b_c, _mm256_mul_pd(a_c, b_s)));
}

/* Rows k and k + 1 of KVC_ROPE_TABLE_GROUP whole blocks, half a multiple of 4: the blocks
 * unrolled, so with half a constant (the common rot_dim 128, below) every address is a register
 * plus a constant and the loop is nearly all arithmetic, loads and stores (it bounded the build:
 * about 40% fewer instructions than the loop over blocks); two rows per load of a block's angles
 * (5 % faster again). */
static inline __attribute__((always_inline)) void table_row_group(const double *ca, const double *sa,
                                                                  const double *cbk, const double *sbk, size_t half,
                                                                  float *row)
{
    const size_t B = KVC_ROPE_TABLE_BLOCK;
    for (size_t i = 0; i < half; i += 4) {
        /* rows k and k + 1: each block's first angles loaded once for both */
        const __m256d b_c = _mm256_loadu_pd(cbk + i), b_s = _mm256_loadu_pd(sbk + i);
        const __m256d b_c1 = _mm256_loadu_pd(cbk + half + i), b_s1 = _mm256_loadu_pd(sbk + half + i);
        for (size_t bl = 0; bl < KVC_ROPE_TABLE_GROUP; bl++) {
            const __m256d a_c = _mm256_loadu_pd(ca + bl * half + i), a_s = _mm256_loadu_pd(sa + bl * half + i);
            __m128 rc, rs;
            angle_sum4(a_c, a_s, b_c, b_s, &rc, &rs);
            _mm_storeu_ps(row + bl * B * 2 * half + i, rc);
            _mm_storeu_ps(row + bl * B * 2 * half + half + i, rs);
            angle_sum4(a_c, a_s, b_c1, b_s1, &rc, &rs);
            _mm_storeu_ps(row + bl * B * 2 * half + 2 * half + i, rc);
            _mm_storeu_ps(row + bl * B * 2 * half + 3 * half + i, rs);
        }
    }
}

static void avx2_table_rows(const double *ca, const double *sa, const double *cb, const double *sb, size_t n,
                            size_t half, float *rows)
{
    const size_t B = KVC_ROPE_TABLE_BLOCK;
    for (size_t k = 0; k < B && k < n; k++) {
        const double *cbk = cb + k * half, *sbk = sb + k * half;
        const size_t nb = (n - k + B - 1) / B; /* blocks that have a row k */
        /* rows k and k + 1 (B is even) of whole groups */
        if (k % 2 == 0 && n >= KVC_ROPE_TABLE_GROUP * B && half == 64) {
            table_row_group(ca, sa, cbk, sbk, 64, rows + k * 2 * 64);
            k++;
            continue;
        }
        if (k % 2 == 0 && n >= KVC_ROPE_TABLE_GROUP * B && half % 4 == 0) {
            table_row_group(ca, sa, cbk, sbk, half, rows + k * 2 * half);
            k++;
            continue;
        }
        size_t i = 0;
        for (; i + 4 <= half; i += 4) {
            const __m256d b_c = _mm256_loadu_pd(cbk + i), b_s = _mm256_loadu_pd(sbk + i);
            for (size_t bl = 0; bl < nb; bl++) {
                float *c = rows + (bl * B + k) * 2 * half + i;
                __m128 rc, rs;
                angle_sum4(_mm256_loadu_pd(ca + bl * half + i), _mm256_loadu_pd(sa + bl * half + i), b_c, b_s, &rc, &rs);
                _mm_storeu_ps(c, rc);
                _mm_storeu_ps(c + half, rs);
            }
        }
        for (; i < half; i++)
            for (size_t bl = 0; bl < nb; bl++) {
                float *c = rows + (bl * B + k) * 2 * half + i;
                kvc_rope_angle_sum1(ca[bl * half + i], sa[bl * half + i], cbk[i], sbk[i], c, c + half);
            }
    }
}

const kvc_rope_kernels_t kvc_rope_kernels_avx2 = {
    .factors = avx2_factors,
    .sincos = avx2_sincos,
    .rotate = avx2_rotate,
    .store = avx2_store,
    .sincos_f64 = avx2_sincos_f64,
    .table_rows = avx2_table_rows,
    .prepare = avx2_prepare,
};
