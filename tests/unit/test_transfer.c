/* SPDX-License-Identifier: BSD-3-Clause */
/* KV transfers: every format x direction x element size against the scalar oracle (tests/ref),
 * round trips, real K/V from a real model, and every validation error with proof that nothing was
 * written. Each randomized case prints its parameters on failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <kvcore.h>

#include "npy_load.h"
#include "ref/transfer_ref.h"
#include "test_util.h"

/* ------------------------------------------------------------------ helpers */

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t rnd(rng_t *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1DULL;
}

static int64_t rnd_in(rng_t *r, int64_t lo, int64_t hi) { return lo + (int64_t)(rnd(r) % (uint64_t)(hi - lo + 1)); }

static void fill(rng_t *r, void *p, size_t n)
{
    uint8_t *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint64_t v = rnd(r);
        memcpy(b + i, &v, 8);
    }
    for (; i < n; i++) b[i] = (uint8_t)(rnd(r) >> 56);
}

/* A buffer in two copies: one for the library, one for the oracle. */
typedef struct {
    uint8_t *fast, *ref;
    size_t n;
} pair_t;

static pair_t pair_new(rng_t *r, size_t n)
{
    /* 64-byte aligned like real pools, so the streaming-store path of large transfers is reachable */
    const size_t cap = (n + 63) / 64 * 64 + 64;
    pair_t p = { aligned_alloc(64, cap), aligned_alloc(64, cap), n };
    cr_assert(p.fast && p.ref);
    fill(r, p.fast, n);
    memcpy(p.ref, p.fast, n);
    return p;
}

static void pair_free(pair_t *p)
{
    free(p->fast);
    free(p->ref);
}

static void pair_expect_equal(const pair_t *p, const char *what, const char *desc)
{
    if (!memcmp(p->fast, p->ref, p->n)) return;
    size_t i = 0;
    while (p->fast[i] == p->ref[i]) i++;
    cr_assert_fail("%s differs from the oracle at byte %zu of %zu (got %02x, want %02x); %s", what, i, p->n,
                   p->fast[i], p->ref[i], desc);
}

/* The engine tensors of one format: kvc_format_ptr_count pairs. */
typedef struct {
    int64_t n;
    pair_t t[64];
    void *fast[64], *ref[64];
} engine_t;

static void engine_new(engine_t *e, rng_t *r, int fmt, const kvc_page_shape_t *s)
{
    e->n = kvc_shape_ptr_count(fmt, s);
    cr_assert(e->n > 0 && e->n <= 64);
    for (int64_t i = 0; i < e->n; i++) {
        e->t[i] = pair_new(r, ref_engine_ptr_bytes(fmt, s, i));
        e->fast[i] = e->t[i].fast;
        e->ref[i] = e->t[i].ref;
    }
}

static void engine_free(engine_t *e)
{
    for (int64_t i = 0; i < e->n; i++) pair_free(&e->t[i]);
}

static void engine_expect_equal(const engine_t *e, const char *desc)
{
    for (int64_t i = 0; i < e->n; i++) {
        char what[48];
        snprintf(what, sizeof(what), "engine tensor %lld", (long long)i);
        pair_expect_equal(&e->t[i], what, desc);
    }
}

static const int element_sizes[] = { 1, 2, 4, 8 };

static int is_fused(int f) { return f >= 10 && f <= 13; }

/* Format 14 moves 4-byte units: element size 8 is refused (tested among the errors). */
static int es_applies(int fmt, int es) { return !(fmt == KVC_FMT_NL_X_NB_BSV_BSS && es == 8); }

/* Make a shape valid for the formats whose rows are pieces. 14: a row of 4-byte units, >= 8 bytes.
 * 17: the row split into planes (r NULL: 3 planes, or as many as the row has bytes), each width
 * random, not always a whole number of elements. */
static void adapt_shape(rng_t *r, int fmt, kvc_page_shape_t *s)
{
    int64_t R = s->hs * s->element_size;
    if (fmt == KVC_FMT_NL_X_NB_BSV_BSS) {
        R = R < 8 ? 8 : (R + 3) / 4 * 4;
        s->hs = R / s->element_size;
    }
    if (fmt != KVC_FMT_NL_X_NP_X_NB_BS_ONE_HS) return;
    s->block_stride_elems = 0;
    int np = r ? (int)rnd_in(r, 1, KVC_MAX_PLANES) : 3;
    if (np > R) np = (int)R;
    s->num_planes = np;
    int64_t left = R;
    for (int p = 0; p < np - 1; p++) {
        s->plane_bytes[p] = r ? rnd_in(r, 1, left - (np - 1 - p)) : left / 2;
        left -= s->plane_bytes[p];
    }
    s->plane_bytes[np - 1] = left;
}

static int random_layout(rng_t *r, int fmt)
{
    if (is_fused(fmt)) return (int)rnd_in(r, 0, 2);
    if (kvc_format_is_mla(fmt)) return KVC_CHUNK_DEFAULT;
    /* SPLIT is the default layout spelled out; INTERLEAVED puts each layer's planes together */
    const int k = (int)(rnd(r) % 6);
    return k < 3 ? KVC_CHUNK_DEFAULT : k == 3 ? KVC_CHUNK_SPLIT_KV : KVC_CHUNK_INTERLEAVED_KV;
}

/* Random geometry: nh 1-256, head sizes 8-576 (odd ones too), block sizes 1-128, padded blocks for
 * the formats that accept them. Rows stay <= 4096 elements and one block of one plane <= 16384. */
static kvc_page_shape_t random_shape(rng_t *r, int fmt, int layout, int es, int64_t max_nl)
{
    kvc_page_shape_t s = { .element_size = es, .nl = rnd_in(r, 1, max_nl) };
    switch (rnd_in(r, 0, 5)) {
    case 0: s.hs = 8; break;
    case 1: s.hs = 576; break;
    case 2: s.hs = 2 * rnd_in(r, 4, 287) + 1; break;
    case 3: s.hs = 128; break;
    default: s.hs = rnd_in(r, 8, 576); break;
    }
    switch (rnd_in(r, 0, 3)) {
    case 0: s.nh = 1; break;
    case 1: s.nh = 256; break;
    case 2: s.nh = rnd_in(r, 2, 16); break;
    default: s.nh = rnd_in(r, 1, 64); break;
    }
    if (kvc_format_is_mla(fmt)) s.nh = 1;
    if (is_fused(fmt) && layout == KVC_CHUNK_SPLIT_KV && s.hs % 2) s.hs++;
    if (s.nh * s.hs > 4096) s.nh = 4096 / s.hs > 0 ? 4096 / s.hs : 1;
    switch (rnd_in(r, 0, 4)) {
    case 0: s.bs = 1; break;
    case 1: s.bs = 128; break;
    case 2: s.bs = 16; break;
    case 3: s.bs = rnd_in(r, 2, 8); break;
    default: s.bs = rnd_in(r, 1, 128); break;
    }
    if (s.bs * s.nh * s.hs > 16384) s.bs = 16384 / (s.nh * s.hs) > 0 ? 16384 / (s.nh * s.hs) : 1;
    s.kv_size = kvc_format_is_mla(fmt) || is_fused(fmt) ? 1 : 2;
    adapt_shape(r, fmt, &s);
    if ((fmt == 3 || fmt == 14 || is_fused(fmt)) && rnd(r) % 2)
        s.block_stride_elems = s.bs * s.nh * s.hs + rnd_in(r, 1, 40);
    return s;
}

