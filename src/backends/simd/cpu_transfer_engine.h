/* SPDX-License-Identifier: BSD-3-Clause */
/* The CPU copy engine for KV transfer plans, compiled once per ISA tier (docs/ARCHITECTURE.md, "CPU
 * ISA dispatch"): cpu_transfer.c with the baseline flags, cpu_transfer_avx2.c with the avx2 tier's.
 * The including file defines XFER_FN(name), the names of the two entry points. memcpy of the
 * longest runs the plan allows, OpenMP over (layer, plane, token range) or (layer, plane, block).
 * The core has validated the plan. */
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cpu_backend.h"
#include "cpu_transfer.h"

/* Below this many bytes a transfer runs on the calling thread: waking the team costs more. */
#define PARALLEL_MIN_BYTES (256 * 1024)

static int threads_for(const kvc_backend_ctx_t *b, int64_t bytes)
{
    return bytes >= 0 && bytes < PARALLEL_MIN_BYTES ? 1 : b->num_threads;
}

/* Transfers larger than b->stream_min_bytes (kvc_context_stream_min_bytes: 3/4 of the last-level
 * cache, as glibc's memcpy decides) bypass the cache on the destination side with streaming stores: such a
 * destination cannot stay cached anyway, and skipping the read-for-ownership saves a third of the
 * memory traffic. Below it, plain stores keep the data in the cache, as memcpy does. */

#if defined(__SSE2__)
/* dst 64-byte aligned, n a multiple of 64: whole cache lines, so no line is half streamed. */
static inline void copy_lines_stream(char *dst, const char *src, int64_t n)
{
    for (; n > 0; n -= 64, dst += 64, src += 64) {
        const __m128i a = _mm_loadu_si128((const __m128i *)src), b = _mm_loadu_si128((const __m128i *)(src + 16));
        const __m128i c = _mm_loadu_si128((const __m128i *)(src + 32)), d = _mm_loadu_si128((const __m128i *)(src + 48));
        _mm_stream_si128((__m128i *)dst, a);
        _mm_stream_si128((__m128i *)(dst + 16), b);
        _mm_stream_si128((__m128i *)(dst + 32), c);
        _mm_stream_si128((__m128i *)(dst + 48), d);
    }
}
/* Streaming stores are weakly ordered: each thread fences before its results are used. */
static inline void stream_fence(int stream)
{
    if (stream) _mm_sfence();
}
/* Fetch the lines of a run that a later copy will read. */
static inline void prefetch_run(const char *p, int64_t n)
{
    for (int64_t o = 0; o < n; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}
#define HAVE_STREAM 1
#else
static inline void stream_fence(int stream) { (void)stream; }
static inline void prefetch_run(const char *p, int64_t n)
{
    (void)p;
    (void)n;
}
#endif

typedef struct {
    int h2d, stream;
} copy_mode_t;

#if defined(__AVX2__)
#include <immintrin.h>
/* Short runs (a head's row in head-major layouts) with 32-byte moves, inline: a libc call per
 * 256-byte run costs as much as the copy itself. */
static inline void copy_small_avx2(char *dst, const char *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 128 <= n; i += 128) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(src + i)), b = _mm256_loadu_si256((const __m256i *)(src + i + 32));
        const __m256i c = _mm256_loadu_si256((const __m256i *)(src + i + 64)), d = _mm256_loadu_si256((const __m256i *)(src + i + 96));
        _mm256_storeu_si256((__m256i *)(dst + i), a);
        _mm256_storeu_si256((__m256i *)(dst + i + 32), b);
        _mm256_storeu_si256((__m256i *)(dst + i + 64), c);
        _mm256_storeu_si256((__m256i *)(dst + i + 96), d);
    }
    for (; i < n; i += 32) _mm256_storeu_si256((__m256i *)(dst + i), _mm256_loadu_si256((const __m256i *)(src + i)));
}
/* As copy_lines_stream, with 32-byte streaming stores (dst 64-byte aligned, n a multiple of 64). */
static inline void copy_lines_stream_avx2(char *dst, const char *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 128 <= n; i += 128) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(src + i)), b = _mm256_loadu_si256((const __m256i *)(src + i + 32));
        const __m256i c = _mm256_loadu_si256((const __m256i *)(src + i + 64)), d = _mm256_loadu_si256((const __m256i *)(src + i + 96));
        _mm256_stream_si256((__m256i *)(dst + i), a);
        _mm256_stream_si256((__m256i *)(dst + i + 32), b);
        _mm256_stream_si256((__m256i *)(dst + i + 64), c);
        _mm256_stream_si256((__m256i *)(dst + i + 96), d);
    }
    for (; i < n; i += 64) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(src + i)), b = _mm256_loadu_si256((const __m256i *)(src + i + 32));
        _mm256_stream_si256((__m256i *)(dst + i), a);
        _mm256_stream_si256((__m256i *)(dst + i + 32), b);
    }
}
#define HAVE_AVX2_RUNS 1
#endif

