/* SPDX-License-Identifier: BSD-3-Clause */
/* KV transfer validation (kvc_transfer_tokens / _blocks / _layer, the flash pair) with random
 * formats, shapes, chunk layouts, slots, block ids and counts against small real buffers, each
 * allocated with exactly the size docs/TRANSFER.md gives for that format and shape (computed here,
 * independently of src/core/layout.c). Invariants: an accepted call stays inside the buffers
 * (ASan); a rejected call changes no byte; dimensions whose byte size overflows 64 bits are
 * rejected.
 *
 * Input: op, format, direction, shape fields, chunk layout, counts, a "mistakes" mask (wrong
 * pointer count, wrong slot count, a NULL pointer, int32 indices, wrong object count, NULL chunk,
 * one huge dimension), then slots / block ids. */
#include "fuzz.h"

#define MAX_BUFFERS 32
#define MAX_TENSORS 12

static kvc_context_t *ctx;

typedef struct {
    uint8_t *p[MAX_BUFFERS], *copy[MAX_BUFFERS];
    size_t n[MAX_BUFFERS];
    int count;
} buffers_t;

/* An exact-size buffer holding a pattern (and a copy, to check that a rejected call wrote nothing). */
static uint8_t *buffer(buffers_t *b, size_t n)
{
    uint8_t *p = malloc(n ? n : 1), *c = malloc(n ? n : 1);
    if (!n) { /* malloc(0) may return NULL, which would read as "no pointer" */
        free(p);
        p = malloc(0);
        if (!p) p = malloc(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = c[i] = (uint8_t)(i * 31 + 7);
    b->p[b->count] = p;
    b->copy[b->count] = c;
    b->n[b->count++] = n;
    return p;
}

static void check_unchanged(const buffers_t *b)
{
    for (int i = 0; i < b->count; i++)
        FUZZ_CHECK(!b->n[i] || !memcmp(b->p[i], b->copy[i], b->n[i]), "a rejected call wrote buffer %d", i);
}

static void release(buffers_t *b)
{
    for (int i = 0; i < b->count; i++) {
        free(b->p[i]);
        free(b->copy[i]);
    }
}

/* docs/TRANSFER.md, "Formats": tensors in the pointer table and elements of each. Unknown formats
 * get one tensor of one block. */
typedef struct {
    __int128 tensors;
    __int128 elems; /* per tensor */
    int planes;     /* chunk planes */
    __int128 row;   /* chunk bytes per token and plane */
} geometry_t;

static geometry_t geometry(int f, const kvc_page_shape_t *s, int chunk_layout)
{
    const __int128 nl = s->nl, nb = s->nb, bs = s->bs, nh = s->nh, hs = s->hs, es = s->element_size;
    const __int128 tight = bs * nh * hs;
    const __int128 padded = s->block_stride_elems ? (nb - 1) * s->block_stride_elems + tight : nb * tight;
    geometry_t g = { .tensors = s->nl, .elems = nb * tight, .planes = 2, .row = nh * hs * es };
    switch (f) {
    case 0: case 8: g.tensors = 1; g.elems = nb * nl * 2 * tight; break;      /* [NB, NL, 2, ...] */
    case 1: case 2: case 6: case 7: g.elems = 2 * nb * tight; break;          /* [2, NB, ...], [NB, 2, ...] */
    case 3: g.elems = padded; g.planes = 1; break;                           /* [NB, BS, HS] */
    case 4: case 9: g.tensors = 2 * nl; break;                            /* [NB*BS, NH, HS] x 2NL */
    case 5: g.planes = 1; break;                                             /* [NB*BS, 1, HS] */
    case 10: case 11: case 12: case 13:                                      /* fused K|V, hs = CS */
        g.elems = padded;
        if (chunk_layout == KVC_CHUNK_SPLIT_KV) g.row = nh * (hs / 2) * es;
        else g.planes = 1;
        break;
    default: g.tensors = 1; g.elems = tight; break;
    }
    return g;
}

static size_t bytes(__int128 n) { return n > 0 ? (size_t)n : 0; }

static int64_t pick_format(fuzz_input_t *in)
{
    const uint8_t v = fuzz_u8(in);
    return v < 240 ? v % 16 : (int8_t)v; /* 14, 15 and negatives are unknown */
}

/* Slot or block id: mostly in [-1, limit], sometimes far outside. */
static int64_t pick_index(fuzz_input_t *in, int64_t limit)
{
    const uint8_t v = fuzz_u8(in);
    if (v < 232) return (int64_t)(v % (uint64_t)(limit + 2)) - 1;
    static const int64_t far[] = { -2, INT64_MIN, INT64_MAX, 1LL << 32, -(1LL << 40), 1LL << 62, 255, -129 };
    return far[v % 8];
}

static const int64_t huge[] = { 1LL << 31, (1LL << 32) + 1, 1LL << 40, 1LL << 62, INT64_MAX, 3037000500LL };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx) ctx = fuzz_cpu_context("best");
    fuzz_input_t in = { data, size };
    const unsigned op = fuzz_u8(&in) % 5;
    const int format = (int)pick_format(&in);
    const int direction = fuzz_u8(&in) % 3;
    static const int32_t esizes[] = { 1, 2, 4, 8, 3, 0, 2, 4 };
    kvc_page_shape_t s = { .kv_size = fuzz_u8(&in) % 3, .element_size = esizes[fuzz_u8(&in) % 8] };
    s.nl = fuzz_u8(&in) % 4;
    s.nb = fuzz_u8(&in) % 5;
    s.bs = fuzz_u8(&in) % 5;
    s.nh = fuzz_u8(&in) % 4;
    s.hs = fuzz_u8(&in) % 9;
    const uint8_t stride = fuzz_u8(&in);
    if (stride >= 128) s.block_stride_elems = s.bs * s.nh * s.hs + (stride % 8) - 2;
    const int chunk_layout = fuzz_u8(&in) % 4;
    int64_t T = (int8_t)fuzz_u8(&in) % 12;
    const unsigned mistakes = (unsigned)fuzz_uint(&in, 2);
    int64_t chunk_tokens = fuzz_u8(&in) % 10, num_ids = fuzz_u8(&in) % 8;

    /* One dimension out of reach of any buffer: only calls that must be rejected are made. */
    int huge_mode = 0;
    if (mistakes & 0x100) {
        const int64_t v = huge[fuzz_u8(&in) % 6];
        switch (fuzz_u8(&in) % 8) {
        case 0: s.nl = v; break;
        case 1: s.nb = v; break;
        case 2: s.bs = v; break;
        case 3: s.nh = v; break;
        case 4: s.hs = v; break;
        case 5: s.block_stride_elems = v; break;
        case 6: T = v; break;
        default: chunk_tokens = v; break;
        }
        huge_mode = 1;
    }
    const geometry_t g = geometry(format, &s, chunk_layout);
    if (huge_mode) {
        const __int128 tensor_bytes = g.elems * s.element_size;
        const __int128 chunk_rows = op == 1 ? (__int128)chunk_tokens : (__int128)T;
        const __int128 chunk_bytes = g.planes * (__int128)s.nl * chunk_rows * g.row;
        if (tensor_bytes <= INT64_MAX && chunk_bytes <= INT64_MAX && (op != 3 && op != 4)) return 0;
        if (op >= 3 && 2 * (__int128)s.nl * T * s.nh * s.hs * s.element_size <= INT64_MAX &&
            s.nb * (__int128)s.bs * s.nh * s.hs * s.element_size <= INT64_MAX)
            return 0;
    }
    const __int128 small_limit = (__int128)1 << 20;
    if (!huge_mode && (g.elems * s.element_size > small_limit || g.tensors > MAX_TENSORS)) return 0;
    /* Negative sizes (a stride below the block, a negative count) are calls that must fail: no bytes. */
    const size_t tensor_bytes = huge_mode ? 64 : bytes(g.elems * s.element_size);
    const size_t row = huge_mode ? 8 : (size_t)g.row;

    buffers_t b = { .count = 0 };
    int64_t nptrs = g.tensors > MAX_TENSORS ? MAX_TENSORS : g.tensors > 0 ? (int64_t)g.tensors : 1;
    if (mistakes & 1) nptrs += (mistakes & 0x200) ? -1 : 1;
    void **ptrs = malloc((size_t)(nptrs > 0 ? nptrs : 1) * sizeof(void *));
    for (int64_t i = 0; i < nptrs; i++) ptrs[i] = i < MAX_TENSORS ? buffer(&b, tensor_bytes) : ptrs[0];
    if ((mistakes & 4) && nptrs > 0) ptrs[fuzz_u8(&in) % nptrs] = NULL;
    const kvc_index_type_t itype = (mistakes & 8) ? KVC_INDEX_INT32 : KVC_INDEX_INT64;
    const int64_t num_slots = !(mistakes & 2) ? T : (mistakes & 0x400) && T < INT64_MAX ? T + 1 : T - 1;
    const int64_t slot_limit = huge_mode ? 16 : s.nb * s.bs;
    /* With a huge count the call must fail before reading the list: a short one stands in for it. */
    const size_t nslots = num_slots > 0 ? (size_t)(num_slots < 16 ? num_slots : 16) : 0;
    int64_t *slots = malloc((nslots ? nslots : 1) * sizeof(int64_t));
    for (size_t i = 0; i < nslots; i++) slots[i] = pick_index(&in, slot_limit);
    const int64_t skip = (int64_t)(fuzz_u8(&in) % 14) - 1;
    const int null_chunk = (mistakes & 32) != 0;

    kvc_status_t st;
    switch (op) {
    case 0: { /* per token: [planes, NL, T, row] */
        void *chunk = null_chunk ? NULL : buffer(&b, huge_mode ? 64 : bytes(g.planes * (__int128)s.nl * T * row));
        const kvc_token_transfer_t a = { .format = format, .direction = direction, .shape = s, .engine_ptrs = ptrs,
                                         .num_engine_ptrs = nptrs, .chunk = chunk, .chunk_layout = chunk_layout,
                                         .num_tokens = T, .slots = slots, .slot_type = itype, .num_slots = num_slots,
                                         .skip_prefix_tokens = skip };
        st = kvc_transfer_tokens(ctx, &a);
        break;
    }
    case 1: { /* per block: objects of [planes, NL, chunk_tokens, row] */
        const int64_t bpo = s.bs > 0 && chunk_tokens > 0 && chunk_tokens % s.bs == 0 ? chunk_tokens / s.bs : 1;
        int64_t nobj = num_ids / bpo + (num_ids % bpo != 0);
        if (mistakes & 16) nobj += (mistakes & 0x800) ? -1 : 1;
        const size_t obj_bytes = huge_mode ? 64 : bytes(g.planes * (__int128)s.nl * chunk_tokens * row);
        void **objects = malloc((size_t)(nobj > 0 ? nobj : 1) * sizeof(void *));
        for (int64_t i = 0; i < nobj; i++) objects[i] = null_chunk && i == 0 ? NULL : buffer(&b, obj_bytes);
        int64_t *ids = malloc((size_t)(num_ids ? num_ids : 1) * sizeof(int64_t));
        for (int64_t i = 0; i < num_ids; i++) ids[i] = pick_index(&in, huge_mode ? 4 : s.nb);
        const kvc_block_transfer_t a = { .format = format, .direction = direction, .shape = s, .engine_ptrs = ptrs,
                                         .num_engine_ptrs = nptrs, .objects = objects, .num_objects = nobj,
                                         .chunk_layout = chunk_layout, .chunk_tokens = chunk_tokens,
                                         .block_ids = ids, .block_id_type = itype, .num_block_ids = num_ids,
                                         .skip_prefix_blocks = skip };
        st = kvc_transfer_blocks(ctx, &a);
        free(objects);
        free(ids);
        break;
    }
    case 2: { /* one layer: [planes, T, row] or [T, planes, row] */
        void *chunk = null_chunk ? NULL : buffer(&b, huge_mode ? 64 : bytes(g.planes * (__int128)T * row));
        const kvc_layer_transfer_t a = { .format = format, .direction = direction, .shape = s, .engine_ptrs = ptrs,
                                         .num_engine_ptrs = nptrs, .chunk = chunk, .chunk_layout = chunk_layout,
                                         .token_major = (mistakes >> 6) & 1, .num_tokens = T, .slots = slots,
                                         .slot_type = itype, .num_slots = num_slots };
        st = kvc_transfer_layer(ctx, &a);
        break;
    }
    default: { /* flash: key_value [2, NL, T, NH*HS], caches [NB, BS, NH, HS] */
        const __int128 head = (__int128)s.nh * s.hs * s.element_size;
        const size_t kv_bytes = huge_mode ? 64 : bytes(2 * s.nl * (__int128)T * head);
        const size_t cache_bytes = huge_mode ? 64 : bytes(s.nb * s.bs * head);
        void *kv = null_chunk ? NULL : buffer(&b, kv_bytes);
        void *kc = (mistakes & 4) ? NULL : buffer(&b, cache_bytes), *vc = buffer(&b, cache_bytes);
        const kvc_flash_transfer_t a = { .shape = s, .key_value = kv, .num_tokens = T, .key_cache = kc,
                                         .value_cache = vc, .slots = slots, .slot_type = itype,
                                         .num_slots = num_slots, .layer_idx = (int8_t)fuzz_u8(&in) % 4 };
        st = op == 3 ? kvc_load_and_reshape_flash(ctx, &a) : kvc_reshape_and_cache_back_flash(ctx, &a);
        break;
    }
    }
    if (huge_mode) FUZZ_CHECK(st != KVC_OK, "a shape whose bytes overflow 64 bits was accepted");
    if (st != KVC_OK) {
        FUZZ_CHECK(st == KVC_ERR_INVALID_ARG || st == KVC_ERR_FORMAT || st == KVC_ERR_DTYPE || st == KVC_ERR_SHAPE ||
                       st == KVC_ERR_OUT_OF_RANGE,
                   "transfer returned %s", kvc_status_name(st));
        check_unchanged(&b);
    }
    release(&b);
    free(ptrs);
    free(slots);
    return 0;
}
