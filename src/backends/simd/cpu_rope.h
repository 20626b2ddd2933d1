/* CPU RoPE: the backend slots (cpu_rope.c) and the per-ISA kernels they dispatch to
 * (cpu_rope.c: scalar; cpu_rope_avx2.c, cpu_rope_avx512.c: compiled with their own -m flags;
 * cpu_rope_neon.c: AArch64, where NEON is baseline).
 *
 * Every variant reduces to "per token, a rotation (c_i, s_i) per pair i, applied to every head":
 *   fused:  c = cos(new - old) and s = sin(new - old) composed from two table rows (in double,
 *           normalised: see kvc_rope_combine1),
 *   delta:  c, s from sincos((new - old) * theta_i),
 *   table:  c, s from sincos(p * theta_i), stored as row p.
 * All files are compiled with -ffp-contract=off so results do not depend on the compiler's FMA
 * contraction: FMAs are written explicitly where wanted (the rotation itself). */
#ifndef KVC_CPU_ROPE_H
#define KVC_CPU_ROPE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <kvcore/backend.h>
#include <kvcore/rope.h>

#include "common/half.h"

typedef struct kvc_rope_kernels {
    /* The single rotation that undoes row_old and applies row_new (rows: cos half, sin half), for
     * i < half: see kvc_rope_combine1. Bit-identical on every tier. */
    void (*factors)(const void *row_old, const void *row_new, kvc_dtype_t dtype, size_t half, float *c,
                    float *s);
    /* c[i] = cos(d*theta[i]), s[i] = sin(d*theta[i]) for i < half (see kvc_rope_reduce). */
    void (*sincos)(double d, const double *theta, size_t half, float *c, float *s);
    /* Rotate the first 2*half elements of num_heads heads starting at key (head stride in elements):
     * x' = x*c - y*s, y' = y*c + x*s, math in fp32, one rounding to the key dtype. */
    void (*rotate)(void *key, kvc_dtype_t dtype, size_t num_heads, size_t head_stride, size_t half, int is_neox,
                   const float *c, const float *s);
    /* dst[i] = src[i] converted to dtype (round to nearest even). */
    void (*store)(void *dst, kvc_dtype_t dtype, const float *src, size_t n);
} kvc_rope_kernels_t;

extern const kvc_rope_kernels_t kvc_rope_kernels_scalar;
#ifdef KVC_HAVE_X86_SIMD
extern const kvc_rope_kernels_t kvc_rope_kernels_avx2;
extern const kvc_rope_kernels_t kvc_rope_kernels_avx512;
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define KVC_ROPE_HAVE_NEON 1
extern const kvc_rope_kernels_t kvc_rope_kernels_neon;
#endif

/* The scalar tier's sincos (SLEEF's scalar sincosf), also the NEON tier's: see cpu_rope_neon.c. */
void kvc_rope_sincos_scalar(double d, const double *theta, size_t half, float *c, float *s);

/* Backend slots. */
kvc_status_t kvc_cpu_rope_k_fused(kvc_backend_ctx_t *b, const struct kvc_rope_args *a);
kvc_status_t kvc_cpu_rope_cache_build(kvc_backend_ctx_t *b, const struct kvc_rope_cache_args *a);
kvc_status_t kvc_cpu_rope_k_delta(kvc_backend_ctx_t *b, const struct kvc_rope_delta_args *a);

/* ---- scalar helpers shared by the kernels (tails, the scalar tier) ---- */

/* 2*pi as an unevaluated sum of two doubles (Cody-Waite), and 1/(2*pi). */
#define KVC_ROPE_2PI_HI 6.283185307179586
#define KVC_ROPE_2PI_LO 2.4492935982947064e-16
#define KVC_ROPE_INV_2PI 0.15915494309189535

/* a - 2*pi*round(a / 2*pi), in [-pi, pi]. Each FMA rounds once, on a result already near [-pi, pi],
 * so the error is the rounding of a itself (|a| * 2^-53) plus about 2^-52. */
static inline double kvc_rope_reduce(double a)
{
    const double k = nearbyint(a * KVC_ROPE_INV_2PI);
    return fma(-k, KVC_ROPE_2PI_LO, fma(-k, KVC_ROPE_2PI_HI, a));
}

/* Combined rotation of one pair for the fused op: undo (co, so), apply (cn, sn).
 *   cd = cn*co + sn*so, sd = sn*co - cn*so   in double: each product of two floats is exact, so
 *                                            sd is exactly 0 when both rows are the same (equal
 *                                            positions), with or without FMA contraction;
 *   h  = sqrt(cd*cd + sd*sd)                 = |row_old| * |row_new| up to double rounding (no
 *                                            overflow or underflow is possible for float inputs);
 *   c = fp32(cd * (1/h)), s = fp32(sd * (1/h)).
 * Normalising removes the rows' norm error (c^2 + s^2 of rounded table entries is not 1), so for
 * old == new the result is exactly c = 1 (sqrt(cd*cd) == cd in binary floating point, and
 * cd * (1/cd) is within 2^-52 of 1, which rounds to 1 in fp32), s = 0: the keys come back
 * bit-identical. A zero row (h == 0) gives c = s = 0, as the textbook two steps would. The SIMD tiers
 * do the same operations in the same order (mul, add, sqrt, div, mul; no FMA), so the factors are
 * bit-identical across tiers. */
static inline void kvc_rope_combine1(float co, float so, float cn, float sn, float *c, float *s)
{
    const double cd = (double)cn * (double)co + (double)sn * (double)so;
    const double sd = (double)sn * (double)co - (double)cn * (double)so;
    const double h = sqrt(cd * cd + sd * sd);
    const double inv = h == 0 ? 0.0 : 1.0 / h;
    *c = (float)(cd * inv);
    *s = (float)(sd * inv);
}

static inline float kvc_rope_load1(const void *p, kvc_dtype_t dt, size_t i)
{
    switch (dt) {
    case KVC_DTYPE_F16: return kvc_f16_to_f32(((const uint16_t *)p)[i]);
    case KVC_DTYPE_BF16: return kvc_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static inline void kvc_rope_store1(void *p, kvc_dtype_t dt, size_t i, float v)
{
    switch (dt) {
    case KVC_DTYPE_F16: ((uint16_t *)p)[i] = kvc_f32_to_f16(v); break;
    case KVC_DTYPE_BF16: ((uint16_t *)p)[i] = kvc_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

#endif
