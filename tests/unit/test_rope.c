/* SPDX-License-Identifier: BSD-3-Clause */
/* RoPE: golden vectors (LMCache rotary0), the scalar oracle over every dtype x pairing x partial/full x
 * stride on each ISA tier, the table builder against double precision, undo/redo identity, real keys
 * from a model, the fused-vs-delta accuracy, and every error status. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <kvcore.h>

#include "npy_load.h"
#include "ref/rope_ref.h"
#include "test_util.h"

#define EPS32 0x1p-24 /* unit roundoff of fp32 */

/* ---------------------------------------------------------------- helpers */

/* Context whose CPU tier is `isa`, with `threads` OpenMP threads; skips the test when the CPU does
 * not offer the tier. */
static kvc_context_t *tier_context_threads(const char *isa, int threads)
{
    /* A recorded topology without hwloc's PCI component: RoPE does not depend on it, and the PCI
     * component (libpciaccess) leaks ~8500 allocations per load, which makes LeakSanitizer crawl. */
    setenv("HWLOC_XMLFILE", kvc_test_data("topologies/16amd64-4distances.xml"), 1);
    setenv("HWLOC_COMPONENTS", "-pci", 1);
    setenv("KVCORE_ISA", isa, 1);
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS,
                               .backend = "cpu",
                               .num_threads = threads };
    kvc_context_t *ctx = NULL;
    cr_assert_eq(kvc_context_create(&p, &ctx), KVC_OK, "%s", kvc_last_error());
    if (strcmp(isa, "best") != 0 && strcmp(kvc_context_isa(ctx), isa) != 0) {
        char got[16];
        snprintf(got, sizeof(got), "%s", kvc_context_isa(ctx));
        kvc_context_destroy(ctx);
        cr_skip_test("KVCORE_ISA=%s: this CPU offers only %s", isa, got);
    }
    return ctx;
}

/* One-thread context on tier `isa`, or NULL when the CPU does not offer it (for tests that compare
 * whichever tiers exist). */
static kvc_context_t *tier_context_if_offered(const char *isa)
{
    setenv("HWLOC_XMLFILE", kvc_test_data("topologies/16amd64-4distances.xml"), 1);
    setenv("HWLOC_COMPONENTS", "-pci", 1);
    setenv("KVCORE_ISA", isa, 1);
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS,
                               .backend = "cpu", .num_threads = 1 };
    kvc_context_t *ctx = NULL;
    cr_assert_eq(kvc_context_create(&p, &ctx), KVC_OK, "%s", kvc_last_error());
    if (strcmp(kvc_context_isa(ctx), isa) == 0) return ctx;
    kvc_context_destroy(ctx);
    return NULL;
}

/* One thread: the tests check arithmetic; thread splitting has its own test. */
static kvc_context_t *tier_context(const char *isa) { return tier_context_threads(isa, 1); }

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static double rng_uniform(double lo, double hi) { return lo + (hi - lo) * (double)(rng_next() >> 11) * 0x1p-53; }

static void *alloc_filled(size_t n, kvc_dtype_t dt, double lo, double hi)
{
    void *p = malloc(n * kvc_dtype_size(dt) + 64);
    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++) rope_ref_put(p, dt, i, rng_uniform(lo, hi));
    return p;
}

/* Positions in [0, limit): runs of equal values (the kernels cache per-token factors) mixed with
 * independent draws. */
static int64_t *random_positions(size_t n, int64_t limit)
{
    int64_t *p = malloc((n ? n : 1) * sizeof(int64_t));
    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (i > 0 && rng_next() % 3 == 0) ? p[i - 1] : (int64_t)(rng_next() % (uint64_t)limit);
    return p;
}

static const char *dt_name(kvc_dtype_t d)
{
    return d == KVC_DTYPE_F32 ? "f32" : d == KVC_DTYPE_F16 ? "f16" : "bf16";
}

/* Every rounding of a value within tol of the exact result: round(exact-tol) <= got <= round(exact+tol).
 * Checks "math in fp32, one rounding at the end": tol bounds the fp32 error before the rounding. */
static int within_one_rounding(double got, double exact, double tol, kvc_dtype_t dt)
{
    return got >= rope_ref_round(exact - tol, dt) && got <= rope_ref_round(exact + tol, dt);
}

typedef struct layout {
    size_t n, nkv, hs, rot, head_stride, token_stride;
} layout_t;

static size_t layout_elems(const layout_t *l) { return (l->n - 1) * l->token_stride + (l->nkv - 1) * l->head_stride + l->hs; }

static kvc_rope_keys_t keys_of(void *data, kvc_dtype_t dt, const layout_t *l)
{
    return (kvc_rope_keys_t){ .data = data, .dtype = dt, .num_tokens = l->n, .num_heads = l->nkv,
                              .head_size = l->hs, .head_stride = l->head_stride, .token_stride = l->token_stride };
}

/* Rotated element or not, for each element of the key buffer. */
static unsigned char *rotated_mask(const layout_t *l)
{
    const size_t total = layout_elems(l);
    unsigned char *m = calloc(total, 1);
    cr_assert_not_null(m);
    for (size_t t = 0; t < l->n; t++)
        for (size_t h = 0; h < l->nkv; h++)
            memset(m + t * l->token_stride + h * l->head_stride, 1, l->rot);
    return m;
}

/* Elements outside the rotated ranges (rest of head, other half of fused rows, stride gaps) are
 * bit-identical to the input. */
static void assert_untouched(const void *out, const void *in, kvc_dtype_t dt, const layout_t *l)
{
    unsigned char *m = rotated_mask(l);
    const size_t es = kvc_dtype_size(dt);
    for (size_t i = 0; i < layout_elems(l); i++)
        if (!m[i])
            cr_assert(memcmp((const char *)out + i * es, (const char *)in + i * es, es) == 0,
                      "element %zu outside the rotated range changed", i);
    free(m);
}

static kvc_rope_table_t build_table(kvc_context_t *ctx, kvc_dtype_t dt, size_t max_pos, size_t rot, double base)
{
    kvc_rope_table_t t = { .data = malloc(max_pos * rot * kvc_dtype_size(dt)), .dtype = dt,
                           .max_position = max_pos, .rot_dim = rot };
    cr_assert_not_null(t.data);
    cr_assert_eq(kvc_rope_cache_build(ctx, NULL, &t, base), KVC_OK, "%s", kvc_last_error());
    return t;
}

/* ---------------------------------------------------------------- fused vs the oracle */

static const layout_t base_shapes[] = {
    { 13, 3, 128, 128, 0, 0 }, /* full rotary, whole vectors */
    { 13, 2, 128, 64, 0, 0 },  /* partial rotary */
    { 19, 2, 8, 8, 0, 0 },     /* tiny heads (the real keys' shape) */
    { 11, 3, 22, 14, 0, 0 },   /* 7 pairs: tails everywhere */
    { 7, 2, 80, 48, 0, 0 },    /* 24 pairs: vectors plus a tail */
};

/* Strides: contiguous; fused K/V rows (head stride 2*HS); odd head stride with padded tokens. */
static layout_t with_strides(layout_t l, int variant)
{
    l.head_stride = variant == 0 ? l.hs : variant == 1 ? 2 * l.hs : l.hs + 5;
    l.token_stride = l.nkv * l.head_stride + (variant == 2 ? 7 : 0);
    return l;
}

