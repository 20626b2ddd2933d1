/* SPDX-License-Identifier: BSD-3-Clause */
/* Engine formats: predicates, names, and the expansion of (format, shape) into one byte-stride map.
 * Nothing else in kvcore knows the tensor shapes of kvc_format_t. */
#include "config.h"

#include <kvcore/transfer.h>

#include "layout.h"
#include "log.h"

enum {
    F_CROSS = 1 << 0,
    F_KVLIST = 1 << 1,
    F_LAYERS = 1 << 2,
    F_MLA = 1 << 3,
    F_HND = 1 << 4,
    F_FUSED = 1 << 5,
    F_TWO_MAJOR = 1 << 6,
    F_PBS = 1 << 7,
    F_TUPLE = 1 << 8,
};

static const struct {
    const char *name;
    unsigned facts;
} formats[KVC_FORMAT_COUNT] = {
    { "NB_NL_TWO_BS_NH_HS", F_CROSS },
    { "NL_X_TWO_NB_BS_NH_HS", F_LAYERS | F_TWO_MAJOR },
    { "NL_X_NB_TWO_BS_NH_HS", F_LAYERS },
    { "NL_X_NB_BS_HS", F_LAYERS | F_MLA },
    { "TWO_X_NL_X_NBBS_NH_HS", F_KVLIST },
    { "NL_X_NBBS_ONE_HS", F_LAYERS | F_MLA | F_PBS },
    { "NL_X_TWO_NB_NH_BS_HS", F_LAYERS | F_HND | F_TWO_MAJOR },
    { "NL_X_NB_TWO_NH_BS_HS", F_LAYERS | F_HND },
    { "NB_NL_TWO_NH_BS_HS", F_CROSS | F_HND },
    { "TWO_X_NL_X_NB_BS_NH_HS", F_KVLIST },
    { "NL_X_NB_NH_BS_TWO_HS", F_LAYERS | F_HND | F_FUSED },
    { "NL_X_NB_BS_NH_TWO_HS", F_LAYERS | F_FUSED },
    { "NL_X_NB_NH_BS_CS", F_LAYERS | F_HND | F_FUSED },
    { "NL_X_NB_BS_NH_CS", F_LAYERS | F_FUSED },
    { "NL_X_NB_BSV_BSS", F_LAYERS | F_MLA },
    { "NL_X_TWO_NB_NH_ONE_BS_HS", F_LAYERS | F_HND | F_TWO_MAJOR },
    { "NL_X_TWO_X_NB_BS_NH_HS", F_LAYERS | F_TUPLE },
    { "NL_X_NP_X_NB_BS_ONE_HS", F_LAYERS | F_MLA | F_TUPLE },
};

static unsigned facts(int f) { return f >= 0 && f < KVC_FORMAT_COUNT ? formats[f].facts : 0; }

KVC_API int kvc_format_is_valid(int f) { return f >= 0 && f < KVC_FORMAT_COUNT; }
KVC_API int kvc_format_is_cross_layer(int f) { return !!(facts(f) & F_CROSS); }
KVC_API int kvc_format_is_kv_list(int f) { return !!(facts(f) & F_KVLIST); }
KVC_API int kvc_format_is_layer_list(int f) { return !!(facts(f) & F_LAYERS); }
KVC_API int kvc_format_is_mla(int f) { return !!(facts(f) & F_MLA); }
KVC_API int kvc_format_is_hnd(int f) { return !!(facts(f) & F_HND); }
KVC_API int kvc_format_is_fused_packed(int f) { return !!(facts(f) & F_FUSED); }
KVC_API int kvc_format_is_two_major(int f) { return !!(facts(f) & F_TWO_MAJOR); }
KVC_API int kvc_format_is_pbs_fused(int f) { return !!(facts(f) & F_PBS); }
KVC_API int kvc_format_is_kv_second_tuple(int f) { return !!(facts(f) & F_TUPLE); }

KVC_API const char *kvc_format_name(int f) { return kvc_format_is_valid(f) ? formats[f].name : "unknown"; }

KVC_API int64_t kvc_format_ptr_count(int f, int64_t nl)
{
    if (!kvc_format_is_valid(f) || nl < 1 || f == KVC_FMT_NL_X_NP_X_NB_BS_ONE_HS) return -1;
    if (facts(f) & F_CROSS) return 1;
    return facts(f) & (F_KVLIST | F_TUPLE) ? kvc_mul2(2, nl) : nl;
}

