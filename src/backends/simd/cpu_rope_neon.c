/* SPDX-License-Identifier: BSD-3-Clause */
/* RoPE kernels for the NEON tier (AArch64, where Advanced SIMD is baseline: no extra -m flags).
 * 4 fp32 lanes; fp16 converted with FCVT (round to nearest even,
 * the FPCR default), bf16 with integer shifts; tails shorter than a vector go through the scalar
 * helpers with the same operation order. Mirrors cpu_rope_avx2.c: the factors and the stores are
 * bit-identical to every other tier, and the rotation uses FMAs exactly as the AVX tiers do
 * (x*c - y*s as fma(x, c, -(y*s)), y*c + x*s as fma(y, c, x*s)), so it is bit-identical to them.
 * The table builder and the delta variant need vector sin/cos (SLEEF): they use the scalar
 * sincos. Compiled to nothing unless the target is AArch64 with NEON.
 * Like every RoPE file, this must be compiled with -ffp-contract=off: GCC treats vmulq + vaddq as
 * ordinary arithmetic and would otherwise fuse them. */
#include "config.h"

#include "cpu_rope.h"

#ifdef KVC_ROPE_HAVE_NEON

#include <arm_neon.h>

static inline float32x4_t half2f4(uint16x4_t h, kvc_dtype_t dt)
{
    if (dt == KVC_DTYPE_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); /* bf16 */
}

/* fp32 -> bf16, round to nearest even; NaNs stay quiet NaNs (as kvc_f32_to_bf16, src/common/half.h). */
static inline uint16x4_t f2bf4(float32x4_t v)
{
    const uint32x4_t x = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1));
    const uint32x4_t r = vshrq_n_u32(vaddq_u32(x, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), 16);
    const uint32x4_t quiet = vorrq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(0x40));
    const uint32x4_t ordered = vceqq_f32(v, v); /* all ones unless NaN */
    return vmovn_u32(vbslq_u32(ordered, r, quiet));
}

static inline uint16x4_t f2half4(float32x4_t v, kvc_dtype_t dt)
{
    if (dt == KVC_DTYPE_F16) return vreinterpret_u16_f16(vcvt_f16_f32(v));
    return f2bf4(v);
}

static inline float32x4_t load4(const void *p, kvc_dtype_t dt)
{
    if (dt == KVC_DTYPE_F32) return vld1q_f32((const float *)p);
    return half2f4(vld1_u16((const uint16_t *)p), dt);
}

static inline void store4(void *p, kvc_dtype_t dt, float32x4_t v)
{
    if (dt == KVC_DTYPE_F32) vst1q_f32((float *)p, v);
    else vst1_u16((uint16_t *)p, f2half4(v, dt));
}

/* kvc_rope_sop / kvc_rope_dop on 4 lanes (vfmaq_f32(acc, a, b) = acc + a*b, one rounding) */
static inline float32x4_t sop4(float32x4_t a, float32x4_t b, float32x4_t c, float32x4_t d)
{
    const float32x4_t w = vmulq_f32(c, d);
    return vaddq_f32(vfmaq_f32(w, a, b), vfmaq_f32(vnegq_f32(w), c, d));
}

static inline float32x4_t dop4(float32x4_t a, float32x4_t b, float32x4_t c, float32x4_t d)
{
    const float32x4_t p = vmulq_f32(a, b), q = vmulq_f32(c, d);
    return vaddq_f32(vsubq_f32(p, q), vsubq_f32(vfmaq_f32(vnegq_f32(p), a, b), vfmaq_f32(vnegq_f32(q), c, d)));
}

static void neon_factors(const void *row_old, const void *row_new, kvc_dtype_t dt, size_t half, float *c,
                         float *s)
{
    const size_t es = kvc_dtype_size(dt);
    const char *ro = row_old, *rn = row_new;
    size_t i = 0;
    for (; i + 4 <= half; i += 4) {
        const float32x4_t co = load4(ro + i * es, dt), so = load4(ro + (half + i) * es, dt);
        const float32x4_t cn = load4(rn + i * es, dt), sn = load4(rn + (half + i) * es, dt);
        /* kvc_rope_combine1 on four pairs; lanes whose n is out of range take the double fallback */
        const float32x4_t cd = sop4(cn, co, sn, so), sd = dop4(sn, co, cn, so);
        const float32x4_t n = vfmaq_f32(vmulq_f32(sd, sd), cd, cd);
        const uint32x4_t ok = vandq_u32(vcgeq_f32(n, vdupq_n_f32(KVC_ROPE_NORM_MIN)),
                                        vcleq_f32(n, vdupq_n_f32(KVC_ROPE_NORM_MAX)));
        const float32x4_t h = vsqrtq_f32(n);
        vst1q_f32(c + i, vdivq_f32(cd, h));
        vst1q_f32(s + i, vdivq_f32(sd, h));
        if (vminvq_u32(ok) == 0)
            for (size_t j = i; j < i + 4; j++) {
                const float cf = kvc_rope_load1(ro, dt, j), sf = kvc_rope_load1(ro, dt, half + j);
                const float cnf = kvc_rope_load1(rn, dt, j), snf = kvc_rope_load1(rn, dt, half + j);
                const float nj = fmaf(kvc_rope_sop(cnf, cf, snf, sf), kvc_rope_sop(cnf, cf, snf, sf),
                                      kvc_rope_dop(snf, cf, cnf, sf) * kvc_rope_dop(snf, cf, cnf, sf));
                if (!(nj >= KVC_ROPE_NORM_MIN && nj <= KVC_ROPE_NORM_MAX))
                    kvc_rope_combine1_f64(cf, sf, cnf, snf, c + j, s + j);
            }
    }
    for (; i < half; i++) {
        const float co = kvc_rope_load1(ro, dt, i), so = kvc_rope_load1(ro, dt, half + i);
        const float cn = kvc_rope_load1(rn, dt, i), sn = kvc_rope_load1(rn, dt, half + i);
        kvc_rope_combine1(co, so, cn, sn, c + i, s + i);
    }
}