/* Runs up to this many bytes are copied inline: head-major (HND) layouts move one head's row at a
 * time (head_size x element bytes, typically 256), and a libc call per run costs as much as the copy. */
#define INLINE_RUN_MAX 1024

static inline void copy_run(char *eng, char *chk, int64_t n, copy_mode_t m)
{
    char *dst = m.h2d ? eng : chk;
    const char *src = m.h2d ? chk : eng;
#ifdef HAVE_STREAM
    if (m.stream && !(((uintptr_t)dst | (uintptr_t)n) & 63)) {
#ifdef HAVE_AVX2_RUNS
        copy_lines_stream_avx2(dst, src, n);
#else
        copy_lines_stream(dst, src, n);
#endif
        return;
    }
#endif
#ifdef HAVE_AVX2_RUNS
    if (n <= INLINE_RUN_MAX && !(n & 31)) {
        copy_small_avx2(dst, src, n);
        return;
    }
#endif
    memcpy(dst, src, (size_t)n);
}

/* One unit's runs, in the order that reads the source side sequentially (the inner loop steps
 * the source by the smaller stride; the destination's lines are whole either way). Short runs
 * (head-major layouts: a head's row, strided on one side) defeat the hardware prefetcher, so each
 * run is followed by a prefetch of the same run of the next unit (`next_eng`/`next_chk`, NULL for
 * none): the source is then in the cache one unit ahead. */
static inline void copy_unit(char *eng, char *chk, const kvc_run_shape_t *r, copy_mode_t m, const char *next_eng,
                             const char *next_chk)
{
    int64_t no = r->outer_count, oe = r->outer_engine, oc = r->outer_chunk;
    int64_t ni = r->inner_count, ie = r->inner_engine, ic = r->inner_chunk;
    const int64_t src_outer = m.h2d ? oc : oe, src_inner = m.h2d ? ic : ie;
    if (no > 1 && ni > 1 && (src_inner < 0 ? -src_inner : src_inner) > (src_outer < 0 ? -src_outer : src_outer)) {
        no = r->inner_count, oe = r->inner_engine, oc = r->inner_chunk;
        ni = r->outer_count, ie = r->outer_engine, ic = r->outer_chunk;
    }
    const char *next = r->run_bytes > INLINE_RUN_MAX ? NULL : m.h2d ? next_chk : next_eng;
    const int64_t next_outer = m.h2d ? oc : oe, next_inner = m.h2d ? ic : ie;
    for (int64_t i = 0; i < no; i++) {
        char *e = eng + i * oe, *c = chk + i * oc;
        for (int64_t j = 0; j < ni; j++) {
            copy_run(e + j * ie, c + j * ic, r->run_bytes, m);
            if (next) prefetch_run(next + i * next_outer + j * next_inner, r->run_bytes);
        }
    }
}