KVC_API int64_t kvc_shape_ptr_count(int f, const kvc_page_shape_t *s)
{
    if (!s) return -1;
    if (f != KVC_FMT_NL_X_NP_X_NB_BS_ONE_HS) return kvc_format_ptr_count(f, s->nl);
    if (s->nl < 1 || s->num_planes < 1 || s->num_planes > KVC_MAX_PLANES) return -1;
    return kvc_mul2(s->nl, s->num_planes);
}

/* Format 14: a row of R bytes is R - 4 value bytes and a 4-byte scale; format 17: the planes'
 * rows in order. Both come in whole elements of the chunk's element size. */
static kvc_status_t check_pieces(int format, const kvc_page_shape_t *s, const char *name)
{
    const int64_t row = kvc_mul2(s->hs, s->element_size);
    if (format != KVC_FMT_NL_X_NP_X_NB_BS_ONE_HS && s->num_planes != 0)
        return kvc_error(KVC_ERR_SHAPE, "shape.num_planes = %d: only format NL_X_NP_X_NB_BS_ONE_HS (17) has planes; "
                                        "pass 0 for %s", (int)s->num_planes, name);
    if (format == KVC_FMT_NL_X_NB_BSV_BSS) {
        if (s->element_size == 8)
            return kvc_error(KVC_ERR_DTYPE, "shape.element_size = 8: format %s moves 4-byte units (the scale is one); "
                                            "use element size 1, 2 or 4", name);
        if (row < 8 || row % 4)
            return kvc_error(KVC_ERR_SHAPE, "shape.hs * element_size = %lld bytes: format %s needs a row of 4-byte units, "
                                            "values then a 4-byte scale (>= 8 bytes, e.g. 132)", (long long)row, name);
    }
    if (format == KVC_FMT_NL_X_NP_X_NB_BS_ONE_HS) {
        if (s->num_planes < 1 || s->num_planes > KVC_MAX_PLANES)
            return kvc_error(KVC_ERR_SHAPE, "shape.num_planes = %d: format %s needs 1..%d planes per layer",
                             (int)s->num_planes, name, KVC_MAX_PLANES);
        int64_t sum = 0;
        for (int p = 0; p < s->num_planes; p++) {
            if (s->plane_bytes[p] < 1 || s->plane_bytes[p] > row)
                return kvc_error(KVC_ERR_SHAPE, "shape.plane_bytes[%d] = %lld: must be in [1, hs * element_size = %lld]",
                                 p, (long long)s->plane_bytes[p], (long long)row);
            sum += s->plane_bytes[p];
        }
        if (sum != row)
            return kvc_error(KVC_ERR_SHAPE, "shape.plane_bytes sum to %lld bytes but a chunk row of format %s is "
                                            "hs * element_size = %lld bytes", (long long)sum, name, (long long)row);
    }
    return KVC_OK;
}

kvc_layout_t kvc_layout_part_view(const kvc_layout_t *l, int i)
{
    kvc_layout_t v = *l;
    const kvc_layout_part_t *p = &l->part[i];
    v.engine = p->engine;
    v.planes = 1;
    v.heads = 1;
    v.head_bytes = v.row_bytes = p->bytes;
    v.nparts = 1;
    return v;
}

