/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU RoPE slots: pick the kernels of the context's ISA tier, split tokens (or table rows) across
 * OpenMP threads, and hold the scalar tier. */
#include "config.h"

#include <stdlib.h>

#include <sleef.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_backend.h"
#include "cpu_rope.h"

/* ---------------------------------------------------------------- scalar tier */

static void scalar_factors(const void *row_old, const void *row_new, kvc_dtype_t dt, size_t half, float *c,
                           float *s)
{
    for (size_t i = 0; i < half; i++) {
        const float co = kvc_rope_load1(row_old, dt, i), so = kvc_rope_load1(row_old, dt, half + i);
        const float cn = kvc_rope_load1(row_new, dt, i), sn = kvc_rope_load1(row_new, dt, half + i);
        kvc_rope_combine1(co, so, cn, sn, c + i, s + i);
    }
}

/* cos/sin of d*theta in double (SLEEF's u35: within 3.5 double ulp), rounded once to fp32: within a
 * hair over half an fp32 ulp of cos/sin of the double angle. */
void kvc_rope_sincos_scalar(double d, const double *theta, size_t half, float *c, float *s)
{
    for (size_t i = 0; i < half; i++) {
        const Sleef_double2 sc = Sleef_sincos_u35(d * theta[i]); /* x: sin, y: cos */
        s[i] = (float)sc.x;
        c[i] = (float)sc.y;
    }
}

void kvc_rope_sincos_f64_scalar(double d, const double *theta, size_t half, double *c, double *s)
{
    for (size_t i = 0; i < half; i++) {
        const Sleef_double2 sc = Sleef_sincos_u35(d * theta[i]); /* x: sin, y: cos */
        s[i] = sc.x;
        c[i] = sc.y;
    }
}

void kvc_rope_table_rows_scalar(const double *ca, const double *sa, const double *cb, const double *sb, size_t n,
                                size_t half, float *rows)
{
    for (size_t r = 0; r < n; r++) {
        const size_t b = r / KVC_ROPE_TABLE_BLOCK, k = r % KVC_ROPE_TABLE_BLOCK;
        for (size_t i = 0; i < half; i++)
            kvc_rope_angle_sum1(ca[b * half + i], sa[b * half + i], cb[k * half + i], sb[k * half + i],
                                rows + r * 2 * half + i, rows + r * 2 * half + half + i);
    }
}

static void scalar_rotate(void *key, kvc_dtype_t dt, size_t num_heads, size_t head_stride, size_t half,
                          int is_neox, const float *c, const float *s)
{
    const size_t es = kvc_dtype_size(dt);
    for (size_t h = 0; h < num_heads; h++) {
        void *head = (char *)key + h * head_stride * es;
        for (size_t i = 0; i < half; i++) {
            const size_t xi = is_neox ? i : 2 * i, yi = is_neox ? i + half : 2 * i + 1;
            const float x = kvc_rope_load1(head, dt, xi), y = kvc_rope_load1(head, dt, yi);
            kvc_rope_store1(head, dt, xi, x * c[i] - y * s[i]);
            kvc_rope_store1(head, dt, yi, y * c[i] + x * s[i]);
        }
    }
}

static void scalar_store(void *dst, kvc_dtype_t dt, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) kvc_rope_store1(dst, dt, i, src[i]);
}

const kvc_rope_kernels_t kvc_rope_kernels_scalar = {
    .factors = scalar_factors,
    .sincos = kvc_rope_sincos_scalar,
    .rotate = scalar_rotate,
    .store = scalar_store,
    .sincos_f64 = kvc_rope_sincos_f64_scalar,
    .table_rows = kvc_rope_table_rows_scalar,
};

/* ---------------------------------------------------------------- slots */

