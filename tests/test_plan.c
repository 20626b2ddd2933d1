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

static const int og_formats[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13 };

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