kvc_status_t kvc_layout_build(int format, const kvc_page_shape_t *s, int chunk_layout, kvc_layout_t *out)
{
    if (!kvc_format_is_valid(format))
        return kvc_error(KVC_ERR_FORMAT, "format %d is not a known engine format (0..%d)", format, KVC_FORMAT_COUNT - 1);
    const unsigned f = facts(format);
    const char *name = formats[format].name;
    if (s->element_size != 1 && s->element_size != 2 && s->element_size != 4 && s->element_size != 8)
        return kvc_error(KVC_ERR_DTYPE, "shape.element_size = %d: must be 1, 2, 4 or 8 bytes", (int)s->element_size);
    if (s->nl < 1 || s->nb < 1 || s->bs < 1 || s->nh < 1 || s->hs < 1)
        return kvc_error(KVC_ERR_SHAPE, "shape nl=%lld nb=%lld bs=%lld nh=%lld hs=%lld: every dimension must be >= 1",
                         (long long)s->nl, (long long)s->nb, (long long)s->bs, (long long)s->nh, (long long)s->hs);
    kvc_status_t st = check_pieces(format, s, name);
    if (st != KVC_OK) return st;
    const int single_plane = (f & (F_MLA | F_FUSED)) != 0;
    if (s->kv_size != (single_plane ? 1 : 2))
        return kvc_error(KVC_ERR_SHAPE, "shape.kv_size = %d: format %s has %d plane(s)%s", (int)s->kv_size, name,
                         single_plane ? 1 : 2, (f & F_FUSED) ? " (K|V fused: hs is the fused width)" : "");
    if ((f & F_MLA) && s->nh != 1)
        return kvc_error(KVC_ERR_SHAPE, "shape.nh = %lld: MLA format %s has one latent head (nh = 1)",
                         (long long)s->nh, name);
    if (chunk_layout < KVC_CHUNK_DEFAULT || chunk_layout > KVC_CHUNK_INTERLEAVED_KV)
        return kvc_error(KVC_ERR_FORMAT, "chunk_layout = %d is not a known chunk layout", chunk_layout);
    int split = 0;
    if (f & F_FUSED) {
        split = chunk_layout == KVC_CHUNK_SPLIT_KV;
        if (split && s->hs % 2)
            return kvc_error(KVC_ERR_SHAPE, "shape.hs = %lld: a split K/V chunk of fused format %s needs an even fused width",
                             (long long)s->hs, name);
        if (chunk_layout == KVC_CHUNK_INTERLEAVED_KV)
            return kvc_error(KVC_ERR_FORMAT, "chunk_layout = %d (interleaved K/V) does not apply to fused format %s",
                             chunk_layout, name);
    } else if (chunk_layout == KVC_CHUNK_FUSED_PACKED || ((f & F_MLA) && chunk_layout != KVC_CHUNK_DEFAULT)) {
        return kvc_error(KVC_ERR_FORMAT, "chunk_layout = %d does not apply to format %s", chunk_layout, name);
    }
    const int64_t es = s->element_size;
    const int64_t head = kvc_mul2(s->hs, es);          /* engine head bytes (fused: K|V) */
    const int64_t tight = kvc_mul3(s->bs, s->nh, head); /* bytes of one plane of one block */
    const int64_t planes_in_tensor = s->kv_size;
    if (tight < 0 || kvc_mul3(kvc_mul3(tight, s->nb, s->nl), planes_in_tensor, 1) < 0)
        return kvc_error(KVC_ERR_SHAPE, "shape nl=%lld nb=%lld bs=%lld nh=%lld hs=%lld overflows 64-bit byte offsets",
                         (long long)s->nl, (long long)s->nb, (long long)s->bs, (long long)s->nh, (long long)s->hs);
    int64_t block = tight;
    if (s->block_stride_elems != 0) {
        const int padded_ok = format == KVC_FMT_NL_X_NB_BS_HS || format == KVC_FMT_NL_X_NB_BSV_BSS || (f & F_FUSED);
        if (!padded_ok)
            return kvc_error(KVC_ERR_SHAPE,
                             "shape.block_stride_elems = %lld: padded blocks are accepted only for the single-plane "
                             "formats 3 and 10-14, not %s (pass 0)",
                             (long long)s->block_stride_elems, name);
        block = kvc_mul2(s->block_stride_elems, es);
        if (s->block_stride_elems < s->bs * s->nh * s->hs || block < 0 || kvc_mul2(block, s->nb) < 0)
            return kvc_error(KVC_ERR_SHAPE, "shape.block_stride_elems = %lld: must be >= bs*nh*hs = %lld and fit 64 bits",
                             (long long)s->block_stride_elems, (long long)(s->bs * s->nh * s->hs));
    }

    kvc_engine_map_t m = { .block_size = s->bs, .block_stride = block };
    int hnd = (f & F_HND) != 0;
    switch (format) {
    case KVC_FMT_NB_NL_TWO_BS_NH_HS:
    case KVC_FMT_NB_NL_TWO_NH_BS_HS: /* [NB, NL, 2, block] */
        m.layer_offset = 2 * tight;
        m.plane_offset = tight;
        m.block_stride = kvc_mul3(2, tight, s->nl);
        break;
    case KVC_FMT_NL_X_TWO_NB_BS_NH_HS:
    case KVC_FMT_NL_X_TWO_NB_NH_BS_HS:
    case KVC_FMT_NL_X_TWO_NB_NH_ONE_BS_HS: /* per layer [2, NB, block] (15: [2, NB, NH, 1, BS, HS]) */
        m.ptr_layer_step = 1;
        m.plane_offset = tight * s->nb;
        break;
    case KVC_FMT_NL_X_NB_TWO_BS_NH_HS:
    case KVC_FMT_NL_X_NB_TWO_NH_BS_HS: /* per layer [NB, 2, block] */
        m.ptr_layer_step = 1;
        m.plane_offset = tight;
        m.block_stride = 2 * tight;
        break;
    case KVC_FMT_TWO_X_NL_X_NBBS_NH_HS:
    case KVC_FMT_TWO_X_NL_X_NB_BS_NH_HS: /* ptrs [K_0..K_{NL-1}, V_0..V_{NL-1}], each [NB, block] */
        m.ptr_layer_step = 1;
        m.ptr_plane_step = s->nl;
        break;
    case KVC_FMT_NL_X_TWO_X_NB_BS_NH_HS: /* ptrs [K_0, V_0, K_1, V_1, ...], each [NB, block] */
        m.ptr_layer_step = 2;
        m.ptr_plane_step = 1;
        break;
    default: /* one plane per layer: MLA and fused formats, [NB, block] with an optional padded step */
        m.ptr_layer_step = 1;
        break;
    }
    m.head_stride = hnd ? s->bs * head : head;
    m.token_stride = hnd ? head : s->nh * head;

    kvc_layout_t l = { .planes = single_plane && !split ? 1 : 2, .heads = s->nh, .head_bytes = head };
    l.interleaved = chunk_layout == KVC_CHUNK_INTERLEAVED_KV;
    if (split) { /* K = first half of each fused head, V = second half */
        l.head_bytes = head / 2;
        m.plane_offset = head / 2;
    }
    l.row_bytes = s->nh * l.head_bytes;
    l.ptr_count = kvc_shape_ptr_count(format, s);
    l.block_pad = block - tight;
    l.engine = m;
    l.nparts = 1;
    if (format == KVC_FMT_NL_X_NB_BSV_BSS) { /* each block: [bs x values][bs x scale] */
        const int64_t v = head - 4;
        kvc_engine_map_t pm = m;
        pm.token_stride = pm.head_stride = v;
        l.part[0] = (kvc_layout_part_t){ .engine = pm, .bytes = v, .tensor_bytes = kvc_mul2(block, s->nb) };
        pm.token_stride = pm.head_stride = 4;
        l.part[1] = (kvc_layout_part_t){ .engine = pm, .ptr_shift = s->bs * v, .chunk_offset = v, .bytes = 4,
                                         .tensor_bytes = l.part[0].tensor_bytes };
        l.nparts = 2;
    } else if (format == KVC_FMT_NL_X_NP_X_NB_BS_ONE_HS) { /* plane p of layer l: ptrs[l*np + p], [NB, BS, w_p] */
        int64_t at = 0;
        for (int p = 0; p < s->num_planes; p++) {
            const int64_t w = s->plane_bytes[p];
            const kvc_engine_map_t pm = { .ptr_layer_step = s->num_planes, .block_stride = s->bs * w, .token_stride = w,
                                          .head_stride = w, .block_size = s->bs };
            l.part[p] = (kvc_layout_part_t){ .engine = pm, .ptr_first = p, .chunk_offset = at, .bytes = w,
                                             .tensor_bytes = kvc_mul3(s->nb, s->bs, w) };
            at += w;
        }
        l.engine.ptr_layer_step = s->num_planes;
        l.nparts = s->num_planes;
    }
    *out = l;
    return KVC_OK;
}