static void check_fused(kvc_context_t *ctx, const layout_t *l, kvc_dtype_t kdt, kvc_dtype_t tdt, int neox,
                        int random_table)
{
    const size_t total = layout_elems(l), max_pos = 300;
    void *key = alloc_filled(total, kdt, -4, 4);
    void *in = malloc(total * kvc_dtype_size(kdt));
    memcpy(in, key, total * kvc_dtype_size(kdt));
    /* A random table is not a rotation: kvcore takes each row as the rotation by its angle (the
     * LMCache's two steps divided by the two rows' norms, see rope_ref_fused_pair_unit), and so must
     * the result here. */
    kvc_rope_table_t tab = random_table ? (kvc_rope_table_t){ .data = alloc_filled(max_pos * l->rot, tdt, -1.5, 1.5),
                                                              .dtype = tdt, .max_position = max_pos, .rot_dim = l->rot }
                                        : build_table(ctx, tdt, max_pos, l->rot, 10000.0);
    int64_t *po = random_positions(l->n, max_pos), *pn = random_positions(l->n, max_pos);
    kvc_rope_keys_t k = keys_of(key, kdt, l);
    cr_assert_eq(kvc_rope_k_fused(ctx, NULL, &k, po, pn, &tab, ROPE_STYLE(neox ? KVC_ROPE_NEOX : KVC_ROPE_GPTJ)), KVC_OK, "%s",
                 kvc_last_error());
    const size_t half = l->rot / 2;
    for (size_t t = 0; t < l->n; t++)
        for (size_t h = 0; h < l->nkv; h++)
            for (size_t i = 0; i < half; i++) {
                const size_t base = t * l->token_stride + h * l->head_stride;
                const size_t xi = base + rope_ref_x(i, l->rot, neox), yi = base + rope_ref_y(i, l->rot, neox);
                const double x = rope_ref_get(in, kdt, xi), y = rope_ref_get(in, kdt, yi);
                const double co = rope_ref_get(tab.data, tdt, (size_t)po[t] * l->rot + i);
                const double so = rope_ref_get(tab.data, tdt, (size_t)po[t] * l->rot + half + i);
                const double cn = rope_ref_get(tab.data, tdt, (size_t)pn[t] * l->rot + i);
                const double sn = rope_ref_get(tab.data, tdt, (size_t)pn[t] * l->rot + half + i);
                /* Expected: LMCache's two steps in double (the oracle), divided by the norms of the
                 * two rows. kvcore normalises the combined rotation (docs/ROPE.md), so a rounded
                 * table row's norm error (up to ~2^-23 for fp32 entries, ~2^-10 for fp16, ~2^-7 for
                 * bf16) does not scale the keys, while the plain two-step oracle keeps it: comparing
                 * against the unnormalised oracle would need a tolerance of that norm error, larger
                 * than one fp16/bf16 rounding. */
                double xo, yo;
                rope_ref_fused_pair_unit(x, y, co, so, cn, sn, &xo, &yo);
                const double norms = hypot(co, so) * hypot(cn, sn);
                /* fp32 error bound: a few roundings of terms no larger than this product (with
                 * normalised rows, between 8 and 16 EPS32 (|x| + |y|)) */
                const double tol = 8 * EPS32 * (fabs(x) + fabs(y)) * (fabs(co) + fabs(so)) * (fabs(cn) + fabs(sn)) /
                                   (norms > 0 ? norms : 1);
                const double gx = rope_ref_get(key, kdt, xi), gy = rope_ref_get(key, kdt, yi);
                cr_assert(within_one_rounding(gx, xo, tol, kdt) && within_one_rounding(gy, yo, tol, kdt),
                          "%s keys, %s table, %s, HS %zu rot %zu hstride %zu: token %zu head %zu pair %zu: got (%.9g, "
                          "%.9g), oracle (%.9g, %.9g)",
                          dt_name(kdt), dt_name(tdt), neox ? "neox" : "gptj", l->hs, l->rot, l->head_stride, t, h, i, gx,
                          gy, xo, yo);
            }
    assert_untouched(key, in, kdt, l);
    free(key);
    free(in);
    free(tab.data);
    free(po);
    free(pn);
}

static void oracle_sweep(const char *isa)
{
    kvc_context_t *ctx = tier_context(isa);
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F32, KVC_DTYPE_F16, KVC_DTYPE_BF16 };
    for (size_t s = 0; s < sizeof(base_shapes) / sizeof(base_shapes[0]); s++)
        for (int v = 0; v < 3; v++) {
            const layout_t l = with_strides(base_shapes[s], v);
            for (int d = 0; d < 3; d++)
                for (int neox = 0; neox < 2; neox++) {
                    check_fused(ctx, &l, dts[d], dts[d], neox, 0);
                    if (dts[d] != KVC_DTYPE_F32) check_fused(ctx, &l, dts[d], KVC_DTYPE_F32, neox, 0);
                }
        }
    /* a table that is not a rotation (LMCache's cross-backend test uses randn) */
    for (int neox = 0; neox < 2; neox++) {
        const layout_t l = with_strides(base_shapes[3], 0);
        check_fused(ctx, &l, KVC_DTYPE_F32, KVC_DTYPE_F32, neox, 1);
    }
    kvc_context_destroy(ctx);
}

Test(rope_oracle, fused_scalar) { oracle_sweep("scalar"); }
Test(rope_oracle, fused_avx2) { oracle_sweep("avx2"); }
Test(rope_oracle, fused_avx512) { oracle_sweep("avx512"); }

/* ---------------------------------------------------------------- delta vs the oracle */

static double check_delta(kvc_context_t *ctx, const layout_t *l, kvc_dtype_t kdt, int neox, int64_t limit,
                          double base)
{
    const size_t total = layout_elems(l);
    void *key = alloc_filled(total, kdt, -4, 4);
    void *in = malloc(total * kvc_dtype_size(kdt));
    memcpy(in, key, total * kvc_dtype_size(kdt));
    int64_t *po = random_positions(l->n, limit), *pn = random_positions(l->n, limit);
    kvc_rope_keys_t k = keys_of(key, kdt, l);
    cr_assert_eq(kvc_rope_k_delta(ctx, NULL, &k, po, pn, l->rot, base, ROPE_STYLE(neox ? KVC_ROPE_NEOX : KVC_ROPE_GPTJ)), KVC_OK,
                 "%s", kvc_last_error());
    double worst = 0; /* largest error before rounding seen, in units of EPS32*(|x|+|y|) (fp32 keys) */
    for (size_t t = 0; t < l->n; t++)
        for (size_t h = 0; h < l->nkv; h++)
            for (size_t i = 0; i < l->rot / 2; i++) {
                const size_t b = t * l->token_stride + h * l->head_stride;
                const size_t xi = b + rope_ref_x(i, l->rot, neox), yi = b + rope_ref_y(i, l->rot, neox);
                const double x = rope_ref_get(in, kdt, xi), y = rope_ref_get(in, kdt, yi);
                double xo, yo;
                rope_ref_rotate_pair(x, y, (double)(pn[t] - po[t]) * rope_ref_theta(i, l->rot, base), &xo, &yo);
                const double tol = 8 * EPS32 * (fabs(x) + fabs(y));
                const double gx = rope_ref_get(key, kdt, xi), gy = rope_ref_get(key, kdt, yi);
                cr_assert(within_one_rounding(gx, xo, tol, kdt) && within_one_rounding(gy, yo, tol, kdt),
                          "delta %s %s HS %zu rot %zu: token %zu (delta %lld) head %zu pair %zu: got (%.9g, %.9g), "
                          "oracle (%.9g, %.9g)",
                          dt_name(kdt), neox ? "neox" : "gptj", l->hs, l->rot, t, (long long)(pn[t] - po[t]), h, i, gx,
                          gy, xo, yo);
                if (kdt == KVC_DTYPE_F32 && fabs(x) + fabs(y) > 0) {
                    const double e = fmax(fabs(gx - xo), fabs(gy - yo)) / (EPS32 * (fabs(x) + fabs(y)));
                    worst = fmax(worst, e);
                }
            }
    assert_untouched(key, in, kdt, l);
    free(key);
    free(in);
    free(po);
    free(pn);
    return worst;
}

static void delta_sweep(const char *isa)
{
    kvc_context_t *ctx = tier_context(isa);
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F32, KVC_DTYPE_F16, KVC_DTYPE_BF16 };
    double worst = 0;
    for (size_t s = 0; s < sizeof(base_shapes) / sizeof(base_shapes[0]); s++)
        for (int v = 0; v < 3; v++) {
            const layout_t l = with_strides(base_shapes[s], v);
            for (int d = 0; d < 3; d++)
                for (int neox = 0; neox < 2; neox++) {
                    worst = fmax(worst, check_delta(ctx, &l, dts[d], neox, 4096, 10000.0));
                    /* positions up to the limit: angles up to 2^31 rad, reduced in double */
                    worst = fmax(worst, check_delta(ctx, &l, dts[d], neox, KVC_ROPE_POSITION_LIMIT, 500000.0));
                }
        }
    fprintf(stderr, "# delta (%s): worst fp32 error %.2f x 2^-24 x (|x|+|y|)\n", isa, worst);
    kvc_context_destroy(ctx);
}

Test(rope_oracle, delta_scalar) { delta_sweep("scalar"); }
Test(rope_oracle, delta_avx2) { delta_sweep("avx2"); }
Test(rope_oracle, delta_avx512) { delta_sweep("avx512"); }

/* ---------------------------------------------------------------- table builder */

/* Table entries against cos/sin of the double-precision angle p*theta_i. fp32: within 2 ulp of the
 * value (or 2^-30 absolute, near zeros of sin/cos); fp16/bf16: one rounding of such a value. */
static void check_table(kvc_context_t *ctx, kvc_dtype_t dt, size_t max_pos, size_t rot, double base,
                        double *worst_ulp)
{
    kvc_rope_table_t t = build_table(ctx, dt, max_pos, rot, base);
    const size_t half = rot / 2;
    for (size_t p = 0; p < max_pos; p++)
        for (size_t i = 0; i < half; i++) {
            const double a = (double)p * rope_ref_theta(i, rot, base);
            const double ec = cos(a), es = sin(a);
            const double gc = rope_ref_get(t.data, dt, p * rot + i), gs = rope_ref_get(t.data, dt, p * rot + half + i);
            const double tc = 2 * rope_ref_ulp(ec, KVC_DTYPE_F32) + 0x1p-30, ts = 2 * rope_ref_ulp(es, KVC_DTYPE_F32) + 0x1p-30;
            cr_assert(within_one_rounding(gc, ec, tc, dt) && within_one_rounding(gs, es, ts, dt),
                      "%s table rot %zu base %g: row %zu pair %zu: got (%.9g, %.9g), want (%.12g, %.12g)", dt_name(dt),
                      rot, base, p, i, gc, gs, ec, es);
            if (dt == KVC_DTYPE_F32) {
                *worst_ulp = fmax(*worst_ulp, fabs(gc - ec) / rope_ref_ulp(ec, KVC_DTYPE_F32));
                *worst_ulp = fmax(*worst_ulp, fabs(gs - es) / rope_ref_ulp(es, KVC_DTYPE_F32));
            }
        }
    free(t.data);
}

