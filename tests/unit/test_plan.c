/* SPDX-License-Identifier: BSD-3-Clause */
/* Plans (plan.h): the object-group transfer and the CacheBlend retrieve against oracles composed of
 * plain memcpy, the scalar transfer oracle (tests/ref/transfer_ref) and the scalar RoPE oracle
 * (tests/ref/rope_ref), run step by step in the documented order; steps reuse their staging
 * buffers, so an executor that reorders copies, launches, rotations or scatters fails. Then every
 * validation error with its exact status and proof that nothing was written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <kvcore.h>

#include "ref/rope_ref.h"
#include "ref/transfer_ref.h"
#include "test_util.h"

/* ------------------------------------------------------------------ helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

/* A buffer in two copies, the library's and the oracle's, with a snapshot for "nothing written". */
typedef struct {
    uint8_t *fast, *ref, *snap;
    size_t n;
} buf_t;

static buf_t buf_new(size_t n)
{
    buf_t b = { aligned_alloc(64, (n + 63) / 64 * 64), aligned_alloc(64, (n + 63) / 64 * 64),
                aligned_alloc(64, (n + 63) / 64 * 64), n };
    cr_assert(b.fast && b.ref && b.snap);
    for (size_t i = 0; i < n; i++) b.fast[i] = (uint8_t)(rnd() >> 56);
    memcpy(b.ref, b.fast, n);
    memcpy(b.snap, b.fast, n);
    return b;
}

static void buf_free(buf_t *b)
{
    free(b->fast);
    free(b->ref);
    free(b->snap);
}

static void buf_expect(const buf_t *b, const char *what, const char *desc)
{
    if (!memcmp(b->fast, b->ref, b->n)) return;
    size_t i = 0;
    while (b->fast[i] == b->ref[i]) i++;
    cr_assert_fail("%s differs from the oracle at byte %zu of %zu; %s", what, i, b->n, desc);
}

static void buf_untouched(const buf_t *b, const char *what, const char *desc)
{
    cr_assert(!memcmp(b->fast, b->snap, b->n), "%s was written by a failed plan: %s", what, desc);
}

static kvc_context_t *cpu_ctx(void)
{
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS,
                               .backend = "cpu",
                               .num_threads = 2 };
    kvc_context_t *ctx = NULL;
    cr_assert_eq(kvc_context_create(&p, &ctx), KVC_OK, "%s", kvc_last_error());
    return ctx;
}

/* A small geometry of each format (fused: kv_size 1 and hs = CS; MLA: one head). */
static kvc_page_shape_t shape_of(int fmt, int es)
{
    kvc_page_shape_t s = { .kv_size = 2, .element_size = es, .nl = 2, .nb = 8, .bs = 4, .nh = 2, .hs = 16 };
    if (kvc_format_is_mla(fmt)) s = (kvc_page_shape_t){ .kv_size = 1, .element_size = es, .nl = 2, .nb = 8, .bs = 4,
                                                        .nh = 1, .hs = 24 };
    if (kvc_format_is_fused_packed(fmt)) {
        s.kv_size = 1;
        s.hs = 32;
    }
    return s;
}

static int64_t row_bytes(int fmt, const kvc_page_shape_t *s)
{
    return s->nh * ref_chunk_head_elems(fmt, s, KVC_CHUNK_DEFAULT) * s->element_size;
}

/* Engine tensors of one format. */
typedef struct {
    int64_t n;
    buf_t t[8];
    void *fast[8], *ref[8];
} engine_t;

static void engine_new(engine_t *e, int fmt, const kvc_page_shape_t *s)
{
    e->n = kvc_format_ptr_count(fmt, s->nl);
    cr_assert(e->n > 0 && e->n <= 8);
    for (int64_t i = 0; i < e->n; i++) {
        e->t[i] = buf_new(ref_engine_tensor_bytes(fmt, s));
        e->fast[i] = e->t[i].fast;
        e->ref[i] = e->t[i].ref;
    }
}

static void engine_free(engine_t *e)
{
    for (int64_t i = 0; i < e->n; i++) buf_free(&e->t[i]);
}

/* ------------------------------------------------------------------ object-group transfer */

enum { OG_GROUPS = 2, OG_OBJ = 2, OG_C = 8, OG_CAP = 12, OG_STEPS = 3, OG_HOST = 8 };

/* Two groups of one format, each with its engine, two staging objects and a block-id table; three
 * steps, the middle one launching both groups; steps 0 and 2 reuse the same objects. */
typedef struct {
    int fmt, dir;
    kvc_page_shape_t s;
    engine_t eng[OG_GROUPS];
    buf_t obj[OG_GROUPS][OG_OBJ];
    void *obj_fast[OG_GROUPS][OG_OBJ];
    buf_t host[OG_HOST]; /* host-side chunks of the staging copies */
    int64_t ids[OG_GROUPS][OG_CAP];
    kvc_kernel_group_t groups[OG_GROUPS];
    kvc_staging_copy_t copies[OG_STEPS][3];
    kvc_launch_var_t launches[OG_STEPS][2];
    kvc_batch_step_t steps[OG_STEPS];
    kvc_object_plan_t plan;
    int64_t obj_bytes;
} og_t;

