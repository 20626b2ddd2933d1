/* SPDX-License-Identifier: BSD-3-Clause */
/* NEON RoPE tier against the scalar tier, bit for bit, under qemu-aarch64 (see run.sh).
 *
 * What is compared, and against what:
 *   factors  NEON vs scalar kernel: bit-identical (every tier does the same double operations);
 *   store    NEON vs scalar kernel: bit-identical (fp32 -> fp16/bf16, RNE, specials included);
 *   rotate   NEON vs the scalar tier's loads/stores with the rotation written as the SIMD tiers
 *            write it (fma(x, c, -(y*s)), fma(y, c, x*s): the AVX tiers' tail code): bit-identical.
 *            The scalar tier itself uses separate multiplies (x*c - y*s, no FMA), so NEON, like
 *            AVX2 and AVX-512, may differ from it in the last fp32 bit (docs/ROPE.md): that is
 *            bounded here, |neon - scalar| <= 2^-22 (|x| + |y|) + 1 ulp of the key dtype, and the
 *            number of such elements is reported;
 *   fused / delta slots (kvc_cpu_rope_k_fused / _k_delta with a context on the NEON tier, i.e.
 *            through the dispatch) vs the scalar factors/sincos + FMA rotation above, whole
 *            buffers bit for bit (so bytes outside rot_dim and between heads/tokens are untouched),
 *            and with a context capped to scalar vs the scalar kernels;
 *   identity old == new on every token: keys come back bit-identical (NEON tier).
 * Exit status 0 only when every check passes; output is TAP. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "cpu_rope.h"
#include "isa.h"

#ifndef KVC_ROPE_HAVE_NEON
#error "build for AArch64 with NEON (tests/neon/run.sh)"
#endif

/* Stand-in for the core's kvc_dtype_size (src/core/rope.c), which this harness does not link. */
size_t kvc_dtype_size(kvc_dtype_t dt) { return dt == KVC_DTYPE_F32 ? 4 : 2; }

static kvc_status_t fake_set_error(kvc_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return st;
}

static kvc_backend_services_t svc;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}
static double rng_unit(void) { return (double)(rng_next() >> 11) * 0x1p-53; }
static double rng_uniform(double a, double b) { return a + (b - a) * rng_unit(); }

static const char *dt_name(kvc_dtype_t d) { return d == KVC_DTYPE_F32 ? "f32" : d == KVC_DTYPE_F16 ? "f16" : "bf16"; }

static int test_no = 0, failures = 0;
static void ok(int pass, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s %d - ", pass ? "ok" : "not ok", ++test_no);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (!pass) failures++;
}

/* A random finite key value, rounded to dt: wide exponents (f16 subnormals and values near its
 * overflow included, so rotation results cross both ends). */
static float rand_key(kvc_dtype_t dt)
{
    const int e = (int)(rng_next() % 39) - 24; /* 2^-24 .. 2^15 (exclusive: finite in f16) */
    float v = (float)ldexp(rng_uniform(1.0, 2.0), e);
    if (rng_next() & 1) v = -v;
    if (rng_next() % 16 == 0) v = 0.0f;
    uint16_t h;
    switch (dt) {
    case KVC_DTYPE_F16: h = kvc_f32_to_f16(v); return kvc_f16_to_f32(h);
    case KVC_DTYPE_BF16: h = kvc_f32_to_bf16(v); return kvc_bf16_to_f32(h);
    default: return v;
    }
}

/* Table in dt: rows of several kinds, as test_rope.c's factor test (exact, scaled, random, zero). */
static void *make_table(kvc_dtype_t dt, size_t max_pos, size_t rot)
{
    const size_t half = rot / 2, es = kvc_dtype_size(dt);
    void *tab = malloc(max_pos * rot * es);
    for (size_t p = 0; p < max_pos; p++)
        for (size_t i = 0; i < half; i++) {
            const double theta = pow(10000.0, -(double)(2 * i) / (double)rot);
            double c = cos((double)p * theta), s = sin((double)p * theta), scale = 1.0;
            switch (p % 5) {
            case 1: scale = 1.0 + (double)((int)(rng_next() % 9) - 4) * 0x1p-6; break;
            case 2: c = rng_uniform(-1.5, 1.5), s = rng_uniform(-1.5, 1.5); break;
            case 3:
                if (p == 3) c = s = 0; /* a zero row */
                break;
            case 4: scale = rng_uniform(0.9, 1.1); break;
            default: break;
            }
            kvc_rope_store1((char *)tab + p * rot * es, dt, i, (float)(c * scale));
            kvc_rope_store1((char *)tab + p * rot * es, dt, half + i, (float)(s * scale));
        }
    return tab;
}

