/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU RoPE: the backend slots (cpu_rope.c) and the per-ISA kernels they dispatch to
 * (cpu_rope.c: scalar; cpu_rope_avx2.c, cpu_rope_avx512.c: compiled with their own -m flags;
 * cpu_rope_neon.c: AArch64, where NEON is baseline).
 *
 * Every variant reduces to "per token, a rotation (c_i, s_i) per pair i, applied to every head":
 *   fused:  c = cos(new - old) and s = sin(new - old) composed from two table rows (in double,
 *           normalised: see kvc_rope_combine1),
 *   delta:  c, s from sincos((new - old) * theta_i) in double, rounded to fp32,
 *   table:  c, s of p * theta_i by the angle sum (p0 + k) * theta_i, from double-precision
 *           cos/sin of the block start p0 * theta_i and of the steps k * theta_i, k < 64: see
 *           table_rows; stored as row p.
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
#include "common/rope.h" /* kvc_rope_combine1 */

typedef struct kvc_rope_kernels {
    /* The single rotation that undoes row_old and applies row_new (rows: cos half, sin half), for
     * i < half: see kvc_rope_combine1. Bit-identical on every tier. */
    void (*factors)(const void *row_old, const void *row_new, kvc_dtype_t dtype, size_t half, float *c,
                    float *s);
    /* c[i] = cos(d*theta[i]), s[i] = sin(d*theta[i]) for i < half: SLEEF's double sincos (u35) of
     * the double angle, rounded once to fp32. */
    void (*sincos)(double d, const double *theta, size_t half, float *c, float *s);
    /* Rotate the first 2*half elements of num_heads heads starting at key (head stride in elements):
     * x' = x*c - y*s, y' = y*c + x*s, math in fp32, one rounding to the key dtype. c and s are in
     * the layout prepare gives (see below). */
    void (*rotate)(void *key, kvc_dtype_t dtype, size_t num_heads, size_t head_stride, size_t half, int is_neox,
                   const float *c, const float *s);
    /* dst[i] = src[i] converted to dtype (round to nearest even). */
    void (*store)(void *dst, kvc_dtype_t dtype, const float *src, size_t n);
    /* c[i] = cos(d*theta[i]), s[i] = sin(d*theta[i]) in double (SLEEF's u35: within 3.5 double ulp). */
    void (*sincos_f64)(double d, const double *theta, size_t half, double *c, double *s);
    /* n consecutive fp32 table rows (cos half, sin half; rows contiguous) of consecutive blocks of
     * KVC_ROPE_TABLE_BLOCK rows: row r = b*BLOCK + k has the angles a_bi + b_ki, from the cos/sin
     * of block b's first angles (ca, sa + b*half) and of the step k (cb, sb + k*half),
     *   cos = fp32(fma(ca, cb, -(sa*sb))), sin = fp32(fma(sa, cb, ca*sb))   in double,
     * the same operations on every tier (see kvc_rope_angle_sum1). The SIMD tiers load each step
     * once for all the blocks: the steps (64 KiB for rot_dim 128) do not fit in L1, and reading
     * them from L2 for every row bounded the build. */
    void (*table_rows)(const double *ca, const double *sa, const double *cb, const double *sb, size_t n, size_t half,
                       float *rows);
    /* Optional (NULL: rotate takes c and s as they are). Reorders the factors (c, s) of one token
     * into the layout rotate wants for (dtype, half, is_neox), 2*half floats each in cd and sd,
     * once per token rather than per head; returns 1 if it wrote cd and sd (pass those to rotate),
     * 0 if rotate takes c and s unchanged. */
    int (*prepare)(kvc_dtype_t dtype, size_t half, int is_neox, const float *c, const float *s, float *cd, float *sd);
} kvc_rope_kernels_t;

extern const kvc_rope_kernels_t kvc_rope_kernels_scalar;
#ifdef KVC_HAVE_X86_SIMD
extern const kvc_rope_kernels_t kvc_rope_kernels_avx2;
extern const kvc_rope_kernels_t kvc_rope_kernels_avx512;
/* The AVX-512 tier with bf16 keys narrowed by AVX512_BF16's vcvtneps2bf16 (same bits), where the
 * compiler can build it and the CPU has it. */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 10)
#define KVC_ROPE_AVX512BF16 1
extern const kvc_rope_kernels_t kvc_rope_kernels_avx512bf16;
int kvc_rope_cpu_has_avx512bf16(void);
#endif
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define KVC_ROPE_HAVE_NEON 1
extern const kvc_rope_kernels_t kvc_rope_kernels_neon;
#endif

/* The scalar tier's sincos (SLEEF's scalar sincosf), also the NEON tier's: see cpu_rope_neon.c. */
void kvc_rope_sincos_scalar(double d, const double *theta, size_t half, float *c, float *s);
/* The scalar tier's sincos_f64 and table_rows, also the NEON tier's. */
void kvc_rope_sincos_f64_scalar(double d, const double *theta, size_t half, double *c, double *s);
void kvc_rope_table_rows_scalar(const double *ca, const double *sa, const double *cb, const double *sb, size_t n,
                                size_t half, float *rows);

/* Rows per block of kvc_rope_cache_build: each block's angles are its first row's plus a step
 * k * theta_i, k < KVC_ROPE_TABLE_BLOCK, whose cos/sin are computed once per build. Blocks are
 * built KVC_ROPE_TABLE_GROUP at a time (a divisor of the anchor spacing, 64 blocks). */
#define KVC_ROPE_TABLE_BLOCK 64
#define KVC_ROPE_TABLE_GROUP 4

/* Backend slots. */
kvc_status_t kvc_cpu_rope_k_fused(kvc_backend_ctx_t *b, const struct kvc_rope_args *a);
kvc_status_t kvc_cpu_rope_cache_build(kvc_backend_ctx_t *b, const struct kvc_rope_cache_args *a);
kvc_status_t kvc_cpu_rope_k_delta(kvc_backend_ctx_t *b, const struct kvc_rope_delta_args *a);

/* ---- scalar helpers shared by the kernels (tails, the scalar tier) ---- */

/* One table entry by the angle sum, in double: cos(a+b) and sin(a+b) from the cos/sin of a and b.
 * Each input is within a few double ulps (SLEEF u35, or a few angle sums), so the result is within
 * about 2^-50 of the exact value and its rounding to fp32 is off by a hair over half an fp32 ulp. */
static inline void kvc_rope_angle_sum1(double ca, double sa, double cb, double sb, float *c, float *s)
{
    *c = (float)fma(ca, cb, -(sa * sb));
    *s = (float)fma(sa, cb, ca * sb);
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