static const kvc_rope_kernels_t *kernels_for(const kvc_backend_ctx_t *b)
{
#ifdef KVC_HAVE_X86_SIMD
#ifdef KVC_ROPE_AVX512BF16
    /* CPUID once (it traps to the hypervisor in a VM): 0 unknown, 1 no, 2 yes */
    static int bf16;
    int have = __atomic_load_n(&bf16, __ATOMIC_RELAXED);
    if (!have && b->isa >= KVC_ISA_AVX512) {
        have = kvc_rope_cpu_has_avx512bf16() ? 2 : 1;
        __atomic_store_n(&bf16, have, __ATOMIC_RELAXED);
    }
    if (b->isa >= KVC_ISA_AVX512 && have == 2) return &kvc_rope_kernels_avx512bf16;
#endif
    if (b->isa >= KVC_ISA_AVX512) return &kvc_rope_kernels_avx512;
    if (b->isa >= KVC_ISA_AVX2) return &kvc_rope_kernels_avx2;
#elif defined(KVC_ROPE_HAVE_NEON)
    if (b->isa == KVC_ISA_NEON) return &kvc_rope_kernels_neon; /* KVCORE_ISA=scalar caps it */
#else
    (void)b;
#endif
    return &kvc_rope_kernels_scalar;
}

/* Per-thread buffers, `sets` of them: c and s (stride floats each), and the 2*stride floats each of
 * prepare's layout: 6 * stride floats per set, stride a multiple of 16 (one cache line). */
typedef struct scratch {
    float *buf;
    size_t stride, sets;
} scratch_t;

static kvc_status_t scratch_alloc(kvc_backend_ctx_t *b, int threads, size_t half, size_t sets, scratch_t *out)
{
    out->stride = (half + 15) & ~(size_t)15;
    out->sets = sets;
    out->buf = aligned_alloc(64, (size_t)threads * sets * 6 * out->stride * sizeof(float));
    if (!out->buf)
        return b->svc->set_error(KVC_ERR_NO_MEMORY, "rope: cannot allocate %d x %zu floats of scratch", threads,
                                 sets * 6 * out->stride);
    return KVC_OK;
}

/* One token's factors, in rotate's layout (rc, rs). */
typedef struct factor_set {
    float *c, *s, *cd, *sd;
    const float *rc, *rs;
} factor_set_t;

static factor_set_t factor_set(const scratch_t *sc, int thread, size_t set)
{
    float *c = sc->buf + ((size_t)thread * sc->sets + set) * 6 * sc->stride;
    factor_set_t f = { .c = c, .s = c + sc->stride, .cd = c + 2 * sc->stride, .sd = c + 4 * sc->stride };
    f.rc = f.c;
    f.rs = f.s;
    return f;
}

static void set_prepare(const kvc_rope_kernels_t *k, kvc_dtype_t dt, size_t half, int is_neox, factor_set_t *f)
{
    f->rc = f->c;
    f->rs = f->s;
    if (k->prepare && k->prepare(dt, half, is_neox, f->c, f->s, f->cd, f->sd)) {
        f->rc = f->cd;
        f->rs = f->sd;
    }
}

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static int threads_for(const kvc_backend_ctx_t *b, size_t work)
{
    return work < (size_t)b->num_threads ? (int)work : b->num_threads;
}

/* theta_i = base^(-2i/rot_dim) in double (vLLM's inv_freq, without its fp32 rounding). */
static double *theta_alloc(kvc_backend_ctx_t *b, size_t rot_dim, double base)
{
    const size_t half = rot_dim / 2;
    double *theta = malloc(half * sizeof(double));
    if (!theta) {
        b->svc->set_error(KVC_ERR_NO_MEMORY, "rope: cannot allocate %zu frequencies", half);
        return NULL;
    }
    for (size_t i = 0; i < half; i++) theta[i] = pow(base, -(double)(2 * i) / (double)rot_dim);
    return theta;
}