/* The rotation as the SIMD tiers compute it (the AVX tiers' rotate_pair_tail), scalar loads/stores. */
static void fma_rotate(void *key, kvc_dtype_t dt, size_t num_heads, size_t head_stride, size_t half, int is_neox,
                       const float *c, const float *s)
{
    const size_t es = kvc_dtype_size(dt);
    for (size_t h = 0; h < num_heads; h++) {
        void *head = (char *)key + h * head_stride * es;
        for (size_t i = 0; i < half; i++) {
            const size_t xi = is_neox ? i : 2 * i, yi = is_neox ? i + half : 2 * i + 1;
            const float x = kvc_rope_load1(head, dt, xi), y = kvc_rope_load1(head, dt, yi);
            kvc_rope_store1(head, dt, xi, fmaf(x, c[i], -(y * s[i])));
            kvc_rope_store1(head, dt, yi, fmaf(y, c[i], x * s[i]));
        }
    }
}

static double ulp_of(double v, kvc_dtype_t dt)
{
    const int mant = dt == KVC_DTYPE_F32 ? 24 : dt == KVC_DTYPE_F16 ? 11 : 8;
    const int emin = dt == KVC_DTYPE_F16 ? -14 : -126;
    int e;
    frexp(v, &e);
    if (e - 1 < emin) e = emin + 1;
    return ldexp(1.0, e - mant);
}

static size_t first_diff(const void *a, const void *b, size_t bytes, size_t es)
{
    for (size_t i = 0; i < bytes; i += es)
        if (memcmp((const char *)a + i, (const char *)b + i, es)) return i / es;
    return (size_t)-1;
}

/* ---------------------------------------------------------------- factors */

static void check_factors(void)
{
    static const size_t halves[] = { 1, 2, 3, 4, 5, 7, 8, 9, 15, 23, 32, 40, 64 };
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F32, KVC_DTYPE_F16, KVC_DTYPE_BF16 };
    for (size_t d = 0; d < 3; d++) {
        size_t compared = 0, bad = 0;
        for (size_t hi = 0; hi < sizeof(halves) / sizeof(halves[0]); hi++) {
            const size_t half = halves[hi], rot = 2 * half, max_pos = 40, es = kvc_dtype_size(dts[d]);
            char *tab = make_table(dts[d], max_pos, rot);
            float c0[64], s0[64], c1[64], s1[64];
            for (size_t po = 0; po < max_pos; po++)
                for (size_t pn = 0; pn < max_pos; pn += 3) {
                    const size_t q = (po + pn) % max_pos; /* includes po == pn when pn == 0, po == 0 */
                    const void *ro = tab + po * rot * es, *rn = tab + (po % 4 == 0 ? po : q) * rot * es;
                    kvc_rope_kernels_scalar.factors(ro, rn, dts[d], half, c0, s0);
                    kvc_rope_kernels_neon.factors(ro, rn, dts[d], half, c1, s1);
                    if (memcmp(c0, c1, half * 4) || memcmp(s0, s1, half * 4)) {
                        if (!bad)
                            fprintf(stderr, "# factors %s half %zu rows %zu -> %zu differ\n", dt_name(dts[d]), half,
                                    po, po % 4 == 0 ? po : q);
                        bad++;
                    }
                    compared += 2 * half;
                }
            free(tab);
        }
        ok(bad == 0, "factors, %s table: %zu values bit-identical to scalar (%zu row pairs differ)", dt_name(dts[d]),
           compared, bad);
    }
}

/* ---------------------------------------------------------------- store */

static float special(size_t i)
{
    static const uint32_t bits[] = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, /* sNaN */
        0x7fa5a5a5u, 0x477fefffu, 0x477ff000u, 0x477fe000u, /* around f16 max 65504 / 65520 */
        0x33000000u, 0x33000001u, 0x337fffffu, 0x38800000u, 0x387fffffu, /* f16 subnormal range */
        0x3f808000u, 0x3f818000u, 0x3f817fffu, 0x3f800fffu, 0x3f801000u, 0x3f803000u, /* bf16/f16 ties */
        0x7f7fffffu, 0x00000001u, 0x807fffffu,
    };
    const size_t n = sizeof(bits) / sizeof(bits[0]);
    float f;
    if (i % 3 == 0) {
        memcpy(&f, &bits[(i / 3) % n], 4);
        return f;
    }
    const uint32_t r = (uint32_t)rng_next();
    memcpy(&f, &r, 4); /* any bit pattern: NaN payloads, every exponent */
    return f;
}