typedef struct {
    int64_t n, e, c; /* count, engine stride, chunk stride */
} dim_t;

/* Fold dims (innermost first) into the run while both sides stay contiguous; the remaining dims
 * (at most two) become the loops, the one with the larger engine stride outside. */
static kvc_run_shape_t fold(int64_t run, dim_t *d, int nd)
{
    int k = 0;
    while (k < nd && (d[k].n == 1 || (d[k].e == run && d[k].c == run))) run *= d[k++].n;
    dim_t rest[2] = { { 1, 0, 0 }, { 1, 0, 0 } };
    for (int i = k, j = 0; i < nd && j < 2; i++)
        if (d[i].n > 1) rest[j++] = d[i];
    if (rest[0].e > rest[1].e) {
        const dim_t t = rest[0];
        rest[0] = rest[1];
        rest[1] = t;
    }
    return (kvc_run_shape_t){ .run_bytes = run,
                              .outer_count = rest[1].n, .outer_engine = rest[1].e, .outer_chunk = rest[1].c,
                              .inner_count = rest[0].n, .inner_engine = rest[0].e, .inner_chunk = rest[0].c };
}

kvc_run_shape_t kvc_layout_token_runs(const kvc_layout_t *l, const kvc_chunk_map_t *c)
{
    dim_t d[1] = { { l->heads, l->engine.head_stride, c->head_stride } };
    return fold(l->head_bytes, d, 1);
}

kvc_run_shape_t kvc_layout_block_runs(const kvc_layout_t *l, const kvc_chunk_map_t *c)
{
    dim_t d[2] = { { l->heads, l->engine.head_stride, c->head_stride },
                   { l->engine.block_size, l->engine.token_stride, c->token_stride } };
    return fold(l->head_bytes, d, 2);
}
