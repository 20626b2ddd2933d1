/* SPDX-License-Identifier: BSD-3-Clause */
/* Scalar transfer oracle: row-major flattening of the shapes of docs/TRANSFER.md and docs/LMCACHE.md, one
 * element per copy (formats 14 and 17: one byte per copy, located within the row's pieces). */
#include "transfer_ref.h"

#include <string.h>

/* Row-major offset of idx in dims; dim0_stride (elements, 0 = tight) replaces the outer step. */
static int64_t flat(int n, const int64_t *dims, const int64_t *idx, int64_t dim0_stride)
{
    int64_t off = 0, stride = 1;
    for (int i = n - 1; i >= 1; i--) {
        off += idx[i] * stride;
        stride *= dims[i];
    }
    return off + idx[0] * (dim0_stride ? dim0_stride : stride);
}

static int is_fused(int f) { return f >= 10 && f <= 13; }
static int is_mla(int f) { return f == 3 || f == 5 || f == 14 || f == 17; }
static int is_pieced(int f) { return f == 14 || f == 17; }

int64_t ref_chunk_planes(int f, int layout)
{
    if (is_mla(f)) return 1;
    if (is_fused(f)) return layout == KVC_CHUNK_SPLIT_KV ? 2 : 1;
    return 2;
}

int64_t ref_chunk_head_elems(int f, const kvc_page_shape_t *s, int layout)
{
    return is_fused(f) && layout == KVC_CHUNK_SPLIT_KV ? s->hs / 2 : s->hs;
}

size_t ref_engine_tensor_bytes(int f, const kvc_page_shape_t *s)
{
    const int64_t NL = s->nl, NB = s->nb, BS = s->bs, NH = s->nh, HS = s->hs;
    int64_t elems;
    switch (f) {
    case 0: case 8: elems = NB * NL * 2 * BS * NH * HS; break;
    case 1: case 2: case 6: case 7: elems = 2 * NB * BS * NH * HS; break;
    case 4: case 9: elems = NB * BS * NH * HS; break;
    case 5: elems = NB * BS * HS; break;
    case 15: elems = 2 * NB * NH * 1 * BS * HS; break;
    case 16: elems = NB * BS * NH * HS; break;
    case 17: return (size_t)(NB * BS * s->plane_bytes[0]);
    default: /* 3, 10-14 */ /* 3, 10-13: [NB, ...] with an optional padded block step */
        elems = NB * (s->block_stride_elems ? s->block_stride_elems : BS * NH * HS);
        break;
    }
    return (size_t)elems * (size_t)s->element_size;
}

size_t ref_engine_ptr_bytes(int f, const kvc_page_shape_t *s, int64_t i)
{
    if (f == 17) return (size_t)(s->nb * s->bs * s->plane_bytes[i % s->num_planes]);
    return ref_engine_tensor_bytes(f, s);
}

uint8_t *ref_engine_byte(int f, const kvc_page_shape_t *s, void *const *ptrs, int64_t l, int64_t b, int64_t o,
                         int64_t k)
{
    const int64_t BS = s->bs, R = s->hs * s->element_size;
    if (f == 14) { /* NL x [NB, BS, R] whose block is [BS][R - 4] values then [BS][4] scale bytes */
        const int64_t V = R - 4, block = b * (s->block_stride_elems ? s->block_stride_elems * s->element_size : BS * R);
        const int64_t off = k < V ? block + o * V + k : block + BS * V + o * 4 + (k - V);
        return (uint8_t *)ptrs[l] + off;
    }
    int64_t q = 0, at = 0; /* 17: plane q holds row bytes [at, at + plane_bytes[q]) */
    while (k >= at + s->plane_bytes[q]) at += s->plane_bytes[q++];
    const int64_t d[] = { s->nb, BS, 1, s->plane_bytes[q] }, i[] = { b, o, 0, k - at };
    return (uint8_t *)ptrs[l * s->num_planes + q] + flat(4, d, i, 0);
}