static void check_store(void)
{
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F32, KVC_DTYPE_F16, KVC_DTYPE_BF16 };
    for (size_t d = 0; d < 3; d++) {
        size_t compared = 0, bad = 0;
        const size_t es = kvc_dtype_size(dts[d]);
        for (size_t n = 1; n <= 70; n++)
            for (int rep = 0; rep < 60; rep++) {
                float src[70];
                unsigned char a[70 * 4 + 8], b[70 * 4 + 8];
                for (size_t i = 0; i < n; i++) src[i] = special(i + (size_t)rep * 7);
                memset(a, 0xcd, sizeof(a));
                memset(b, 0xcd, sizeof(b));
                kvc_rope_kernels_scalar.store(a, dts[d], src, n);
                kvc_rope_kernels_neon.store(b, dts[d], src, n);
                const size_t at = first_diff(a, b, sizeof(a), 1);
                if (at != (size_t)-1) {
                    if (!bad) fprintf(stderr, "# store %s n %zu byte %zu differs\n", dt_name(dts[d]), n, at);
                    bad++;
                }
                compared += n;
            }
        (void)es;
        ok(bad == 0, "store to %s: %zu values (specials, NaN payloads, ties, subnormals) bit-identical to scalar",
           dt_name(dts[d]), compared);
    }
}

/* ---------------------------------------------------------------- rotate */

static void check_rotate(void)
{
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F32, KVC_DTYPE_F16, KVC_DTYPE_BF16 };
    static const size_t halves[] = { 1, 3, 4, 5, 8, 15, 20, 32, 40, 64 };
    for (size_t d = 0; d < 3; d++)
        for (int neox = 0; neox <= 1; neox++) {
            size_t compared = 0, bad = 0, vs_scalar_diff = 0, vs_scalar_bad = 0;
            const size_t es = kvc_dtype_size(dts[d]);
            for (size_t hi = 0; hi < sizeof(halves) / sizeof(halves[0]); hi++)
                for (int rep = 0; rep < 20; rep++) {
                    const size_t half = halves[hi], hs = 2 * half + (rep % 3) * 2, heads = 1 + rep % 3;
                    const size_t stride = rep % 2 ? hs : 2 * hs + 3, n = heads * stride;
                    float c[64], s[64];
                    char *a = malloc(n * es), *b = malloc(n * es), *sc = malloc(n * es);
                    for (size_t i = 0; i < half; i++) {
                        const double ang = rng_uniform(-4, 4);
                        c[i] = (float)cos(ang), s[i] = (float)sin(ang);
                        if (rep == 0) c[i] = 1, s[i] = 0;
                    }
                    for (size_t e = 0; e < n; e++) kvc_rope_store1(a, dts[d], e, rand_key(dts[d]));
                    memcpy(b, a, n * es);
                    memcpy(sc, a, n * es);
                    fma_rotate(a, dts[d], heads, stride, half, neox, c, s);
                    kvc_rope_kernels_neon.rotate(b, dts[d], heads, stride, half, neox, c, s);
                    const size_t at = first_diff(a, b, n * es, es);
                    if (at != (size_t)-1) {
                        if (!bad)
                            fprintf(stderr, "# rotate %s %s half %zu element %zu: %.9g (fma model) vs %.9g (neon)\n",
                                    dt_name(dts[d]), neox ? "neox" : "gptj", half, at, kvc_rope_load1(a, dts[d], at),
                                    kvc_rope_load1(b, dts[d], at));
                        bad++;
                    }
                    /* against the scalar tier (no FMA): bounded difference */
                    char *orig = malloc(n * es);
                    memcpy(orig, sc, n * es);
                    kvc_rope_kernels_scalar.rotate(sc, dts[d], heads, stride, half, neox, c, s);
                    for (size_t h = 0; h < heads; h++)
                        for (size_t i = 0; i < half; i++) {
                            const size_t xi = h * stride + (neox ? i : 2 * i), yi = h * stride + (neox ? i + half : 2 * i + 1);
                            const double x = kvc_rope_load1(orig, dts[d], xi), y = kvc_rope_load1(orig, dts[d], yi);
                            const size_t idx[2] = { xi, yi };
                            for (int k = 0; k < 2; k++) {
                                const double g = kvc_rope_load1(b, dts[d], idx[k]), w = kvc_rope_load1(sc, dts[d], idx[k]);
                                if (memcmp(b + idx[k] * es, sc + idx[k] * es, es)) {
                                    vs_scalar_diff++;
                                    const double tol = 0x1p-22 * (fabs(x) + fabs(y)) + ulp_of(fmax(fabs(g), fabs(w)), dts[d]);
                                    if (!(fabs(g - w) <= tol) && !(isinf(g) && isinf(w) && g == w)) vs_scalar_bad++;
                                }
                            }
                        }
                    compared += n;
                    free(a), free(b), free(sc), free(orig);
                }
            ok(bad == 0 && vs_scalar_bad == 0,
               "rotate %s keys %s: %zu elements bit-identical to the FMA-order scalar model; vs the scalar tier "
               "(no FMA) %zu differ, %zu beyond 2^-22(|x|+|y|) + 1 ulp",
               dt_name(dts[d]), neox ? "NeoX" : "GPT-J", compared, vs_scalar_diff, vs_scalar_bad);
        }
}