static inline char *engine_base(const kvc_engine_map_t *m, int64_t l, int64_t p)
{
    return (char *)m->ptrs[l * m->ptr_layer_step + p * m->ptr_plane_step] + l * m->layer_offset + p * m->plane_offset;
}

/* Tokens whose source a token copy prefetches ahead: one token of a head-major layout is a few
 * 256-byte runs, too little to cover the memory latency. */
#define PREFETCH_TOKENS 4

/* The first token from t on whose slot is mapped (>= 0), or t1. */
static inline int64_t skip_unmapped(const int64_t *slots, int64_t t, int64_t t1)
{
    while (t < t1 && slots[t] < 0) t++;
    return t;
}

/* The number of tokens from t whose slots follow slots[t] inside its block (vLLM maps a sequence's
 * tokens to consecutive slots of its blocks); 0 when t == t1 or slots[t] is skipped (< 0). */
static inline int64_t slot_group(const int64_t *slots, int64_t t, int64_t t1, int64_t bs)
{
    if (t >= t1 || slots[t] < 0) return 0;
    const int64_t s = slots[t], room = bs - s % bs;
    int64_t k = 1;
    while (k < room && t + k < t1 && slots[t + k] == s + k) k++;
    return k;
}

/* Tokens [t0, t1) of one (layer, plane). When a token is one run (token-major layouts), tokens
 * whose engine and chunk rows both follow the previous one (consecutive slots) are merged into one
 * copy. */
static void tokens_range(const struct kvc_token_plan *p, copy_mode_t mode, int64_t l, int64_t pl, int64_t t0, int64_t t1)
{
    const kvc_engine_map_t *m = &p->engine;
    const kvc_run_shape_t *r = &p->runs;
    char *eb = engine_base(m, l, pl);
    char *cb = (char *)p->chunk + pl * p->chunk_map.plane_stride + l * p->chunk_map.layer_stride;
    const int64_t bs = m->block_size, cts = p->chunk_map.token_stride;
    if (r->outer_count == 1 && r->inner_count == 1) {
        char *run_e = NULL, *run_c = NULL;
        int64_t run_n = 0;
        for (int64_t t = t0; t < t1; t++) {
            const int64_t s = p->slots[t];
            if (s < 0) continue;
            char *e = eb + (s / bs) * m->block_stride + (s % bs) * m->token_stride, *c = cb + t * cts;
            if (run_n && e == run_e + run_n && c == run_c + run_n) {
                run_n += r->run_bytes;
                continue;
            }
            if (run_n) copy_run(run_e, run_c, run_n, mode);
            run_e = e;
            run_c = c;
            run_n = r->run_bytes;
        }
        if (run_n) copy_run(run_e, run_c, run_n, mode);
        return;
    }
    /* Otherwise one head per run (kvc_layout_token_runs leaves at most the head loop, as outer):
     * tokens of consecutive slots are copied as a block, head by head, so that on the engine side a
     * head's rows are one contiguous read or write instead of a row per token at the head stride.
     * Meanwhile the next group of the same length is prefetched; a lone token prefetches the token
     * PREFETCH_TOKENS ahead (one token is too little to cover the memory latency). */
    int64_t t = skip_unmapped(p->slots, t0, t1), k = slot_group(p->slots, t, t1, bs);
    while (k) {
        const int64_t tn = skip_unmapped(p->slots, t + k, t1), kn = slot_group(p->slots, tn, t1, bs);
        const int64_t tp = k == 1 ? t + PREFETCH_TOKENS : tn, sp = tp < t1 && (k == 1 || kn == k) ? p->slots[tp] : -1;
        const int64_t s = p->slots[t];
        const kvc_run_shape_t g = { .run_bytes = r->run_bytes,
                                    .outer_count = r->outer_count, .outer_engine = r->outer_engine,
                                    .outer_chunk = r->outer_chunk,
                                    .inner_count = k, .inner_engine = m->token_stride, .inner_chunk = cts };
        copy_unit(eb + (s / bs) * m->block_stride + (s % bs) * m->token_stride, cb + t * cts, &g, mode,
                  sp >= 0 ? eb + (sp / bs) * m->block_stride + (sp % bs) * m->token_stride : NULL,
                  sp >= 0 ? cb + tp * cts : NULL);
        t = tn;
        k = kn;
    }
}