static void table_sweep(const char *isa)
{
    kvc_context_t *ctx = tier_context(isa);
    double worst = 0;
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F32, KVC_DTYPE_F16, KVC_DTYPE_BF16 };
    for (int d = 0; d < 3; d++) {
        check_table(ctx, dts[d], 2048, 128, 10000.0, &worst);
        check_table(ctx, dts[d], 300, 14, 500000.0, &worst);
        check_table(ctx, dts[d], 64, 2, 10000.0, &worst);
    }
    /* rows up to 2^19 (angles up to 5e5 rad), fp32, one pair per row */
    check_table(ctx, KVC_DTYPE_F32, (size_t)1 << 19, 2, 10000.0, &worst);
    fprintf(stderr, "# table (%s): worst fp32 entry error %.3f ulp\n", isa, worst);
    kvc_context_destroy(ctx);
}

Test(rope_table, build_scalar) { table_sweep("scalar"); }
Test(rope_table, build_avx2) { table_sweep("avx2"); }
Test(rope_table, build_avx512) { table_sweep("avx512"); }

/* ---------------------------------------------------------------- golden (LMCache rotary0) */

static void golden(const char *isa)
{
    kvc_context_t *ctx = tier_context(isa);
    test_npy_t cache = test_npy_load(kvc_test_data("golden/rotary0_cos_sin_cache.npy"));
    test_npy_t kin = test_npy_load(kvc_test_data("golden/rotary0_key_in.npy"));
    test_npy_t kout = test_npy_load(kvc_test_data("golden/rotary0_key_out.npy"));
    test_npy_t po = test_npy_load(kvc_test_data("golden/rotary0_old_positions.npy"));
    test_npy_t pn = test_npy_load(kvc_test_data("golden/rotary0_new_positions.npy"));
    cr_assert_str_eq(cache.descr, "<f4");
    cr_assert_str_eq(kin.descr, "<f4");
    cr_assert_str_eq(po.descr, "<i8");
    cr_assert(kin.ndim == 3 && kin.shape[0] == 32 && kin.shape[1] == 4 && kin.shape[2] == 128);
    cr_assert(cache.shape[0] == 1024 && cache.shape[1] == 128);
    const kvc_rope_keys_t k = { .data = kin.data, .dtype = KVC_DTYPE_F32, .num_tokens = 32, .num_heads = 4,
                                .head_size = 128 };
    const kvc_rope_table_t t = { .data = cache.data, .dtype = KVC_DTYPE_F32, .max_position = 1024, .rot_dim = 128 };
    cr_assert_eq(kvc_rope_k_fused(ctx, NULL, &k, po.data, pn.data, &t, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_OK, "%s", kvc_last_error());
    double worst = 0;
    for (size_t i = 0; i < kin.count; i++) worst = fmax(worst, fabs(((float *)kin.data)[i] - ((float *)kout.data)[i]));
    fprintf(stderr, "# golden rotary0 (%s): max |diff| %.3g\n", isa, worst);
    cr_assert_leq(worst, 1e-5, "max |diff| %g against LMCache's rotary0", worst);

    /* our own table for the same base: how far LMCache's (fp32-angle) table is from it */
    kvc_rope_table_t mine = build_table(ctx, KVC_DTYPE_F32, 1024, 128, 10000.0);
    double tdiff = 0;
    for (size_t i = 0; i < cache.count; i++) tdiff = fmax(tdiff, fabs(((float *)cache.data)[i] - ((float *)mine.data)[i]));
    fprintf(stderr, "# golden rotary0 (%s): max |table diff| vs kvc_rope_cache_build %.3g\n", isa, tdiff);
    cr_assert_leq(tdiff, 1e-4, "rotary0 table differs from ours by %g", tdiff);
    free(mine.data);
    test_npy_free(&cache);
    test_npy_free(&kin);
    test_npy_free(&kout);
    test_npy_free(&po);
    test_npy_free(&pn);
    kvc_context_destroy(ctx);
}

Test(rope_golden, rotary0_scalar) { golden("scalar"); }
Test(rope_golden, rotary0_avx2) { golden("avx2"); }
Test(rope_golden, rotary0_avx512) { golden("avx512"); }

/* ---------------------------------------------------------------- undo/redo identity */

/* old == new: the combined rotation is built from the same table row twice: sd = so*co - co*so is
 * exactly 0 (the two products are one real number, rounded and corrected alike), cd ~ co^2 + so^2,
 * and dividing by sqrt(fp32(cd^2)) == |cd| gives c = 1, s = 0 exactly. Every element is then x*1 - y*0
 * = x: asserted bit-identical for every key dtype, with an fp32 table and with a table in the key
 * dtype (whose rows' norms are off by up to ~2^-10 / ~2^-7), NeoX and GPT-J, contiguous and fused
 * K/V head strides. The issue asks for "identity within 1 ulp of fp32 math"; this is 0 ulp. */
static void identity(const char *isa)
{
    kvc_context_t *ctx = tier_context(isa);
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F32, KVC_DTYPE_F16, KVC_DTYPE_BF16 };
    const size_t max_pos = 8192, rot = 128;
    size_t checked = 0;
    for (int d = 0; d < 3; d++)
        for (int own_table = 0; own_table < 2; own_table++) {
            if (own_table && dts[d] == KVC_DTYPE_F32) continue; /* same as the f32 table */
            kvc_rope_table_t tab = build_table(ctx, own_table ? dts[d] : KVC_DTYPE_F32, max_pos, rot, 10000.0);
            for (int neox = 0; neox < 2; neox++)
                for (int v = 0; v < 2; v++) {
                    const layout_t l = with_strides((layout_t){ 64, 2, rot, rot, 0, 0 }, v);
                    const size_t total = layout_elems(&l), bytes = total * kvc_dtype_size(dts[d]);
                    void *key = alloc_filled(total, dts[d], -4, 4), *in = malloc(bytes);
                    memcpy(in, key, bytes);
                    int64_t *pos = random_positions(l.n, max_pos);
                    kvc_rope_keys_t k = keys_of(key, dts[d], &l);
                    cr_assert_eq(kvc_rope_k_fused(ctx, NULL, &k, pos, pos, &tab, ROPE_STYLE(neox ? KVC_ROPE_NEOX : KVC_ROPE_GPTJ)),
                                 KVC_OK);
                    for (size_t e = 0; e < total; e++) {
                        const double x = rope_ref_get(in, dts[d], e), g = rope_ref_get(key, dts[d], e);
                        cr_assert(memcmp((char *)key + e * kvc_dtype_size(dts[d]),
                                         (char *)in + e * kvc_dtype_size(dts[d]), kvc_dtype_size(dts[d])) == 0,
                                  "%s keys, %s table, %s, head stride %zu: element %zu: %.9g -> %.9g (%.1f ulp)",
                                  dt_name(dts[d]), dt_name(tab.dtype), neox ? "neox" : "gptj", l.head_stride, e, x, g,
                                  fabs(g - x) / rope_ref_ulp(x, dts[d]));
                    }
                    checked += total;
                    free(key);
                    free(in);
                    free(pos);
                }
            free(tab.data);
        }
    fprintf(stderr, "# identity (%s): %zu elements, every dtype and table dtype: bit-identical (0 ulp)\n", isa, checked);
    kvc_context_destroy(ctx);
}

Test(rope_identity, same_positions_scalar) { identity("scalar"); }
Test(rope_identity, same_positions_avx2) { identity("avx2"); }
Test(rope_identity, same_positions_avx512) { identity("avx512"); }

/* There and back (old -> new -> old) with fp32 keys: two combined rotations, the second exactly the
 * inverse factors of the first (the same cd, exactly -sd), each within about 1.5 fp32 roundings of
 * the pair's magnitude: asserted |x'' - x| <= 2^-22 * (|x| + |y|). Measured: 3.49 x 2^-24 (|x| + |y|)
 * on the SIMD tiers, 3.48 scalar with the fp32 factors of 2026-12-01 (2.92 / 3.08 with the double
 * ones before; the unnormalised fp32 composition before those measured 4.07 / 4.38, hence the
 * looser 2^-21 it was tested against). */
