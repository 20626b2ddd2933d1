/* SPDX-License-Identifier: BSD-3-Clause */
/* RoPE kernels for the AVX-512 tier (F/BW/DQ/VL + FMA + F16C; built with the matching -m flags).
 * 16 fp32 lanes; tails use masked loads and stores, so every element goes through the vector code.
 * Whole vectors use plain loads and stores: masked memory operations are several times slower on
 * some CPUs (measured 3.7 vs 21 GB/s for fp16 keys on an AMD EPYC with AVX-512). */
#include "config.h"

#include <cpuid.h>
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

/* kvc_rope_sop / kvc_rope_dop on 16 lanes */
static inline __m512 sop16(__m512 a, __m512 b, __m512 c, __m512 d)
{
    const __m512 w = _mm512_mul_ps(c, d);
    return _mm512_add_ps(_mm512_fmadd_ps(a, b, w), _mm512_fmsub_ps(c, d, w));
}

static inline __m512 dop16(__m512 a, __m512 b, __m512 c, __m512 d)
{
    const __m512 p = _mm512_mul_ps(a, b), q = _mm512_mul_ps(c, d);
    return _mm512_add_ps(_mm512_sub_ps(p, q), _mm512_sub_ps(_mm512_fmsub_ps(a, b, p), _mm512_fmsub_ps(c, d, q)));
}

/* kvc_rope_combine1 on 16 pairs at i (m: the valid lanes); lanes whose n is out of range take the
 * double fallback, as in the scalar helper. */
static inline void factors16(__m512 co, __m512 so, __m512 cn, __m512 sn, const char *ro, const char *rn,
                             kvc_dtype_t dt, size_t half, size_t i, __mmask16 m, float *c, float *s)
{
    const __m512 cd = sop16(cn, co, sn, so), sd = dop16(sn, co, cn, so);
    const __m512 n = _mm512_fmadd_ps(cd, cd, _mm512_mul_ps(sd, sd));
    const __mmask16 ok = _mm512_cmp_ps_mask(n, _mm512_set1_ps(KVC_ROPE_NORM_MIN), _CMP_GE_OQ) &
                         _mm512_cmp_ps_mask(n, _mm512_set1_ps(KVC_ROPE_NORM_MAX), _CMP_LE_OQ);
    const __m512 h = _mm512_sqrt_ps(n);
    storef(c + i, _mm512_div_ps(cd, h), m);
    storef(s + i, _mm512_div_ps(sd, h), m);
    for (unsigned bad = (unsigned)(m & ~ok); __builtin_expect(bad != 0, 0); bad &= bad - 1) {
        const size_t j = i + (size_t)__builtin_ctz(bad);
        kvc_rope_combine1_f64(kvc_rope_load1(ro, dt, j), kvc_rope_load1(ro, dt, half + j), kvc_rope_load1(rn, dt, j),
                              kvc_rope_load1(rn, dt, half + j), c + j, s + j);
    }
}

static void avx512_factors(const void *row_old, const void *row_new, kvc_dtype_t dt, size_t half, float *c,
                           float *s)
{
    const size_t es = kvc_dtype_size(dt);
    const char *ro = row_old, *rn = row_new;
    size_t i = 0;
    if (dt == KVC_DTYPE_F32) /* the usual table: plain loads for whole vectors */
        for (const float *fo = row_old, *fn = row_new; i + 16 <= half; i += 16)
            factors16(_mm512_loadu_ps(fo + i), _mm512_loadu_ps(fo + half + i), _mm512_loadu_ps(fn + i),
                      _mm512_loadu_ps(fn + half + i), ro, rn, dt, half, i, 0xffff, c, s);
    for (; i < half; i += 16) {
        const __mmask16 m = mask16(half - i);
        factors16(load16(ro + i * es, dt, m), load16(ro + (half + i) * es, dt, m), load16(rn + i * es, dt, m),
                  load16(rn + (half + i) * es, dt, m), ro, rn, dt, half, i, m, c, s);
    }
}