/* ---------------------------------------------------------------- slots, through the dispatch */

typedef struct keyset {
    kvc_dtype_t dt;
    size_t tokens, heads, hs, head_stride, token_stride, bytes;
} keyset_t;

static size_t fused_bad = 0, fused_cases = 0, fused_elems = 0, delta_bad = 0, delta_cases = 0, scalar_bad = 0;
static size_t identity_bad = 0, identity_cases = 0, neon_ne_scalar = 0;

static void run_case(kvc_dtype_t kd, kvc_dtype_t td, int neox, size_t hs, size_t rot, size_t head_stride,
                     size_t tokens, size_t heads)
{
    struct kvc_backend_ctx neon_ctx = { .svc = &svc, .isa = KVC_ISA_NEON, .num_threads = 1 };
    struct kvc_backend_ctx scal_ctx = { .svc = &svc, .isa = KVC_ISA_SCALAR, .num_threads = 1 };
    const size_t kes = kvc_dtype_size(kd), tes = kvc_dtype_size(td), half = rot / 2, max_pos = 64;
    const size_t token_stride = heads * head_stride + (tokens % 2) * 5;
    const size_t n = tokens * token_stride;
    char *in = malloc(n * kes), *ref = malloc(n * kes), *got = malloc(n * kes), *sref = malloc(n * kes);
    for (size_t e = 0; e < n; e++) kvc_rope_store1(in, kd, e, rand_key(kd));
    int64_t po[32], pn[32];
    for (size_t t = 0; t < tokens; t++) {
        po[t] = (int64_t)(rng_next() % max_pos);
        pn[t] = t % 3 == 1 ? po[t] : (int64_t)(rng_next() % max_pos); /* some old == new */
        if (t == 5) po[t] = 3;                                          /* the zero row */
    }
    char *tab = make_table(td, max_pos, rot);
    float c[64], s[64];
    const kvc_rope_keys_t keys = { .data = got, .dtype = kd, .num_tokens = tokens, .num_heads = heads, .head_size = hs,
                                   .head_stride = head_stride, .token_stride = token_stride };

    /* fused: NEON context vs scalar factors + FMA rotation; scalar context vs scalar kernels */
    memcpy(ref, in, n * kes);
    memcpy(sref, in, n * kes);
    for (size_t t = 0; t < tokens; t++) {
        kvc_rope_kernels_scalar.factors(tab + (size_t)po[t] * rot * tes, tab + (size_t)pn[t] * rot * tes, td, half, c, s);
        fma_rotate(ref + t * token_stride * kes, kd, heads, head_stride, half, neox, c, s);
        kvc_rope_kernels_scalar.rotate(sref + t * token_stride * kes, kd, heads, head_stride, half, neox, c, s);
    }
    memcpy(got, in, n * kes);
    struct kvc_rope_args fa = { .keys = keys, .old_positions = po, .new_positions = pn,
                                .table = { .data = tab, .dtype = td, .max_position = max_pos, .rot_dim = rot },
                                .is_neox = neox };
    if (kvc_cpu_rope_k_fused(&neon_ctx, &fa) != KVC_OK) fused_bad++;
    size_t at = first_diff(ref, got, n * kes, kes);
    if (at != (size_t)-1) {
        if (!fused_bad)
            fprintf(stderr, "# fused %s keys %s table %s hs %zu rot %zu stride %zu tokens %zu: element %zu %.9g vs %.9g\n",
                    dt_name(kd), dt_name(td), neox ? "neox" : "gptj", hs, rot, head_stride, tokens, at,
                    kvc_rope_load1(ref, kd, at), kvc_rope_load1(got, kd, at));
        fused_bad++;
    }
    for (size_t e = 0; e < n; e++) neon_ne_scalar += memcmp(got + e * kes, sref + e * kes, kes) != 0;
    memcpy(got, in, n * kes);
    if (kvc_cpu_rope_k_fused(&scal_ctx, &fa) != KVC_OK || first_diff(sref, got, n * kes, kes) != (size_t)-1) scalar_bad++;
    fused_cases++;
    fused_elems += n;

    /* identity: old == new everywhere (any row but the zero one, which zeroes the keys) */
    int64_t same[32];
    for (size_t t = 0; t < tokens; t++) same[t] = pn[t] == 3 ? 4 : pn[t];
    memcpy(got, in, n * kes);
    fa.old_positions = fa.new_positions = same;
    if (kvc_cpu_rope_k_fused(&neon_ctx, &fa) != KVC_OK || first_diff(in, got, n * kes, kes) != (size_t)-1) {
        if (!identity_bad)
            fprintf(stderr, "# identity %s keys %s table %s hs %zu rot %zu: changed\n", dt_name(kd), dt_name(td),
                    neox ? "neox" : "gptj", hs, rot);
        identity_bad++;
    }
    identity_cases++;

    /* delta (keys only; the table dtype does not enter): NEON context vs scalar sincos + FMA rotation */
    if (td == KVC_DTYPE_F32) {
        double theta[64];
        for (size_t i = 0; i < half; i++) theta[i] = pow(10000.0, -(double)(2 * i) / (double)rot);
        memcpy(ref, in, n * kes);
        for (size_t t = 0; t < tokens; t++) {
            kvc_rope_kernels_scalar.sincos((double)(pn[t] - po[t]), theta, half, c, s);
            fma_rotate(ref + t * token_stride * kes, kd, heads, head_stride, half, neox, c, s);
        }
        memcpy(got, in, n * kes);
        const struct kvc_rope_delta_args da = { .keys = keys, .old_positions = po, .new_positions = pn, .rot_dim = rot,
                                                .base = 10000.0, .is_neox = neox };
        if (kvc_cpu_rope_k_delta(&neon_ctx, &da) != KVC_OK || first_diff(ref, got, n * kes, kes) != (size_t)-1) {
            if (!delta_bad)
                fprintf(stderr, "# delta %s keys %s hs %zu rot %zu: differs\n", dt_name(kd), neox ? "neox" : "gptj", hs, rot);
            delta_bad++;
        }
        delta_cases++;
    }
    free(in), free(ref), free(got), free(sref), free(tab);
}