static void round_trip(const char *isa)
{
    kvc_context_t *ctx = tier_context(isa);
    const size_t max_pos = 4096;
    kvc_rope_table_t tab = build_table(ctx, KVC_DTYPE_F32, max_pos, 64, 10000.0);
    const layout_t l = with_strides((layout_t){ 50, 4, 64, 64, 0, 0 }, 0);
    const size_t total = layout_elems(&l);
    float *key = alloc_filled(total, KVC_DTYPE_F32, -4, 4), *in = malloc(total * 4);
    memcpy(in, key, total * 4);
    int64_t *po = random_positions(l.n, max_pos), *pn = random_positions(l.n, max_pos);
    kvc_rope_keys_t k = keys_of(key, KVC_DTYPE_F32, &l);
    cr_assert_eq(kvc_rope_k_fused(ctx, NULL, &k, po, pn, &tab, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_OK);
    cr_assert_eq(kvc_rope_k_fused(ctx, NULL, &k, pn, po, &tab, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_OK);
    double worst = 0;
    for (size_t t = 0; t < l.n * l.nkv; t++)
        for (size_t i = 0; i < 32; i++) {
            const float *a = in + t * 64, *b = key + t * 64;
            const double mag = fabs(a[i]) + fabs(a[i + 32]), bound = 0x1p-22 * mag;
            cr_assert_leq(fabs(b[i] - a[i]), bound, "head %zu pair %zu x: %.9g -> %.9g", t, i, a[i], b[i]);
            cr_assert_leq(fabs(b[i + 32] - a[i + 32]), bound, "head %zu pair %zu y", t, i);
            if (mag > 0) worst = fmax(worst, fmax(fabs(b[i] - a[i]), fabs(b[i + 32] - a[i + 32])) / (EPS32 * mag));
        }
    fprintf(stderr, "# round trip f32 (%s): worst |x'' - x| = %.2f x 2^-24 x (|x|+|y|)\n", isa, worst);
    free(key);
    free(in);
    free(po);
    free(pn);
    free(tab.data);
    kvc_context_destroy(ctx);
}

Test(rope_identity, round_trip_f32_scalar) { round_trip("scalar"); }
Test(rope_identity, round_trip_f32_avx2) { round_trip("avx2"); }
Test(rope_identity, round_trip_f32_avx512) { round_trip("avx512"); }

/* ---------------------------------------------------------------- real keys */

/* stories260K keys (fp16, [5 layers, 512 tokens, 4 kv heads, 8], adjacent pairs, theta 10000): the
 * pre-RoPE keys rotated from position 0 to t must match the stored post-RoPE keys. Those were
 * rotated in fp32 from fp32 keys, ours from the fp16-rounded pre-RoPE keys, so an element may differ
 * by both roundings plus the rotated rounding of its pair: asserted per element |ours - K| <= 2 fp16
 * ulp of |x| + |y| (the pre-RoPE pair), and overall max |ours - K| <= 2^-6 (one fp16 ulp at the data's
 * largest magnitudes, 16..32). */
static void real_keys(const char *isa, const char *seq, int use_delta)
{
    kvc_context_t *ctx = tier_context(isa);
    char path[128];
    snprintf(path, sizeof(path), "kvdata/%s_K_prerope.npy", seq);
    test_npy_t pre = test_npy_load(kvc_test_data(path));
    snprintf(path, sizeof(path), "kvdata/%s_K.npy", seq);
    test_npy_t post = test_npy_load(kvc_test_data(path));
    cr_assert_str_eq(pre.descr, "<f2");
    cr_assert(pre.ndim == 4 && pre.shape[2] == 4 && pre.shape[3] == 8 && post.count == pre.count);
    const size_t layers = pre.shape[0], T = pre.shape[1], n = layers * T;
    void *orig = malloc(pre.count * 2);
    memcpy(orig, pre.data, pre.count * 2);
    int64_t *po = calloc(n, sizeof(int64_t)), *pn = malloc(n * sizeof(int64_t));
    for (size_t i = 0; i < n; i++) pn[i] = (int64_t)(i % T);
    kvc_rope_keys_t k = { .data = pre.data, .dtype = KVC_DTYPE_F16, .num_tokens = n, .num_heads = 4, .head_size = 8 };
    if (use_delta) {
        cr_assert_eq(kvc_rope_k_delta(ctx, NULL, &k, po, pn, 8, 10000.0, ROPE_STYLE(KVC_ROPE_GPTJ)), KVC_OK, "%s", kvc_last_error());
    } else {
        kvc_rope_table_t tab = build_table(ctx, KVC_DTYPE_F32, T, 8, 10000.0);
        cr_assert_eq(kvc_rope_k_fused(ctx, NULL, &k, po, pn, &tab, ROPE_STYLE(KVC_ROPE_GPTJ)), KVC_OK, "%s", kvc_last_error());
        free(tab.data);
    }
    double worst = 0;
    size_t exact = 0;
    for (size_t e = 0; e < pre.count; e += 2)
        for (int c = 0; c < 2; c++) {
            const double got = rope_ref_get(pre.data, KVC_DTYPE_F16, e + c), want = rope_ref_get(post.data, KVC_DTYPE_F16, e + c);
            const double mag = fabs(rope_ref_get(orig, KVC_DTYPE_F16, e)) + fabs(rope_ref_get(orig, KVC_DTYPE_F16, e + 1));
            cr_assert_leq(fabs(got - want), 2 * rope_ref_ulp(mag, KVC_DTYPE_F16), "%s element %zu: %.6g, stored %.6g", seq,
                          e + c, got, want);
            worst = fmax(worst, fabs(got - want));
            exact += got == want;
        }
    fprintf(stderr, "# real keys %s (%s, %s): max |diff| %.4g, %.2f%% bit-identical\n", seq, isa,
            use_delta ? "delta" : "fused", worst, 100.0 * (double)exact / (double)pre.count);
    cr_assert_leq(worst, 0.015625);
    free(orig);
    free(po);
    free(pn);
    test_npy_free(&pre);
    test_npy_free(&post);
    kvc_context_destroy(ctx);
}

static void real_keys_all(const char *isa)
{
    real_keys(isa, "story_prompt", 0);
    real_keys(isa, "sampled_t1_512", 0);
    real_keys(isa, "story_prompt", 1);
}

Test(rope_real, keys_scalar) { real_keys_all("scalar"); }
Test(rope_real, keys_avx2) { real_keys_all("avx2"); }
Test(rope_real, keys_avx512) { real_keys_all("avx512"); }

/* ---------------------------------------------------------------- fused vs delta accuracy */

/* Both variants against the exact rotation by (new - old)*theta_i in double, on the same keys.
 * Reported per variant: max error in units of u * (|x| + |y|), u the unit roundoff of the key dtype
 * (2^-24 f32, 2^-11 f16, 2^-8 bf16; correct rounding alone gives up to ~1), and the share of
 * elements equal to the correctly rounded exact result. Asserted: the delta variant is within one
 * rounding of the exact result everywhere, and at least as accurate (max error and share) as every
 * fused variant: table in the key dtype (what LMCache's CUDA kernel requires), f32 table from
 * kvc_rope_cache_build, and a vLLM-style table (angles rounded to fp32). */
typedef struct accuracy {
    double max_err;   /* max |got - exact| / (u (|x| + |y|)) */
    double exact_pct; /* % of elements equal to round(exact) */
    int one_rounding; /* every element within one rounding of exact (tol 8 * 2^-24 (|x|+|y|)) */
} accuracy_t;

static accuracy_t measure(const void *in, const void *out, kvc_dtype_t dt, const layout_t *l, const int64_t *po,
                          const int64_t *pn, double base)
{
    accuracy_t a = { 0, 0, 1 };
    const double u = dt == KVC_DTYPE_F32 ? 0x1p-24 : dt == KVC_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
    size_t exact = 0, count = 0;
    const size_t half = l->rot / 2;
    for (size_t t = 0; t < l->n; t++)
        for (size_t h = 0; h < l->nkv; h++)
            for (size_t i = 0; i < half; i++) {
                const size_t b = t * l->token_stride + h * l->head_stride, xi = b + i, yi = b + half + i;
                const double x = rope_ref_get(in, dt, xi), y = rope_ref_get(in, dt, yi);
                double xo, yo;
                rope_ref_rotate_pair(x, y, (double)(pn[t] - po[t]) * rope_ref_theta(i, l->rot, base), &xo, &yo);
                const double gx = rope_ref_get(out, dt, xi), gy = rope_ref_get(out, dt, yi), mag = fabs(x) + fabs(y);
                if (mag > 0) a.max_err = fmax(a.max_err, fmax(fabs(gx - xo), fabs(gy - yo)) / (u * mag));
                exact += (gx == rope_ref_round(xo, dt)) + (gy == rope_ref_round(yo, dt));
                count += 2;
                a.one_rounding &= within_one_rounding(gx, xo, 8 * EPS32 * mag, dt) &&
                                  within_one_rounding(gy, yo, 8 * EPS32 * mag, dt);
            }
    a.exact_pct = 100.0 * (double)exact / (double)count;
    return a;
}

/* vLLM's table: inv_freq and p * inv_freq in fp32, then cos/sin (here in double of the fp32 angle). */
static kvc_rope_table_t vllm_table(size_t max_pos, size_t rot, double base)
{
    kvc_rope_table_t t = { .data = malloc(max_pos * rot * 4), .dtype = KVC_DTYPE_F32, .max_position = max_pos, .rot_dim = rot };
    float *f = t.data;
    for (size_t p = 0; p < max_pos; p++)
        for (size_t i = 0; i < rot / 2; i++) {
            const float inv = 1.0f / powf((float)base, (float)(2 * i) / (float)rot), angle = (float)p * inv;
            f[p * rot + i] = (float)cos(angle);
            f[p * rot + rot / 2 + i] = (float)sin(angle);
        }
    return t;
}

static void accuracy_for(kvc_context_t *ctx, kvc_dtype_t dt)
{
    const double base = 10000.0;
    const size_t max_pos = 32768;
    const layout_t l = with_strides((layout_t){ 256, 4, 128, 128, 0, 0 }, 0);
    const size_t total = layout_elems(&l), bytes = total * kvc_dtype_size(dt);
    void *in = alloc_filled(total, dt, -4, 4), *out = malloc(bytes);
    int64_t *po = random_positions(l.n, max_pos / 2), *pn = malloc(l.n * sizeof(int64_t));
    for (size_t t = 0; t < l.n; t++) pn[t] = po[t] + (int64_t)(rng_next() % (max_pos / 2)); /* CacheBlend: shifts */
    kvc_rope_keys_t k = keys_of(out, dt, &l);
    const char *names[4] = { "fused, table in key dtype", "fused, f32 table", "fused, vLLM-style f32 table", "delta" };
    accuracy_t acc[4];
    for (int v = 0; v < 4; v++) {
        if (v == 0 && dt == KVC_DTYPE_F32) continue; /* same as v == 1 */
        memcpy(out, in, bytes);
        if (v == 3) {
            cr_assert_eq(kvc_rope_k_delta(ctx, NULL, &k, po, pn, l.rot, base, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_OK);
        } else {
            kvc_rope_table_t t = v == 2 ? vllm_table(max_pos, l.rot, base)
                                        : build_table(ctx, v == 0 ? dt : KVC_DTYPE_F32, max_pos, l.rot, base);
            cr_assert_eq(kvc_rope_k_fused(ctx, NULL, &k, po, pn, &t, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_OK);
            free(t.data);
        }
        acc[v] = measure(in, out, dt, &l, po, pn, base);
        fprintf(stderr, "# accuracy %4s keys, %-28s max err %7.3f u(|x|+|y|), %6.2f%% correctly rounded\n",
                dt_name(dt), names[v], acc[v].max_err, acc[v].exact_pct);
    }
    cr_assert(acc[3].one_rounding, "%s: delta is not within one rounding of the exact rotation", dt_name(dt));
    for (int v = dt == KVC_DTYPE_F32 ? 1 : 0; v < 3; v++) {
        cr_assert_leq(acc[3].max_err, acc[v].max_err, "%s: delta less accurate than %s", dt_name(dt), names[v]);
        cr_assert_geq(acc[3].exact_pct, acc[v].exact_pct, "%s: delta rounds worse than %s", dt_name(dt), names[v]);
    }
    free(in);
    free(out);
    free(po);
    free(pn);
}

Test(rope_accuracy, fused_vs_delta)
{
    kvc_context_t *ctx = tier_context_threads("best", 1);
    accuracy_for(ctx, KVC_DTYPE_F32);
    accuracy_for(ctx, KVC_DTYPE_F16);
    accuracy_for(ctx, KVC_DTYPE_BF16);
    kvc_context_destroy(ctx);
}

/* ---------------------------------------------------------------- threads */

/* Splitting tokens (or table rows) across threads must not change a single bit. */
Test(rope_threads, two_threads_match_one)
{
    kvc_context_t *c1 = tier_context_threads("best", 1), *c2 = tier_context_threads("best", 2);
    const layout_t l = with_strides((layout_t){ 101, 3, 64, 64, 0, 0 }, 1);
    const size_t total = layout_elems(&l), bytes = total * 2;
    kvc_rope_table_t t1 = build_table(c1, KVC_DTYPE_F32, 1000, 64, 10000.0), t2 = build_table(c2, KVC_DTYPE_F32, 1000, 64, 10000.0);
    cr_assert(memcmp(t1.data, t2.data, 1000 * 64 * 4) == 0, "tables differ between 1 and 2 threads");
    void *a = alloc_filled(total, KVC_DTYPE_BF16, -4, 4), *b = malloc(bytes);
    memcpy(b, a, bytes);
    int64_t *po = random_positions(l.n, 1000), *pn = random_positions(l.n, 1000);
    kvc_rope_keys_t ka = keys_of(a, KVC_DTYPE_BF16, &l), kb = keys_of(b, KVC_DTYPE_BF16, &l);
    cr_assert_eq(kvc_rope_k_fused(c1, NULL, &ka, po, pn, &t1, ROPE_STYLE(KVC_ROPE_GPTJ)), KVC_OK);
    cr_assert_eq(kvc_rope_k_fused(c2, NULL, &kb, po, pn, &t1, ROPE_STYLE(KVC_ROPE_GPTJ)), KVC_OK);
    cr_assert(memcmp(a, b, bytes) == 0, "fused results differ between 1 and 2 threads");
    cr_assert_eq(kvc_rope_k_delta(c1, NULL, &ka, po, pn, 64, 10000.0, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_OK);
    cr_assert_eq(kvc_rope_k_delta(c2, NULL, &kb, po, pn, 64, 10000.0, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_OK);
    cr_assert(memcmp(a, b, bytes) == 0, "delta results differ between 1 and 2 threads");
    free(a);
    free(b);
    free(po);
    free(pn);
    free(t1.data);
    free(t2.data);
    kvc_context_destroy(c1);
    kvc_context_destroy(c2);
}

/* The table is built in 64-row blocks whose first angles step from an anchor every 64 blocks: a
 * thread that starts inside a run of blocks must reproduce the chain from its anchor. 129 blocks and
 * a partial one (two anchors), fp32 and fp16 (converted through scratch rows), 1-3 threads, rot_dim
 * 128 and 14 (vector tails), on every tier. */
Test(rope_threads, table_blocks_independent_of_threads)
{
    static const char *const tiers[] = { "scalar", "avx2", "avx512" };
    const size_t rows = 64 * 129 + 37;
    for (int k = 0; k < 3; k++) {
        setenv("HWLOC_XMLFILE", kvc_test_data("topologies/16amd64-4distances.xml"), 1);
        setenv("HWLOC_COMPONENTS", "-pci", 1);
        setenv("KVCORE_ISA", tiers[k], 1);
        kvc_context_t *ctx[3];
        for (int t = 0; t < 3; t++) {
            kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS,
                                       .backend = "cpu",
                                       .num_threads = t + 1 };
            cr_assert_eq(kvc_context_create(&p, &ctx[t]), KVC_OK, "%s", kvc_last_error());
        }
        if (strcmp(kvc_context_isa(ctx[0]), tiers[k]) != 0) { /* the CPU lacks the tier */
            for (int t = 0; t < 3; t++) kvc_context_destroy(ctx[t]);
            continue;
        }
        for (int d = 0; d < 2; d++)
            for (size_t rot = 128; rot >= 14; rot = rot == 128 ? 14 : 0) {
                const kvc_dtype_t dt = d ? KVC_DTYPE_F16 : KVC_DTYPE_F32;
                const size_t bytes = rows * rot * kvc_dtype_size(dt);
                kvc_rope_table_t t1 = build_table(ctx[0], dt, rows, rot, 10000.0);
                for (int t = 1; t < 3; t++) {
                    kvc_rope_table_t tn = build_table(ctx[t], dt, rows, rot, 10000.0);
                    cr_assert(memcmp(t1.data, tn.data, bytes) == 0, "%s %s table rot %zu: 1 and %d threads differ",
                              tiers[k], dt_name(dt), rot, t + 1);
                    free(tn.data);
                }
                free(t1.data);
            }
        for (int t = 0; t < 3; t++) kvc_context_destroy(ctx[t]);
    }
    unsetenv("KVCORE_ISA");
}

/* ---------------------------------------------------------------- tiers */

/* The fused op's per-token factors (c, s) are bit-identical on every tier: with fp32 keys whose pairs
 * are (1, 0), x' = 1*c - 0*s = c and y' = 0*c + 1*s = s exactly (with or without FMA), so the keys
 * come out as the factors themselves. The table mixes rows of every kind the factor code
 * distinguishes: exact cos/sin, rows scaled so that the squared norm product lands on either side of
 * the Newton threshold (|n - 1| <= 2^-4), bf16-rounded rows, random rows (not rotations), a zero
 * row, rows scaled by 2^-36 or 2^36 (the fp32 path's range check sends them to the double
 * fallback). 23 pairs: whole vectors and tails on both SIMD tiers. */
Test(rope_tiers, fused_factors_bit_identical)
{
    const size_t rot = 46, half = rot / 2, max_pos = 64, n = 400;
    float *tab = malloc(max_pos * rot * sizeof(float));
    cr_assert_not_null(tab);
    for (size_t p = 0; p < max_pos; p++)
        for (size_t i = 0; i < half; i++) {
            const double a = (double)p * rope_ref_theta(i, rot, 10000.0);
            double c = cos(a), sn = sin(a), scale = 1.0;
            switch (p % 5) {
            case 1: scale = 1.0 + (double)((int)(rng_next() % 9) - 4) * 0x1p-6; break; /* |n - 1| up to ~2^-3 */
            case 2: c = rng_uniform(-1.5, 1.5), sn = rng_uniform(-1.5, 1.5); break;
            case 3:
                c = p == 3 ? 0 : rope_ref_round(c, KVC_DTYPE_BF16);
                sn = p == 3 ? 0 : rope_ref_round(sn, KVC_DTYPE_BF16);
                break;
            case 4: scale = rng_uniform(0.9, 1.1); break;
            default: break;
            }
            /* rows so short or long that |row_old|^2 |row_new|^2 leaves [2^-60, 2^60] with most
             * partners: those pairs take the double fallback of kvc_rope_combine1 */
            if (p % 7 == 6) scale *= (p & 8) ? 0x1p36 : 0x1p-36;
            tab[p * rot + i] = (float)(c * scale);
            tab[p * rot + half + i] = (float)(sn * scale);
        }
    const kvc_rope_table_t t = { .data = tab, .dtype = KVC_DTYPE_F32, .max_position = max_pos, .rot_dim = rot };
    int64_t *po = random_positions(n, max_pos), *pn = random_positions(n, max_pos);
    static const char *const tiers[] = { "scalar", "avx2", "avx512" };
    float *out[3] = { NULL, NULL, NULL };
    int ran = 0;
    for (int k = 0; k < 3; k++) {
        kvc_context_t *ctx = tier_context_if_offered(tiers[k]);
        if (ctx) {
            out[k] = malloc(n * rot * sizeof(float));
            cr_assert_not_null(out[k]);
            for (size_t e = 0; e < n * rot; e++) out[k][e] = (e % rot) < half ? 1.0f : 0.0f; /* NeoX (x, y) = (1, 0) */
            const kvc_rope_keys_t keys = { .data = out[k], .dtype = KVC_DTYPE_F32, .num_tokens = n, .num_heads = 1,
                                           .head_size = rot };
            cr_assert_eq(kvc_rope_k_fused(ctx, NULL, &keys, po, pn, &t, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_OK, "%s", kvc_last_error());
            ran++;
        }
        kvc_context_destroy(ctx);
    }
    for (int k = 1; k < 3; k++) {
        if (!out[k]) continue;
        for (size_t e = 0; e < n * rot; e++)
            cr_assert(memcmp(&out[0][e], &out[k][e], sizeof(float)) == 0,
                      "%s vs scalar: token %zu (rows %lld -> %lld) element %zu: %.9g vs %.9g", tiers[k], e / rot,
                      (long long)po[e / rot], (long long)pn[e / rot], e % rot, out[k][e], out[0][e]);
    }
    /* the factors are those of a unit vector, or 0 for the zero row */
    for (size_t t0 = 0; t0 < n; t0++)
        for (size_t i = 0; i < half; i++) {
            const double c = out[0][t0 * rot + i], sn = out[0][t0 * rot + half + i];
            if (po[t0] == 3 || pn[t0] == 3) cr_assert(c == 0 && sn == 0, "zero row: (%g, %g)", c, sn);
            else cr_assert_leq(fabs(hypot(c, sn) - 1), 0x1p-23, "token %zu pair %zu: |(c, s)| = %.12g", t0, i, hypot(c, sn));
        }
    fprintf(stderr, "# fused factors bit-identical across %d tier(s)\n", ran);
    for (int k = 0; k < 3; k++) free(out[k]);
    free(tab);
    free(po);
    free(pn);
}

/* Half-precision keys with the values a conversion can get wrong: subnormals (bf16 0x0001-0x007f,
 * which AVX512_BF16's vcvtneps2bf16 would flush to zero; fp16 ones), NaNs with payloads, infinities,
 * the largest finite values (a rotation can round them to infinity), zeros, next to ordinary values.
 * (1) old == new gives every finite nonzero key with a finite partner back bit for bit on every
 * tier; (2) random rotations
 * give the same bits on the AVX2 and AVX-512 tiers (the same FMAs in the same order), fused and
 * delta, NeoX and GPT-J, over whole vectors (head size 128) and tails (head size 40). */
static uint16_t edge_half(kvc_dtype_t dt, uint64_t r)
{
    const uint16_t sign = (uint16_t)((r >> 40) & 1) << 15;
    const int bf = dt == KVC_DTYPE_BF16;
    switch (r % 8) {
    case 0: return sign | (uint16_t)(1 + (r >> 20) % (bf ? 0x7f : 0x3ff)); /* subnormal */
    case 1: return sign | (uint16_t)((bf ? 0x7f80 : 0x7c00) | (1 + (r >> 20) % (bf ? 0x7f : 0x3ff))); /* NaN */
    case 2: return sign | (uint16_t)(bf ? 0x7f7f - (r >> 20) % 4 : 0x7bff - (r >> 20) % 4); /* near the largest */
    case 3: return sign | (uint16_t)(bf ? 0x0080 + (r >> 20) % 0x100 : 0x0400 + (r >> 20) % 0x800); /* tiny normal */
    default: return sign | (uint16_t)(bf ? 0x3c00 + (r >> 20) % 0x600 : 0x2c00 + (r >> 20) % 0x2000);
    }
}

static int edge_finite_nonzero(kvc_dtype_t dt, uint16_t b)
{
    const uint16_t m = b & 0x7fff;
    return m != 0 && m < (dt == KVC_DTYPE_BF16 ? 0x7f80 : 0x7c00);
}

Test(rope_tiers, half_edge_values_bit_identical)
{
    static const char *const tiers[] = { "scalar", "avx2", "avx512" };
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F16, KVC_DTYPE_BF16 };
    const size_t n = 67, max_pos = 4096;
    int compared = 0;
    for (int d = 0; d < 2; d++)
        for (size_t hs = 128; hs >= 40; hs = hs == 128 ? 40 : 0)
            for (int neox = 0; neox < 2; neox++)
                for (int variant = 0; variant < 3; variant++) { /* identity, fused, delta */
                    const kvc_dtype_t dt = dts[d];
                    uint16_t *in = malloc(n * hs * 2), *out[3] = { NULL, NULL, NULL };
                    cr_assert_not_null(in);
                    for (size_t e = 0; e < n * hs; e++) in[e] = edge_half(dt, rng_next());
                    int64_t *po = random_positions(n, max_pos), *pn = random_positions(n, max_pos);
                    const kvc_rope_keys_t shape = { .dtype = dt, .num_tokens = n, .num_heads = 1, .head_size = hs };
                    const kvc_rope_params_t *style = ROPE_STYLE(neox ? KVC_ROPE_NEOX : KVC_ROPE_GPTJ);
                    for (int k = 0; k < 3; k++) {
                        kvc_context_t *ctx = tier_context_if_offered(tiers[k]);
                        if (ctx) {
                            kvc_rope_table_t tab = build_table(ctx, KVC_DTYPE_F32, max_pos, hs, 10000.0);
                            out[k] = malloc(n * hs * 2);
                            cr_assert_not_null(out[k]);
                            memcpy(out[k], in, n * hs * 2);
                            kvc_rope_keys_t keys = shape;
                            keys.data = out[k];
                            const kvc_status_t st =
                                variant == 2 ? kvc_rope_k_delta(ctx, NULL, &keys, po, pn, hs, 10000.0, style)
                                             : kvc_rope_k_fused(ctx, NULL, &keys, po, variant ? pn : po, &tab, style);
                            cr_assert_eq(st, KVC_OK, "%s", kvc_last_error());
                            free(tab.data);
                            if (variant == 0) /* x*1 - y*0: x, unless the partner y is infinite or NaN */
                                for (size_t e = 0; e < n * hs; e++) {
                                    const size_t i = e % hs, partner = e - i + (neox ? (i + hs / 2) % hs : i ^ 1);
                                    if (edge_finite_nonzero(dt, in[e]) && (edge_finite_nonzero(dt, in[partner]) || !(in[partner] & 0x7fff)))
                                        cr_assert_eq(out[k][e], in[e], "%s %s %s hs %zu, old = new: element %zu 0x%04x -> 0x%04x",
                                                     tiers[k], dt_name(dt), neox ? "neox" : "gptj", hs, e, in[e], out[k][e]);
                                }
                        }
                        kvc_context_destroy(ctx);
                    }
                    if (out[1] && out[2]) {
                        for (size_t e = 0; e < n * hs; e++)
                            cr_assert_eq(out[2][e], out[1][e], "%s %s hs %zu %s: element %zu (in 0x%04x): avx512 0x%04x, avx2 0x%04x",
                                         dt_name(dt), neox ? "neox" : "gptj", hs,
                                         variant == 0 ? "identity" : variant == 1 ? "fused" : "delta", e, in[e], out[2][e],
                                         out[1][e]);
                        compared++;
                    }
                    for (int k = 0; k < 3; k++) free(out[k]);
                    free(in);
                    free(po);
                    free(pn);
                }
    unsetenv("KVCORE_ISA");
    fprintf(stderr, "# half-precision edge values: %d case(s) compared avx512 vs avx2\n", compared);
}

/* ---------------------------------------------------------------- errors */

#define ERR_KEY_ELEMS (4 * 2 * 8 + 8) /* 4 tokens x 2 heads x 8, f16, plus room for misalignment */
typedef struct err_fixture {
    kvc_context_t *ctx;
    uint16_t key[ERR_KEY_ELEMS];
    uint16_t before[ERR_KEY_ELEMS];
    float table[16 * 8 + 1];
    int64_t po[5], pn[5];
    kvc_rope_keys_t k;
    kvc_rope_table_t t;
} err_fixture_t;

static void err_setup(err_fixture_t *f)
{
    memset(f, 0, sizeof(*f));
    f->ctx = tier_context_threads("best", 1);
    for (size_t i = 0; i < sizeof(f->key) / 2; i++) f->key[i] = (uint16_t)(0x3c00 + i); /* 1.0, 1.001, ... */
    memcpy(f->before, f->key, sizeof(f->key));
    f->k = (kvc_rope_keys_t){ .data = f->key, .dtype = KVC_DTYPE_F16, .num_tokens = 4, .num_heads = 2, .head_size = 8 };
    f->t = (kvc_rope_table_t){ .data = f->table, .dtype = KVC_DTYPE_F32, .max_position = 16, .rot_dim = 8 };
    cr_assert_eq(kvc_rope_cache_build(f->ctx, NULL, &f->t, 10000.0), KVC_OK);
    for (int i = 0; i < 4; i++) {
        f->po[i] = i;
        f->pn[i] = 15 - i;
    }
}

static kvc_status_t fused(err_fixture_t *f, kvc_rope_style_t style)
{
    return kvc_rope_k_fused(f->ctx, NULL, &f->k, f->po, f->pn, &f->t, ROPE_STYLE(style));
}

static kvc_status_t delta(err_fixture_t *f, size_t rot, double base)
{
    return kvc_rope_k_delta(f->ctx, NULL, &f->k, f->po, f->pn, rot, base, ROPE_STYLE(KVC_ROPE_NEOX));
}

/* The call failed with `want`, the message mentions `needle`, and the keys were not written. */
#define EXPECT_ERR(f, call, want, needle)                                                                        \
    do {                                                                                                         \
        const kvc_status_t st_ = (call);                                                                         \
        cr_assert_eq(st_, (want), "%s: got %s, want %s (%s)", #call, kvc_status_name(st_), kvc_status_name(want), \
                     kvc_last_error());                                                                          \
        cr_assert(strstr(kvc_last_error(), (needle)) != NULL, "%s: message '%s' lacks '%s'", #call,              \
                  kvc_last_error(), (needle));                                                                   \
        cr_assert(memcmp((f)->key, (f)->before, sizeof((f)->key)) == 0, "%s wrote to the keys", #call);         \
    } while (0)

Test(rope_errors, null_arguments)
{
    err_fixture_t f;
    err_setup(&f);
    EXPECT_ERR(&f, kvc_rope_k_fused(NULL, NULL, &f.k, f.po, f.pn, &f.t, NULL), KVC_ERR_INVALID_ARG, "ctx");
    EXPECT_ERR(&f, kvc_rope_k_fused(f.ctx, NULL, NULL, f.po, f.pn, &f.t, NULL), KVC_ERR_INVALID_ARG, "keys");
    EXPECT_ERR(&f, kvc_rope_k_fused(f.ctx, NULL, &f.k, NULL, f.pn, &f.t, NULL), KVC_ERR_INVALID_ARG,
               "old_positions");
    EXPECT_ERR(&f, kvc_rope_k_fused(f.ctx, NULL, &f.k, f.po, NULL, &f.t, NULL), KVC_ERR_INVALID_ARG,
               "new_positions");
    EXPECT_ERR(&f, kvc_rope_k_fused(f.ctx, NULL, &f.k, f.po, f.pn, NULL, NULL), KVC_ERR_INVALID_ARG, "table");
    EXPECT_ERR(&f, kvc_rope_k_delta(NULL, NULL, &f.k, f.po, f.pn, 8, 1e4, NULL), KVC_ERR_INVALID_ARG, "ctx");
    EXPECT_ERR(&f, kvc_rope_k_delta(f.ctx, NULL, &f.k, NULL, f.pn, 8, 1e4, NULL), KVC_ERR_INVALID_ARG,
               "old_positions");
    EXPECT_ERR(&f, kvc_rope_cache_build(NULL, NULL, &f.t, 1e4), KVC_ERR_INVALID_ARG, "ctx");
    EXPECT_ERR(&f, kvc_rope_cache_build(f.ctx, NULL, NULL, 1e4), KVC_ERR_INVALID_ARG, "table");
    f.t.data = NULL;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_INVALID_ARG, "table->data");
    EXPECT_ERR(&f, kvc_rope_cache_build(f.ctx, NULL, &f.t, 1e4), KVC_ERR_INVALID_ARG, "table->data");
    f.t.data = f.table;
    f.k.data = NULL;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_INVALID_ARG, "keys->data");
    kvc_context_destroy(f.ctx);
}

/* NULL params and a style without its field_mask bit both mean NEOX; the bit makes the style count. */
Test(rope_errors, params_defaults)
{
    err_fixture_t f;
    err_setup(&f);
    uint16_t neox[sizeof(f.key) / sizeof(f.key[0])], unset[sizeof(f.key) / sizeof(f.key[0])];
    cr_assert_eq(kvc_rope_k_fused(f.ctx, NULL, &f.k, f.po, f.pn, &f.t, NULL), KVC_OK, "%s", kvc_last_error());
    memcpy(neox, f.key, sizeof(neox));
    memcpy(f.key, f.before, sizeof(f.key));
    const kvc_rope_params_t no_bit = { .field_mask = 0, .style = KVC_ROPE_GPTJ };
    cr_assert_eq(kvc_rope_k_fused(f.ctx, NULL, &f.k, f.po, f.pn, &f.t, &no_bit), KVC_OK);
    memcpy(unset, f.key, sizeof(unset));
    memcpy(f.key, f.before, sizeof(f.key));
    cr_assert(memcmp(neox, unset, sizeof(neox)) == 0, "a style without KVC_ROPE_PARAM_STYLE was read");
    cr_assert_eq(kvc_rope_k_fused(f.ctx, NULL, &f.k, f.po, f.pn, &f.t, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_OK);
    cr_assert(memcmp(neox, f.key, sizeof(neox)) == 0, "NULL params differ from an explicit NEOX");
    memcpy(f.key, f.before, sizeof(f.key));
    cr_assert_eq(kvc_rope_k_fused(f.ctx, NULL, &f.k, f.po, f.pn, &f.t, ROPE_STYLE(KVC_ROPE_GPTJ)), KVC_OK);
    cr_assert(memcmp(neox, f.key, sizeof(neox)) != 0, "GPTJ gave the NEOX result");
    kvc_context_destroy(f.ctx);
}

Test(rope_errors, bad_enums_and_counts)
{
    err_fixture_t f;
    err_setup(&f);
    EXPECT_ERR(&f, fused(&f, (kvc_rope_style_t)2), KVC_ERR_INVALID_ARG, "style");
    EXPECT_ERR(&f, kvc_rope_k_delta(f.ctx, NULL, &f.k, f.po, f.pn, 8, 1e4, ROPE_STYLE((kvc_rope_style_t)-1)),
               KVC_ERR_INVALID_ARG, "style");
    const kvc_rope_params_t newer = { .field_mask = KVC_ROPE_PARAM_STYLE | 1u << 7, .style = KVC_ROPE_NEOX };
    EXPECT_ERR(&f, kvc_rope_k_fused(f.ctx, NULL, &f.k, f.po, f.pn, &f.t, &newer), KVC_ERR_INVALID_ARG, "field_mask");
    EXPECT_ERR(&f, kvc_rope_k_delta(f.ctx, NULL, &f.k, f.po, f.pn, 8, 1e4, &newer), KVC_ERR_INVALID_ARG, "field_mask");
    f.k.num_heads = 0;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_INVALID_ARG, "num_heads");
    f.k.num_heads = 2;
    f.k.head_size = 0;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_INVALID_ARG, "head_size");
    f.k.head_size = 8;
    EXPECT_ERR(&f, delta(&f, 0, 1e4), KVC_ERR_INVALID_ARG, "rot_dim");
    f.t.max_position = 0;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_INVALID_ARG, "max_position");
    EXPECT_ERR(&f, kvc_rope_cache_build(f.ctx, NULL, &f.t, 1e4), KVC_ERR_INVALID_ARG, "max_position");
    f.t.max_position = 16;
    f.t.rot_dim = 0;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_INVALID_ARG, "rot_dim");
    f.t.rot_dim = 8;
    static const double bad_bases[] = { 0.0, -2.0, NAN, INFINITY };
    for (int i = 0; i < 4; i++) {
        EXPECT_ERR(&f, delta(&f, 8, bad_bases[i]), KVC_ERR_INVALID_ARG, "base");
        EXPECT_ERR(&f, kvc_rope_cache_build(f.ctx, NULL, &f.t, bad_bases[i]), KVC_ERR_INVALID_ARG, "base");
    }
    kvc_context_destroy(f.ctx);
}

Test(rope_errors, dtypes)
{
    err_fixture_t f;
    err_setup(&f);
    f.k.dtype = (kvc_dtype_t)7;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_DTYPE, "keys->dtype");
    EXPECT_ERR(&f, delta(&f, 8, 1e4), KVC_ERR_DTYPE, "keys->dtype");
    f.k.dtype = KVC_DTYPE_F16;
    f.t.dtype = (kvc_dtype_t)9;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_DTYPE, "table->dtype");
    EXPECT_ERR(&f, kvc_rope_cache_build(f.ctx, NULL, &f.t, 1e4), KVC_ERR_DTYPE, "table->dtype");
    f.t.dtype = KVC_DTYPE_BF16; /* neither the key dtype (f16) nor f32 */
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_DTYPE, "must be the key dtype");
    f.t.dtype = KVC_DTYPE_F32;
    kvc_context_destroy(f.ctx);
}