/* cos/sin of d*theta in double, rounded once to fp32 (see kvc_rope_sincos_scalar). */
static void avx512_sincos(double d, const double *theta, size_t half, float *c, float *s)
{
    const __m512d dv = _mm512_set1_pd(d);
    for (size_t i = 0; i < half; i += 8) {
        const __mmask8 m = mask8(half - i);
        const __m512d t = m == 0xff ? _mm512_loadu_pd(theta + i) : _mm512_maskz_loadu_pd(m, theta + i);
        const Sleef___m512d_2 sc = Sleef_sincosd8_u35avx512f(_mm512_mul_pd(dv, t)); /* x: sin, y: cos */
        if (m == 0xff) {
            _mm256_storeu_ps(s + i, _mm512_cvtpd_ps(sc.x));
            _mm256_storeu_ps(c + i, _mm512_cvtpd_ps(sc.y));
        } else {
            _mm256_mask_storeu_ps(s + i, m, _mm512_cvtpd_ps(sc.x));
            _mm256_mask_storeu_ps(c + i, m, _mm512_cvtpd_ps(sc.y));
        }
    }
}

/* Any shape: masked tails, the dtype switched per vector. */
static void rotate_generic(void *key, kvc_dtype_t dt, size_t num_heads, size_t head_stride, size_t half,
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

/* The fast paths below compute every element with the operations of rotate_generic, in the same
 * order (so the results are bit-identical), on whole vectors with the dtype fixed per loop. They
 * take the factors in a layout that avx512_prepare writes once per token (per change of the
 * factors), not once per head or per call:
 * - GPT-J: the factors are duplicated per pair, with the sine negated (exactly, by its sign bit) in
 *   the even lanes: fmadd(v, cd, swapped * sd') is fmaddsub(v, cd, swapped * sd) lane for lane.
 * - bf16 without AVX512_BF16: 32 values are widened by interleaving them with zero words
 *   (unpacklo/hi_epi16: a bf16 is the high half of its fp32) and narrowed by packus_epi32, both
 *   within 128-bit lanes, so the lanes hold elements {0-3, 8-11, 16-19, 24-27} and {4-7, ...}; the
 *   factors are permuted to match. No cross-lane widening or narrowing per element.
 * - bf16 with AVX512_BF16 (the kvc_rope_kernels_avx512bf16 table): widened in order (zero-extend,
 *   shift) and narrowed by vcvtneps2bf16, which rounds to nearest even and quiets NaNs exactly as
 *   kvc_f32_to_bf16 does but flushes subnormal inputs to zero: a vector holding a subnormal takes
 *   the integer rounding instead (vfpclassps tells), so the bits are those of every other tier. The
 *   factors then have the fp16 layout. */
/* bf16 round to nearest even of fp32 lanes, result in the low 16 bits of each 32-bit lane: the
 * same bits as f2bf16 (which narrows as well) with fewer operations: +0x7fff, +1 more where the
 * kept part is odd, and a NaN's bits with the quiet bit set instead. */
static inline __m512i bf16_bits(__m512 v)
{
    const __m512i x = _mm512_castps_si512(v);
    __m512i t = _mm512_add_epi32(x, _mm512_set1_epi32(0x7fff));
    t = _mm512_mask_add_epi32(t, _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x10000)), t, _mm512_set1_epi32(1));
    t = _mm512_mask_or_epi32(t, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), x, _mm512_set1_epi32(0x400000));
    return _mm512_srli_epi32(t, 16);
}

static inline __m512 bf16_lo(__m512i v) { return _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), v)); }
static inline __m512 bf16_hi(__m512i v) { return _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), v)); }
/* bf16_bits without the NaN case */
static inline __m512i bf16_bits_finite(__m512 v)
{
    const __m512i x = _mm512_castps_si512(v);
    const __m512i t = _mm512_add_epi32(x, _mm512_set1_epi32(0x7fff));
    return _mm512_srli_epi32(_mm512_mask_add_epi32(t, _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x10000)), t,
                                                   _mm512_set1_epi32(1)), 16);
}