uint8_t *ref_engine_elem(int f, const kvc_page_shape_t *s, int layout, void *const *ptrs, int64_t l, int64_t p,
                         int64_t b, int64_t o, int64_t h, int64_t e)
{
    const int64_t NL = s->nl, NB = s->nb, BS = s->bs, NH = s->nh, HS = s->hs;
    int64_t off, ptr = l;
    if (is_fused(f) && layout == KVC_CHUNK_SPLIT_KV) e += p * (HS / 2); /* K half, then V half */
    switch (f) {
    case 0: { const int64_t d[] = { NB, NL, 2, BS, NH, HS }, i[] = { b, l, p, o, h, e };
        ptr = 0; off = flat(6, d, i, 0); break; }
    case 1: { const int64_t d[] = { 2, NB, BS, NH, HS }, i[] = { p, b, o, h, e }; off = flat(5, d, i, 0); break; }
    case 2: { const int64_t d[] = { NB, 2, BS, NH, HS }, i[] = { b, p, o, h, e }; off = flat(5, d, i, 0); break; }
    case 3: { const int64_t d[] = { NB, BS, HS }, i[] = { b, o, e }; off = flat(3, d, i, s->block_stride_elems); break; }
    case 4: { const int64_t d[] = { NB * BS, NH, HS }, i[] = { b * BS + o, h, e };
        ptr = p * NL + l; off = flat(3, d, i, 0); break; }
    case 5: { const int64_t d[] = { NB * BS, 1, HS }, i[] = { b * BS + o, 0, e }; off = flat(3, d, i, 0); break; }
    case 6: { const int64_t d[] = { 2, NB, NH, BS, HS }, i[] = { p, b, h, o, e }; off = flat(5, d, i, 0); break; }
    case 7: { const int64_t d[] = { NB, 2, NH, BS, HS }, i[] = { b, p, h, o, e }; off = flat(5, d, i, 0); break; }
    case 8: { const int64_t d[] = { NB, NL, 2, NH, BS, HS }, i[] = { b, l, p, h, o, e };
        ptr = 0; off = flat(6, d, i, 0); break; }
    case 9: { const int64_t d[] = { NB, BS, NH, HS }, i[] = { b, o, h, e };
        ptr = p * NL + l; off = flat(4, d, i, 0); break; }
    case 15: { const int64_t d[] = { 2, NB, NH, 1, BS, HS }, i[] = { p, b, h, 0, o, e }; off = flat(6, d, i, 0); break; }
    case 16: { const int64_t d[] = { NB, BS, NH, HS }, i[] = { b, o, h, e }; /* ptrs K_0, V_0, K_1, ... */
        ptr = 2 * l + p; off = flat(4, d, i, 0); break; }
    case 10: case 12: { const int64_t d[] = { NB, NH, BS, HS }, i[] = { b, h, o, e };
        off = flat(4, d, i, s->block_stride_elems); break; }
    default: { const int64_t d[] = { NB, BS, NH, HS }, i[] = { b, o, h, e }; /* 11, 13 */
        off = flat(4, d, i, s->block_stride_elems); break; }
    }
    return (uint8_t *)ptrs[ptr] + off * s->element_size;
}

/* One element of es bytes, in the direction's sense. */
static void move(uint8_t *eng, uint8_t *chk, int es, int direction)
{
    uint8_t *dst = direction == KVC_H2D ? eng : chk;
    const uint8_t *src = direction == KVC_H2D ? chk : eng;
    switch (es) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    default: memcpy(dst, src, 8); break;
    }
}

void ref_transfer_tokens(const kvc_token_transfer_t *a)
{
    const kvc_page_shape_t *s = &a->shape;
    const int64_t P = ref_chunk_planes(a->format, a->chunk_layout), H = ref_chunk_head_elems(a->format, s, a->chunk_layout);
    /* the chunk [P, NL, T, NH, H], or [NL, P, T, NH, H] when interleaved */
    const int il = a->chunk_layout == KVC_CHUNK_INTERLEAVED_KV;
    const int64_t T = a->num_tokens, cd[] = { il ? s->nl : P, il ? P : s->nl, T, s->nh, H };
    const int64_t *slots = a->slots;
    for (int64_t t = a->skip_prefix_tokens; t < T; t++) {
        if (slots[t] < 0) continue;
        if (is_pieced(a->format)) { /* one plane [NL, T, R], byte by byte */
            const int64_t R = s->hs * s->element_size;
            for (int64_t l = 0; l < s->nl; l++)
                for (int64_t k = 0; k < R; k++)
                    move(ref_engine_byte(a->format, s, a->engine_ptrs, l, slots[t] / s->bs, slots[t] % s->bs, k),
                         (uint8_t *)a->chunk + (l * T + t) * R + k, 1, a->direction);
            continue;
        }
        for (int64_t l = 0; l < s->nl; l++)
            for (int64_t p = 0; p < P; p++)
                for (int64_t h = 0; h < s->nh; h++)
                    for (int64_t e = 0; e < H; e++) {
                        const int64_t ci[] = { il ? l : p, il ? p : l, t, h, e };
                        move(ref_engine_elem(a->format, s, a->chunk_layout, a->engine_ptrs, l, p, slots[t] / s->bs,
                                             slots[t] % s->bs, h, e),
                             (uint8_t *)a->chunk + flat(5, cd, ci, 0) * s->element_size, s->element_size, a->direction);
                    }
    }
}