/* ---------------------------------------------------------------- multi-part rows (formats 14, 17) */

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* Parts up to this many bytes are copied inline (longer ones: memcpy, or streamed). */
#define PART_INLINE_MAX 256

/* n bytes (<= PART_INLINE_MAX) inline: whole vectors, then one last vector ending at byte n
 * (overlapping the previous one; the two buffers never overlap). 14's 4-byte scale is one load and
 * one store, where a libc call per token would cost more than the whole row. */
static ALWAYS_INLINE void copy_bytes_inline(char *dst, const char *src, int64_t n)
{
    uint64_t a, z;
    uint32_t x, y;
    if (n == 4) {
        memcpy(&x, src, 4);
        memcpy(dst, &x, 4);
        return;
    }
#ifdef HAVE_AVX2_RUNS
    if (n >= 32) {
        copy_small_avx2(dst, src, n & ~(int64_t)31);
        if (n & 31)
            _mm256_storeu_si256((__m256i *)(dst + n - 32), _mm256_loadu_si256((const __m256i *)(src + n - 32)));
        return;
    }
#endif
#if defined(__SSE2__)
    if (n >= 16) {
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) _mm_storeu_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(src + i)));
        if (i < n) _mm_storeu_si128((__m128i *)(dst + n - 16), _mm_loadu_si128((const __m128i *)(src + n - 16)));
        return;
    }
#endif
    if (n >= 8) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            memcpy(&a, src + i, 8);
            memcpy(dst + i, &a, 8);
        }
        if (i < n) {
            memcpy(&z, src + n - 8, 8);
            memcpy(dst + n - 8, &z, 8);
        }
    } else if (n >= 4) {
        memcpy(&x, src, 4);
        memcpy(&y, src + n - 4, 4);
        memcpy(dst, &x, 4);
        memcpy(dst + n - 4, &y, 4);
    } else {
        for (int64_t i = 0; i < n; i++) dst[i] = src[i];
    }
}

/* One part of one token: whole streamed lines when the mode and alignment allow, short parts
 * inline, long ones as a run. */
static ALWAYS_INLINE void copy_part(char *eng, char *chk, int64_t n, copy_mode_t m)
{
    char *dst = m.h2d ? eng : chk;
#ifdef HAVE_STREAM
    if (m.stream && !(((uintptr_t)dst | (uintptr_t)n) & 63)) {
        copy_run(eng, chk, n, m);
        return;
    }
#endif
    if (n <= PART_INLINE_MAX) copy_bytes_inline(dst, m.h2d ? chk : eng, n);
    else memcpy(dst, m.h2d ? chk : eng, (size_t)n);
}

/* A part's engine side in one layer: base address and strides. */
typedef struct {
    char *base;
    int64_t block_stride, token_stride, chunk_offset, bytes;
} part_at_t;

static inline int parts_at(const struct kvc_row_parts *rp, int64_t l, part_at_t *pa)
{
    for (int k = 0; k < (int)rp->count; k++) {
        const struct kvc_row_part *q = &rp->part[k];
        pa[k] = (part_at_t){ engine_base(&q->engine, l, 0), q->engine.block_stride, q->engine.token_stride,
                             q->chunk_offset, q->bytes };
    }
    return (int)rp->count;
}

/* Rows of at least this many bytes prefetch the parts PARTS_PREFETCH_TOKENS tokens ahead (for
 * H2D with write intent: the engine lines are read for ownership). The parts of a row are as many
 * streams with a jump at every block, which the hardware prefetcher follows late; shorter rows
 * (14's 132 bytes) lose more to the address arithmetic than they gain. 8 tokens ahead (9 KiB of
 * the bench's MLA rows) measured best on the reference VM, timed beside memcpy (4 tokens: 0.78 of
 * it, 8: 0.83, 12: 0.82, 16: 0.77). */