/* n distinct indices in [0, pool) in random order (n <= pool). */
static int64_t *distinct_indices(rng_t *r, int64_t n, int64_t pool)
{
    int64_t *perm = malloc((size_t)(pool ? pool : 1) * sizeof(int64_t));
    for (int64_t i = 0; i < pool; i++) perm[i] = i;
    for (int64_t i = 0; i < n; i++) {
        const int64_t j = rnd_in(r, i, pool - 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    return perm;
}

/* The slots 0..pool-1 cut into runs of 1..8 consecutive slots, the runs shuffled: what vLLM's
 * slot mapping looks like (consecutive slots in scattered blocks), with runs that start and end
 * anywhere in a block. */
static int64_t *shuffled_runs(rng_t *r, int64_t pool)
{
    int64_t *start = malloc((size_t)(pool ? pool : 1) * sizeof(int64_t)), n = 0;
    int64_t *out = malloc((size_t)(pool ? pool : 1) * sizeof(int64_t)), k = 0;
    for (int64_t s = 0; s < pool; s += rnd_in(r, 1, 8)) start[n++] = s;
    int64_t *order = distinct_indices(r, n, n);
    for (int64_t i = 0; i < n; i++) {
        const int64_t a = start[order[i]], b = order[i] + 1 < n ? start[order[i] + 1] : pool;
        for (int64_t s = a; s < b; s++) out[k++] = s;
    }
    free(order);
    free(start);
    return out;
}

/* Slots for T tokens over a pool of `pool` slots. Modes: 0 random distinct with some negatives,
 * 1 consecutive (runs that merge), 2 all negative, 3 shuffled runs of consecutive slots with some
 * negatives between and inside them. Distinct non-negative slots keep H2D deterministic; tokens
 * beyond the pool get negative slots. */
static int64_t *random_slots(rng_t *r, int64_t T, int64_t pool, int mode)
{
    int64_t *slots = malloc((size_t)(T ? T : 1) * sizeof(int64_t));
    int64_t *perm = mode == 3 ? shuffled_runs(r, pool) : distinct_indices(r, T < pool ? T : pool, pool);
    const int64_t base = rnd_in(r, 0, pool - 1);
    for (int64_t t = 0; t < T; t++) {
        if (mode == 2 || t >= pool) slots[t] = -rnd_in(r, 1, 1000);
        else if (mode == 1) slots[t] = (base + t) % pool;
        else if (mode == 3) slots[t] = rnd(r) % 9 ? perm[t] : -1;
        else slots[t] = rnd(r) % 6 ? perm[t] : -1;
    }
    free(perm);
    return slots;
}

static void describe_shape(char *buf, size_t len, const char *op, int fmt, int dir, int layout,
                           const kvc_page_shape_t *s)
{
    snprintf(buf, len, "%s fmt %d (%s) dir %s layout %d es %d nl %lld nb %lld bs %lld nh %lld hs %lld stride %lld", op,
             fmt, kvc_format_name(fmt), dir == KVC_H2D ? "H2D" : "D2H", layout, (int)s->element_size,
             (long long)s->nl, (long long)s->nb, (long long)s->bs, (long long)s->nh, (long long)s->hs,
             (long long)s->block_stride_elems);
}

static size_t row_bytes(int fmt, const kvc_page_shape_t *s, int layout)
{
    return (size_t)(s->nh * ref_chunk_head_elems(fmt, s, layout) * s->element_size);
}

static kvc_context_t *ctx_threads(int n)
{
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS,
                               .backend = "cpu",
                               .num_threads = n };
    kvc_context_t *ctx = NULL;
    cr_assert_eq(kvc_context_create(&p, &ctx), KVC_OK, "%s", kvc_last_error());
    return ctx;
}

/* ------------------------------------------------------------------ enum and predicates */

Test(transfer, format_values_and_predicates)
{
    cr_assert_eq(KVC_FMT_NB_NL_TWO_BS_NH_HS, 0);
    cr_assert_eq(KVC_FMT_NL_X_NB_BS_HS, 3);
    cr_assert_eq(KVC_FMT_TWO_X_NL_X_NB_BS_NH_HS, 9);
    cr_assert_eq(KVC_FMT_NL_X_NB_NH_BS_TWO_HS, 10);
    cr_assert_eq(KVC_FMT_NL_X_NB_BS_NH_CS, 13);
    cr_assert_eq(KVC_H2D, 0);
    cr_assert_eq(KVC_D2H, 1);
    /* LMCache's format_facts for 0-17 (docs/LMCACHE.md, docs/TRANSFER.md). */
    const char *cross = "100000001000000000", *kvlist = "000010000100000000", *layers = "011101110011111111",
               *mla = "000101000000001001", *hnd = "000000111010100100", *fused = "000000000011110000",
               *two = "010000100000000100", *tuple = "000000000000000011";
    for (int f = 0; f < KVC_FORMAT_COUNT; f++) {
        cr_assert(kvc_format_is_valid(f));
        cr_assert_eq(kvc_format_is_cross_layer(f), cross[f] - '0', "cross_layer(%d)", f);
        cr_assert_eq(kvc_format_is_kv_list(f), kvlist[f] - '0', "kv_list(%d)", f);
        cr_assert_eq(kvc_format_is_layer_list(f), layers[f] - '0', "layer_list(%d)", f);
        cr_assert_eq(kvc_format_is_mla(f), mla[f] - '0', "mla(%d)", f);
        cr_assert_eq(kvc_format_is_hnd(f), hnd[f] - '0', "hnd(%d)", f);
        cr_assert_eq(kvc_format_is_fused_packed(f), fused[f] - '0', "fused(%d)", f);
        cr_assert_eq(kvc_format_is_two_major(f), two[f] - '0', "two_major(%d)", f);
        cr_assert_eq(kvc_format_is_kv_second_tuple(f), tuple[f] - '0', "kv_second_tuple(%d)", f);
        cr_assert_eq(kvc_format_is_cross_layer(f) + kvc_format_is_kv_list(f) + kvc_format_is_layer_list(f), 1);
        cr_assert_str_neq(kvc_format_name(f), "unknown");
    }
    cr_assert_eq(KVC_FORMAT_COUNT, 18);
    cr_assert_eq(KVC_FMT_NL_X_NB_BSV_BSS, 14);
    cr_assert_eq(KVC_FMT_NL_X_TWO_NB_NH_ONE_BS_HS, 15);
    cr_assert_eq(KVC_FMT_NL_X_TWO_X_NB_BS_NH_HS, 16);
    cr_assert_eq(KVC_FMT_NL_X_NP_X_NB_BS_ONE_HS, 17);
    cr_assert_eq(KVC_FMT_NL_X_TWO_X_NB_BS_HS, 17);
    cr_assert_str_eq(kvc_format_name(14), "NL_X_NB_BSV_BSS");
    cr_assert_str_eq(kvc_format_name(15), "NL_X_TWO_NB_NH_ONE_BS_HS");
    cr_assert_str_eq(kvc_format_name(16), "NL_X_TWO_X_NB_BS_NH_HS");
    cr_assert_str_eq(kvc_format_name(17), "NL_X_NP_X_NB_BS_ONE_HS");
    cr_assert_eq(kvc_format_ptr_count(14, 32), 32);
    cr_assert_eq(kvc_format_ptr_count(15, 32), 32);
    cr_assert_eq(kvc_format_ptr_count(16, 32), 64);
    cr_assert_eq(kvc_format_ptr_count(17, 32), -1); /* depends on the plane count */
    kvc_page_shape_t s17 = { .nl = 32, .num_planes = 3 };
    cr_assert_eq(kvc_shape_ptr_count(17, &s17), 96);
    s17.num_planes = 0;
    cr_assert_eq(kvc_shape_ptr_count(17, &s17), -1);
    s17.num_planes = KVC_MAX_PLANES + 1;
    cr_assert_eq(kvc_shape_ptr_count(17, &s17), -1);
    cr_assert_eq(kvc_shape_ptr_count(16, &s17), 64);
    cr_assert_eq(kvc_shape_ptr_count(99, &s17), -1);
    cr_assert_eq(kvc_shape_ptr_count(1, NULL), -1);
    cr_assert_eq(kvc_format_is_pbs_fused(5), 1);
    cr_assert_str_eq(kvc_format_name(1), "NL_X_TWO_NB_BS_NH_HS");
    cr_assert_str_eq(kvc_format_name(8), "NB_NL_TWO_NH_BS_HS");
    for (int f = -2; f < 20; f += (f == -1 ? KVC_FORMAT_COUNT + 1 : 1)) {
        if (f >= 0 && f < KVC_FORMAT_COUNT) continue;
        cr_assert_not(kvc_format_is_valid(f) || kvc_format_is_cross_layer(f) || kvc_format_is_kv_list(f) ||
                      kvc_format_is_layer_list(f) || kvc_format_is_mla(f) || kvc_format_is_hnd(f) ||
                      kvc_format_is_kv_second_tuple(f));
        cr_assert_str_eq(kvc_format_name(f), "unknown");
        cr_assert_eq(kvc_format_ptr_count(f, 4), -1);
    }
    cr_assert_eq(kvc_format_ptr_count(0, 32), 1);
    cr_assert_eq(kvc_format_ptr_count(1, 32), 32);
    cr_assert_eq(kvc_format_ptr_count(4, 32), 64);
    cr_assert_eq(kvc_format_ptr_count(1, 0), -1);
}

/* Hand-computed positions (docs/LMCACHE.md tables) for a small LMCache-like case, so the oracle
 * itself is checked against literal numbers: NL 2, NB 2, BS 5, NH 2, HS 8, fp32. */
Test(transfer, hand_computed_positions)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    const kvc_page_shape_t s = { .kv_size = 2, .element_size = 4, .nl = 2, .nb = 2, .bs = 5, .nh = 2, .hs = 8 };
    const int64_t D = 16, PBS = 10, T = 4, slots[4] = { 0, 2, 5, 9 };
    float chunk[2 * 2 * 4 * 16];
    for (int i = 0; i < 2 * 2 * 4 * 16; i++) chunk[i] = (float)i + 0.5f;
    /* For each format: where element (kv, l, t, d) of the chunk must land, in floats of ptrs[?]. */
    for (int fmt = 0; fmt <= 9; fmt++) {
        if (kvc_format_is_mla(fmt)) continue;
        float *buf[4];
        const int64_t nptr = kvc_format_ptr_count(fmt, 2), tensor = (int64_t)ref_engine_tensor_bytes(fmt, &s) / 4;
        for (int i = 0; i < nptr; i++) buf[i] = calloc((size_t)tensor, 4);
        kvc_token_transfer_t a = { .format = fmt, .direction = KVC_H2D, .shape = s, .engine_ptrs = (void *const *)buf,
                                   .num_engine_ptrs = nptr, .chunk = chunk, .num_tokens = T, .slots = slots,
                                   .slot_type = KVC_INDEX_INT64, .num_slots = T };
        cr_assert_eq(kvc_transfer_tokens(ctx, &a), KVC_OK, "fmt %d: %s", fmt, kvc_last_error());
        for (int kv = 0; kv < 2; kv++)
            for (int l = 0; l < 2; l++)
                for (int t = 0; t < T; t++)
                    for (int d = 0; d < D; d++) {
                        const int64_t sl = slots[t], b = sl / 5, o = sl % 5, h = d / 8, e = d % 8;
                        int64_t ptr = l, off;
                        switch (fmt) {
                        case 0: ptr = 0; off = ((b * 2 + l) * 2 + kv) * 5 * D + o * D + d; break;
                        case 1: off = kv * PBS * D + sl * D + d; break;
                        case 2: off = b * 2 * 5 * D + kv * 5 * D + o * D + d; break;
                        case 4: case 9: ptr = kv * 2 + l; off = sl * D + d; break;
                        case 6: off = kv * PBS * D + b * 2 * 5 * 8 + h * 5 * 8 + o * 8 + e; break;
                        case 7: off = b * 2 * 2 * 5 * 8 + kv * 2 * 5 * 8 + h * 5 * 8 + o * 8 + e; break;
                        default: ptr = 0; off = ((b * 2 + l) * 2 + kv) * 2 * 5 * 8 + h * 5 * 8 + o * 8 + e; break; /* 8 */
                        }
                        const float want = chunk[((kv * 2 + l) * T + t) * D + d];
                        cr_assert_eq(buf[ptr][off], want, "fmt %d kv %d l %d t %d d %d", fmt, kv, l, t, d);
                        cr_assert_eq((void *)ref_engine_elem(fmt, &s, 0, (void *const *)buf, l, kv, b, o, h, e),
                                     (void *)&buf[ptr][off], "oracle position fmt %d", fmt);
                    }
        for (int i = 0; i < nptr; i++) free(buf[i]);
    }
    kvc_context_destroy(ctx);
}

/* Formats 14, 16 and 17 by literal positions (LMCache's test_blocked layout for 14, its data_ptrs
 * order for 16 and 17), uint8, NL 2, NB 3, BS 4: the oracle and the library must both agree. */
Test(transfer, hand_computed_positions_14_16_17)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    const int64_t T = 3, slots[3] = { 5, 0, 11 }, R = 12;
    uint8_t chunk[2 * 2 * 3 * 12], eng[4][3 * 4 * 2 * 12];
    for (size_t i = 0; i < sizeof(chunk); i++) chunk[i] = (uint8_t)(i + 1);
    for (int fmt = 14; fmt <= 17; fmt += (fmt == 14 ? 2 : 1)) {
        kvc_page_shape_t s = { .kv_size = 1, .element_size = 1, .nl = 2, .nb = 3, .bs = 4, .nh = 1, .hs = R };
        if (fmt == 16) s = (kvc_page_shape_t){ .kv_size = 2, .element_size = 1, .nl = 2, .nb = 3, .bs = 4, .nh = 2, .hs = 6 };
        if (fmt == 17) s.num_planes = 2, s.plane_bytes[0] = 5, s.plane_bytes[1] = 7;
        memset(eng, 0, sizeof(eng));
        void *ptrs[4] = { eng[0], eng[1], eng[2], eng[3] };
        const int64_t P = fmt == 16 ? 2 : 1;
        kvc_token_transfer_t a = { .format = fmt, .direction = KVC_H2D, .shape = s, .engine_ptrs = ptrs,
                                   .num_engine_ptrs = kvc_shape_ptr_count(fmt, &s), .chunk = chunk, .num_tokens = T,
                                   .slots = slots, .slot_type = KVC_INDEX_INT64, .num_slots = T };
        cr_assert_eq(kvc_transfer_tokens(ctx, &a), KVC_OK, "fmt %d: %s", fmt, kvc_last_error());
        for (int64_t p = 0; p < P; p++)
            for (int64_t l = 0; l < 2; l++)
                for (int64_t t = 0; t < T; t++)
                    for (int64_t k = 0; k < R; k++) {
                        const int64_t sl = slots[t], b = sl / 4, o = sl % 4;
                        int64_t ptr = l, off;
                        if (fmt == 14) off = k < 8 ? b * 48 + o * 8 + k : b * 48 + 32 + o * 4 + (k - 8);
                        else if (fmt == 16) ptr = 2 * l + p, off = sl * 12 + k;
                        else if (k < 5) ptr = 2 * l, off = sl * 5 + k;
                        else ptr = 2 * l + 1, off = sl * 7 + (k - 5);
                        const uint8_t want = chunk[((p * 2 + l) * T + t) * R + k];
                        cr_assert_eq(eng[ptr][off], want, "fmt %d p %lld l %lld t %lld byte %lld", fmt, (long long)p,
                                     (long long)l, (long long)t, (long long)k);
                        if (fmt != 16)
                            cr_assert_eq((void *)ref_engine_byte(fmt, &s, ptrs, l, b, o, k), (void *)&eng[ptr][off],
                                         "oracle position fmt %d", fmt);
                    }
    }
    kvc_context_destroy(ctx);
}

/* ------------------------------------------------------------------ randomized sweeps vs the oracle */