static int thread_count(void)
{
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

/* Each thread rotates a contiguous range of tokens. The factors of the next token (when its
 * positions differ) are computed before the current token is rotated, into the other of two sets:
 * their long dependency chain (FMAs, square root, divisions) then overlaps the rotation instead of
 * stalling it. */
kvc_status_t kvc_cpu_rope_k_fused(kvc_backend_ctx_t *b, const struct kvc_rope_args *a)
{
    const kvc_rope_kernels_t *k = kernels_for(b);
    const kvc_rope_keys_t *key = &a->keys;
    const size_t half = a->table.rot_dim / 2, kes = kvc_dtype_size(key->dtype);
    const size_t row_bytes = a->table.rot_dim * kvc_dtype_size(a->table.dtype);
    const int threads = threads_for(b, key->num_tokens);
    scratch_t sc;
    kvc_status_t st = scratch_alloc(b, threads, half, 2, &sc);
    if (st != KVC_OK) return st;
    const char *table = a->table.data;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
    {
        const int tid = thread_id();
        const size_t nt = (size_t)thread_count(), n = key->num_tokens;
        const size_t lo = n / nt * (size_t)tid + (n % nt < (size_t)tid ? n % nt : (size_t)tid);
        const size_t hi = lo + n / nt + ((size_t)tid < n % nt);
        factor_set_t f[2] = { factor_set(&sc, tid, 0), factor_set(&sc, tid, 1) };
        int cur = 0;
        if (lo < hi) {
            k->factors(table + (size_t)a->old_positions[lo] * row_bytes, table + (size_t)a->new_positions[lo] * row_bytes,
                       a->table.dtype, half, f[0].c, f[0].s);
            set_prepare(k, key->dtype, half, a->is_neox, &f[0]);
        }
        for (size_t t = lo; t < hi; t++) {
            int next = cur; /* consecutive tokens often share both positions */
            if (t + 1 < hi && (a->old_positions[t + 1] != a->old_positions[t] ||
                               a->new_positions[t + 1] != a->new_positions[t])) {
                next = cur ^ 1;
                k->factors(table + (size_t)a->old_positions[t + 1] * row_bytes,
                           table + (size_t)a->new_positions[t + 1] * row_bytes, a->table.dtype, half, f[next].c,
                           f[next].s);
                set_prepare(k, key->dtype, half, a->is_neox, &f[next]);
            }
            k->rotate((char *)key->data + t * key->token_stride * kes, key->dtype, key->num_heads, key->head_stride,
                      half, a->is_neox, f[cur].rc, f[cur].rs);
            cur = next;
        }
    }
    free(sc.buf);
    return KVC_OK;
}

kvc_status_t kvc_cpu_rope_k_delta(kvc_backend_ctx_t *b, const struct kvc_rope_delta_args *a)
{
    const kvc_rope_kernels_t *k = kernels_for(b);
    const kvc_rope_keys_t *key = &a->keys;
    const size_t half = a->rot_dim / 2, kes = kvc_dtype_size(key->dtype);
    double *theta = theta_alloc(b, a->rot_dim, a->base);
    if (!theta) return KVC_ERR_NO_MEMORY;
    const int threads = threads_for(b, key->num_tokens);
    scratch_t sc;
    kvc_status_t st = scratch_alloc(b, threads, half, 1, &sc);
    if (st != KVC_OK) {
        free(theta);
        return st;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
    {
        factor_set_t f = factor_set(&sc, thread_id(), 0);
        int64_t last_delta = INT64_MIN; /* the delta is usually the same for a run of tokens */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (size_t t = 0; t < key->num_tokens; t++) {
            const int64_t delta = a->new_positions[t] - a->old_positions[t];
            if (delta != last_delta) {
                k->sincos((double)delta, theta, half, f.c, f.s);
                set_prepare(k, key->dtype, half, a->is_neox, &f);
                last_delta = delta;
            }
            k->rotate((char *)key->data + t * key->token_stride * kes, key->dtype, key->num_heads, key->head_stride,
                      half, a->is_neox, f.rc, f.rs);
        }
    }
    free(sc.buf);
    free(theta);
    return KVC_OK;
}

/* (co, so) = cos/sin of the angle sum, in double: plain multiplies (this file has no -mfma, and
 * -ffp-contract=off keeps the compiler from fusing them), so the same on every machine. */
static void angle_add_f64(const double *ca, const double *sa, const double *cb, const double *sb, size_t half,
                          double *co, double *so)
{
    for (size_t i = 0; i < half; i++) {
        const double c = ca[i] * cb[i] - sa[i] * sb[i], s = sa[i] * cb[i] + ca[i] * sb[i];
        co[i] = c;
        so[i] = s;
    }
}

/* Blocks of KVC_ROPE_TABLE_BLOCK rows whose first rows are anchored on a direct sincos once every
 * this many blocks; the blocks between step from it by the angle sum (a few 2^-53 per step). */
#define TABLE_ANCHOR_EVERY 64

/* Rows in blocks of B = KVC_ROPE_TABLE_BLOCK: row p0 + k is the angle sum of the block's first
 * angle p0 * theta_i and the step k * theta_i, both as cos/sin in double, rounded once to fp32: a
 * few double multiplies per entry instead of an fp32 sincos, and more accurate (about half an
 * fp32 ulp of cos/sin of the double angle p * theta_i, against 1.3 ulp before). The steps are
 * sincos of k = 0..7 and of 8a, combined; the block's first angles come from a direct sincos every
 * TABLE_ANCHOR_EVERY blocks and the angle sum with B * theta_i in between, always counted from
 * that anchor, so the table does not depend on the thread count. */
kvc_status_t kvc_cpu_rope_cache_build(kvc_backend_ctx_t *b, const struct kvc_rope_cache_args *a)
{
    const kvc_rope_kernels_t *k = kernels_for(b);
    const kvc_rope_table_t *tb = &a->table;
    const size_t half = tb->rot_dim / 2, es = kvc_dtype_size(tb->dtype), B = KVC_ROPE_TABLE_BLOCK;
    const size_t G = KVC_ROPE_TABLE_GROUP, blocks = (tb->max_position + B - 1) / B, groups = (blocks + G - 1) / G;
    double *theta = theta_alloc(b, tb->rot_dim, a->base);
    if (!theta) return KVC_ERR_NO_MEMORY;
    const int threads = threads_for(b, groups);
    /* shared: steps (B rows of cos, B rows of sin), the step B*theta (cos, sin); per thread: the
     * first angles of G blocks (cos, sin), and G*B fp32 rows for tables in fp16/bf16 */
    const size_t shared = 2 * B * half + 2 * half;
    const size_t per_thread = 2 * G * half + (tb->dtype == KVC_DTYPE_F32 ? 0 : (G * B * tb->rot_dim + 1) / 2);
    double *steps = malloc((shared + (size_t)threads * per_thread) * sizeof(double));
    if (!steps) {
        free(theta);
        return b->svc->set_error(KVC_ERR_NO_MEMORY, "rope: cannot allocate the table build's scratch");
    }
    double *sc = steps, *ss = steps + B * half, *cB = steps + 2 * B * half, *sB = cB + half;
    for (size_t r = 0; r < B; r += r < 8 ? 1 : 8) k->sincos_f64((double)r, theta, half, sc + r * half, ss + r * half);
    for (size_t r = 9; r < B; r++)
        if (r % 8) angle_add_f64(sc + (r & ~(size_t)7) * half, ss + (r & ~(size_t)7) * half, sc + (r % 8) * half,
                                 ss + (r % 8) * half, half, sc + r * half, ss + r * half);
    k->sincos_f64((double)B, theta, half, cB, sB);
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
    {
        double *ca = steps + shared + (size_t)thread_id() * per_thread, *sa = ca + G * half;
        float *rows = (float *)(sa + G * half);
        size_t have = (size_t)-1; /* the block whose first angles ca/sa (first set) hold */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (size_t g = 0; g < groups; g++) {
            const size_t j = g * G, nb = blocks - j < G ? blocks - j : G, p0 = j * B;
            const size_t n = tb->max_position - p0 < nb * B ? tb->max_position - p0 : nb * B;
            const size_t j0 = j - j % TABLE_ANCHOR_EVERY; /* G divides TABLE_ANCHOR_EVERY */
            if (have == (size_t)-1 || have + 1 != j || j == j0) {
                k->sincos_f64((double)(j0 * B), theta, half, ca, sa);
                have = j0;
            } else { /* continue the chain from the previous group's last block */
                memcpy(ca, ca + (G - 1) * half, half * sizeof(double));
                memcpy(sa, sa + (G - 1) * half, half * sizeof(double));
            }
            for (; have < j; have++) angle_add_f64(ca, sa, cB, sB, half, ca, sa);
            for (size_t i = 1; i < nb; i++) /* block j + i: one angle sum after block j + i - 1 */
                angle_add_f64(ca + (i - 1) * half, sa + (i - 1) * half, cB, sB, half, ca + i * half, sa + i * half);
            have = j + nb - 1;
            char *dst = (char *)tb->data + p0 * tb->rot_dim * es;
            k->table_rows(ca, sa, sc, ss, n, half, tb->dtype == KVC_DTYPE_F32 ? (float *)dst : rows);
            if (tb->dtype != KVC_DTYPE_F32) k->store(dst, tb->dtype, rows, n * tb->rot_dim);
        }
    }
    free(steps);
    free(theta);
    return KVC_OK;
}