Test(rope_errors, shapes)
{
    err_fixture_t f;
    err_setup(&f);
    f.t.rot_dim = 7;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_SHAPE, "odd");
    EXPECT_ERR(&f, kvc_rope_cache_build(f.ctx, NULL, &f.t, 1e4), KVC_ERR_SHAPE, "odd");
    f.t.rot_dim = 10; /* > head_size 8 */
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_SHAPE, "exceeds head_size");
    EXPECT_ERR(&f, delta(&f, 10, 1e4), KVC_ERR_SHAPE, "exceeds head_size");
    EXPECT_ERR(&f, delta(&f, 5, 1e4), KVC_ERR_SHAPE, "odd");
    f.t.rot_dim = 8;
    f.k.head_stride = 7;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_SHAPE, "head_stride");
    f.k.head_stride = 8;
    f.k.token_stride = 15; /* two heads of 8 need 16 */
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_SHAPE, "token_stride");
    f.k.token_stride = 0;
    f.k.num_tokens = SIZE_MAX / 4;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_SHAPE, "overflows");
    f.k.num_tokens = 4;
    f.k.num_heads = SIZE_MAX / 2;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_SHAPE, "overflows");
    f.k.num_heads = 2;
    f.t.max_position = (size_t)KVC_ROPE_POSITION_LIMIT + 1;
    EXPECT_ERR(&f, kvc_rope_cache_build(f.ctx, NULL, &f.t, 1e4), KVC_ERR_SHAPE, "KVC_ROPE_POSITION_LIMIT");
    f.t.max_position = (size_t)1 << 40;
    f.t.rot_dim = (size_t)1 << 40;
    EXPECT_ERR(&f, kvc_rope_cache_build(f.ctx, NULL, &f.t, 1e4), KVC_ERR_SHAPE, "KVC_ROPE_POSITION_LIMIT");
    kvc_context_destroy(f.ctx);
}