void ref_transfer_blocks(const kvc_block_transfer_t *a)
{
    const kvc_page_shape_t *s = &a->shape;
    const int64_t P = ref_chunk_planes(a->format, a->chunk_layout), H = ref_chunk_head_elems(a->format, s, a->chunk_layout);
    const int il = a->chunk_layout == KVC_CHUNK_INTERLEAVED_KV; /* objects [NL, P, C, NH, H] */
    const int64_t C = a->chunk_tokens, bpo = C / s->bs, n = a->num_block_ids,
                  cd[] = { il ? s->nl : P, il ? P : s->nl, C, s->nh, H };
    const int64_t *ids = a->block_ids;
    for (int64_t o = 0; o < a->num_objects; o++) {
        /* the fallback's valid range: [max(o*bpo, skip), min((o+1)*bpo, n)) */
        int64_t start = o * bpo > a->skip_prefix_blocks ? o * bpo : a->skip_prefix_blocks;
        int64_t end = (o + 1) * bpo < n ? (o + 1) * bpo : n;
        for (int64_t f = start; f < end; f++) {
            if (is_pieced(a->format)) { /* object [NL, C, R], byte by byte */
                const int64_t R = s->hs * s->element_size;
                for (int64_t l = 0; l < s->nl; l++)
                    for (int64_t t = 0; t < s->bs; t++)
                        for (int64_t k = 0; k < R; k++)
                            move(ref_engine_byte(a->format, s, a->engine_ptrs, l, ids[f], t, k),
                                 (uint8_t *)a->objects[o] + (l * C + (f - o * bpo) * s->bs + t) * R + k, 1, a->direction);
                continue;
            }
            for (int64_t l = 0; l < s->nl; l++)
                for (int64_t p = 0; p < P; p++)
                    for (int64_t t = 0; t < s->bs; t++)
                        for (int64_t h = 0; h < s->nh; h++)
                            for (int64_t e = 0; e < H; e++) {
                                const int64_t ci[] = { il ? l : p, il ? p : l, (f - o * bpo) * s->bs + t, h, e };
                                move(ref_engine_elem(a->format, s, a->chunk_layout, a->engine_ptrs, l, p, ids[f], t, h, e),
                                     (uint8_t *)a->objects[o] + flat(5, cd, ci, 0) * s->element_size, s->element_size,
                                     a->direction);
                            }
        }
    }
}

void ref_transfer_layer(const kvc_layer_transfer_t *a)
{
    const kvc_page_shape_t *s = &a->shape;
    const int64_t P = ref_chunk_planes(a->format, a->chunk_layout), H = ref_chunk_head_elems(a->format, s, a->chunk_layout);
    const int64_t T = a->num_tokens;
    const int64_t pm[] = { P, T, s->nh, H }, tm[] = { T, P, s->nh, H };
    const int64_t *slots = a->slots;
    for (int64_t t = 0; t < T; t++) {
        if (slots[t] < 0) continue;
        if (is_pieced(a->format)) { /* [T, R], byte by byte */
            const int64_t R = s->hs * s->element_size;
            for (int64_t k = 0; k < R; k++)
                move(ref_engine_byte(a->format, s, a->engine_ptrs, 0, slots[t] / s->bs, slots[t] % s->bs, k),
                     (uint8_t *)a->chunk + t * R + k, 1, a->direction);
            continue;
        }
        for (int64_t p = 0; p < P; p++)
            for (int64_t h = 0; h < s->nh; h++)
                for (int64_t e = 0; e < H; e++) {
                    const int64_t ip[] = { p, t, h, e }, it[] = { t, p, h, e };
                    const int64_t ci = a->token_major ? flat(4, tm, it, 0) : flat(4, pm, ip, 0);
                    move(ref_engine_elem(a->format, s, a->chunk_layout, a->engine_ptrs, 0, p, slots[t] / s->bs,
                                         slots[t] % s->bs, h, e),
                         (uint8_t *)a->chunk + ci * s->element_size, s->element_size, a->direction);
                }
    }
}

void ref_flash(const kvc_flash_transfer_t *a, int direction)
{
    const kvc_page_shape_t *s = &a->shape;
    const int64_t T = a->num_tokens, kd[] = { s->nb, s->bs, s->nh, s->hs }, cd[] = { 2, s->nl, T, s->nh, s->hs };
    const int64_t *slots = a->slots;
    for (int64_t t = 0; t < T; t++) {
        if (slots[t] < 0) continue;
        for (int64_t p = 0; p < 2; p++)
            for (int64_t h = 0; h < s->nh; h++)
                for (int64_t e = 0; e < s->hs; e++) {
                    const int64_t ki[] = { slots[t] / s->bs, slots[t] % s->bs, h, e }, ci[] = { p, a->layer_idx, t, h, e };
                    uint8_t *cache = p ? a->value_cache : a->key_cache;
                    move(cache + flat(4, kd, ki, 0) * s->element_size,
                         (uint8_t *)a->key_value + flat(5, cd, ci, 0) * s->element_size, s->element_size, direction);
                }
    }
}