static void token_case(kvc_context_t *ctx, rng_t *r, int fmt, int dir, int es, int rep)
{
    const int layout = random_layout(r, fmt);
    kvc_page_shape_t s = random_shape(r, fmt, layout, es, 3);
    s.nb = rnd_in(r, 1, 6);
    int64_t T = rnd_in(r, 2, 40), skip = 0;
    int mode = rep % 3;
    if (rep == 2) T = rnd_in(r, 0, 1); /* empty list or a single token */
    if (rep == 3) {
        skip = rnd_in(r, 0, T);
        mode = 0;
    }
    if (rep == 4) mode = 2;
    if (rep == 5) mode = 3;
    int64_t *slots = random_slots(r, T, s.nb * s.bs, mode);
    engine_t e;
    engine_new(&e, r, fmt, &s);
    const size_t cb = (size_t)(ref_chunk_planes(fmt, layout) * s.nl * T) * row_bytes(fmt, &s, layout);
    pair_t chunk = pair_new(r, cb);
    char desc[320];
    describe_shape(desc, sizeof(desc), "tokens", fmt, dir, layout, &s);
    snprintf(desc + strlen(desc), sizeof(desc) - strlen(desc), " T %lld skip %lld mode %d", (long long)T,
             (long long)skip, mode);
    kvc_token_transfer_t a = { .format = fmt, .direction = dir, .shape = s, .engine_ptrs = e.fast,
                               .num_engine_ptrs = e.n, .chunk = chunk.fast, .chunk_layout = layout, .num_tokens = T,
                               .slots = slots, .slot_type = KVC_INDEX_INT64, .num_slots = T,
                               .skip_prefix_tokens = skip };
    cr_assert_eq(kvc_transfer_tokens(ctx, &a), KVC_OK, "%s: %s", desc, kvc_last_error());
    a.engine_ptrs = e.ref;
    a.chunk = chunk.ref;
    ref_transfer_tokens(&a);
    engine_expect_equal(&e, desc);
    pair_expect_equal(&chunk, "chunk", desc);
    engine_free(&e);
    pair_free(&chunk);
    free(slots);
}

Test(transfer, tokens_every_format_direction_element_size)
{
    kvc_context_t *ctx1 = ctx_threads(1), *ctx3 = ctx_threads(3);
    rng_t r = { 0x9E3779B97F4A7C15ULL };
    for (int fmt = 0; fmt < KVC_FORMAT_COUNT; fmt++)
        for (int dir = 0; dir < 2; dir++)
            for (int k = 0; k < 4; k++)
                for (int rep = 0; rep < 6 && es_applies(fmt, element_sizes[k]); rep++)
                    token_case(rep % 2 ? ctx3 : ctx1, &r, fmt, dir, element_sizes[k], rep);
    kvc_context_destroy(ctx1);
    kvc_context_destroy(ctx3);
}

static void block_case(kvc_context_t *ctx, rng_t *r, int fmt, int dir, int es, int rep)
{
    const int layout = random_layout(r, fmt);
    kvc_page_shape_t s = random_shape(r, fmt, layout, es, 2);
    const int64_t bpo = rnd_in(r, 1, 4);
    int64_t n = rep == 2 ? 0 : rnd_in(r, 1, 3 * bpo); /* rep 2: no blocks at all */
    if (rep == 3) n = 3 * bpo;                          /* full objects */
    s.nb = n + rnd_in(r, 0, 3);
    if (s.nb < 1) s.nb = 1;
    const int64_t skip = rep == 1 ? rnd_in(r, 0, n) : 0, C = bpo * s.bs, nobj = (n + bpo - 1) / bpo;
    int64_t *ids = distinct_indices(r, n, s.nb);
    engine_t e;
    engine_new(&e, r, fmt, &s);
    const size_t ob = (size_t)(ref_chunk_planes(fmt, layout) * s.nl * C) * row_bytes(fmt, &s, layout);
    pair_t obj[12];
    void *of[12], *orf[12];
    for (int64_t o = 0; o < nobj; o++) {
        obj[o] = pair_new(r, ob);
        of[o] = obj[o].fast;
        orf[o] = obj[o].ref;
    }
    char desc[320];
    describe_shape(desc, sizeof(desc), "blocks", fmt, dir, layout, &s);
    snprintf(desc + strlen(desc), sizeof(desc) - strlen(desc), " C %lld n %lld skip %lld objects %lld", (long long)C,
             (long long)n, (long long)skip, (long long)nobj);
    kvc_block_transfer_t a = { .format = fmt, .direction = dir, .shape = s, .engine_ptrs = e.fast,
                               .num_engine_ptrs = e.n, .objects = of, .num_objects = nobj, .chunk_layout = layout,
                               .chunk_tokens = C, .block_ids = ids, .block_id_type = KVC_INDEX_INT64,
                               .num_block_ids = n, .skip_prefix_blocks = skip };
    cr_assert_eq(kvc_transfer_blocks(ctx, &a), KVC_OK, "%s: %s", desc, kvc_last_error());
    a.engine_ptrs = e.ref;
    a.objects = orf;
    ref_transfer_blocks(&a);
    engine_expect_equal(&e, desc);
    for (int64_t o = 0; o < nobj; o++) {
        pair_expect_equal(&obj[o], "object", desc);
        pair_free(&obj[o]);
    }
    engine_free(&e);
    free(ids);
}

Test(transfer, blocks_every_format_direction_element_size)
{
    kvc_context_t *ctx1 = ctx_threads(1), *ctx3 = ctx_threads(3);
    rng_t r = { 0xD1B54A32D192ED03ULL };
    for (int fmt = 0; fmt < KVC_FORMAT_COUNT; fmt++)
        for (int dir = 0; dir < 2; dir++)
            for (int k = 0; k < 4; k++)
                for (int rep = 0; rep < 4 && es_applies(fmt, element_sizes[k]); rep++)
                    block_case(rep % 2 ? ctx3 : ctx1, &r, fmt, dir, element_sizes[k], rep);
    kvc_context_destroy(ctx1);
    kvc_context_destroy(ctx3);
}

static void layer_case(kvc_context_t *ctx, rng_t *r, int fmt, int dir, int es, int rep)
{
    const int layout = random_layout(r, fmt);
    kvc_page_shape_t s = random_shape(r, fmt, layout, es, 1);
    s.nb = rnd_in(r, 1, 6);
    const int64_t T = rep == 2 ? rnd_in(r, 0, 1) : rnd_in(r, 2, 48);
    int64_t *slots = random_slots(r, T, s.nb * s.bs, rep % 3);
    engine_t e;
    engine_new(&e, r, fmt, &s);
    pair_t chunk = pair_new(r, (size_t)(ref_chunk_planes(fmt, layout) * T) * row_bytes(fmt, &s, layout));
    char desc[320];
    const int token_major = rep % 2;
    describe_shape(desc, sizeof(desc), "layer", fmt, dir, layout, &s);
    snprintf(desc + strlen(desc), sizeof(desc) - strlen(desc), " T %lld token_major %d", (long long)T, token_major);
    kvc_layer_transfer_t a = { .format = fmt, .direction = dir, .shape = s, .engine_ptrs = e.fast,
                               .num_engine_ptrs = e.n, .chunk = chunk.fast, .chunk_layout = layout,
                               .token_major = token_major, .num_tokens = T, .slots = slots,
                               .slot_type = KVC_INDEX_INT64, .num_slots = T };
    cr_assert_eq(kvc_transfer_layer(ctx, &a), KVC_OK, "%s: %s", desc, kvc_last_error());
    a.engine_ptrs = e.ref;
    a.chunk = chunk.ref;
    ref_transfer_layer(&a);
    engine_expect_equal(&e, desc);
    pair_expect_equal(&chunk, "chunk", desc);
    engine_free(&e);
    pair_free(&chunk);
    free(slots);
}

Test(transfer, single_layer_every_format_direction_element_size)
{
    kvc_context_t *ctx1 = ctx_threads(1), *ctx3 = ctx_threads(3);
    rng_t r = { 0x94D049BB133111EBULL };
    for (int fmt = 0; fmt < KVC_FORMAT_COUNT; fmt++) {
        if (kvc_format_is_cross_layer(fmt)) continue;
        for (int dir = 0; dir < 2; dir++)
            for (int k = 0; k < 4; k++)
                for (int rep = 0; rep < 4 && es_applies(fmt, element_sizes[k]); rep++)
                    layer_case(rep % 2 ? ctx3 : ctx1, &r, fmt, dir, element_sizes[k], rep);
    }
    kvc_context_destroy(ctx1);
    kvc_context_destroy(ctx3);
}

Test(transfer, flash_pair_skips_negative_slots)
{
    kvc_context_t *ctx = ctx_threads(2);
    rng_t r = { 0xBF58476D1CE4E5B9ULL };
    for (int k = 0; k < 4; k++)
        for (int rep = 0; rep < 6; rep++) {
            kvc_page_shape_t s = random_shape(&r, 9, 0, element_sizes[k], 4);
            s.nb = rnd_in(&r, 1, 6);
            const int64_t T = rep == 2 ? 0 : rnd_in(&r, 1, 40);
            int64_t *slots = random_slots(&r, T, s.nb * s.bs, rep % 3);
            if (T && rep != 2) slots[T - 1] = -1; /* the fallback wrote this one into the last block */
            pair_t kc = pair_new(&r, ref_engine_tensor_bytes(9, &s)), vc = pair_new(&r, ref_engine_tensor_bytes(9, &s));
            pair_t kv = pair_new(&r, (size_t)(2 * s.nl * T) * row_bytes(9, &s, 0));
            kvc_flash_transfer_t a = { .shape = s, .key_value = kv.fast, .num_tokens = T, .key_cache = kc.fast,
                                       .value_cache = vc.fast, .slots = slots, .slot_type = KVC_INDEX_INT64,
                                       .num_slots = T, .layer_idx = rnd_in(&r, 0, s.nl - 1) };
            const int dir = rep % 2 ? KVC_H2D : KVC_D2H;
            char desc[320];
            describe_shape(desc, sizeof(desc), "flash", 9, dir, 0, &s);
            kvc_status_t st = dir == KVC_D2H ? kvc_load_and_reshape_flash(ctx, &a) : kvc_reshape_and_cache_back_flash(ctx, &a);
            cr_assert_eq(st, KVC_OK, "%s: %s", desc, kvc_last_error());
            a.key_value = kv.ref;
            a.key_cache = kc.ref;
            a.value_cache = vc.ref;
            ref_flash(&a, dir);
            pair_expect_equal(&kc, "key_cache", desc);
            pair_expect_equal(&vc, "value_cache", desc);
            pair_expect_equal(&kv, "key_value", desc);
            pair_free(&kc);
            pair_free(&vc);
            pair_free(&kv);
            free(slots);
        }
    kvc_context_destroy(ctx);
}

/* A context that writes every transfer with streaming stores (KVCORE_STREAM_MIN_BYTES=0) on ISA
 * tier `isa`; NULL when the CPU lacks the tier. The default threshold is 3/4 of this machine's
 * last-level cache, so without the knob the streaming path would go untested on most machines. */
static kvc_context_t *ctx_streaming(int threads, const char *isa)
{
    setenv("KVCORE_STREAM_MIN_BYTES", "0", 1);
    setenv("KVCORE_ISA", isa, 1);
    kvc_context_t *ctx = ctx_threads(threads);
    unsetenv("KVCORE_STREAM_MIN_BYTES");
    unsetenv("KVCORE_ISA");
    if (strcmp(kvc_context_isa(ctx), isa) != 0) {
        kvc_context_destroy(ctx);
        return NULL;
    }
    return ctx;
}

/* Large enough for the threaded paths (token tiles of one layer, many blocks) and, with 64-byte
 * aligned runs, for the streaming stores and the prefetch of the next unit; every format, on every
 * ISA tier the CPU has (the streaming and short-run copies differ per tier). */