#define PARTS_PREFETCH_MIN_ROW 512
#define PARTS_PREFETCH_TOKENS 8

static ALWAYS_INLINE void prefetch_parts(const part_at_t *pa, const int np, int64_t blk, int64_t off, int h2d)
{
    for (int k = 0; k < np; k++) {
        const char *q = pa[k].base + blk * pa[k].block_stride + off * pa[k].token_stride;
        if (h2d)
            for (int64_t o = 0; o < pa[k].bytes; o += 64) __builtin_prefetch(q + o, 1, 3);
        else
            for (int64_t o = 0; o < pa[k].bytes; o += 64) __builtin_prefetch(q + o, 0, 3);
    }
}

/* Tokens [t0, t1) of one layer, each token's np parts back to back (np is a constant in each
 * instance). slots NULL: the tokens are the offsets t of block `id`, and the prefetch runs on into
 * block next_id (< 0: none). */
static ALWAYS_INLINE void parts_loop(const part_at_t *pa, const int np, const int64_t n0, const int64_t n1,
                                     const int64_t *slots, int64_t id, int64_t next_id, int64_t bs, char *cb,
                                     int64_t cts, int64_t t0, int64_t t1, copy_mode_t mode)
{
    /* rows of constant parts shorter than the threshold: no prefetch code in that instance */
    const int prefetch = !(np == 2 && n0 && n1 && n0 + n1 < PARTS_PREFETCH_MIN_ROW) && cts >= PARTS_PREFETCH_MIN_ROW;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t s = slots ? slots[t] : id * bs + t;
        if (s < 0) continue;
        if (prefetch) {
            const int64_t tn = t + PARTS_PREFETCH_TOKENS;
            if (!slots && tn < bs) prefetch_parts(pa, np, id, tn, mode.h2d);
            else if (!slots && next_id >= 0 && tn - bs < bs) prefetch_parts(pa, np, next_id, tn - bs, mode.h2d);
            else if (slots && tn < t1 && slots[tn] >= 0) prefetch_parts(pa, np, slots[tn] / bs, slots[tn] % bs, mode.h2d);
        }
        const int64_t blk = slots ? s / bs : id, off = slots ? s - blk * bs : t;
        char *c = cb + t * cts;
        for (int k = 0; k < np; k++)
            copy_part(pa[k].base + blk * pa[k].block_stride + off * pa[k].token_stride, c + pa[k].chunk_offset,
                      k == 0 && n0 ? n0 : k == 1 && n1 ? n1 : pa[k].bytes, mode);
    }
}

/* parts_loop with the part count, the direction, streaming and the sizes of the common rows as
 * constants (DeepSeek-V3.2's 128 + 4-byte indexer rows, any values + 4-byte scale): with them
 * folded, each token is a few moves; a run-time size or direction costs about a third of the rate. */
static ALWAYS_INLINE void parts_shapes(const part_at_t *pa, int np, const int64_t *slots, int64_t id, int64_t next_id,
                                       int64_t bs, char *cb, int64_t cts, int64_t t0, int64_t t1, const copy_mode_t mode)
{
    if (np == 2 && pa[0].bytes == 128 && pa[1].bytes == 4)
        parts_loop(pa, 2, 128, 4, slots, id, next_id, bs, cb, cts, t0, t1, mode);
    else if (np == 2 && pa[1].bytes == 4)
        parts_loop(pa, 2, 0, 4, slots, id, next_id, bs, cb, cts, t0, t1, mode);
    else if (np == 2)
        parts_loop(pa, 2, 0, 0, slots, id, next_id, bs, cb, cts, t0, t1, mode);
    else if (np == 3)
        parts_loop(pa, 3, 0, 0, slots, id, next_id, bs, cb, cts, t0, t1, mode);
    else
        parts_loop(pa, 4, 0, 0, slots, id, next_id, bs, cb, cts, t0, t1, mode);
}

