/* The CPU copy engine for KV transfer plans, compiled once per ISA tier (docs/ARCHITECTURE.md, "CPU
 * ISA dispatch"): cpu_transfer.c with the baseline flags, cpu_transfer_avx2.c with the avx2 tier's.
 * The including file defines XFER_FN(name), the names of the two entry points. memcpy of the
 * longest runs the plan allows, OpenMP over (layer, plane, token range) or (layer, plane, block).
 * The core has validated the plan. */
#include <stdint.h>
#include <string.h>
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

/* Transfers larger than b->stream_min_bytes (cpu_backend.c: 3/4 of the last-level cache, as glibc's
 * memcpy decides) bypass the cache on the destination side with streaming stores: such a
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
#define HAVE_STREAM 1
#else
static inline void stream_fence(int stream) { (void)stream; }
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
        copy_lines_stream(dst, src, n);
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

static inline void copy_unit(char *eng, char *chk, const kvc_run_shape_t *r, copy_mode_t m)
{
    for (int64_t i = 0; i < r->outer_count; i++) {
        char *e = eng + i * r->outer_engine, *c = chk + i * r->outer_chunk;
        for (int64_t j = 0; j < r->inner_count; j++)
            copy_run(e + j * r->inner_engine, c + j * r->inner_chunk, r->run_bytes, m);
    }
}

static inline char *engine_base(const kvc_engine_map_t *m, int64_t l, int64_t p)
{
    return (char *)m->ptrs[l * m->ptr_layer_step + p * m->ptr_plane_step] + l * m->layer_offset + p * m->plane_offset;
}

/* Tokens [t0, t1) of one (layer, plane). When a token is one run, tokens whose engine and chunk
 * rows both follow the previous one (consecutive slots) are merged into one copy. */
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
    for (int64_t t = t0; t < t1; t++) {
        const int64_t s = p->slots[t];
        if (s >= 0) copy_unit(eb + (s / bs) * m->block_stride + (s % bs) * m->token_stride, cb + t * cts, r, mode);
    }
}

kvc_status_t XFER_FN(tokens)(kvc_backend_ctx_t *b, const struct kvc_token_plan *p)
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
            tokens_range(p, mode, lpi / p->num_planes, lpi % p->num_planes, t0, t1);
        }
        stream_fence(mode.stream);
    }
    return KVC_OK;
}

kvc_status_t XFER_FN(blocks)(kvc_backend_ctx_t *b, const struct kvc_block_plan *p)
{
    const int64_t nblk = p->end_block - p->first_block, items = p->num_layers * p->num_planes * nblk;
    if (items <= 0) return KVC_OK;
    const int threads = threads_for(b, p->bytes);
    const copy_mode_t mode = { p->direction == KVC_H2D, p->bytes < 0 || p->bytes > b->stream_min_bytes };
    const kvc_engine_map_t *m = &p->engine;
    const int64_t bpo = p->blocks_per_object, block_rows = m->block_size * p->chunk_map.token_stride;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
    {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t it = 0; it < items; it++) {
            const int64_t lpi = it / nblk, f = p->first_block + it % nblk;
            const int64_t l = lpi / p->num_planes, pl = lpi % p->num_planes;
            char *e = engine_base(m, l, pl) + p->block_ids[f] * m->block_stride;
            char *c = (char *)p->objects[f / bpo] + pl * p->chunk_map.plane_stride + l * p->chunk_map.layer_stride +
                      (f % bpo) * block_rows;
            copy_unit(e, c, &p->runs, mode);
        }
        stream_fence(mode.stream);
    }
    return KVC_OK;
}