Test(transfer, threaded_and_streaming_paths_match_oracle)
{
    kvc_context_t *ctx = ctx_threads(3);
    static const char *const tiers[] = { "scalar", "avx2", "avx512" };
    kvc_context_t *stream_ctx[3];
    for (int k = 0; k < 3; k++) stream_ctx[k] = ctx_streaming(k == 0 ? 1 : k + 1, tiers[k]);
    rng_t r = { 42 };
    for (int fmt = 0; fmt < KVC_FORMAT_COUNT; fmt++) {
        const int single = kvc_format_is_mla(fmt) || is_fused(fmt);
        kvc_page_shape_t s = { .kv_size = single ? 1 : 2, .element_size = 2, .nl = 1, .nb = 64, .bs = 16,
                               .nh = kvc_format_is_mla(fmt) ? 1 : 4, .hs = 64 };
        adapt_shape(&r, fmt, &s);
        const int64_t T = 700;
        int64_t *slots = random_slots(&r, T, s.nb * s.bs, fmt % 2);
        engine_t e;
        pair_t chunk;
        if (!kvc_format_is_cross_layer(fmt)) {
            engine_new(&e, &r, fmt, &s);
            chunk = pair_new(&r, (size_t)(ref_chunk_planes(fmt, 0) * T) * row_bytes(fmt, &s, 0));
            kvc_layer_transfer_t a = { .format = fmt, .shape = s, .num_engine_ptrs = e.n, .num_tokens = T,
                                       .slots = slots, .slot_type = KVC_INDEX_INT64, .num_slots = T };
            for (int dir = 0; dir < 2; dir++) {
                a.direction = dir;
                a.engine_ptrs = e.fast;
                a.chunk = chunk.fast;
                cr_assert_eq(kvc_transfer_layer(ctx, &a), KVC_OK, "%s", kvc_last_error());
                a.engine_ptrs = e.ref;
                a.chunk = chunk.ref;
                ref_transfer_layer(&a);
                engine_expect_equal(&e, "threaded layer");
                pair_expect_equal(&chunk, "chunk", "threaded layer");
            }
            engine_free(&e);
            pair_free(&chunk);
        }
        free(slots);

        /* 8 layers x 256 tokens x 1.5-2.5 KiB of rows: over 4 MiB, both ops, both directions. Head
         * rows of an odd number of cache lines (192, 320, 2112 bytes) reach the copies' tails. */
        s.nl = 8;
        s.nh = kvc_format_is_mla(fmt) ? 1 : 8;
        s.hs = kvc_format_is_mla(fmt) ? 1056 : single ? 160 : 96;
        s.nb = 24;
        adapt_shape(NULL, fmt, &s);
        const int64_t C = 256, nblk = C / s.bs;
        int64_t *ids = distinct_indices(&r, nblk, s.nb), *tok = malloc(C * sizeof(int64_t));
        for (int64_t t = 0; t < C; t++) tok[t] = ids[t / s.bs] * s.bs + t % s.bs;
        if (fmt % 2) { /* runs of consecutive slots that start and end inside blocks, some skipped */
            free(tok);
            tok = random_slots(&r, C, s.nb * s.bs, 3);
        }
        for (int k = -1; k < 3; k++) {
            kvc_context_t *c = k < 0 ? ctx : stream_ctx[k];
            if (!c) continue;
            engine_new(&e, &r, fmt, &s);
            chunk = pair_new(&r, (size_t)(ref_chunk_planes(fmt, 0) * s.nl * C) * row_bytes(fmt, &s, 0));
            cr_assert_geq(chunk.n, 4u << 20);
            for (int dir = 0; dir < 2; dir++) {
                kvc_token_transfer_t t = { .format = fmt, .direction = dir, .shape = s, .engine_ptrs = e.fast,
                                           .num_engine_ptrs = e.n, .chunk = chunk.fast, .num_tokens = C, .slots = tok,
                                           .slot_type = KVC_INDEX_INT64, .num_slots = C };
                cr_assert_eq(kvc_transfer_tokens(c, &t), KVC_OK, "%s", kvc_last_error());
                t.engine_ptrs = e.ref;
                t.chunk = chunk.ref;
                ref_transfer_tokens(&t);
                engine_expect_equal(&e, "streaming tokens");
                pair_expect_equal(&chunk, "chunk", "streaming tokens");
                void *of[1] = { chunk.fast }, *orf[1] = { chunk.ref };
                kvc_block_transfer_t b = { .format = fmt, .direction = !dir, .shape = s, .engine_ptrs = e.fast,
                                           .num_engine_ptrs = e.n, .objects = of, .num_objects = 1, .chunk_tokens = C,
                                           .block_ids = ids, .block_id_type = KVC_INDEX_INT64, .num_block_ids = nblk };
                fill(&r, chunk.fast, chunk.n);
                memcpy(chunk.ref, chunk.fast, chunk.n);
                cr_assert_eq(kvc_transfer_blocks(c, &b), KVC_OK, "%s", kvc_last_error());
                b.engine_ptrs = e.ref;
                b.objects = orf;
                ref_transfer_blocks(&b);
                engine_expect_equal(&e, "streaming blocks");
                pair_expect_equal(&chunk, "object", "streaming blocks");
            }
            engine_free(&e);
            pair_free(&chunk);
        }
        free(ids);
        free(tok);
    }
    for (int k = 0; k < 3; k++)
        if (stream_ctx[k]) kvc_context_destroy(stream_ctx[k]);
    kvc_context_destroy(ctx);
}

/* Rows in parts (formats 14, 17) through the CPU engine's one-call walk: the shapes it compiles
 * apart (DeepSeek-V3.2's 128 + 4-byte indexer rows; other values + 4-byte scale rows; MLA planes of
 * 1024 + 128 bytes, whose parts are prefetched and streamed; 3 and 4 planes of odd widths), odd
 * token counts, negative slots, skip prefixes, slot runs across blocks, padded blocks, partial
 * objects, 1 and 2 threads (rep 0 is large enough for the team) and streaming stores on every ISA
 * tier, both directions of both ops. */
Test(transfer, multi_part_rows_every_walk_match_oracle)
{
    static const char *const tiers[] = { "scalar", "avx2", "avx512" };
    kvc_context_t *ctxs[5] = { ctx_threads(1), ctx_threads(2), NULL, NULL, NULL };
    for (int k = 0; k < 3; k++) ctxs[2 + k] = ctx_streaming(2, tiers[k]);
    static const struct {
        int fmt, es;
        int64_t hs;
        int np;
        int64_t w[KVC_MAX_PLANES];
    } shapes[] = {
        { 14, 1, 132, 0, { 0 } }, { 14, 2, 66, 0, { 0 } }, { 14, 4, 33, 0, { 0 } }, { 14, 1, 8, 0, { 0 } },
        { 14, 2, 98, 0, { 0 } },  { 17, 2, 576, 2, { 1024, 128 } }, { 17, 1, 704, 3, { 512, 64, 128 } },
        { 17, 1, 37, 4, { 5, 1, 30, 1 } }, { 17, 4, 160, 2, { 576, 64 } },
    };
    rng_t r = { 0x5EED0017ULL };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int c = 0; c < 5; c++)
            for (int dir = 0; dir < 2 && ctxs[c]; dir++)
                for (int rep = 0; rep < 3; rep++) {
                    const int fmt = shapes[i].fmt;
                    kvc_page_shape_t s = { .kv_size = 1, .element_size = shapes[i].es, .nl = rep ? rnd_in(&r, 1, 3) : 8,
                                           .nb = 40, .bs = rep ? rnd_in(&r, 1, 9) : 16, .nh = 1, .hs = shapes[i].hs,
                                           .num_planes = shapes[i].np };
                    for (int p = 0; p < shapes[i].np; p++) s.plane_bytes[p] = shapes[i].w[p];
                    if (fmt == 14 && rep == 2) s.block_stride_elems = s.bs * s.hs + rnd_in(&r, 1, 9);
                    char desc[320];
                    engine_t e;
                    engine_new(&e, &r, fmt, &s);
                    /* tokens: an odd count, random slots with negatives or consecutive runs, a skip prefix */
                    const int64_t T = rep ? 2 * rnd_in(&r, 0, 30) + 1 : 255, skip = rnd_in(&r, 0, T / 2);
                    int64_t *slots = random_slots(&r, T, s.nb * s.bs, rep == 1);
                    pair_t chunk = pair_new(&r, (size_t)(s.nl * T) * row_bytes(fmt, &s, 0));
                    describe_shape(desc, sizeof(desc), "tokens", fmt, dir, 0, &s);
                    snprintf(desc + strlen(desc), sizeof(desc) - strlen(desc), " ctx %d T %lld skip %lld", c,
                             (long long)T, (long long)skip);
                    kvc_token_transfer_t a = { .format = fmt, .direction = dir, .shape = s, .engine_ptrs = e.fast,
                                               .num_engine_ptrs = e.n, .chunk = chunk.fast, .num_tokens = T,
                                               .slots = slots, .slot_type = KVC_INDEX_INT64, .num_slots = T,
                                               .skip_prefix_tokens = skip };
                    cr_assert_eq(kvc_transfer_tokens(ctxs[c], &a), KVC_OK, "%s: %s", desc, kvc_last_error());
                    a.engine_ptrs = e.ref;
                    a.chunk = chunk.ref;
                    ref_transfer_tokens(&a);
                    engine_expect_equal(&e, desc);
                    pair_expect_equal(&chunk, "chunk", desc);
                    pair_free(&chunk);
                    free(slots);
                    /* blocks: several per object, the last object partial, a skip prefix */
                    const int64_t bpo = rnd_in(&r, 1, 3), n = rep ? rnd_in(&r, 1, 12) : 31, nobj = (n + bpo - 1) / bpo;
                    const int64_t bskip = rnd_in(&r, 0, n - 1);
                    int64_t *ids = distinct_indices(&r, n, s.nb);
                    pair_t obj[31];
                    void *of[31], *orf[31];
                    for (int64_t o = 0; o < nobj; o++) {
                        obj[o] = pair_new(&r, (size_t)(s.nl * bpo * s.bs) * row_bytes(fmt, &s, 0));
                        of[o] = obj[o].fast;
                        orf[o] = obj[o].ref;
                    }
                    describe_shape(desc, sizeof(desc), "blocks", fmt, dir, 0, &s);
                    snprintf(desc + strlen(desc), sizeof(desc) - strlen(desc), " ctx %d n %lld bpo %lld skip %lld", c,
                             (long long)n, (long long)bpo, (long long)bskip);
                    kvc_block_transfer_t b = { .format = fmt, .direction = dir, .shape = s, .engine_ptrs = e.fast,
                                               .num_engine_ptrs = e.n, .objects = of, .num_objects = nobj,
                                               .chunk_tokens = bpo * s.bs, .block_ids = ids,
                                               .block_id_type = KVC_INDEX_INT64, .num_block_ids = n,
                                               .skip_prefix_blocks = bskip };
                    cr_assert_eq(kvc_transfer_blocks(ctxs[c], &b), KVC_OK, "%s: %s", desc, kvc_last_error());
                    b.engine_ptrs = e.ref;
                    b.objects = orf;
                    ref_transfer_blocks(&b);
                    engine_expect_equal(&e, desc);
                    for (int64_t o = 0; o < nobj; o++) {
                        pair_expect_equal(&obj[o], "object", desc);
                        pair_free(&obj[o]);
                    }
                    free(ids);
                    engine_free(&e);
                }
    for (int c = 0; c < 5; c++)
        if (ctxs[c]) kvc_context_destroy(ctxs[c]);
}

/* ------------------------------------------------------------------ round trips */

/* D2H, then the addressed engine bytes are overwritten (by the oracle, from a poison chunk), then
 * H2D must restore the engine exactly: addressed bytes come back, the rest was never touched. */