/* One unordered compare tells whether either vector holds a NaN (rare): only then the quieting. */
static inline __m512i bf16_pack(__m512 lo, __m512 hi)
{
    if (_mm512_cmp_ps_mask(lo, hi, _CMP_UNORD_Q)) return _mm512_packus_epi32(bf16_bits(lo), bf16_bits(hi));
    return _mm512_packus_epi32(bf16_bits_finite(lo), bf16_bits_finite(hi));
}

static void rotate_neox_f16(char *key, size_t num_heads, size_t hstride, size_t half, const float *c, const float *s)
{
    for (size_t h = 0; h < num_heads; h++) {
        uint16_t *x = (uint16_t *)key + h * hstride, *y = x + half;
        for (size_t i = 0; i < half; i += 16) {
            const __m512 xv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
            const __m512 yv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i)));
            const __m512 cv = _mm512_loadu_ps(c + i), sv = _mm512_loadu_ps(s + i);
            _mm256_storeu_si256((__m256i *)(x + i), _mm512_cvtps_ph(_mm512_fmsub_ps(xv, cv, _mm512_mul_ps(yv, sv)),
                                                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtps_ph(_mm512_fmadd_ps(yv, cv, _mm512_mul_ps(xv, sv)),
                                                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }
}

static void rotate_neox_f32(char *key, size_t num_heads, size_t hstride, size_t half, const float *c, const float *s)
{
    for (size_t h = 0; h < num_heads; h++) {
        float *x = (float *)key + h * hstride, *y = x + half;
        for (size_t i = 0; i < half; i += 16) {
            const __m512 xv = _mm512_loadu_ps(x + i), yv = _mm512_loadu_ps(y + i);
            const __m512 cv = _mm512_loadu_ps(c + i), sv = _mm512_loadu_ps(s + i);
            _mm512_storeu_ps(x + i, _mm512_fmsub_ps(xv, cv, _mm512_mul_ps(yv, sv)));
            _mm512_storeu_ps(y + i, _mm512_fmadd_ps(yv, cv, _mm512_mul_ps(xv, sv)));
        }
    }
}

/* half a multiple of 32; cp/sp: the factors in unpack order (see above). */
static void rotate_neox_bf16(char *key, size_t num_heads, size_t hstride, size_t half, const float *cp, const float *sp)
{
    for (size_t h = 0; h < num_heads; h++) {
        uint16_t *x = (uint16_t *)key + h * hstride, *y = x + half;
        for (size_t i = 0; i < half; i += 32) {
            const __m512i xw = _mm512_loadu_si512(x + i), yw = _mm512_loadu_si512(y + i);
            const __m512 xl = bf16_lo(xw), xh = bf16_hi(xw), yl = bf16_lo(yw), yh = bf16_hi(yw);
            const __m512 cl = _mm512_loadu_ps(cp + i), ch = _mm512_loadu_ps(cp + i + 16);
            const __m512 sl = _mm512_loadu_ps(sp + i), sh = _mm512_loadu_ps(sp + i + 16);
            _mm512_storeu_si512(x + i, bf16_pack(_mm512_fmsub_ps(xl, cl, _mm512_mul_ps(yl, sl)),
                                                 _mm512_fmsub_ps(xh, ch, _mm512_mul_ps(yh, sh))));
            _mm512_storeu_si512(y + i, bf16_pack(_mm512_fmadd_ps(yl, cl, _mm512_mul_ps(xl, sl)),
                                                 _mm512_fmadd_ps(yh, ch, _mm512_mul_ps(xh, sh))));
        }
    }
}

/* 2*half elements; cd/sd: per-element factors (c duplicated, s negated in even lanes). */
static void rotate_gptj_f16(char *key, size_t num_heads, size_t hstride, size_t half, const float *cd, const float *sd)
{
    for (size_t h = 0; h < num_heads; h++) {
        uint16_t *k = (uint16_t *)key + h * hstride;
        for (size_t i = 0; i < 2 * half; i += 16) {
            const __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + i)));
            const __m512 r = _mm512_fmadd_ps(v, _mm512_loadu_ps(cd + i),
                                             _mm512_mul_ps(_mm512_permute_ps(v, 0xb1), _mm512_loadu_ps(sd + i)));
            _mm256_storeu_si256((__m256i *)(k + i), _mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }
}