/* Inlined into the token walk and the block walk: each gets its own instances (slot table or
 * block offsets as a constant; 0.6 -> 0.7-0.85 of memcpy for the DSA rows). */
static ALWAYS_INLINE void parts_range(const part_at_t *pa, int np, const int64_t *slots, int64_t id, int64_t next_id,
                                      int64_t bs, char *cb, int64_t cts, int64_t t0, int64_t t1, copy_mode_t mode)
{
    if (mode.h2d && mode.stream) parts_shapes(pa, np, slots, id, next_id, bs, cb, cts, t0, t1, (copy_mode_t){ 1, 1 });
    else if (mode.h2d) parts_shapes(pa, np, slots, id, next_id, bs, cb, cts, t0, t1, (copy_mode_t){ 1, 0 });
    else if (mode.stream) parts_shapes(pa, np, slots, id, next_id, bs, cb, cts, t0, t1, (copy_mode_t){ 0, 1 });
    else parts_shapes(pa, np, slots, id, next_id, bs, cb, cts, t0, t1, (copy_mode_t){ 0, 0 });
}

/* Tokens [t0, t1) of layer l of a multi-part row. */
static void tokens_parts_range(const struct kvc_token_plan *p, const struct kvc_row_parts *rp, copy_mode_t mode,
                               int64_t l, int64_t t0, int64_t t1)
{
    part_at_t pa[KVC_ROW_MAX_PARTS];
    const int np = parts_at(rp, l, pa);
    parts_range(pa, np, p->slots, 0, -1, p->engine.block_size, (char *)p->chunk + l * p->chunk_map.layer_stride,
                p->chunk_map.token_stride, t0, t1, mode);
}

/* rp: the parts of a multi-part row (num_planes is then 1), or NULL. */
static kvc_status_t tokens_run(kvc_backend_ctx_t *b, const struct kvc_token_plan *p, const struct kvc_row_parts *rp)
{
    const int64_t ntok = p->end_token - p->first_token, lp = p->num_layers * p->num_planes;
    if (ntok <= 0 || lp <= 0) return KVC_OK;
    const int threads = threads_for(b, p->bytes);
    /* Split tokens only as far as needed to give every thread several work items. */
    int64_t tiles = (8 * (int64_t)threads + lp - 1) / lp;
    if (threads == 1 || tiles < 1) tiles = 1;
    if (tiles > ntok) tiles = ntok;
    const int64_t per_tile = (ntok + tiles - 1) / tiles;
    tiles = (ntok + per_tile - 1) / per_tile;
    const int64_t items = lp * tiles;
    const copy_mode_t mode = { p->direction == KVC_H2D, p->bytes < 0 || p->bytes > b->stream_min_bytes };
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
    {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t it = 0; it < items; it++) {
            const int64_t lpi = it / tiles, t0 = p->first_token + (it % tiles) * per_tile;
            const int64_t t1 = t0 + per_tile < p->end_token ? t0 + per_tile : p->end_token;
            if (rp) tokens_parts_range(p, rp, mode, lpi, t0, t1);
            else tokens_range(p, mode, lpi / p->num_planes, lpi % p->num_planes, t0, t1);
        }
        stream_fence(mode.stream);
    }
    return KVC_OK;
}

kvc_status_t XFER_FN(tokens)(kvc_backend_ctx_t *b, const struct kvc_token_plan *p) { return tokens_run(b, p, NULL); }

kvc_status_t XFER_FN(tokens_parts)(kvc_backend_ctx_t *b, const struct kvc_token_plan *p, const struct kvc_row_parts *rp)
{
    return tokens_run(b, p, rp);
}