Test(transfer, round_trip_tokens_and_blocks_restore_engine)
{
    kvc_context_t *ctx = ctx_threads(2);
    rng_t r = { 7 };
    for (int fmt = 0; fmt < KVC_FORMAT_COUNT; fmt++)
        for (int k = 0; k < 4; k++) {
            const int es = element_sizes[k], layout = random_layout(&r, fmt);
            if (!es_applies(fmt, es)) continue;
            kvc_page_shape_t s = random_shape(&r, fmt, layout, es, 3);
            s.nb = rnd_in(&r, 2, 6);
            const int64_t T = rnd_in(&r, 1, 40);
            int64_t *slots = random_slots(&r, T, s.nb * s.bs, k % 2);
            engine_t e;
            engine_new(&e, &r, fmt, &s);
            const size_t cb = (size_t)(ref_chunk_planes(fmt, layout) * s.nl * T) * row_bytes(fmt, &s, layout);
            uint8_t *chunk = malloc(cb ? cb : 1), *poison = malloc(cb ? cb : 1);
            memset(poison, 0xEE, cb);
            char desc[320];
            describe_shape(desc, sizeof(desc), "round trip tokens", fmt, 1, layout, &s);
            kvc_token_transfer_t a = { .format = fmt, .direction = KVC_D2H, .shape = s, .engine_ptrs = e.fast,
                                       .num_engine_ptrs = e.n, .chunk = chunk, .chunk_layout = layout,
                                       .num_tokens = T, .slots = slots, .slot_type = KVC_INDEX_INT64, .num_slots = T };
            cr_assert_eq(kvc_transfer_tokens(ctx, &a), KVC_OK, "%s", kvc_last_error());
            a.direction = KVC_H2D;
            a.chunk = poison;
            ref_transfer_tokens(&a);
            a.chunk = chunk;
            cr_assert_eq(kvc_transfer_tokens(ctx, &a), KVC_OK, "%s", kvc_last_error());
            engine_expect_equal(&e, desc); /* fast == ref: the untouched original */

            /* blocks: every block of the pool through objects and back */
            const int64_t bpo = rnd_in(&r, 1, 3), n = s.nb, nobj = (n + bpo - 1) / bpo;
            int64_t ids[6];
            for (int64_t i = 0; i < n; i++) ids[i] = n - 1 - i;
            const size_t ob = (size_t)(ref_chunk_planes(fmt, layout) * s.nl * bpo * s.bs) * row_bytes(fmt, &s, layout);
            void *objs[6], *pobj[6];
            for (int64_t o = 0; o < nobj; o++) {
                objs[o] = malloc(ob);
                pobj[o] = malloc(ob);
                memset(pobj[o], 0xEE, ob);
            }
            kvc_block_transfer_t b = { .format = fmt, .direction = KVC_D2H, .shape = s, .engine_ptrs = e.fast,
                                       .num_engine_ptrs = e.n, .objects = objs, .num_objects = nobj,
                                       .chunk_layout = layout, .chunk_tokens = bpo * s.bs, .block_ids = ids,
                                       .block_id_type = KVC_INDEX_INT64, .num_block_ids = n };
            cr_assert_eq(kvc_transfer_blocks(ctx, &b), KVC_OK, "%s", kvc_last_error());
            b.direction = KVC_H2D;
            b.objects = pobj;
            ref_transfer_blocks(&b);
            b.objects = objs;
            cr_assert_eq(kvc_transfer_blocks(ctx, &b), KVC_OK, "%s", kvc_last_error());
            engine_expect_equal(&e, desc);
            for (int64_t o = 0; o < nobj; o++) {
                free(objs[o]);
                free(pobj[o]);
            }
            engine_free(&e);
            free(chunk);
            free(poison);
            free(slots);
        }
    kvc_context_destroy(ctx);
}

/* ------------------------------------------------------------------ real K/V (stories260K) */

typedef struct {
    int64_t nl, T, nh, hs;
    uint16_t *k, *v; /* [NL, T, NH, HS] fp16 bits */
    test_npy_t kn, vn;
} kvdata_t;

static kvdata_t kvdata_load(void)
{
    kvdata_t d;
    d.kn = test_npy_load(kvc_test_data("kvdata/story_prompt_K.npy"));
    d.vn = test_npy_load(kvc_test_data("kvdata/story_prompt_V.npy"));
    cr_assert_str_eq(d.kn.descr, "<f2");
    cr_assert_eq(d.kn.ndim, 4);
    cr_assert_eq(d.kn.count, d.vn.count);
    d.nl = (int64_t)d.kn.shape[0];
    d.T = (int64_t)d.kn.shape[1];
    d.nh = (int64_t)d.kn.shape[2];
    d.hs = (int64_t)d.kn.shape[3];
    d.k = d.kn.data;
    d.v = d.vn.data;
    return d;
}

/* The chunk a format's transfer expects, built from K and V by hand: 2LTD [2, NL, T, NH*HS],
 * MLA [1, NL, T, NH*HS] (K as the latent), fused-packed [1, NL, T, NH*(HS_K + HS_V)]. */
static uint16_t *kvdata_chunk(const kvdata_t *d, int kind, size_t *bytes)
{
    const int64_t D = d->nh * d->hs, n = d->nl * d->T * D;
    uint16_t *c = malloc((size_t)(2 * n) * 2);
    for (int64_t l = 0; l < d->nl; l++)
        for (int64_t t = 0; t < d->T; t++)
            for (int64_t h = 0; h < d->nh; h++)
                for (int64_t e = 0; e < d->hs; e++) {
                    const int64_t src = ((l * d->T + t) * d->nh + h) * d->hs + e;
                    const int64_t row = (l * d->T + t) * D;
                    if (kind == 0) {
                        c[row + h * d->hs + e] = d->k[src];
                        c[n + row + h * d->hs + e] = d->v[src];
                    } else if (kind == 1) {
                        c[row + h * d->hs + e] = d->k[src];
                    } else {
                        c[2 * row + h * 2 * d->hs + e] = d->k[src];
                        c[2 * row + h * 2 * d->hs + d->hs + e] = d->v[src];
                    }
                }
    *bytes = (size_t)(kind == 1 ? n : 2 * n) * 2;
    return c;
}

Test(transfer, real_kv_through_every_format_and_back)
{
    kvc_context_t *ctx = ctx_threads(2);
    kvdata_t d = kvdata_load();
    rng_t r = { 1234 };
    size_t b2, b1, bf;
    uint16_t *c2 = kvdata_chunk(&d, 0, &b2), *c1 = kvdata_chunk(&d, 1, &b1), *cf = kvdata_chunk(&d, 2, &bf);
    for (int fmt = 0; fmt < KVC_FORMAT_COUNT; fmt++) {
        const int mla = kvc_format_is_mla(fmt), fused = is_fused(fmt);
        kvc_page_shape_t s = { .kv_size = mla || fused ? 1 : 2, .element_size = 2, .nl = d.nl, .nb = 40, .bs = 16,
                               .nh = mla ? 1 : d.nh, .hs = mla ? d.nh * d.hs : fused ? 2 * d.hs : d.hs };
        if (fmt == 3 || fmt == 14 || fused) s.block_stride_elems = s.bs * s.nh * s.hs + 24; /* a padded pool */
        adapt_shape(NULL, fmt, &s);
        const uint16_t *want = mla ? c1 : fused ? cf : c2;
        const size_t bytes = mla ? b1 : fused ? bf : b2;
        int64_t *slots = distinct_indices(&r, d.T, s.nb * s.bs); /* every token, scattered over the pool */
        engine_t e;
        engine_new(&e, &r, fmt, &s);
        uint8_t *back = calloc(1, bytes);
        kvc_token_transfer_t a = { .format = fmt, .direction = KVC_H2D, .shape = s, .engine_ptrs = e.fast,
                                   .num_engine_ptrs = e.n, .chunk = (void *)want, .num_tokens = d.T, .slots = slots,
                                   .slot_type = KVC_INDEX_INT64, .num_slots = d.T };
        cr_assert_eq(kvc_transfer_tokens(ctx, &a), KVC_OK, "fmt %d: %s", fmt, kvc_last_error());
        a.engine_ptrs = e.ref;
        ref_transfer_tokens(&a);
        engine_expect_equal(&e, "real K/V, tokens H2D");
        a.engine_ptrs = e.fast;
        a.direction = KVC_D2H;
        a.chunk = back;
        cr_assert_eq(kvc_transfer_tokens(ctx, &a), KVC_OK, "fmt %d: %s", fmt, kvc_last_error());
        cr_assert(!memcmp(back, want, bytes), "fmt %d: real K/V did not survive H2D + D2H", fmt);

        /* blocks: 32 blocks of 16 tokens into 2 objects of 256 tokens and back */
        const int64_t nblk = d.T / s.bs, C = 256, nobj = nblk * s.bs / C;
        int64_t *ids = distinct_indices(&r, nblk, s.nb);
        void *objs[2], *backs[2];
        const size_t ob = bytes / (size_t)nobj; /* the chunk is [planes, NL, 512, row]: objects must be built */
        uint8_t *o[2] = { malloc(ob), malloc(ob) };
        const size_t row = bytes / (size_t)(d.nl * d.T) / (size_t)(mla || fused ? 1 : 2);
        const int64_t planes = mla || fused ? 1 : 2;
        for (int64_t oi = 0; oi < nobj; oi++)
            for (int64_t p = 0; p < planes; p++)
                for (int64_t l = 0; l < d.nl; l++)
                    memcpy(o[oi] + (size_t)((p * d.nl + l) * C) * row,
                           (const uint8_t *)want + (size_t)((p * d.nl + l) * d.T + oi * C) * row, (size_t)C * row);
        objs[0] = o[0];
        objs[1] = o[1];
        backs[0] = calloc(1, ob);
        backs[1] = calloc(1, ob);
        kvc_block_transfer_t b = { .format = fmt, .direction = KVC_H2D, .shape = s, .engine_ptrs = e.fast,
                                   .num_engine_ptrs = e.n, .objects = objs, .num_objects = nobj, .chunk_tokens = C,
                                   .block_ids = ids, .block_id_type = KVC_INDEX_INT64, .num_block_ids = nblk };
        cr_assert_eq(kvc_transfer_blocks(ctx, &b), KVC_OK, "fmt %d: %s", fmt, kvc_last_error());
        b.direction = KVC_D2H;
        b.objects = backs;
        cr_assert_eq(kvc_transfer_blocks(ctx, &b), KVC_OK, "fmt %d: %s", fmt, kvc_last_error());
        cr_assert(!memcmp(backs[0], o[0], ob) && !memcmp(backs[1], o[1], ob), "fmt %d: blocks round trip", fmt);

        /* fused formats: a split 2LTD chunk in, the packed chunk out (K|V interleaved per head) */
        if (fused) {
            a.direction = KVC_H2D;
            a.chunk_layout = KVC_CHUNK_SPLIT_KV;
            a.chunk = c2;
            for (int64_t t = 0; t < d.T; t++) slots[t] = t; /* all tokens, so the whole packed chunk is defined */
            cr_assert_eq(kvc_transfer_tokens(ctx, &a), KVC_OK, "fmt %d: %s", fmt, kvc_last_error());
            a.direction = KVC_D2H;
            a.chunk_layout = KVC_CHUNK_FUSED_PACKED;
            a.chunk = back;
            cr_assert_eq(kvc_transfer_tokens(ctx, &a), KVC_OK, "fmt %d: %s", fmt, kvc_last_error());
            cr_assert(!memcmp(back, cf, bf), "fmt %d: split K/V in, packed K|V out", fmt);
        }
        free(o[0]);
        free(o[1]);
        free(backs[0]);
        free(backs[1]);
        free(ids);
        free(back);
        free(slots);
        engine_free(&e);
    }
    free(c1);
    free(c2);
    free(cf);
    test_npy_free(&d.kn);
    test_npy_free(&d.vn);
    kvc_context_destroy(ctx);
}

/* ------------------------------------------------------------------ validation: exact status, nothing written */