Test(rope_errors, alignment)
{
    err_fixture_t f;
    err_setup(&f);
    f.k.data = (char *)f.key + 1;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_ALIGNMENT, "keys->data");
    f.k.data = f.key;
    f.t.data = (char *)f.table + 2;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_ALIGNMENT, "table->data");
    EXPECT_ERR(&f, kvc_rope_cache_build(f.ctx, NULL, &f.t, 1e4), KVC_ERR_ALIGNMENT, "table->data");
    f.t.data = f.table;
    EXPECT_ERR(&f, kvc_rope_k_fused(f.ctx, NULL, &f.k, (const int64_t *)((char *)f.po + 4), f.pn, &f.t, ROPE_STYLE(KVC_ROPE_NEOX)),
               KVC_ERR_ALIGNMENT, "old_positions");
    kvc_context_destroy(f.ctx);
}

Test(rope_errors, positions_out_of_range)
{
    err_fixture_t f;
    err_setup(&f);
    f.po[2] = 16; /* == max_position */
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_NEOX), KVC_ERR_OUT_OF_RANGE, "old_positions[2] = 16");
    f.po[2] = 2;
    f.pn[3] = -1;
    EXPECT_ERR(&f, fused(&f, KVC_ROPE_GPTJ), KVC_ERR_OUT_OF_RANGE, "new_positions[3] = -1");
    EXPECT_ERR(&f, delta(&f, 8, 1e4), KVC_ERR_OUT_OF_RANGE, "new_positions[3] = -1");
    f.pn[3] = KVC_ROPE_POSITION_LIMIT;
    EXPECT_ERR(&f, delta(&f, 8, 1e4), KVC_ERR_OUT_OF_RANGE, "new_positions[3]");
    f.pn[3] = KVC_ROPE_POSITION_LIMIT - 1; /* the largest valid delta position */
    cr_assert_eq(delta(&f, 8, 1e4), KVC_OK, "%s", kvc_last_error());
    kvc_context_destroy(f.ctx);
}

