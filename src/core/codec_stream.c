/* SPDX-License-Identifier: BSD-3-Clause */
/* Streams of .kvc containers (docs/FORMAT.md "Streams"): a KV cache of any length coded through
 * caller callbacks, K chunks at a time (one thread each), so memory stays at K chunks and their
 * containers. Callbacks run on the calling thread only, in chunk order. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore/codec.h>
#include <kvcore/context.h>

#ifdef KVC_HAVE_OPENMP
#include <omp.h>
#endif

#include "common/checked.h"
#include "container.h"
#include "log.h"


/* Chunks in flight: min(threads, 4, chunks). Each is coded by one thread of an outer team; the
 * codec's own parallel regions inside it are then nested and, under OpenMP's default of one
 * active level, run on that one thread, so the stream uses K threads in all. When nesting is
 * enabled (OMP_MAX_ACTIVE_LEVELS > 1) the inner teams would multiply the threads by K, so the
 * stream then codes one chunk at a time with all the context's threads instead. */
static size_t chunks_in_flight(const kvc_context_t *ctx, size_t chunks)
{
    size_t k = (size_t)(kvc_context_num_threads(ctx) > 0 ? kvc_context_num_threads(ctx) : 1);
    if (k > KVC_CODEC_STREAM_MAX_IN_FLIGHT) k = KVC_CODEC_STREAM_MAX_IN_FLIGHT;
    if (k > chunks) k = chunks;
#ifdef KVC_HAVE_OPENMP
    if (omp_get_max_active_levels() > omp_get_active_level() + 1) k = 1;
#else
    k = 1;
#endif
    return k ? k : 1;
}

typedef struct {
    void *in;                 /* encode: the input chunk; decode: the container */
    size_t in_cap;
    uint8_t *out;             /* encode: the container (kvc_codec_free); decode: the decoded chunk */
    size_t out_cap, len, t0, n;
    kvc_codec_info_t info;    /* decode */
    kvc_status_t st;
    char msg[512];            /* kvc_last_error of a worker thread, re-raised on the calling thread */
} slot_t;

static void slots_free(slot_t *s, size_t k, int encode)
{
    if (!s) return;
    for (size_t i = 0; i < k; i++) {
        free(s[i].in);
        if (encode) kvc_codec_free(s[i].out);
        else free(s[i].out);
    }
    free(s);
}

/* Code slots [0, m) at once, one thread each. A slot after a failed one is skipped: it would
 * never be written. */