typedef struct {
    kvc_context_t *ctx;
    kvc_page_shape_t s; /* format 1 (also fits 2, 3-with-nh-1 checks, 6, 7): nl 2, nb 4, bs 4, nh 2, hs 8, fp16 */
    uint8_t *eng[2], *chunk, *obj[2], *snap[5];
    size_t sizes[5];
    void *eng_ptrs[2], *obj_ptrs[2];
    int64_t slots[6], ids[3];
} fx_t;

enum { FX_T = 6 };

static fx_t fx_new(void)
{
    fx_t f = { .ctx = ctx_threads(2),
               .s = { .kv_size = 2, .element_size = 2, .nl = 2, .nb = 4, .bs = 4, .nh = 2, .hs = 8 },
               .slots = { 3, -1, 15, 0, 7, 9 },
               .ids = { 3, 0, 2 } };
    f.sizes[0] = f.sizes[1] = ref_engine_tensor_bytes(1, &f.s); /* [2, 4, 4, 2, 8] */
    f.sizes[2] = 2 * 2 * FX_T * 16 * 2;                        /* tokens: [2, 2, 6, 16] */
    f.sizes[3] = f.sizes[4] = 2 * 2 * 8 * 16 * 2;              /* objects of 8 tokens */
    uint8_t **bufs[5] = { &f.eng[0], &f.eng[1], &f.chunk, &f.obj[0], &f.obj[1] };
    for (int i = 0; i < 5; i++) {
        *bufs[i] = malloc(f.sizes[i]);
        f.snap[i] = malloc(f.sizes[i]);
        for (size_t k = 0; k < f.sizes[i]; k++) (*bufs[i])[k] = (uint8_t)(k * 7 + (size_t)i * 31 + 1);
        memcpy(f.snap[i], *bufs[i], f.sizes[i]);
    }
    f.eng_ptrs[0] = f.eng[0];
    f.eng_ptrs[1] = f.eng[1];
    f.obj_ptrs[0] = f.obj[0];
    f.obj_ptrs[1] = f.obj[1];
    return f;
}

static void fx_free(fx_t *f)
{
    uint8_t *bufs[5] = { f->eng[0], f->eng[1], f->chunk, f->obj[0], f->obj[1] };
    for (int i = 0; i < 5; i++) {
        free(bufs[i]);
        free(f->snap[i]);
    }
    kvc_context_destroy(f->ctx);
}

static void fx_expect_untouched(const fx_t *f, const char *what)
{
    const uint8_t *bufs[5] = { f->eng[0], f->eng[1], f->chunk, f->obj[0], f->obj[1] };
    static const char *names[5] = { "engine[0]", "engine[1]", "chunk", "objects[0]", "objects[1]" };
    for (int i = 0; i < 5; i++)
        cr_assert(!memcmp(bufs[i], f->snap[i], f->sizes[i]), "%s: %s was written by a failed call", what, names[i]);
}

static void expect_fail(const fx_t *f, kvc_status_t got, kvc_status_t want, const char *needle, const char *what)
{
    cr_assert_eq(got, want, "%s: got %s, want %s (%s)", what, kvc_status_name(got), kvc_status_name(want),
                 kvc_last_error());
    cr_assert(strstr(kvc_last_error(), needle), "%s: message '%s' does not mention '%s'", what, kvc_last_error(),
              needle);
    fx_expect_untouched(f, what);
}

static kvc_token_transfer_t fx_tokens(fx_t *f, int dir)
{
    return (kvc_token_transfer_t){ .format = 1, .direction = dir, .shape = f->s, .engine_ptrs = f->eng_ptrs,
                                   .num_engine_ptrs = 2, .chunk = f->chunk, .num_tokens = FX_T, .slots = f->slots,
                                   .slot_type = KVC_INDEX_INT64, .num_slots = FX_T };
}

static kvc_block_transfer_t fx_blocks(fx_t *f, int dir)
{
    return (kvc_block_transfer_t){ .format = 1, .direction = dir, .shape = f->s, .engine_ptrs = f->eng_ptrs,
                                   .num_engine_ptrs = 2, .objects = f->obj_ptrs, .num_objects = 2, .chunk_tokens = 8,
                                   .block_ids = f->ids, .block_id_type = KVC_INDEX_INT64, .num_block_ids = 3 };
}