/* Zero tokens is a no-op: positions may be NULL, nothing is written. */
Test(rope_errors, zero_tokens_is_noop)
{
    err_fixture_t f;
    err_setup(&f);
    f.k.num_tokens = 0;
    cr_assert_eq(kvc_rope_k_fused(f.ctx, NULL, &f.k, NULL, NULL, &f.t, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_OK);
    cr_assert_eq(kvc_rope_k_delta(f.ctx, NULL, &f.k, NULL, NULL, 8, 1e4, ROPE_STYLE(KVC_ROPE_GPTJ)), KVC_OK);
    cr_assert(memcmp(f.key, f.before, sizeof(f.key)) == 0);
    kvc_context_destroy(f.ctx);
}

/* A failed table build leaves the table untouched. */
Test(rope_errors, table_untouched_on_error)
{
    err_fixture_t f;
    err_setup(&f);
    float copy[sizeof(f.table) / sizeof(float)];
    memcpy(copy, f.table, sizeof(copy));
    f.t.rot_dim = 3;
    cr_assert_eq(kvc_rope_cache_build(f.ctx, NULL, &f.t, 500000.0), KVC_ERR_SHAPE);
    f.t.rot_dim = 8;
    cr_assert_eq(kvc_rope_cache_build(f.ctx, NULL, &f.t, -1.0), KVC_ERR_INVALID_ARG);
    cr_assert(memcmp(copy, f.table, sizeof(copy)) == 0);
    cr_assert_eq(kvc_dtype_size(KVC_DTYPE_INVALID), 0u);
    cr_assert_eq(kvc_dtype_size(KVC_DTYPE_BF16), 2u);
    kvc_context_destroy(f.ctx);
}

/* ---------------------------------------------------------------- overlap */

/* Keys are rewritten in place: a table or position array sharing bytes with them is refused
 * (KVC_ERR_OVERLAP) with nothing written; the same arrays one byte apart are fine. */
Test(rope_errors, table_or_positions_overlapping_keys)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    enum { N = 4, H = 2, HS = 8, KEYS = N * H * HS, MAXP = 16, TABLE = MAXP * HS };
    float *arena = aligned_alloc(64, (KEYS + TABLE + 64) * sizeof(float)), *snap = malloc((KEYS + TABLE + 64) * sizeof(float));
    for (size_t i = 0; i < KEYS; i++) arena[i] = (float)i / 7.0f;
    kvc_rope_table_t t = { .data = arena + KEYS, .dtype = KVC_DTYPE_F32, .max_position = MAXP, .rot_dim = HS };
    cr_assert_eq(kvc_rope_cache_build(ctx, NULL, &t, 10000.0), KVC_OK);
    memcpy(snap, arena, (KEYS + TABLE + 64) * sizeof(float));
    kvc_rope_keys_t k = { .data = arena, .dtype = KVC_DTYPE_F32, .num_tokens = N, .num_heads = H, .head_size = HS };
    int64_t oldp[N] = { 1, 2, 3, 4 }, newp[N] = { 5, 6, 7, 8 };
    /* The table starting on the keys' last element; the keys' last token reaching into the table. */
    kvc_rope_table_t bad = t;
    bad.data = arena + KEYS - 1;
    cr_assert_eq(kvc_rope_k_fused(ctx, NULL, &k, oldp, newp, &bad, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_ERR_OVERLAP);
    cr_assert(strstr(kvc_last_error(), "table->data"), "%s", kvc_last_error());
    kvc_rope_keys_t longer = k;
    longer.num_tokens = N + 1;
    int64_t oldp5[N + 1] = { 1, 2, 3, 4, 5 }, newp5[N + 1] = { 5, 6, 7, 8, 9 };
    cr_assert_eq(kvc_rope_k_fused(ctx, NULL, &longer, oldp5, newp5, &t, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_ERR_OVERLAP);
    /* Positions inside the keys (fused and delta). */
    int64_t *inside = (int64_t *)(void *)(arena + 8);
    cr_assert_eq(kvc_rope_k_fused(ctx, NULL, &k, inside, newp, &t, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_ERR_OVERLAP);
    cr_assert(strstr(kvc_last_error(), "old_positions"), "%s", kvc_last_error());
    cr_assert_eq(kvc_rope_k_fused(ctx, NULL, &k, oldp, inside, &t, ROPE_STYLE(KVC_ROPE_GPTJ)), KVC_ERR_OVERLAP);
    cr_assert_eq(kvc_rope_k_delta(ctx, NULL, &k, inside, newp, HS, 10000.0, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_ERR_OVERLAP);
    cr_assert_eq(kvc_rope_k_delta(ctx, NULL, &k, oldp, inside, HS, 10000.0, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_ERR_OVERLAP);
    cr_assert(!memcmp(arena, snap, (KEYS + TABLE + 64) * sizeof(float)), "a refused call wrote");
    /* Adjacent: legal. */
    cr_assert_eq(kvc_rope_k_fused(ctx, NULL, &k, oldp, newp, &t, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_OK, "%s", kvc_last_error());
    int64_t *after = (int64_t *)(void *)(arena + KEYS + TABLE);
    memcpy(after, oldp, sizeof(oldp));
    cr_assert_eq(kvc_rope_k_delta(ctx, NULL, &k, after, newp, HS, 10000.0, ROPE_STYLE(KVC_ROPE_NEOX)), KVC_OK, "%s", kvc_last_error());
    free(arena);
    free(snap);
    kvc_context_destroy(ctx);
}