/* (group, object) staged by each copy, and its host chunk. */
static const int og_copy_group[OG_STEPS][3] = { { 0, 0, -1 }, { 1, 0, -1 }, { 0, 0, -1 } };
static const int og_copy_obj[OG_STEPS][3] = { { 0, 1, -1 }, { 0, 0, -1 }, { 0, 1, -1 } };

static void og_new(og_t *f, int fmt, int dir)
{
    memset(f, 0, sizeof(*f));
    f->fmt = fmt;
    f->dir = dir;
    f->s = shape_of(fmt, 2);
    const int64_t planes = ref_chunk_planes(fmt, KVC_CHUNK_DEFAULT);
    f->obj_bytes = planes * f->s.nl * OG_C * row_bytes(fmt, &f->s);
    for (int g = 0; g < OG_GROUPS; g++) {
        engine_new(&f->eng[g], fmt, &f->s);
        for (int o = 0; o < OG_OBJ; o++) {
            f->obj[g][o] = buf_new((size_t)f->obj_bytes);
            f->obj_fast[g][o] = f->obj[g][o].fast;
        }
        /* distinct ids: an H2D block written twice would depend on the order */
        int64_t perm[8];
        for (int i = 0; i < 8; i++) perm[i] = i;
        for (int i = 7; i > 0; i--) {
            const int j = (int)(rnd() % (uint64_t)(i + 1));
            const int64_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (int i = 0; i < OG_CAP; i++) f->ids[g][i] = perm[i % 8];
        f->groups[g] = (kvc_kernel_group_t){ .format = fmt, .shape = f->s, .engine_ptrs = f->eng[g].fast,
                                             .num_engine_ptrs = f->eng[g].n, .objects = f->obj_fast[g],
                                             .num_objects = OG_OBJ, .chunk_tokens = OG_C, .block_ids = f->ids[g],
                                             .block_ids_capacity = OG_CAP };
    }
    /* bpo = 2. Step 0: group 0, ids [0, 4), 2 objects, skip 1. Step 1: group 1 ids [0, 2), then
     * group 0 ids [4, 6) (ids 4, 5 = ids 0..3's engine blocks 4..7: distinct), 1 object each.
     * Step 2: group 0, ids [8, 12) (blocks repeat step 0's: H2D overwrites them in order). */
    const kvc_launch_var_t lv[OG_STEPS][2] = { { { 0, 0, 4, 2, 1 } },
                                               { { 1, 0, 2, 1, 0 }, { 0, 4, 2, 1, 0 } },
                                               { { 0, 8, 4, 2, 0 } } };
    const int nl[OG_STEPS] = { 1, 2, 1 }, nc[OG_STEPS] = { 2, 1, 2 };
    int h = 0;
    for (int i = 0; i < OG_STEPS; i++) {
        for (int j = 0; j < nl[i]; j++) f->launches[i][j] = lv[i][j];
        for (int j = 0; j < nc[i]; j++, h++) {
            f->host[h] = buf_new((size_t)f->obj_bytes);
            void *objp = f->obj[og_copy_group[i][j]][og_copy_obj[i][j]].fast;
            /* host_offset makes the 64-byte alignment split the copy at uneven places */
            f->copies[i][j] = dir == KVC_H2D
                                  ? (kvc_staging_copy_t){ objp, f->host[h].fast, (size_t)f->obj_bytes, 40 + 8 * h }
                                  : (kvc_staging_copy_t){ f->host[h].fast, objp, (size_t)f->obj_bytes, 40 + 8 * h };
        }
        f->steps[i] = (kvc_batch_step_t){ f->copies[i], nc[i], f->launches[i], nl[i] };
    }
    /* step 1 group 1 stages object 0 of group 1; the copy table above says so */
    f->plan = (kvc_object_plan_t){ .direction = dir, .host_buffer_alignment = 64, .groups = f->groups,
                                   .num_groups = OG_GROUPS, .steps = f->steps, .num_steps = OG_STEPS };
}

static void og_free(og_t *f)
{
    for (int g = 0; g < OG_GROUPS; g++) {
        engine_free(&f->eng[g]);
        for (int o = 0; o < OG_OBJ; o++) buf_free(&f->obj[g][o]);
    }
    for (int h = 0; h < OG_HOST; h++)
        if (f->host[h].fast) buf_free(&f->host[h]);
}

/* The oracle: each step in the documented order, on the ref copies. */
static void og_oracle_copies(og_t *f, int i, int h)
{
    for (int j = 0; j < f->steps[i].num_staging; j++, h++) {
        uint8_t *o = f->obj[og_copy_group[i][j]][og_copy_obj[i][j]].ref;
        if (f->dir == KVC_H2D) memcpy(o, f->host[h].ref, (size_t)f->obj_bytes);
        else memcpy(f->host[h].ref, o, (size_t)f->obj_bytes);
    }
}

static void og_oracle(og_t *f)
{
    int h = 0;
    for (int i = 0; i < OG_STEPS; i++) {
        if (f->dir == KVC_H2D) og_oracle_copies(f, i, h);
        for (int j = 0; j < f->steps[i].num_launches; j++) {
            const kvc_launch_var_t *lv = &f->steps[i].launches[j];
            const int g = (int)lv->group_idx;
            void *objs[OG_OBJ] = { f->obj[g][0].ref, f->obj[g][1].ref };
            const kvc_block_transfer_t t = { .format = f->fmt, .direction = f->dir, .shape = f->s,
                                             .engine_ptrs = f->eng[g].ref, .num_engine_ptrs = f->eng[g].n,
                                             .objects = objs, .num_objects = lv->num_objects, .chunk_tokens = OG_C,
                                             .block_ids = f->ids[g] + lv->block_ids_offset,
                                             .block_id_type = KVC_INDEX_INT64, .num_block_ids = lv->total_blocks,
                                             .skip_prefix_blocks = lv->skip_prefix_blocks };
            ref_transfer_blocks(&t);
        }
        if (f->dir == KVC_D2H) og_oracle_copies(f, i, h);
        h += (int)f->steps[i].num_staging;
    }
}

static void og_expect(const og_t *f, int oracle, const char *desc)
{
    for (int g = 0; g < OG_GROUPS; g++) {
        for (int64_t i = 0; i < f->eng[g].n; i++)
            oracle ? buf_expect(&f->eng[g].t[i], "engine", desc) : buf_untouched(&f->eng[g].t[i], "engine", desc);
        for (int o = 0; o < OG_OBJ; o++)
            oracle ? buf_expect(&f->obj[g][o], "object", desc) : buf_untouched(&f->obj[g][o], "object", desc);
    }
    for (int h = 0; h < OG_HOST; h++)
        if (f->host[h].fast)
            oracle ? buf_expect(&f->host[h], "host chunk", desc) : buf_untouched(&f->host[h], "host chunk", desc);
}

/* 14 and 17 (rows of several parts, one launch each) are refused in plans: see the errors test. */
static const int og_formats[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 16 };

Test(plan, object_plan_matches_step_by_step_oracle)
{
    kvc_context_t *ctx = cpu_ctx();
    for (size_t k = 0; k < sizeof(og_formats) / sizeof(og_formats[0]); k++)
        for (int dir = 0; dir < 2; dir++) {
            og_t f;
            og_new(&f, og_formats[k], dir);
            char desc[96];
            snprintf(desc, sizeof(desc), "format %d (%s) %s", f.fmt, kvc_format_name(f.fmt), dir ? "D2H" : "H2D");
            cr_assert_eq(kvc_execute_object_plan(ctx, &f.plan), KVC_OK, "%s: %s", desc, kvc_last_error());
            og_oracle(&f);
            og_expect(&f, 1, desc);
            og_free(&f);
        }
    kvc_context_destroy(ctx);
}

/* ------------------------------------------------------------------ CacheBlend retrieve */

enum { CB_ST = 6, CB_SLOTS = 2, CB_CAP = 20, CB_HOST = 4, CB_POS = 64, CB_STEPS = 3 };

typedef struct {
    int fmt, rope_on;
    kvc_dtype_t dt;
    size_t es;
    kvc_page_shape_t s;
    int64_t planes, row, row_elems, slot_bytes, heads, head_stride, off_bytes, rot;
    engine_t eng;
    uint8_t *mask_eng[8]; /* which engine elements hold rotated values (oracle side) */
    buf_t slot[CB_SLOTS];
    uint8_t *mask_slot[CB_SLOTS];
    void *slot_fast[CB_SLOTS];
    buf_t host[CB_HOST];
    int64_t slot_mapping[CB_CAP];
    kvc_cb_group_t group;
    int64_t staging[CB_HOST][4], ropes[3][4], scatters[4][4], offsets[CB_STEPS][3];
    kvc_cb_plan_t plan;
    void *table;
} cb_t;

static void fill_values(void *p, kvc_dtype_t dt, size_t n)
{
    for (size_t i = 0; i < n; i++) rope_ref_put(p, dt, i, ((double)(rnd() >> 11) / 9007199254740992.0) * 8 - 4);
}

static void cb_new(cb_t *f, kvc_context_t *ctx, int fmt, kvc_dtype_t dt, int rope_on)
{
    memset(f, 0, sizeof(*f));
    f->fmt = fmt;
    f->dt = dt;
    f->rope_on = rope_on;
    f->es = kvc_dtype_size(dt);
    f->s = shape_of(fmt, (int)f->es);
    f->planes = ref_chunk_planes(fmt, KVC_CHUNK_DEFAULT);
    f->row = row_bytes(fmt, &f->s);
    f->row_elems = f->row / (int64_t)f->es;
    f->slot_bytes = f->planes * f->s.nl * CB_ST * f->row;
    /* Rotation geometry: MLA rotates the last 8 of its 24-element latent row (rope_base_offset),
     * fused rows rotate the K half of each 2*HS head, the others a full or partial head. */
    if (kvc_format_is_mla(fmt)) {
        f->heads = 1, f->head_stride = 24, f->off_bytes = 16 * (int64_t)f->es, f->rot = 8;
    } else if (kvc_format_is_fused_packed(fmt)) {
        f->heads = 2, f->head_stride = 32, f->rot = 16;
    } else {
        f->heads = 2, f->head_stride = 16, f->rot = dt == KVC_DTYPE_F16 ? 8 : 16;
    }
    engine_new(&f->eng, fmt, &f->s);
    for (int64_t i = 0; i < f->eng.n; i++) {
        fill_values(f->eng.t[i].fast, dt, f->eng.t[i].n / f->es);
        memcpy(f->eng.t[i].ref, f->eng.t[i].fast, f->eng.t[i].n);
        memcpy(f->eng.t[i].snap, f->eng.t[i].fast, f->eng.t[i].n);
        f->mask_eng[i] = calloc(1, f->eng.t[i].n);
    }
    for (int k = 0; k < CB_SLOTS; k++) {
        f->slot[k] = buf_new((size_t)f->slot_bytes);
        f->slot_fast[k] = f->slot[k].fast;
        f->mask_slot[k] = calloc(1, (size_t)f->slot_bytes);
    }
    for (int k = 0; k < CB_HOST; k++) {
        f->host[k] = buf_new((size_t)f->slot_bytes);
        fill_values(f->host[k].fast, dt, (size_t)f->slot_bytes / f->es);
        memcpy(f->host[k].ref, f->host[k].fast, (size_t)f->slot_bytes);
        memcpy(f->host[k].snap, f->host[k].fast, (size_t)f->slot_bytes);
    }
    /* distinct engine slots (an H2D slot written twice would depend on the order), two skipped */
    int64_t perm[32];
    for (int i = 0; i < 32; i++) perm[i] = i;
    for (int i = 31; i > 0; i--) {
        const int j = (int)(rnd() % (uint64_t)(i + 1));
        const int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < CB_CAP; i++) f->slot_mapping[i] = i == 3 || i == 12 ? -1 : perm[i];
    f->table = calloc(CB_POS * (size_t)f->rot, f->es);
    kvc_rope_table_t tab = { .data = f->table, .dtype = dt, .max_position = CB_POS, .rot_dim = (size_t)f->rot };
    cr_assert_eq(kvc_rope_cache_build(ctx, NULL, &tab, 10000.0), KVC_OK, "%s", kvc_last_error());
    if (!rope_on) tab.data = NULL;
    f->group = (kvc_cb_group_t){ .format = fmt, .shape = f->s, .engine_ptrs = f->eng.fast, .num_engine_ptrs = f->eng.n,
                                 .temp_slots = f->slot_fast, .num_temp_slots = CB_SLOTS, .slot_tokens = CB_ST,
                                 .slot_mapping = f->slot_mapping, .slot_mapping_capacity = CB_CAP, .table = tab,
                                 .key_dtype = dt, .rope_num_heads = f->heads, .rope_head_stride = f->head_stride,
                                 .rope_base_offset = f->off_bytes,
                                 .style = dt == KVC_DTYPE_BF16 ? KVC_ROPE_GPTJ : KVC_ROPE_NEOX };
    /* Step 0 stages chunks 0, 1 into slots 0, 1, rotates both, scatters 6 and 4 tokens; step 1
     * reuses slot 0 for chunk 2 (rotated, 5 tokens); step 2 reuses slot 1 for chunk 3 (not
     * rotated, 5 tokens). */
    const int slot_of[CB_HOST] = { 0, 1, 0, 1 };
    for (int k = 0; k < CB_HOST; k++) {
        f->staging[k][0] = (int64_t)(uintptr_t)f->slot[slot_of[k]].fast;
        f->staging[k][1] = (int64_t)(uintptr_t)f->host[k].fast;
        f->staging[k][2] = f->slot_bytes;
        f->staging[k][3] = 24 * k + 8;
    }
    const int64_t ropes[3][4] = { { 0, 0, 3, 10 }, { 0, 1, 7, 1 }, { 0, 0, 20, 5 } };
    const int64_t scatters[4][4] = { { 0, 0, 0, 6 }, { 0, 1, 6, 4 }, { 0, 0, 10, 5 }, { 0, 1, 15, 5 } };
    const int64_t offsets[CB_STEPS][3] = { { 2, 2, 2 }, { 3, 3, 3 }, { 4, 3, 4 } };
    memcpy(f->ropes, ropes, sizeof(ropes));
    memcpy(f->scatters, scatters, sizeof(scatters));
    memcpy(f->offsets, offsets, sizeof(offsets));
    f->plan = (kvc_cb_plan_t){ .host_buffer_alignment = 32, .groups = &f->group, .num_groups = 1,
                               .staging = &f->staging[0][0], .num_staging = CB_HOST, .ropes = &f->ropes[0][0],
                               .num_ropes = 3, .scatters = &f->scatters[0][0], .num_scatters = 4,
                               .step_offsets = &f->offsets[0][0], .num_steps = CB_STEPS };
}

static void cb_free(cb_t *f)
{
    for (int64_t i = 0; i < f->eng.n; i++) free(f->mask_eng[i]);
    engine_free(&f->eng);
    for (int k = 0; k < CB_SLOTS; k++) {
        buf_free(&f->slot[k]);
        free(f->mask_slot[k]);
    }
    for (int k = 0; k < CB_HOST; k++) buf_free(&f->host[k]);
    free(f->table);
}

/* Oracle rotation of one temp slot: every layer's keys (plane 0), in double, rounded once. */
static void cb_oracle_rope(cb_t *f, int k, int64_t old_start, int64_t new_start)
{
    const int neox = f->group.style == KVC_ROPE_NEOX;
    const size_t half = (size_t)f->rot / 2, off = (size_t)f->off_bytes / f->es;
    for (int64_t l = 0; l < f->s.nl; l++)
        for (int64_t t = 0; t < CB_ST; t++)
            for (int64_t h = 0; h < f->heads; h++)
                for (size_t i = 0; i < half; i++) {
                    const size_t base = (size_t)((l * CB_ST + t) * f->row_elems + h * f->head_stride) + off;
                    const size_t xi = base + rope_ref_x(i, (size_t)f->rot, neox);
                    const size_t yi = base + rope_ref_y(i, (size_t)f->rot, neox);
                    const size_t po = (size_t)(old_start + t) * (size_t)f->rot, pn = (size_t)(new_start + t) * (size_t)f->rot;
                    double xo, yo;
                    rope_ref_fused_pair_unit(rope_ref_get(f->slot[k].ref, f->dt, xi), rope_ref_get(f->slot[k].ref, f->dt, yi),
                                             rope_ref_get(f->table, f->dt, po + i), rope_ref_get(f->table, f->dt, po + half + i),
                                             rope_ref_get(f->table, f->dt, pn + i), rope_ref_get(f->table, f->dt, pn + half + i),
                                             &xo, &yo);
                    rope_ref_put(f->slot[k].ref, f->dt, xi, xo);
                    rope_ref_put(f->slot[k].ref, f->dt, yi, yo);
                    memset(f->mask_slot[k] + xi * f->es, 0xFF, f->es);
                    memset(f->mask_slot[k] + yi * f->es, 0xFF, f->es);
                }
}

/* Oracle scatter of the first n rows of a slot: a compact chunk through the transfer oracle, for
 * the values and for the rotation mask alike. */
static void cb_oracle_scatter(cb_t *f, int k, int64_t off, int64_t n)
{
    uint8_t *vals = malloc((size_t)(f->planes * f->s.nl * n * f->row)), *mask = malloc((size_t)(f->planes * f->s.nl * n * f->row));
    for (int64_t pl = 0; pl < f->planes * f->s.nl; pl++) {
        memcpy(vals + pl * n * f->row, f->slot[k].ref + pl * CB_ST * f->row, (size_t)(n * f->row));
        memcpy(mask + pl * n * f->row, f->mask_slot[k] + pl * CB_ST * f->row, (size_t)(n * f->row));
    }
    kvc_token_transfer_t t = { .format = f->fmt, .direction = KVC_H2D, .shape = f->s, .engine_ptrs = f->eng.ref,
                               .num_engine_ptrs = f->eng.n, .chunk = vals, .num_tokens = n,
                               .slots = f->slot_mapping + off, .slot_type = KVC_INDEX_INT64, .num_slots = n };
    ref_transfer_tokens(&t);
    t.engine_ptrs = (void *const *)f->mask_eng;
    t.chunk = mask;
    ref_transfer_tokens(&t);
    free(vals);
    free(mask);
}

static void cb_oracle(cb_t *f)
{
    int64_t s0 = 0, r0 = 0, c0 = 0;
    for (int i = 0; i < CB_STEPS; i++) {
        for (int64_t j = s0; j < f->offsets[i][0]; j++) {
            const int k = f->staging[j][0] == (int64_t)(uintptr_t)f->slot[0].fast ? 0 : 1;
            memcpy(f->slot[k].ref, f->host[j].ref, (size_t)f->slot_bytes);
            memset(f->mask_slot[k], 0, (size_t)f->slot_bytes);
        }
        for (int64_t j = r0; j < f->offsets[i][1] && f->rope_on; j++)
            cb_oracle_rope(f, (int)f->ropes[j][1], f->ropes[j][2], f->ropes[j][3]);
        for (int64_t j = c0; j < f->offsets[i][2]; j++)
            cb_oracle_scatter(f, (int)f->scatters[j][1], f->scatters[j][2], f->scatters[j][3]);
        s0 = f->offsets[i][0], r0 = f->offsets[i][1], c0 = f->offsets[i][2];
    }
}

/* Bytes equal where no rotation reached, one rounding apart (fp32: a few ulp) where one did. */
static void cb_compare(const cb_t *f, const buf_t *b, const uint8_t *mask, const char *what, const char *desc)
{
    for (size_t e = 0; e < b->n / f->es; e++) {
        const int rotated = mask[e * f->es] != 0;
        if (!rotated) {
            cr_assert(!memcmp(b->fast + e * f->es, b->ref + e * f->es, f->es), "%s element %zu differs (not rotated); %s",
                      what, e, desc);
            continue;
        }
        const double got = rope_ref_get(b->fast, f->dt, e), want = rope_ref_get(b->ref, f->dt, e);
        const double tol = f->dt == KVC_DTYPE_F32 ? 0x1p-18 * (1 + fabs(want)) : rope_ref_ulp(want, f->dt);
        cr_assert(fabs(got - want) <= tol, "%s element %zu: got %.9g, oracle %.9g; %s", what, e, got, want, desc);
    }
}

static const int cb_formats[] = { 0, 1, 2, 3, 5, 6, 7, 9, 10, 13, 15, 16 };

Test(plan, cb_plan_matches_step_by_step_oracle)
{
    kvc_context_t *ctx = cpu_ctx();
    const kvc_dtype_t dts[] = { KVC_DTYPE_F16, KVC_DTYPE_BF16, KVC_DTYPE_F32 };
    for (size_t k = 0; k < sizeof(cb_formats) / sizeof(cb_formats[0]); k++)
        for (int d = 0; d < 3; d++)
            for (int rope_on = 0; rope_on < 2; rope_on++) {
                cb_t f;
                cb_new(&f, ctx, cb_formats[k], dts[d], rope_on);
                char desc[128];
                snprintf(desc, sizeof(desc), "format %d (%s) %s rope %s", f.fmt, kvc_format_name(f.fmt),
                         kvc_dtype_name(f.dt), rope_on ? "on" : "off");
                cr_assert_eq(kvc_execute_cb_plan(ctx, &f.plan), KVC_OK, "%s: %s", desc, kvc_last_error());
                cb_oracle(&f);
                for (int64_t i = 0; i < f.eng.n; i++) cb_compare(&f, &f.eng.t[i], f.mask_eng[i], "engine", desc);
                for (int s = 0; s < CB_SLOTS; s++) cb_compare(&f, &f.slot[s], f.mask_slot[s], "temp slot", desc);
                cb_free(&f);
            }
    kvc_context_destroy(ctx);
}

/* ------------------------------------------------------------------ errors */

static void og_untouched(const og_t *f, const char *what)
{
    og_expect(f, 0, what);
}

static void expect_status(kvc_status_t got, kvc_status_t want, const char *needle, const char *what)
{
    cr_assert_eq(got, want, "%s: got %s, want %s (%s)", what, kvc_status_name(got), kvc_status_name(want),
                 kvc_last_error());
    cr_assert(strstr(kvc_last_error(), needle), "%s: message '%s' does not mention '%s'", what, kvc_last_error(),
              needle);
}

/* A mutated copy of the valid plan, in both directions: `want`, `needle` in the message, nothing
 * written. Mutations hit the last step where they can, so a plan run before it is checked shows. */
#define OG_FAIL(want, needle, ...)                                                                           \
    for (int dir_ = 0; dir_ < 2; dir_++) {                                                                   \
        og_t f;                                                                                              \
        og_new(&f, 1, dir_);                                                                                 \
        __VA_ARGS__;                                                                                         \
        expect_status(kvc_execute_object_plan(ctx, &f.plan), want, needle, #__VA_ARGS__);                    \
        og_untouched(&f, #__VA_ARGS__);                                                                      \
        og_free(&f);                                                                                         \
    }

Test(plan, object_plan_errors_have_exact_status_and_write_nothing)
{
    kvc_context_t *ctx = cpu_ctx();
    {
        og_t f;
        og_new(&f, 1, KVC_H2D);
        expect_status(kvc_execute_object_plan(NULL, &f.plan), KVC_ERR_INVALID_ARG, "NULL", "NULL ctx");
        expect_status(kvc_execute_object_plan(ctx, NULL), KVC_ERR_INVALID_ARG, "NULL", "NULL plan");
        og_free(&f);
    }
    OG_FAIL(KVC_ERR_INVALID_ARG, "field_mask", f.plan.field_mask = 1);
    OG_FAIL(KVC_ERR_INVALID_ARG, "direction", f.plan.direction = 2);
    OG_FAIL(KVC_ERR_INVALID_ARG, "power of two", f.plan.host_buffer_alignment = 0);
    OG_FAIL(KVC_ERR_INVALID_ARG, "power of two", f.plan.host_buffer_alignment = 48);
    OG_FAIL(KVC_ERR_INVALID_ARG, "num_groups", f.plan.num_groups = -1);
    OG_FAIL(KVC_ERR_INVALID_ARG, "groups is NULL", f.plan.groups = NULL);
    OG_FAIL(KVC_ERR_INVALID_ARG, "steps is NULL", f.plan.steps = NULL);
    OG_FAIL(KVC_ERR_INVALID_ARG, "steps[2]: num_staging", f.steps[2].num_staging = -1);
    OG_FAIL(KVC_ERR_INVALID_ARG, "steps[2]: launches is NULL", f.steps[2].launches = NULL);
    OG_FAIL(KVC_ERR_INVALID_ARG, "groups[1]: objects is NULL", f.groups[1].objects = NULL);
    OG_FAIL(KVC_ERR_INVALID_ARG, "groups[0]: num_block_ids", f.groups[0].block_ids_capacity = -1);
    OG_FAIL(KVC_ERR_OUT_OF_RANGE, "steps[2].launches[0]: group_idx 2", f.launches[2][0].group_idx = 2);
    OG_FAIL(KVC_ERR_OUT_OF_RANGE, "steps[2].launches[0]: group_idx -1", f.launches[2][0].group_idx = -1);
    OG_FAIL(KVC_ERR_OUT_OF_RANGE, "num_objects 0", f.launches[2][0].num_objects = 0);
    OG_FAIL(KVC_ERR_OUT_OF_RANGE, "num_objects 3", f.launches[2][0].num_objects = 3);
    /* LMCache's kernel takes four objects at most, whatever the group holds (only 2 entries are read) */
    OG_FAIL(KVC_ERR_OUT_OF_RANGE, "outside [1, 4]", f.groups[0].num_objects = 6; f.launches[2][0].num_objects = 5);
    OG_FAIL(KVC_ERR_OUT_OF_RANGE, "capacity 12", f.launches[2][0].block_ids_offset = 10);
    OG_FAIL(KVC_ERR_OUT_OF_RANGE, "capacity 12", f.launches[2][0].block_ids_offset = -1);
    OG_FAIL(KVC_ERR_OUT_OF_RANGE, "capacity 12", f.launches[2][0].total_blocks = -1);
    OG_FAIL(KVC_ERR_OUT_OF_RANGE, "block_ids[1] = 99", f.ids[0][9] = 99);
    OG_FAIL(KVC_ERR_OUT_OF_RANGE, "skip_prefix_blocks", f.launches[2][0].skip_prefix_blocks = 5);
    OG_FAIL(KVC_ERR_SHAPE, "num_objects = 1", f.launches[2][0].num_objects = 1);
    OG_FAIL(KVC_ERR_SHAPE, "chunk_tokens", f.groups[0].chunk_tokens = 6);
    OG_FAIL(KVC_ERR_FORMAT, "", f.groups[0].format = 99);
    OG_FAIL(KVC_ERR_UNSUPPORTED, "format NL_X_NB_BSV_BSS in a plan", f.groups[0].format = 14,
            f.groups[0].shape.kv_size = 1, f.groups[0].shape.nh = 1);
    /* 17 with two planes of one layer: the group's two pointers (with one plane it is one part, and runs) */
    OG_FAIL(KVC_ERR_UNSUPPORTED, "format NL_X_NP_X_NB_BS_ONE_HS in a plan", f.groups[0].format = 17,
            f.groups[0].shape.kv_size = 1, f.groups[0].shape.nh = 1, f.groups[0].shape.nl = 1,
            f.groups[0].shape.num_planes = 2, f.groups[0].shape.plane_bytes[0] = 16,
            f.groups[0].shape.plane_bytes[1] = 16);
    OG_FAIL(KVC_ERR_SHAPE, "num_engine_ptrs", f.groups[0].num_engine_ptrs = 1);
    OG_FAIL(KVC_ERR_OVERLAP, "objects[1]", f.obj_fast[0][1] = f.eng[0].fast[1]);
    OG_FAIL(KVC_ERR_INVALID_ARG, "steps[2].staging[1]: dst and src", f.copies[2][1].dest = NULL);
    OG_FAIL(KVC_ERR_INVALID_ARG, "steps[2].staging[0]: dst", f.copies[2][0].src = f.copies[2][0].dest);
    OG_FAIL(KVC_ERR_INVALID_ARG, "overflows", f.copies[2][0].host_offset = SIZE_MAX - 8);
    kvc_context_destroy(ctx);
}

static void cb_untouched(const cb_t *f, const char *what)
{
    for (int64_t i = 0; i < f->eng.n; i++) buf_untouched(&f->eng.t[i], "engine", what);
    for (int k = 0; k < CB_SLOTS; k++) buf_untouched(&f->slot[k], "temp slot", what);
    for (int k = 0; k < CB_HOST; k++) buf_untouched(&f->host[k], "host chunk", what);
}

#define CB_FAIL(want, needle, ...)                                                                           \
    do {                                                                                                     \
        cb_t f;                                                                                              \
        cb_new(&f, ctx, 1, KVC_DTYPE_F16, 1);                                                                \
        __VA_ARGS__;                                                                                         \
        expect_status(kvc_execute_cb_plan(ctx, &f.plan), want, needle, #__VA_ARGS__);                        \
        cb_untouched(&f, #__VA_ARGS__);                                                                      \
        cb_free(&f);                                                                                         \
    } while (0)

Test(plan, cb_plan_errors_have_exact_status_and_write_nothing)
{
    kvc_context_t *ctx = cpu_ctx();
    {
        cb_t f;
        cb_new(&f, ctx, 1, KVC_DTYPE_F16, 1);
        expect_status(kvc_execute_cb_plan(NULL, &f.plan), KVC_ERR_INVALID_ARG, "NULL", "NULL ctx");
        expect_status(kvc_execute_cb_plan(ctx, NULL), KVC_ERR_INVALID_ARG, "NULL", "NULL plan");
        cb_free(&f);
    }
    CB_FAIL(KVC_ERR_INVALID_ARG, "field_mask", f.plan.field_mask = 2);
    CB_FAIL(KVC_ERR_INVALID_ARG, "power of two", f.plan.host_buffer_alignment = 3);
    CB_FAIL(KVC_ERR_INVALID_ARG, "num_step_offsets", f.plan.num_steps = -1);
    CB_FAIL(KVC_ERR_INVALID_ARG, "ropes is NULL", f.plan.ropes = NULL);
    CB_FAIL(KVC_ERR_OUT_OF_RANGE, "step_offsets[1]", f.offsets[1][0] = 1);
    CB_FAIL(KVC_ERR_OUT_OF_RANGE, "step_offsets[2]", f.offsets[2][2] = 5);
    CB_FAIL(KVC_ERR_INVALID_ARG, "staging[3]: nbytes -1", f.staging[3][2] = -1);
    CB_FAIL(KVC_ERR_INVALID_ARG, "staging[3]: dst and src", f.staging[3][0] = 0);
    CB_FAIL(KVC_ERR_OUT_OF_RANGE, "ropes[2]: group_idx 1", f.ropes[2][0] = 1);
    CB_FAIL(KVC_ERR_OUT_OF_RANGE, "scatters[3]: group_idx -1", f.scatters[3][0] = -1);
    CB_FAIL(KVC_ERR_OUT_OF_RANGE, "ropes[2]: slot_idx 2", f.ropes[2][1] = 2);
    CB_FAIL(KVC_ERR_OUT_OF_RANGE, "ropes[2]: start", f.ropes[2][2] = -1);
    CB_FAIL(KVC_ERR_OUT_OF_RANGE, "ropes[2]: new_positions[4] = 64", f.ropes[2][3] = 60);
    CB_FAIL(KVC_ERR_OUT_OF_RANGE, "scatters[3]: slot_idx 5", f.scatters[3][1] = 5);
    CB_FAIL(KVC_ERR_OUT_OF_RANGE, "scatters[3]: num_tokens 7", f.scatters[3][3] = 7);
    CB_FAIL(KVC_ERR_OUT_OF_RANGE, "scatters[3]: slot mapping [17, +5)", f.scatters[3][2] = 17);
    CB_FAIL(KVC_ERR_OUT_OF_RANGE, "scatters[3]: slots[1] = 99", f.slot_mapping[16] = 99);
    CB_FAIL(KVC_ERR_DTYPE, "groups[0]: key_dtype f32", f.group.key_dtype = KVC_DTYPE_F32);
    CB_FAIL(KVC_ERR_DTYPE, "groups[0]: key_dtype", f.group.key_dtype = KVC_DTYPE_I32);
    CB_FAIL(KVC_ERR_DTYPE, "ropes[0]: table dtype bf16", f.group.table.dtype = KVC_DTYPE_BF16);
    CB_FAIL(KVC_ERR_SHAPE, "groups[0]: rope_num_heads 3", f.group.rope_num_heads = 3);
    CB_FAIL(KVC_ERR_SHAPE, "groups[0]: rope_base_offset 1", f.group.rope_base_offset = 1);
    CB_FAIL(KVC_ERR_SHAPE, "ropes[0]: rot_dim 32 exceeds head_size 16", f.group.table.rot_dim = 32);
    CB_FAIL(KVC_ERR_INVALID_ARG, "groups[0]: style 7", f.group.style = (kvc_rope_style_t)7);
    CB_FAIL(KVC_ERR_SHAPE, "groups[0]: num_temp_slots 0", f.group.num_temp_slots = 0);
    CB_FAIL(KVC_ERR_FORMAT, "groups[0]", f.group.format = 99);
    CB_FAIL(KVC_ERR_UNSUPPORTED, "format NL_X_NB_BSV_BSS in a plan", f.group.format = 14, f.group.shape.kv_size = 1,
            f.group.shape.nh = 1, f.group.shape.hs = 32);
    CB_FAIL(KVC_ERR_ALIGNMENT, "ropes[0]: keys->data", f.slot_fast[0] = f.slot[0].fast + 1);
    CB_FAIL(KVC_ERR_OVERLAP, "ropes[1]: table->data", f.group.table.data = f.slot[1].fast);
    CB_FAIL(KVC_ERR_OVERLAP, "scatters[1]: chunk", f.slot_fast[1] = f.eng.fast[1]);
    kvc_context_destroy(ctx);
}