/* Engine and chunk addresses of work item `it` (layer, plane, block) of a block plan. */
static inline void block_unit(const struct kvc_block_plan *p, int64_t it, char **e, char **c)
{
    const kvc_engine_map_t *m = &p->engine;
    const int64_t nblk = p->end_block - p->first_block, lpi = it / nblk, f = p->first_block + it % nblk;
    const int64_t l = lpi / p->num_planes, pl = lpi % p->num_planes, bpo = p->blocks_per_object;
    *e = engine_base(m, l, pl) + p->block_ids[f] * m->block_stride;
    *c = (char *)p->objects[f / bpo] + pl * p->chunk_map.plane_stride + l * p->chunk_map.layer_stride +
         (f % bpo) * m->block_size * p->chunk_map.token_stride;
}

/* Block work items [it0, it1) (layer-major) of a multi-part row: every token's parts back to back.
 * A block of such rows is only bs short rows, so the layer, object and row are stepped from item to
 * item rather than divided out of each. */
static void block_parts_items(const struct kvc_block_plan *p, const struct kvc_row_parts *rp, int64_t it0, int64_t it1,
                              copy_mode_t mode)
{
    if (it0 >= it1) return;
    const int64_t nblk = p->end_block - p->first_block, bpo = p->blocks_per_object, bs = p->engine.block_size;
    const int64_t cts = p->chunk_map.token_stride;
    int64_t l = it0 / nblk, f = p->first_block + it0 % nblk, obj = f / bpo, row = f % bpo;
    part_at_t pa[KVC_ROW_MAX_PARTS];
    int np = parts_at(rp, l, pa);
    for (int64_t it = it0; it < it1; it++) {
        char *c = (char *)p->objects[obj] + l * p->chunk_map.layer_stride + row * bs * cts;
        const int64_t next = f + 1 < p->end_block ? p->block_ids[f + 1] : -1; /* same layer only */
        parts_range(pa, np, NULL, p->block_ids[f], next, bs, c, cts, 0, bs, mode);
        if (++row == bpo) {
            row = 0;
            obj++;
        }
        if (++f == p->end_block && it + 1 < it1) { /* next layer */
            f = p->first_block;
            obj = f / bpo;
            row = f % bpo;
            np = parts_at(rp, ++l, pa);
        }
    }
}

/* rp: the parts of a multi-part row (num_planes is then 1), or NULL. */
static kvc_status_t blocks_run(kvc_backend_ctx_t *b, const struct kvc_block_plan *p, const struct kvc_row_parts *rp)
{
    const int64_t nblk = p->end_block - p->first_block, items = p->num_layers * p->num_planes * nblk;
    if (items <= 0) return KVC_OK;
    const int threads = threads_for(b, p->bytes);
    const copy_mode_t mode = { p->direction == KVC_H2D, p->bytes < 0 || p->bytes > b->stream_min_bytes };
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
    {
        if (rp) { /* rp is the same for the whole team: all threads or none skip the omp for */
#ifdef _OPENMP
            const int64_t me = omp_get_thread_num(), team = omp_get_num_threads();
#else
            const int64_t me = 0, team = 1;
#endif
            block_parts_items(p, rp, items * me / team, items * (me + 1) / team, mode); /* a static share */
        } else {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t it = 0; it < items; it++) {
                char *e, *c, *en = NULL, *cn = NULL;
                block_unit(p, it, &e, &c);
                if (it + 1 < items) block_unit(p, it + 1, &en, &cn); /* prefetched while this one is copied */
                copy_unit(e, c, &p->runs, mode, en, cn);
            }
        }
        stream_fence(mode.stream);
    }
    return KVC_OK;
}

kvc_status_t XFER_FN(blocks)(kvc_backend_ctx_t *b, const struct kvc_block_plan *p) { return blocks_run(b, p, NULL); }

kvc_status_t XFER_FN(blocks_parts)(kvc_backend_ctx_t *b, const struct kvc_block_plan *p, const struct kvc_row_parts *rp)
{
    return blocks_run(b, p, rp);
}