static void rotate_gptj_f32(char *key, size_t num_heads, size_t hstride, size_t half, const float *cd, const float *sd)
{
    for (size_t h = 0; h < num_heads; h++) {
        float *k = (float *)key + h * hstride;
        for (size_t i = 0; i < 2 * half; i += 16) {
            const __m512 v = _mm512_loadu_ps(k + i);
            _mm512_storeu_ps(k + i, _mm512_fmadd_ps(v, _mm512_loadu_ps(cd + i),
                                                    _mm512_mul_ps(_mm512_permute_ps(v, 0xb1), _mm512_loadu_ps(sd + i))));
        }
    }
}

/* 2*half a multiple of 32; cd/sd in unpack order. */
static void rotate_gptj_bf16(char *key, size_t num_heads, size_t hstride, size_t half, const float *cd, const float *sd)
{
    for (size_t h = 0; h < num_heads; h++) {
        uint16_t *k = (uint16_t *)key + h * hstride;
        for (size_t i = 0; i < 2 * half; i += 32) {
            const __m512i w = _mm512_loadu_si512(k + i);
            const __m512 l = bf16_lo(w), hv = bf16_hi(w);
            const __m512 rl = _mm512_fmadd_ps(l, _mm512_loadu_ps(cd + i),
                                              _mm512_mul_ps(_mm512_permute_ps(l, 0xb1), _mm512_loadu_ps(sd + i)));
            const __m512 rh = _mm512_fmadd_ps(hv, _mm512_loadu_ps(cd + i + 16),
                                              _mm512_mul_ps(_mm512_permute_ps(hv, 0xb1), _mm512_loadu_ps(sd + i + 16)));
            _mm512_storeu_si512(k + i, bf16_pack(rl, rh));
        }
    }
}

/* Which loop rotates (dt, half, is_neox), hence the layout prepare writes. */
enum { PATH_GENERIC, PATH_NEOX, PATH_NEOX_BF16, PATH_GPTJ, PATH_GPTJ_BF16 };

static int path_of(kvc_dtype_t dt, size_t half, int is_neox, int bf16_in_order)
{
    const int bf = dt == KVC_DTYPE_BF16 && !bf16_in_order;
    /* bf16 goes 32 elements at a time either way */
    if (half % (is_neox ? (dt == KVC_DTYPE_BF16 ? 32 : 16) : (dt == KVC_DTYPE_BF16 ? 16 : 8))) return PATH_GENERIC;
    if (is_neox) return bf ? PATH_NEOX_BF16 : PATH_NEOX;
    return bf ? PATH_GPTJ_BF16 : PATH_GPTJ;
}