/* x' = x*c - y*s, y' = y*c + x*s with one FMA each (the AVX tiers' fmsub / fmadd). */
static inline float32x4_t rot_x(float32x4_t x, float32x4_t y, float32x4_t c, float32x4_t s)
{
    return vfmaq_f32(vnegq_f32(vmulq_f32(y, s)), x, c);
}

static inline float32x4_t rot_y(float32x4_t x, float32x4_t y, float32x4_t c, float32x4_t s)
{
    return vfmaq_f32(vmulq_f32(x, s), y, c);
}

static inline void rotate_pair_tail(void *head, kvc_dtype_t dt, size_t xi, size_t yi, float c, float s)
{
    const float x = kvc_rope_load1(head, dt, xi), y = kvc_rope_load1(head, dt, yi);
    kvc_rope_store1(head, dt, xi, fmaf(x, c, -(y * s)));
    kvc_rope_store1(head, dt, yi, fmaf(y, c, x * s));
}

static void neon_rotate(void *key, kvc_dtype_t dt, size_t num_heads, size_t head_stride, size_t half,
                        int is_neox, const float *c, const float *s)
{
    const size_t es = kvc_dtype_size(dt);
    for (size_t h = 0; h < num_heads; h++) {
        char *head = (char *)key + h * head_stride * es;
        size_t i = 0;
        if (is_neox) {
            for (; i + 4 <= half; i += 4) {
                const float32x4_t x = load4(head + i * es, dt), y = load4(head + (half + i) * es, dt);
                const float32x4_t cv = vld1q_f32(c + i), sv = vld1q_f32(s + i);
                store4(head + i * es, dt, rot_x(x, y, cv, sv));
                store4(head + (half + i) * es, dt, rot_y(x, y, cv, sv));
            }
            for (; i < half; i++) rotate_pair_tail(head, dt, i, half + i, c[i], s[i]);
        } else {
            /* 4 interleaved pairs: LD2 splits them into x and y lanes, ST2 interleaves them back */
            for (; i + 4 <= half; i += 4) {
                const float32x4_t cv = vld1q_f32(c + i), sv = vld1q_f32(s + i);
                if (dt == KVC_DTYPE_F32) {
                    float *p = (float *)head + 2 * i;
                    const float32x4x2_t v = vld2q_f32(p);
                    float32x4x2_t r;
                    r.val[0] = rot_x(v.val[0], v.val[1], cv, sv);
                    r.val[1] = rot_y(v.val[0], v.val[1], cv, sv);
                    vst2q_f32(p, r);
                } else {
                    uint16_t *p = (uint16_t *)head + 2 * i;
                    const uint16x4x2_t v = vld2_u16(p);
                    const float32x4_t x = half2f4(v.val[0], dt), y = half2f4(v.val[1], dt);
                    uint16x4x2_t r;
                    r.val[0] = f2half4(rot_x(x, y, cv, sv), dt);
                    r.val[1] = f2half4(rot_y(x, y, cv, sv), dt);
                    vst2_u16(p, r);
                }
            }
            for (; i < half; i++) rotate_pair_tail(head, dt, 2 * i, 2 * i + 1, c[i], s[i]);
        }
    }
}

static void neon_store(void *dst, kvc_dtype_t dt, const float *src, size_t n)
{
    const size_t es = kvc_dtype_size(dt);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) store4((char *)dst + i * es, dt, vld1q_f32(src + i));
    for (; i < n; i++) kvc_rope_store1(dst, dt, i, src[i]);
}

const kvc_rope_kernels_t kvc_rope_kernels_neon = {
    .factors = neon_factors,
    .sincos = kvc_rope_sincos_scalar, /* needs vector sin/cos: SLEEF is not pulled in for AArch64 */
    .rotate = neon_rotate,
    .store = neon_store,
    .sincos_f64 = kvc_rope_sincos_f64_scalar, /* as sincos: no vector sin/cos here */
    .table_rows = kvc_rope_table_rows_scalar,
};

#else
/* Not AArch64 with NEON: nothing to build (ISO C wants a declaration in every translation unit). */
typedef int kvc_rope_neon_unused_t;
#endif