/* Run a mutated copy of the valid call in both directions and expect `want` with `needle`. */
#define TOKENS_FAIL(want, needle, ...)                                                                       \
    for (int dir_ = 0; dir_ < 2; dir_++) {                                                                   \
        kvc_token_transfer_t a = fx_tokens(&f, dir_);                                                        \
        __VA_ARGS__;                                                                                         \
        expect_fail(&f, kvc_transfer_tokens(f.ctx, &a), want, needle, "tokens: " #__VA_ARGS__);              \
    }
#define BLOCKS_FAIL(want, needle, ...)                                                                       \
    for (int dir_ = 0; dir_ < 2; dir_++) {                                                                   \
        kvc_block_transfer_t a = fx_blocks(&f, dir_);                                                        \
        __VA_ARGS__;                                                                                         \
        expect_fail(&f, kvc_transfer_blocks(f.ctx, &a), want, needle, "blocks: " #__VA_ARGS__);              \
    }

Test(transfer, token_errors_have_exact_status_and_write_nothing)
{
    fx_t f = fx_new();
    void *with_null[2] = { f.eng[0], NULL };
    kvc_token_transfer_t ok = fx_tokens(&f, KVC_H2D);
    expect_fail(&f, kvc_transfer_tokens(NULL, &ok), KVC_ERR_INVALID_ARG, "NULL", "NULL ctx");
    expect_fail(&f, kvc_transfer_tokens(f.ctx, NULL), KVC_ERR_INVALID_ARG, "NULL", "NULL args");
    TOKENS_FAIL(KVC_ERR_INVALID_ARG, "direction", a.direction = (kvc_direction_t)2);
    TOKENS_FAIL(KVC_ERR_FORMAT, "format 18", a.format = (kvc_format_t)18);
    TOKENS_FAIL(KVC_ERR_FORMAT, "format -1", a.format = (kvc_format_t)-1);
    TOKENS_FAIL(KVC_ERR_FORMAT, "chunk_layout = 4", a.chunk_layout = (kvc_chunk_layout_t)4);
    TOKENS_FAIL(KVC_ERR_FORMAT, "chunk_layout = 3", a.format = 3, a.shape.kv_size = 1, a.shape.nh = 1,
                a.chunk_layout = KVC_CHUNK_INTERLEAVED_KV); /* MLA: one plane */
    TOKENS_FAIL(KVC_ERR_FORMAT, "interleaved K/V", a.format = 13, a.shape.kv_size = 1,
                a.chunk_layout = KVC_CHUNK_INTERLEAVED_KV); /* fused */
    TOKENS_FAIL(KVC_ERR_FORMAT, "chunk_layout = 2", a.chunk_layout = KVC_CHUNK_FUSED_PACKED);
    TOKENS_FAIL(KVC_ERR_FORMAT, "chunk_layout = 1", a.format = 3, a.shape.kv_size = 1, a.shape.nh = 1,
                a.chunk_layout = KVC_CHUNK_SPLIT_KV);
    TOKENS_FAIL(KVC_ERR_DTYPE, "element_size = 3", a.shape.element_size = 3);
    TOKENS_FAIL(KVC_ERR_DTYPE, "element_size = 16", a.shape.element_size = 16);
    TOKENS_FAIL(KVC_ERR_DTYPE, "element_size = 0", a.shape.element_size = 0);
    TOKENS_FAIL(KVC_ERR_SHAPE, "hs=0", a.shape.hs = 0);
    TOKENS_FAIL(KVC_ERR_SHAPE, "nh=0", a.shape.nh = 0);
    TOKENS_FAIL(KVC_ERR_SHAPE, "nb=0", a.shape.nb = 0);
    TOKENS_FAIL(KVC_ERR_SHAPE, "bs=-1", a.shape.bs = -1);
    TOKENS_FAIL(KVC_ERR_SHAPE, "nl=0", a.shape.nl = 0);
    TOKENS_FAIL(KVC_ERR_SHAPE, "kv_size = 1", a.shape.kv_size = 1);
    TOKENS_FAIL(KVC_ERR_SHAPE, "kv_size = 2", a.format = 13);
    TOKENS_FAIL(KVC_ERR_SHAPE, "nh = 2", a.format = 3, a.shape.kv_size = 1);
    TOKENS_FAIL(KVC_ERR_SHAPE, "hs = 15", a.format = 13, a.shape.kv_size = 1, a.shape.hs = 15,
                a.chunk_layout = KVC_CHUNK_SPLIT_KV);
    TOKENS_FAIL(KVC_ERR_SHAPE, "block_stride_elems = 200", a.shape.block_stride_elems = 200);
    TOKENS_FAIL(KVC_ERR_SHAPE, "block_stride_elems = 20", a.format = 3, a.shape.kv_size = 1, a.shape.nh = 1,
                a.shape.block_stride_elems = 20);
    TOKENS_FAIL(KVC_ERR_SHAPE, "overflows", a.shape.nb = INT64_MAX / 4);
    TOKENS_FAIL(KVC_ERR_SHAPE, "overflows", a.num_tokens = a.num_slots = INT64_MAX / 8);
    TOKENS_FAIL(KVC_ERR_SHAPE, "num_engine_ptrs = 1", a.num_engine_ptrs = 1);
    TOKENS_FAIL(KVC_ERR_SHAPE, "num_engine_ptrs = 2", a.format = 4);
    TOKENS_FAIL(KVC_ERR_SHAPE, "num_engine_ptrs = 2", a.format = 0);
    TOKENS_FAIL(KVC_ERR_INVALID_ARG, "engine_ptrs is NULL", a.engine_ptrs = NULL);
    TOKENS_FAIL(KVC_ERR_INVALID_ARG, "engine_ptrs[1] is NULL", a.engine_ptrs = with_null);
    TOKENS_FAIL(KVC_ERR_INVALID_ARG, "chunk is NULL", a.chunk = NULL);
    TOKENS_FAIL(KVC_ERR_SHAPE, "num_slots = 5", a.num_slots = 5);
    TOKENS_FAIL(KVC_ERR_SHAPE, "num_tokens = -1", a.num_tokens = -1);
    TOKENS_FAIL(KVC_ERR_DTYPE, "int32", a.slot_type = KVC_INDEX_INT32);
    TOKENS_FAIL(KVC_ERR_DTYPE, "index type 0", a.slot_type = (kvc_index_type_t)0);
    TOKENS_FAIL(KVC_ERR_INVALID_ARG, "slots is NULL", a.slots = NULL);
    TOKENS_FAIL(KVC_ERR_OUT_OF_RANGE, "skip_prefix_tokens = 7", a.skip_prefix_tokens = 7);
    TOKENS_FAIL(KVC_ERR_OUT_OF_RANGE, "skip_prefix_tokens = -1", a.skip_prefix_tokens = -1);
    /* Formats 14-17: their own geometry rules (fixture: 2 pointers, so 17 with one plane). */
#define AS_14(hs_) a.format = 14, a.shape.kv_size = 1, a.shape.nh = 1, a.shape.hs = (hs_)
#define AS_17(w0_) a.format = 17, a.shape.kv_size = 1, a.shape.nh = 1, a.shape.hs = 16, a.shape.num_planes = 1, \
                   a.shape.plane_bytes[0] = (w0_)
    TOKENS_FAIL(KVC_ERR_SHAPE, "= 6 bytes: format NL_X_NB_BSV_BSS needs a row of 4-byte units", AS_14(3));
    TOKENS_FAIL(KVC_ERR_SHAPE, "= 4 bytes: format NL_X_NB_BSV_BSS", AS_14(2));
    TOKENS_FAIL(KVC_ERR_DTYPE, "element_size = 8: format NL_X_NB_BSV_BSS moves 4-byte units", AS_14(4),
                a.shape.element_size = 8);
    TOKENS_FAIL(KVC_ERR_SHAPE, "kv_size = 2", AS_14(16), a.shape.kv_size = 2);
    TOKENS_FAIL(KVC_ERR_SHAPE, "num_planes = 2: only format NL_X_NP_X_NB_BS_ONE_HS", a.shape.num_planes = 2);
    TOKENS_FAIL(KVC_ERR_SHAPE, "num_planes = 1: only format", AS_14(16), a.shape.num_planes = 1);
    TOKENS_FAIL(KVC_ERR_SHAPE, "plane_bytes sum to 30 bytes", AS_17(30));
    TOKENS_FAIL(KVC_ERR_SHAPE, "plane_bytes[0] = 0", AS_17(0));
    TOKENS_FAIL(KVC_ERR_SHAPE, "plane_bytes[0] = 33", AS_17(33));
    TOKENS_FAIL(KVC_ERR_SHAPE, "plane_bytes[1] = -4", AS_17(32), a.shape.num_planes = 2, a.shape.plane_bytes[1] = -4);
    TOKENS_FAIL(KVC_ERR_SHAPE, "num_planes = 0: format NL_X_NP_X_NB_BS_ONE_HS needs 1..4", AS_17(32),
                a.shape.num_planes = 0);
    TOKENS_FAIL(KVC_ERR_SHAPE, "num_planes = 5", AS_17(32), a.shape.num_planes = 5);
    TOKENS_FAIL(KVC_ERR_SHAPE, "num_engine_ptrs = 2: NL_X_NP_X_NB_BS_ONE_HS needs 4", AS_17(16),
                a.shape.num_planes = 2, a.shape.plane_bytes[1] = 16);
    TOKENS_FAIL(KVC_ERR_SHAPE, "block_stride_elems = 40", AS_17(32), a.shape.block_stride_elems = 40);
    TOKENS_FAIL(KVC_ERR_FORMAT, "chunk_layout = 1", AS_17(32), a.chunk_layout = KVC_CHUNK_SPLIT_KV);
    TOKENS_FAIL(KVC_ERR_SHAPE, "num_engine_ptrs = 2: NL_X_TWO_X_NB_BS_NH_HS needs 4", a.format = 16);
    TOKENS_FAIL(KVC_ERR_SHAPE, "block_stride_elems = 200", a.format = 15, a.shape.block_stride_elems = 200);
    /* the valid forms of the same calls (fixture-sized), so the statuses above are the geometry's */
    kvc_token_transfer_t v = fx_tokens(&f, KVC_D2H);
    v.format = 14, v.shape.kv_size = 1, v.shape.nh = 1, v.shape.hs = 16;
    cr_assert_eq(kvc_transfer_tokens(f.ctx, &v), KVC_OK, "%s", kvc_last_error());
    v.format = 17, v.shape.num_planes = 1, v.shape.plane_bytes[0] = 32;
    cr_assert_eq(kvc_transfer_tokens(f.ctx, &v), KVC_OK, "%s", kvc_last_error());
    memcpy(f.snap[2], f.chunk, f.sizes[2]); /* D2H wrote the chunk: the new baseline */

    f.slots[4] = 16; /* nb*bs = 16: one past the pool */
    TOKENS_FAIL(KVC_ERR_OUT_OF_RANGE, "slots[4] = 16", (void)0);
    f.slots[4] = INT64_MAX;
    TOKENS_FAIL(KVC_ERR_OUT_OF_RANGE, "slots[4] = 9223372036854775807", (void)0);
    /* An empty transfer may come with NULL chunk and slots (empty tensors) and does nothing. */
    kvc_token_transfer_t empty = fx_tokens(&f, KVC_H2D);
    empty.num_tokens = empty.num_slots = 0;
    empty.chunk = NULL;
    empty.slots = NULL;
    cr_assert_eq(kvc_transfer_tokens(f.ctx, &empty), KVC_OK, "%s", kvc_last_error());
    fx_expect_untouched(&f, "empty transfer");

    /* An out-of-range slot inside the skipped prefix is never read: the call succeeds and rows
     * [0, skip) of the chunk stay as they were. */
    kvc_token_transfer_t a = fx_tokens(&f, KVC_D2H);
    a.skip_prefix_tokens = 5;
    cr_assert_eq(kvc_transfer_tokens(f.ctx, &a), KVC_OK, "%s", kvc_last_error());
    for (int64_t p = 0; p < 2; p++)
        for (int64_t l = 0; l < 2; l++) {
            const size_t off = (size_t)((p * 2 + l) * FX_T) * 32;
            cr_assert(!memcmp(f.chunk + off, f.snap[2] + off, 5 * 32), "skipped rows were written");
        }
    fx_free(&f);
}

Test(transfer, block_errors_have_exact_status_and_write_nothing)
{
    fx_t f = fx_new();
    BLOCKS_FAIL(KVC_ERR_DTYPE, "element_size = 8: format NL_X_NB_BSV_BSS", a.format = 14, a.shape.kv_size = 1,
                a.shape.nh = 1, a.shape.hs = 4, a.shape.element_size = 8);
    BLOCKS_FAIL(KVC_ERR_SHAPE, "plane_bytes sum to 20 bytes", a.format = 17, a.shape.kv_size = 1, a.shape.nh = 1,
                a.shape.hs = 16, a.shape.num_planes = 1, a.shape.plane_bytes[0] = 20);
    BLOCKS_FAIL(KVC_ERR_SHAPE, "num_engine_ptrs = 2: NL_X_TWO_X_NB_BS_NH_HS needs 4", a.format = 16);
    void *with_null[2] = { f.obj[0], NULL };
    kvc_block_transfer_t ok = fx_blocks(&f, KVC_H2D);
    expect_fail(&f, kvc_transfer_blocks(NULL, &ok), KVC_ERR_INVALID_ARG, "NULL", "NULL ctx");
    expect_fail(&f, kvc_transfer_blocks(f.ctx, NULL), KVC_ERR_INVALID_ARG, "NULL", "NULL args");
    BLOCKS_FAIL(KVC_ERR_INVALID_ARG, "direction", a.direction = (kvc_direction_t)-1);
    BLOCKS_FAIL(KVC_ERR_FORMAT, "format 99", a.format = (kvc_format_t)99);
    BLOCKS_FAIL(KVC_ERR_DTYPE, "element_size = 5", a.shape.element_size = 5);
    BLOCKS_FAIL(KVC_ERR_SHAPE, "hs=0", a.shape.hs = 0);
    BLOCKS_FAIL(KVC_ERR_SHAPE, "block_stride_elems", a.format = 2, a.shape.block_stride_elems = 64);
    BLOCKS_FAIL(KVC_ERR_SHAPE, "num_engine_ptrs = 3", a.num_engine_ptrs = 3);
    BLOCKS_FAIL(KVC_ERR_SHAPE, "chunk_tokens = 6", a.chunk_tokens = 6);
    BLOCKS_FAIL(KVC_ERR_SHAPE, "chunk_tokens = 0", a.chunk_tokens = 0);
    BLOCKS_FAIL(KVC_ERR_SHAPE, "chunk_tokens = -8", a.chunk_tokens = -8);
    BLOCKS_FAIL(KVC_ERR_SHAPE, "num_objects = 1", a.num_objects = 1);
    BLOCKS_FAIL(KVC_ERR_SHAPE, "num_objects = 2", a.num_block_ids = 2); /* 2 ids fill one object */
    BLOCKS_FAIL(KVC_ERR_SHAPE, "num_objects = 2", a.chunk_tokens = 12);  /* 3 ids per object */
    BLOCKS_FAIL(KVC_ERR_SHAPE, "num_block_ids = -1", a.num_block_ids = -1);
    BLOCKS_FAIL(KVC_ERR_INVALID_ARG, "objects is NULL", a.objects = NULL);
    BLOCKS_FAIL(KVC_ERR_INVALID_ARG, "objects[1] is NULL", a.objects = with_null);
    BLOCKS_FAIL(KVC_ERR_DTYPE, "int32", a.block_id_type = KVC_INDEX_INT32);
    BLOCKS_FAIL(KVC_ERR_INVALID_ARG, "block_ids is NULL", a.block_ids = NULL);
    BLOCKS_FAIL(KVC_ERR_OUT_OF_RANGE, "skip_prefix_blocks = 4", a.skip_prefix_blocks = 4);
    BLOCKS_FAIL(KVC_ERR_OUT_OF_RANGE, "skip_prefix_blocks = -2", a.skip_prefix_blocks = -2);
    f.ids[2] = 4; /* nb = 4 */
    BLOCKS_FAIL(KVC_ERR_OUT_OF_RANGE, "block_ids[2] = 4", (void)0);
    f.ids[2] = 2;
    f.ids[1] = -1; /* negative block ids are errors, not skips */
    BLOCKS_FAIL(KVC_ERR_OUT_OF_RANGE, "block_ids[1] = -1", (void)0);

    /* Bad ids inside the skipped prefix are not read; rows of skipped blocks stay untouched. */
    kvc_block_transfer_t a = fx_blocks(&f, KVC_D2H);
    a.skip_prefix_blocks = 2;
    cr_assert_eq(kvc_transfer_blocks(f.ctx, &a), KVC_OK, "%s", kvc_last_error());
    cr_assert(!memcmp(f.obj[0], f.snap[3], f.sizes[3]), "object 0 holds only skipped blocks");
    for (int64_t p = 0; p < 2; p++)
        for (int64_t l = 0; l < 2; l++) { /* object 1: rows 0-3 written, 4-7 (no block) untouched */
            const size_t off = (size_t)((p * 2 + l) * 8) * 32;
            cr_assert(memcmp(f.obj[1] + off, f.snap[4] + off, 4 * 32), "block 2 was not copied");
            cr_assert(!memcmp(f.obj[1] + off + 4 * 32, f.snap[4] + off + 4 * 32, 4 * 32), "partial tail was written");
        }
    fx_free(&f);
}

Test(transfer, layer_and_flash_errors_have_exact_status_and_write_nothing)
{
    fx_t f = fx_new();
    kvc_page_shape_t one = f.s;
    one.nl = 1;
    for (int dir = 0; dir < 2; dir++) {
        kvc_layer_transfer_t ok = { .format = 1, .direction = dir, .shape = one, .engine_ptrs = f.eng_ptrs,
                                    .num_engine_ptrs = 1, .chunk = f.chunk, .num_tokens = FX_T, .slots = f.slots,
                                    .slot_type = KVC_INDEX_INT64, .num_slots = FX_T };
        kvc_layer_transfer_t a = ok;
        a.format = 0;
        expect_fail(&f, kvc_transfer_layer(f.ctx, &a), KVC_ERR_FORMAT, "kvc_transfer_tokens", "layer: cross-layer");
        a = ok;
        a.format = 8;
        expect_fail(&f, kvc_transfer_layer(f.ctx, &a), KVC_ERR_FORMAT, "NB_NL_TWO_NH_BS_HS", "layer: cross-layer 8");
        a = ok;
        a.shape.nl = 2;
        expect_fail(&f, kvc_transfer_layer(f.ctx, &a), KVC_ERR_SHAPE, "shape.nl = 2", "layer: nl");
        a = ok;
        a.num_engine_ptrs = 2;
        expect_fail(&f, kvc_transfer_layer(f.ctx, &a), KVC_ERR_SHAPE, "num_engine_ptrs = 2", "layer: ptrs");
        a = ok;
        a.format = 9;
        a.num_engine_ptrs = 1;
        expect_fail(&f, kvc_transfer_layer(f.ctx, &a), KVC_ERR_SHAPE, "needs 2", "layer: sgl needs K and V");
        a = ok;
        a.slot_type = KVC_INDEX_INT32;
        expect_fail(&f, kvc_transfer_layer(f.ctx, &a), KVC_ERR_DTYPE, "int32", "layer: int32 slots");
        a = ok;
        f.slots[0] = 16;
        expect_fail(&f, kvc_transfer_layer(f.ctx, &a), KVC_ERR_OUT_OF_RANGE, "slots[0] = 16", "layer: slot range");
        f.slots[0] = 3;
        a.chunk = NULL;
        expect_fail(&f, kvc_transfer_layer(f.ctx, &a), KVC_ERR_INVALID_ARG, "chunk is NULL", "layer: chunk");
        expect_fail(&f, kvc_transfer_layer(NULL, &ok), KVC_ERR_INVALID_ARG, "NULL", "layer: ctx");

        /* flash: chunk [2, NL=2, 6, 16] against K and V caches [4, 4, 2, 8] */
        kvc_flash_transfer_t fl = { .shape = f.s, .key_value = f.chunk, .num_tokens = FX_T, .key_cache = f.eng[0],
                                    .value_cache = f.eng[1], .slots = f.slots, .slot_type = KVC_INDEX_INT64,
                                    .num_slots = FX_T, .layer_idx = 1 };
        kvc_status_t (*op)(kvc_context_t *, const kvc_flash_transfer_t *) =
            dir ? kvc_load_and_reshape_flash : kvc_reshape_and_cache_back_flash;
        kvc_flash_transfer_t b = fl;
        b.layer_idx = 2;
        expect_fail(&f, op(f.ctx, &b), KVC_ERR_OUT_OF_RANGE, "layer_idx = 2", "flash: layer_idx");
        b = fl;
        b.layer_idx = -1;
        expect_fail(&f, op(f.ctx, &b), KVC_ERR_OUT_OF_RANGE, "layer_idx = -1", "flash: negative layer_idx");
        b = fl;
        b.value_cache = NULL;
        expect_fail(&f, op(f.ctx, &b), KVC_ERR_INVALID_ARG, "value_cache is NULL", "flash: value_cache");
        b = fl;
        b.key_cache = NULL;
        expect_fail(&f, op(f.ctx, &b), KVC_ERR_INVALID_ARG, "key_cache is NULL", "flash: key_cache");
        b = fl;
        b.slot_type = KVC_INDEX_INT32;
        expect_fail(&f, op(f.ctx, &b), KVC_ERR_DTYPE, "int32", "flash: int32 slots");
        b = fl;
        b.shape.element_size = 0;
        expect_fail(&f, op(f.ctx, &b), KVC_ERR_DTYPE, "element_size", "flash: element size");
        b = fl;
        b.num_slots = 7;
        expect_fail(&f, op(f.ctx, &b), KVC_ERR_SHAPE, "num_slots = 7", "flash: counts");
        f.slots[5] = 100;
        expect_fail(&f, op(f.ctx, &fl), KVC_ERR_OUT_OF_RANGE, "slots[5] = 100", "flash: slot range");
        f.slots[5] = 9;
        expect_fail(&f, op(NULL, &fl), KVC_ERR_INVALID_ARG, "NULL", "flash: ctx");
    }
    fx_free(&f);
}

/* ------------------------------------------------------------------ overlap of chunk and pool */

/* One arena: [gap | engine tensor 0 | ... | engine tensor n-1 | gap]; a host buffer placed at
 * `at` bytes into it. The gaps are one chunk long, so a chunk ending exactly at the first tensor or
 * starting exactly after the last is legal, one byte further overlaps. */
typedef struct {
    uint8_t *arena, *snap;
    size_t gap, total, tensor, pad; /* pad: the last block's padding (not the tensor's) */
    int64_t n;
    void *ptrs[8];
} arena_t;

static arena_t arena_new(int fmt, const kvc_page_shape_t *s, size_t gap)
{
    arena_t a = { .gap = gap, .tensor = ref_engine_tensor_bytes(fmt, s), .n = kvc_shape_ptr_count(fmt, s) };
    /* A padded block step: the last block's padding is not part of a tensor (the pool may end
     * there, or hold another layer's page), so a buffer may start where its content ends. */
    a.pad = s->block_stride_elems ? (size_t)(s->block_stride_elems - s->bs * s->nh * s->hs) * (size_t)s->element_size : 0;
    cr_assert(a.n > 0 && a.n <= 8);
    a.total = 2 * gap + (size_t)a.n * a.tensor;
    a.arena = malloc(a.total);
    a.snap = malloc(a.total);
    for (size_t i = 0; i < a.total; i++) a.arena[i] = (uint8_t)(i * 13 + 5);
    memcpy(a.snap, a.arena, a.total);
    for (int64_t i = 0; i < a.n; i++) a.ptrs[i] = a.arena + gap + (size_t)i * a.tensor;
    return a;
}

static void arena_free(arena_t *a)
{
    free(a->arena);
    free(a->snap);
}

/* Offsets into the arena for a buffer of `bytes`: legal (adjacent), then overlapping. */
static void placements(const arena_t *a, size_t bytes, size_t legal[2], size_t bad[3])
{
    legal[0] = a->gap - bytes;                      /* ends where tensor 0 starts */
    legal[1] = a->total - a->gap - a->pad;          /* starts where the last tensor's content ends */
    bad[0] = a->gap - bytes + 1;                    /* last byte on tensor 0's first */
    bad[1] = a->total - a->gap - a->pad - 1;        /* first byte on the last tensor's last */
    bad[2] = a->gap + a->tensor / 2;                /* inside tensor 0 */
}

static void expect_overlap(const arena_t *a, kvc_status_t st, const char *what, int fmt, size_t at)
{
    cr_assert_eq(st, KVC_ERR_OVERLAP, "%s fmt %d at %zu: %s (%s)", what, fmt, at, kvc_status_name(st), kvc_last_error());
    cr_assert(!memcmp(a->arena, a->snap, a->total), "%s fmt %d at %zu: a refused call wrote", what, fmt, at);
}

Test(transfer, chunk_overlapping_the_engine_pool_is_refused)
{
    kvc_context_t *ctx = ctx_threads(1);
    int64_t slots[3] = { 0, 2, 5 }, ids[2] = { 2, 0 };
    for (int fmt = 0; fmt < KVC_FORMAT_COUNT; fmt++) {
        kvc_page_shape_t s = { .element_size = 2, .nl = 2, .nb = 3, .bs = 2, .nh = 2, .hs = 4, .kv_size = 2 };
        if (kvc_format_is_mla(fmt)) s.nh = 1;
        if (kvc_format_is_mla(fmt) || kvc_format_is_fused_packed(fmt)) s.kv_size = 1;
        if (fmt == 3 || fmt == 14 || is_fused(fmt)) s.block_stride_elems = s.bs * s.nh * s.hs + 3; /* padding counts */
        if (fmt == KVC_FMT_NL_X_NP_X_NB_BS_ONE_HS) /* two planes of one size: the arena's tensors are alike */
            s = (kvc_page_shape_t){ .element_size = 2, .nl = 2, .nb = 3, .bs = 2, .nh = 1, .hs = 4, .kv_size = 1,
                                    .num_planes = 2, .plane_bytes = { 4, 4 } };
        const int64_t planes = s.kv_size;
        const size_t row = row_bytes(fmt, &s, KVC_CHUNK_DEFAULT), chunk = (size_t)(planes * s.nl * 3) * row,
                     object = (size_t)(planes * s.nl * s.bs) * row;
        arena_t a = arena_new(fmt, &s, chunk > object ? chunk : object);
        size_t legal[2], bad[3];
        for (int dir = 0; dir < 2; dir++) {
            kvc_token_transfer_t t = { .format = fmt, .direction = dir, .shape = s, .engine_ptrs = a.ptrs,
                                       .num_engine_ptrs = a.n, .num_tokens = 3, .slots = slots,
                                       .slot_type = KVC_INDEX_INT64, .num_slots = 3 };
            placements(&a, chunk, legal, bad);
            for (int i = 0; i < 3; i++) {
                t.chunk = a.arena + bad[i];
                expect_overlap(&a, kvc_transfer_tokens(ctx, &t), "tokens", fmt, bad[i]);
            }
            for (int i = 0; i < 2; i++) {
                t.chunk = a.arena + legal[i];
                cr_assert_eq(kvc_transfer_tokens(ctx, &t), KVC_OK, "tokens fmt %d adjacent: %s", fmt, kvc_last_error());
            }
            uint8_t *own = malloc(object);
            void *objs[2] = { own, NULL };
            kvc_block_transfer_t b = { .format = fmt, .direction = dir, .shape = s, .engine_ptrs = a.ptrs,
                                       .num_engine_ptrs = a.n, .objects = objs, .num_objects = 2, .chunk_tokens = s.bs,
                                       .block_ids = ids, .block_id_type = KVC_INDEX_INT64, .num_block_ids = 2 };
            placements(&a, object, legal, bad);
            memcpy(a.snap, a.arena, a.total);
            for (int i = 0; i < 3; i++) {
                objs[1] = a.arena + bad[i];
                expect_overlap(&a, kvc_transfer_blocks(ctx, &b), "blocks", fmt, bad[i]);
            }
            for (int i = 0; i < 2; i++) {
                objs[1] = a.arena + legal[i];
                cr_assert_eq(kvc_transfer_blocks(ctx, &b), KVC_OK, "blocks fmt %d adjacent: %s", fmt, kvc_last_error());
            }
            free(own);
            memcpy(a.snap, a.arena, a.total);
        }
        arena_free(&a);
        if (kvc_format_is_cross_layer(fmt)) continue;
        /* One layer: the same with nl = 1. */
        s.nl = 1;
        const size_t lchunk = (size_t)(planes * 3) * row;
        arena_t l = arena_new(fmt, &s, lchunk);
        size_t legal1[2], bad1[3];
        placements(&l, lchunk, legal1, bad1);
        kvc_layer_transfer_t lt = { .format = fmt, .direction = KVC_D2H, .shape = s, .engine_ptrs = l.ptrs,
                                    .num_engine_ptrs = l.n, .num_tokens = 3, .slots = slots,
                                    .slot_type = KVC_INDEX_INT64, .num_slots = 3 };
        for (int i = 0; i < 3; i++) {
            lt.chunk = l.arena + bad1[i];
            expect_overlap(&l, kvc_transfer_layer(ctx, &lt), "layer", fmt, bad1[i]);
        }
        lt.chunk = l.arena + legal1[1];
        cr_assert_eq(kvc_transfer_layer(ctx, &lt), KVC_OK, "layer fmt %d adjacent: %s", fmt, kvc_last_error());
        arena_free(&l);
    }
    /* flash: key_value [2, NL, T, NH*HS] against the K and V caches [NB, BS, NH, HS]. */
    kvc_page_shape_t s = { .element_size = 2, .nl = 2, .nb = 3, .bs = 2, .nh = 2, .hs = 4, .kv_size = 2 };
    const size_t kv = 2 * 2 * 3 * 8 * 2;
    arena_t a = arena_new(KVC_FMT_TWO_X_NL_X_NB_BS_NH_HS, &(kvc_page_shape_t){ .element_size = 2, .nl = 1, .nb = 3, .bs = 2,
                                                                              .nh = 2, .hs = 4, .kv_size = 2 }, kv);
    size_t legal[2], bad[3];
    placements(&a, kv, legal, bad);
    kvc_flash_transfer_t fl = { .shape = s, .num_tokens = 3, .key_cache = a.ptrs[0], .value_cache = a.ptrs[1],
                                .slots = slots, .slot_type = KVC_INDEX_INT64, .num_slots = 3, .layer_idx = 1 };
    for (int i = 0; i < 3; i++) {
        fl.key_value = a.arena + bad[i];
        expect_overlap(&a, kvc_load_and_reshape_flash(ctx, &fl), "flash D2H", 9, bad[i]);
        expect_overlap(&a, kvc_reshape_and_cache_back_flash(ctx, &fl), "flash H2D", 9, bad[i]);
    }
    fl.key_value = a.arena + legal[0];
    cr_assert_eq(kvc_load_and_reshape_flash(ctx, &fl), KVC_OK, "flash adjacent: %s", kvc_last_error());
    arena_free(&a);
    kvc_context_destroy(ctx);
}