static int prepare(int path, size_t half, const float *c, const float *s, float *cd, float *sd)
{
    /* even lanes: -s (sign bit flipped, exact also for zeros) */
    const __m512 neg_even = _mm512_castsi512_ps(_mm512_set1_epi64(0x80000000u));
    switch (path) {
    case PATH_NEOX_BF16: {
        const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
        const __m512i hi = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
        for (size_t i = 0; i < half; i += 32) {
            const __m512 c0 = _mm512_loadu_ps(c + i), c1 = _mm512_loadu_ps(c + i + 16);
            const __m512 s0 = _mm512_loadu_ps(s + i), s1 = _mm512_loadu_ps(s + i + 16);
            _mm512_storeu_ps(cd + i, _mm512_permutex2var_ps(c0, lo, c1));
            _mm512_storeu_ps(cd + i + 16, _mm512_permutex2var_ps(c0, hi, c1));
            _mm512_storeu_ps(sd + i, _mm512_permutex2var_ps(s0, lo, s1));
            _mm512_storeu_ps(sd + i + 16, _mm512_permutex2var_ps(s0, hi, s1));
        }
        return 1;
    }
    case PATH_GPTJ: {
        const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        const __m512i dup_hi = _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
        size_t i = 0;
        /* whole 64-byte loads: c and s were just written by 64-byte stores, which a narrower load at
         * an offset may not be forwarded from */
        for (; i + 16 <= half; i += 16) {
            const __m512 cv = _mm512_loadu_ps(c + i), sv = _mm512_loadu_ps(s + i);
            _mm512_storeu_ps(cd + 2 * i, _mm512_permutexvar_ps(dup, cv));
            _mm512_storeu_ps(cd + 2 * i + 16, _mm512_permutexvar_ps(dup_hi, cv));
            _mm512_storeu_ps(sd + 2 * i, _mm512_xor_ps(_mm512_permutexvar_ps(dup, sv), neg_even));
            _mm512_storeu_ps(sd + 2 * i + 16, _mm512_xor_ps(_mm512_permutexvar_ps(dup_hi, sv), neg_even));
        }
        for (; i < half; i += 8) {
            _mm512_storeu_ps(cd + 2 * i, _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(c + i))));
            _mm512_storeu_ps(sd + 2 * i, _mm512_xor_ps(_mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(s + i))),
                                                       neg_even));
        }
        return 1;
    }
    case PATH_GPTJ_BF16: {
        /* 16 pairs per 32 elements; the low unpack holds pairs {0,1,4,5,8,9,12,13}, the high one the rest */
        const __m512i lo = _mm512_setr_epi32(0, 0, 1, 1, 4, 4, 5, 5, 8, 8, 9, 9, 12, 12, 13, 13);
        const __m512i hi = _mm512_setr_epi32(2, 2, 3, 3, 6, 6, 7, 7, 10, 10, 11, 11, 14, 14, 15, 15);
        for (size_t i = 0; i < half; i += 16) {
            const __m512 cv = _mm512_loadu_ps(c + i), sv = _mm512_loadu_ps(s + i);
            _mm512_storeu_ps(cd + 2 * i, _mm512_permutexvar_ps(lo, cv));
            _mm512_storeu_ps(cd + 2 * i + 16, _mm512_permutexvar_ps(hi, cv));
            _mm512_storeu_ps(sd + 2 * i, _mm512_xor_ps(_mm512_permutexvar_ps(lo, sv), neg_even));
            _mm512_storeu_ps(sd + 2 * i + 16, _mm512_xor_ps(_mm512_permutexvar_ps(hi, sv), neg_even));
        }
        return 1;
    }
    default: return 0; /* rotate takes (c, s) as they are */
    }
}

static int avx512_prepare(kvc_dtype_t dt, size_t half, int is_neox, const float *c, const float *s, float *cd,
                          float *sd)
{
    return prepare(path_of(dt, half, is_neox, 0), half, c, s, cd, sd);
}