static void check_slots(void)
{
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F32, KVC_DTYPE_F16, KVC_DTYPE_BF16 };
    static const size_t hss[] = { 64, 80, 128 }, token_counts[] = { 1, 3, 17 };
    for (size_t kd = 0; kd < 3; kd++)
        for (size_t td = 0; td < 3; td++) {
            if (td != 0 && td != kd) continue; /* the table is fp32 or the key dtype */
            for (int neox = 0; neox <= 1; neox++)
                for (size_t h = 0; h < 3; h++) {
                    const size_t hs = hss[h], rots[] = { hs, hs / 2, 30, 2 };
                    for (size_t r = 0; r < 4; r++)
                        for (int wide = 0; wide <= 1; wide++)
                            for (size_t t = 0; t < 3; t++)
                                run_case(dts[kd], dts[td], neox, hs, rots[r], wide ? 2 * hs + 3 : hs, token_counts[t],
                                         1 + (t + r) % 3);
                }
        }
    ok(fused_bad == 0, "fused via dispatch (NEON tier): %zu cases, %zu elements bit-identical to scalar factors + "
                       "FMA rotation (incl. untouched tails/gaps)", fused_cases, fused_elems);
    ok(scalar_bad == 0, "fused via dispatch (scalar tier): %zu cases bit-identical to the scalar kernels", fused_cases);
    ok(identity_bad == 0, "identity (old == new): %zu cases bit-identical on the NEON tier", identity_cases);
    ok(delta_bad == 0, "delta via dispatch (NEON tier): %zu cases bit-identical to scalar sincos + FMA rotation",
       delta_cases);
    printf("# NEON vs scalar tier (no FMA) end to end: %zu of %zu elements differ (last-bit FMA differences, bounded "
           "in the rotate checks)\n",
           neon_ne_scalar, fused_elems);
}

int main(void)
{
    svc.set_error = fake_set_error;
    printf("TAP version 13\n");
    check_factors();
    check_store();
    check_rotate();
    check_slots();
    printf("1..%d\n", test_no);
    printf("# %s: %d of %d checks failed\n", failures ? "FAIL" : "PASS", failures, test_no);
    return failures ? 1 : 0;
}