static void code_slots(kvc_context_t *ctx, const kvc_codec_params_t *cp, slot_t *s, size_t m, int encode)
{
    if (m == 0) return;
    size_t failed = m;
#ifdef KVC_HAVE_OPENMP
#pragma omp parallel for schedule(static, 1) num_threads((int)m) if (m > 1)
#endif
    for (size_t i = 0; i < m; i++) {
        s[i].st = KVC_OK;
        if (i > __atomic_load_n(&failed, __ATOMIC_RELAXED)) continue;
        if (encode) {
            kvc_codec_params_t p = *cp;
            p.num_tokens = s[i].n;
            s[i].st = kvc_codec_encode(ctx, &p, s[i].in, &s[i].out, &s[i].len);
        } else {
            s[i].st = kvc_codec_decode(ctx, s[i].in, s[i].len, s[i].out, s[i].out_cap, NULL);
        }
        if (s[i].st != KVC_OK) {
            snprintf(s[i].msg, sizeof(s[i].msg), "%s", kvc_last_error());
            size_t f = __atomic_load_n(&failed, __ATOMIC_RELAXED);
            while (i < f && !__atomic_compare_exchange_n(&failed, &f, i, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            }
        }
    }
}

KVC_API kvc_status_t kvc_codec_encode_stream(kvc_context_t *ctx, const kvc_codec_params_t *p, size_t chunk_tokens,
                                             kvc_codec_chunk_read_fn read, void *read_user,
                                             kvc_codec_bytes_write_fn write, void *write_user)
{
    if (!ctx || !p || !read || !write || chunk_tokens == 0)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec stream encode: ctx, params and callbacks must not be NULL, chunk_tokens > 0");
    /* Checked before the first read, which fills a buffer sized by the dtype. */
    if (p->dtype != KVC_DTYPE_F16 && p->dtype != KVC_DTYPE_BF16 && p->dtype != KVC_DTYPE_F32)
        return kvc_error(KVC_ERR_DTYPE, "codec stream encode: dtype %s: only f16, bf16 and f32 chunks are coded",
                         kvc_dtype_name(p->dtype));
    const size_t es = kvc_dtype_size(p->dtype);
    if (p->num_layers == 0 || p->num_tokens == 0 || p->num_heads == 0 || p->head_size == 0)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec stream encode: dimensions must be non-zero");
    const size_t planes = p->layout == KVC_CODEC_MLA ? 1 : 2;
    const size_t T = p->num_tokens, n_max = chunk_tokens < T ? chunk_tokens : T;
    size_t bytes;
    if (!kvc_mul_ok(planes, p->num_layers, &bytes) || !kvc_mul_ok(bytes, n_max, &bytes) ||
        !kvc_mul_ok(bytes, p->num_heads, &bytes) || !kvc_mul_ok(bytes, p->head_size, &bytes) ||
        !kvc_mul_ok(bytes, es, &bytes))
        return kvc_error(KVC_ERR_SHAPE, "codec stream encode: chunk size overflows");
    const size_t K = chunks_in_flight(ctx, (T + n_max - 1) / n_max);
    slot_t *s = calloc(K, sizeof(*s));
    for (size_t i = 0; s && i < K; i++)
        if (!(s[i].in = malloc(bytes))) {
            slots_free(s, K, 1);
            s = NULL;
        }
    if (!s) return kvc_error(KVC_ERR_NO_MEMORY, "codec stream encode: no memory for %zu chunks of %zu bytes", K, bytes);
    kvc_codec_params_t cp = *p;
    cp.field_mask &= ~(uint64_t)KVC_CODEC_PARAM_PROGRESS; /* progress is reported per chunk */
    kvc_status_t st = KVC_OK;
    for (size_t t0 = 0; t0 < T && st == KVC_OK;) {
        /* Read up to K chunks in order; the chunks before a failed read are still coded and
         * written, as one at a time would. */
        size_t m = 0;
        kvc_status_t rst = KVC_OK;
        while (m < K && t0 < T) {
            const size_t n = T - t0 < n_max ? T - t0 : n_max;
            if ((rst = read(read_user, t0, n, s[m].in)) != KVC_OK) break;
            s[m].t0 = t0;
            s[m].n = n;
            m++;
            t0 += n;
        }
        code_slots(ctx, &cp, s, m, 1);
        for (size_t i = 0; i < m; i++) {
            if (st == KVC_OK && s[i].st != KVC_OK) st = kvc_error(s[i].st, "%s", s[i].msg);
            if (st == KVC_OK) st = write(write_user, s[i].out, s[i].len);
            if (st == KVC_OK && (p->field_mask & KVC_CODEC_PARAM_PROGRESS) && p->progress)
                p->progress(p->progress_user, s[i].t0 + s[i].n, T);
            kvc_codec_free(s[i].out);
            s[i].out = NULL;
        }
        if (st == KVC_OK) st = rst;
    }
    slots_free(s, K, 1);
    return st;
}

/* Read exactly n bytes; *got tells how many came before the end of the stream. */
static kvc_status_t read_full(kvc_codec_bytes_read_fn read, void *user, uint8_t *buf, size_t n, size_t *got)
{
    *got = 0;
    while (*got < n) {
        size_t g = 0;
        kvc_status_t st = read(user, buf + *got, n - *got, &g);
        if (st != KVC_OK) return st;
        if (g == 0) break;
        *got += g;
    }
    return KVC_OK;
}

static int same_kind(const kvc_codec_info_t *a, const kvc_codec_info_t *b)
{
    return a->dtype == b->dtype && a->layout == b->layout && a->num_layers == b->num_layers &&
           a->num_heads == b->num_heads && a->head_size == b->head_size && a->heads_known == b->heads_known;
}

/* Read container `index` of the stream into slot s (validated header, inspected, same kind as
 * *kind, which chunk 0 sets). *end: the stream ended at a container boundary. */
static kvc_status_t read_container(kvc_codec_bytes_read_fn read, void *user, size_t index, slot_t *s,
                                   kvc_codec_info_t *kind, int *end)
{
    uint8_t hdr[KVC_CONTAINER_HEADER_BYTES];
    size_t got = 0;
    kvc_status_t st = read_full(read, user, hdr, sizeof(hdr), &got);
    if (st != KVC_OK) return st;
    if (got == 0 && index > 0) {
        *end = 1;
        return KVC_OK;
    }
    if (got < sizeof(hdr))
        return kvc_error(KVC_ERR_CORRUPT, "codec stream: %s after %zu chunks (%zu of %d header bytes)",
                         got ? "truncated container header" : "empty stream", index, got, KVC_CONTAINER_HEADER_BYTES);
    /* The total size decides an allocation: trust it only from a header that checks out. */
    kvc_container_info_t ci;
    if ((st = kvc_container_probe(hdr, sizeof(hdr), &ci)) == KVC_ERR_VERSION) return st;
    if (st != KVC_OK)
        return kvc_error(KVC_ERR_CORRUPT, "codec stream: chunk %zu has no valid container header (magic or CRC)", index);
    const uint64_t total = ci.container_bytes;
    if (total > SIZE_MAX / 2)
        return kvc_error(KVC_ERR_CORRUPT, "codec stream: chunk %zu claims %llu bytes", index, (unsigned long long)total);
    if (total > s->in_cap) {
        void *nb = realloc(s->in, (size_t)total);
        if (!nb) return kvc_error(KVC_ERR_NO_MEMORY, "codec stream: no memory for a %llu-byte container", (unsigned long long)total);
        s->in = nb;
        s->in_cap = (size_t)total;
    }
    uint8_t *buf = s->in;
    memcpy(buf, hdr, sizeof(hdr));
    st = read_full(read, user, buf + sizeof(hdr), (size_t)total - sizeof(hdr), &got);
    if (st != KVC_OK) return st;
    if (got < (size_t)total - sizeof(hdr))
        return kvc_error(KVC_ERR_CORRUPT, "codec stream: chunk %zu truncated (%zu of %llu bytes)", index, got + sizeof(hdr),
                         (unsigned long long)total);
    s->len = (size_t)total;
    if ((st = kvc_codec_inspect(buf, s->len, &s->info)) != KVC_OK) return st;
    if (index == 0) *kind = s->info;
    else if (!same_kind(kind, &s->info))
        return kvc_error(KVC_ERR_CORRUPT, "codec stream: chunk %zu differs from chunk 0 in dtype, layout, layers or heads", index);
    if (s->info.original_bytes > s->out_cap) {
        void *nb = realloc(s->out, s->info.original_bytes);
        if (!nb) return kvc_error(KVC_ERR_NO_MEMORY, "codec stream: no memory for a %zu-byte chunk", s->info.original_bytes);
        s->out = nb;
        s->out_cap = s->info.original_bytes;
    }
    return KVC_OK;
}

KVC_API kvc_status_t kvc_codec_decode_stream(kvc_context_t *ctx, kvc_codec_bytes_read_fn read, void *read_user,
                                             kvc_codec_chunk_write_fn write, void *write_user,
                                             kvc_codec_info_t *first)
{
    if (!ctx || !read || !write) return kvc_error(KVC_ERR_INVALID_ARG, "codec stream decode: ctx and callbacks must not be NULL");
    const size_t K = chunks_in_flight(ctx, SIZE_MAX);
    slot_t *s = calloc(K, sizeof(*s));
    if (!s) return kvc_error(KVC_ERR_NO_MEMORY, "codec stream decode: no memory");
    size_t token0 = 0, chunks = 0;
    kvc_codec_info_t head, kind;
    memset(&head, 0, sizeof(head));
    memset(&kind, 0, sizeof(kind));
    kvc_status_t st = KVC_OK;
    for (int end = 0; st == KVC_OK && !end;) {
        /* Read up to K containers in order; those before a bad one are still decoded and written. */
        size_t m = 0;
        kvc_status_t rst = KVC_OK;
        while (m < K && (rst = read_container(read, read_user, chunks + m, &s[m], &kind, &end)) == KVC_OK && !end) m++;
        code_slots(ctx, NULL, s, m, 0);
        for (size_t i = 0; i < m && st == KVC_OK; i++) {
            if (s[i].st != KVC_OK) st = kvc_error(s[i].st, "%s", s[i].msg);
            else st = write(write_user, token0, s[i].out, &s[i].info);
            if (st != KVC_OK) break;
            if (chunks == 0) {
                head = s[i].info;
            } else {
                head.num_tokens += s[i].info.num_tokens;
                head.original_bytes += s[i].info.original_bytes;
                head.container_bytes += s[i].info.container_bytes;
            }
            token0 += s[i].info.num_tokens;
            chunks++;
        }
        if (st == KVC_OK) st = rst;
    }
    slots_free(s, K, 0);
    if (st == KVC_OK && first) *first = head;
    return st;
}