static void avx512_rotate(void *key, kvc_dtype_t dt, size_t num_heads, size_t head_stride, size_t half,
                          int is_neox, const float *c, const float *s)
{
    switch (path_of(dt, half, is_neox, 0)) {
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

/* ---- AVX512_BF16: bf16 keys widened in order, narrowed by vcvtneps2bf16 (see above) */
#ifdef KVC_ROPE_AVX512BF16
#define BF16_TARGET __attribute__((target("avx512bf16")))

static inline __m512 bf16_widen(const uint16_t *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* kvc_f32_to_bf16 on 2 x 16 lanes (lo: elements 0-15, hi: 16-31): the instruction, unless a lane
 * is subnormal (which it flushes). */
static inline BF16_TARGET void bf16_narrow32(uint16_t *p, __m512 lo, __m512 hi)
{
    if (_mm512_kor(_mm512_fpclass_ps_mask(lo, 0x20), _mm512_fpclass_ps_mask(hi, 0x20))) {
        _mm256_storeu_si256((__m256i *)p, f2bf16(lo));
        _mm256_storeu_si256((__m256i *)(p + 16), f2bf16(hi));
    } else {
        _mm512_storeu_si512(p, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

/* half a multiple of 32 */
static BF16_TARGET void rotate_neox_bf16_in_order(char *key, size_t num_heads, size_t hstride, size_t half,
                                                  const float *c, const float *s)
{
    for (size_t h = 0; h < num_heads; h++) {
        uint16_t *x = (uint16_t *)key + h * hstride, *y = x + half;
        for (size_t i = 0; i < half; i += 32) {
            const __m512 x0 = bf16_widen(x + i), x1 = bf16_widen(x + i + 16);
            const __m512 y0 = bf16_widen(y + i), y1 = bf16_widen(y + i + 16);
            const __m512 c0 = _mm512_loadu_ps(c + i), c1 = _mm512_loadu_ps(c + i + 16);
            const __m512 s0 = _mm512_loadu_ps(s + i), s1 = _mm512_loadu_ps(s + i + 16);
            bf16_narrow32(x + i, _mm512_fmsub_ps(x0, c0, _mm512_mul_ps(y0, s0)), _mm512_fmsub_ps(x1, c1, _mm512_mul_ps(y1, s1)));
            bf16_narrow32(y + i, _mm512_fmadd_ps(y0, c0, _mm512_mul_ps(x0, s0)), _mm512_fmadd_ps(y1, c1, _mm512_mul_ps(x1, s1)));
        }
    }
}

/* 2*half a multiple of 32 */
static BF16_TARGET void rotate_gptj_bf16_in_order(char *key, size_t num_heads, size_t hstride, size_t half,
                                                  const float *cd, const float *sd)
{
    for (size_t h = 0; h < num_heads; h++) {
        uint16_t *k = (uint16_t *)key + h * hstride;
        for (size_t i = 0; i < 2 * half; i += 32) {
            const __m512 v0 = bf16_widen(k + i), v1 = bf16_widen(k + i + 16);
            bf16_narrow32(k + i,
                          _mm512_fmadd_ps(v0, _mm512_loadu_ps(cd + i), _mm512_mul_ps(_mm512_permute_ps(v0, 0xb1), _mm512_loadu_ps(sd + i))),
                          _mm512_fmadd_ps(v1, _mm512_loadu_ps(cd + i + 16),
                                          _mm512_mul_ps(_mm512_permute_ps(v1, 0xb1), _mm512_loadu_ps(sd + i + 16))));
        }
    }
}

static int avx512bf16_prepare(kvc_dtype_t dt, size_t half, int is_neox, const float *c, const float *s, float *cd,
                              float *sd)
{
    return prepare(path_of(dt, half, is_neox, 1), half, c, s, cd, sd);
}

static void avx512bf16_rotate(void *key, kvc_dtype_t dt, size_t num_heads, size_t head_stride, size_t half,
                              int is_neox, const float *c, const float *s)
{
    if (dt != KVC_DTYPE_BF16) {
        avx512_rotate(key, dt, num_heads, head_stride, half, is_neox, c, s);
        return;
    }
    switch (path_of(dt, half, is_neox, 1)) {
    case PATH_NEOX: rotate_neox_bf16_in_order(key, num_heads, head_stride, half, c, s); break;
    case PATH_GPTJ: rotate_gptj_bf16_in_order(key, num_heads, head_stride, half, c, s); break;
    default: rotate_generic(key, dt, num_heads, head_stride, half, is_neox, c, s); break;
    }
}
#endif

static void avx512_store(void *dst, kvc_dtype_t dt, const float *src, size_t n)
{
    const size_t es = kvc_dtype_size(dt);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = mask16(n - i);
        store16((char *)dst + i * es, dt, loadf(src + i, m), m);
    }
}

static void avx512_sincos_f64(double d, const double *theta, size_t half, double *c, double *s)
{
    const __m512d dv = _mm512_set1_pd(d);
    for (size_t i = 0; i < half; i += 8) {
        const __mmask8 m = mask8(half - i);
        const Sleef___m512d_2 sc = Sleef_sincosd8_u35avx512f(_mm512_mul_pd(dv, _mm512_maskz_loadu_pd(m, theta + i)));
        _mm512_mask_storeu_pd(s + i, m, sc.x);
        _mm512_mask_storeu_pd(c + i, m, sc.y);
    }
}

/* kvc_rope_angle_sum1 on 8 entries */
static inline void angle_sum8(__m512d a_c, __m512d a_s, __m512d b_c, __m512d b_s, __m256 *c, __m256 *s)
{
    *c = _mm512_cvtpd_ps(_mm512_fmsub_pd(a_c, b_c, _mm512_mul_pd(a_s, b_s)));
    *s = _mm512_cvtpd_ps(_mm512_fmadd_pd(a_s, b_c, _mm512_mul_pd(a_c, b_s)));
}

static void avx512_table_rows(const double *ca, const double *sa, const double *cb, const double *sb, size_t n,
                              size_t half, float *rows)
{
    const size_t B = KVC_ROPE_TABLE_BLOCK, whole = half & ~(size_t)7;
    for (size_t k = 0; k < B && k < n; k++) {
        const double *cbk = cb + k * half, *sbk = sb + k * half;
        const size_t nb = (n - k + B - 1) / B; /* blocks that have a row k */
        /* plain loads and stores for whole vectors: masked ones are slow on some CPUs (see above) */
        for (size_t i = 0; i < whole; i += 8) {
            const __m512d b_c = _mm512_loadu_pd(cbk + i), b_s = _mm512_loadu_pd(sbk + i);
            for (size_t bl = 0; bl < nb; bl++) {
                float *c = rows + (bl * B + k) * 2 * half + i;
                __m256 rc, rs;
                angle_sum8(_mm512_loadu_pd(ca + bl * half + i), _mm512_loadu_pd(sa + bl * half + i), b_c, b_s, &rc, &rs);
                _mm256_storeu_ps(c, rc);
                _mm256_storeu_ps(c + half, rs);
            }
        }
        if (whole < half) {
            const __mmask8 m = mask8(half - whole);
            const __m512d b_c = _mm512_maskz_loadu_pd(m, cbk + whole), b_s = _mm512_maskz_loadu_pd(m, sbk + whole);
            for (size_t bl = 0; bl < nb; bl++) {
                float *c = rows + (bl * B + k) * 2 * half + whole;
                __m256 rc, rs;
                angle_sum8(_mm512_maskz_loadu_pd(m, ca + bl * half + whole), _mm512_maskz_loadu_pd(m, sa + bl * half + whole),
                           b_c, b_s, &rc, &rs);
                _mm256_mask_storeu_ps(c, m, rc);
                _mm256_mask_storeu_ps(c + half, m, rs);
            }
        }
    }
}

const kvc_rope_kernels_t kvc_rope_kernels_avx512 = {
    .factors = avx512_factors,
    .sincos = avx512_sincos,
    .rotate = avx512_rotate,
    .store = avx512_store,
    .sincos_f64 = avx512_sincos_f64,
    .table_rows = avx512_table_rows,
    .prepare = avx512_prepare,
};

#ifdef KVC_ROPE_AVX512BF16
const kvc_rope_kernels_t kvc_rope_kernels_avx512bf16 = {
    .factors = avx512_factors,
    .sincos = avx512_sincos,
    .rotate = avx512bf16_rotate,
    .store = avx512_store,
    .sincos_f64 = avx512_sincos_f64,
    .table_rows = avx512_table_rows,
    .prepare = avx512bf16_prepare,
};

/* CPUID.(EAX=7, ECX=1):EAX bit 5; the AVX-512 tier has checked the OS saves the registers. */
int kvc_rope_cpu_has_avx512bf16(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);
}
#endif
