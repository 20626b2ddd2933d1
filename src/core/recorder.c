/* SPDX-License-Identifier: BSD-3-Clause */
/* Completion and event recorders. Each record is prepared (copied) by the caller's thread, handed to
 * the backend's host callback on the stream, and linked into the context's list by that callback
 * under a mutex, so nothing can fail once enqueued. Drain swaps the list out under the mutex and
 * builds the caller's array outside it. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvcore/recorder.h>

#include "internal.h"

typedef struct rec_node {
    struct rec_node *next;
    kvc_recorder_t *owner;
    int is_event;
    union {
        kvc_completion_record_t completion;
        kvc_event_record_t event;
    } r;
} rec_node_t;

typedef struct rec_list {
    rec_node_t *head, *tail;
    size_t count;
} rec_list_t;

struct kvc_recorder {
    pthread_mutex_t lock;
    rec_list_t completions, events;
};

/* ---------------------------------------------------------------- clock */

static struct timespec anchor_real, anchor_mono;
static pthread_once_t anchor_once = PTHREAD_ONCE_INIT;

static void anchor_init(void)
{
    clock_gettime(CLOCK_REALTIME, &anchor_real);
    clock_gettime(CLOCK_MONOTONIC, &anchor_mono);
}

KVC_API double kvc_recorder_now(void)
{
    pthread_once(&anchor_once, anchor_init);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    /* elapsed in integer nanoseconds first, so the double keeps sub-microsecond resolution */
    const int64_t elapsed_ns = (int64_t)(now.tv_sec - anchor_mono.tv_sec) * 1000000000 + (now.tv_nsec - anchor_mono.tv_nsec);
    return (double)anchor_real.tv_sec + ((double)anchor_real.tv_nsec + (double)elapsed_ns) * 1e-9;
}

/* ---------------------------------------------------------------- lists */

static void list_free(rec_list_t *l)
{
    for (rec_node_t *n = l->head, *next; n; n = next) {
        next = n->next;
        free((void *)(n->is_event ? n->r.event.name : n->r.completion.kind)); /* the record's storage */
        free(n);
    }
    *l = (rec_list_t){ 0 };
}

kvc_status_t kvc_recorder_create(kvc_recorder_t **out)
{
    kvc_recorder_t *r = calloc(1, sizeof(*r));
    if (!r) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate the recorders");
    if (pthread_mutex_init(&r->lock, NULL) != 0) {
        free(r);
        return kvc_error(KVC_ERR_NO_MEMORY, "cannot initialise the recorders' mutex");
    }
    *out = r;
    return KVC_OK;
}

void kvc_recorder_destroy(kvc_recorder_t *r)
{
    if (!r) return;
    list_free(&r->completions);
    list_free(&r->events);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* Host callback: runs once the stream reaches the record (at once on the CPU backend). */
static void take_record(void *arg)
{
    rec_node_t *n = arg;
    if (n->is_event) n->r.event.timestamp = kvc_recorder_now();
    kvc_recorder_t *r = n->owner;
    rec_list_t *l = n->is_event ? &r->events : &r->completions;
    pthread_mutex_lock(&r->lock);
    if (l->tail) l->tail->next = n;
    else l->head = n;
    l->tail = n;
    l->count++;
    pthread_mutex_unlock(&r->lock);
}

static kvc_status_t enqueue(kvc_context_t *ctx, kvc_stream_t stream, rec_node_t *n)
{
    n->owner = ctx->recorder;
    const kvc_status_t st = ctx->ops.launch_host_callback(ctx->bctx, stream, take_record, n);
    if (st != KVC_OK) {
        list_free(&(rec_list_t){ n, n, 1 });
        return kvc_error(st, "cannot enqueue the recorder's host callback on the stream: %s", kvc_last_error());
    }
    return KVC_OK;
}

/* Take the whole list (under the lock), or put a taken list back in front of newer records. */
static rec_list_t list_take(kvc_recorder_t *r, rec_list_t *l)
{
    pthread_mutex_lock(&r->lock);
    const rec_list_t taken = *l;
    *l = (rec_list_t){ 0 };
    pthread_mutex_unlock(&r->lock);
    return taken;
}

static void list_put_back(kvc_recorder_t *r, rec_list_t *l, rec_list_t taken)
{
    pthread_mutex_lock(&r->lock);
    taken.tail->next = l->head;
    if (!l->head) l->tail = taken.tail;
    l->head = taken.head;
    l->count += taken.count;
    pthread_mutex_unlock(&r->lock);
}

/* ---------------------------------------------------------------- completions */

KVC_API kvc_status_t kvc_record_completion(kvc_context_t *ctx, kvc_stream_t stream, const char *kind,
                                           const void *payload, size_t payload_len)
{
    if (!ctx) return kvc_error(KVC_ERR_INVALID_ARG, "ctx must not be NULL");
    if (!kind) return kvc_error(KVC_ERR_INVALID_ARG, "kind must not be NULL");
    if (!payload && payload_len)
        return kvc_error(KVC_ERR_INVALID_ARG, "payload is NULL but payload_len is %zu", payload_len);
    const size_t klen = strlen(kind) + 1;
    if (payload_len > SIZE_MAX - klen) return kvc_error(KVC_ERR_NO_MEMORY, "payload of %zu bytes is too large", payload_len);
    rec_node_t *n = calloc(1, sizeof(*n));
    char *storage = malloc(klen + payload_len); /* kind, then the payload */
    if (!n || !storage) {
        free(n);
        free(storage);
        return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate a completion record of %zu bytes", klen + payload_len);
    }
    memcpy(storage, kind, klen);
    if (payload_len) memcpy(storage + klen, payload, payload_len);
    n->r.completion = (kvc_completion_record_t){ .kind = storage,
                                                 .payload = payload_len ? storage + klen : NULL,
                                                 .payload_len = payload_len };
    return enqueue(ctx, stream, n);
}

KVC_API kvc_status_t kvc_drain_completions(kvc_context_t *ctx, kvc_completion_record_t **records, size_t *count)
{
    if (!ctx || !records || !count) return kvc_error(KVC_ERR_INVALID_ARG, "ctx, records and count must not be NULL");
    rec_list_t taken = list_take(ctx->recorder, &ctx->recorder->completions);
    *records = NULL;
    *count = 0;
    if (!taken.count) return KVC_OK;
    kvc_completion_record_t *out = malloc(taken.count * sizeof(*out));
    if (!out) {
        list_put_back(ctx->recorder, &ctx->recorder->completions, taken);
        return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate %zu completion records", taken.count);
    }
    size_t i = 0;
    for (rec_node_t *n = taken.head, *next; n; n = next) {
        next = n->next;
        out[i++] = n->r.completion;
        free(n);
    }
    *records = out;
    *count = i;
    return KVC_OK;
}

KVC_API void kvc_completion_records_free(kvc_completion_record_t *records, size_t count)
{
    if (!records) return;
    for (size_t i = 0; i < count; i++) free((void *)records[i].kind);
    free(records);
}

/* ---------------------------------------------------------------- events */

KVC_API kvc_status_t kvc_record_event(kvc_context_t *ctx, kvc_stream_t stream, const char *name,
                                      const char *session_id, const kvc_str_meta_t *str_meta, size_t num_str_meta,
                                      const kvc_int_meta_t *int_meta, size_t num_int_meta)
{
    if (!ctx) return kvc_error(KVC_ERR_INVALID_ARG, "ctx must not be NULL");
    if (!name || !session_id) return kvc_error(KVC_ERR_INVALID_ARG, "name and session_id must not be NULL");
    if ((!str_meta && num_str_meta) || (!int_meta && num_int_meta))
        return kvc_error(KVC_ERR_INVALID_ARG, "a NULL metadata array with a count (str %zu, int %zu)", num_str_meta,
                         num_int_meta);
    /* storage: name, session id, metadata strings, then (8-byte aligned) the two metadata arrays */
    size_t strings = strlen(name) + 1 + strlen(session_id) + 1;
    for (size_t i = 0; i < num_str_meta; i++) {
        if (!str_meta[i].key || !str_meta[i].value)
            return kvc_error(KVC_ERR_INVALID_ARG, "str_meta[%zu] has a NULL key or value", i);
        strings += strlen(str_meta[i].key) + 1 + strlen(str_meta[i].value) + 1;
    }
    for (size_t i = 0; i < num_int_meta; i++) {
        if (!int_meta[i].key) return kvc_error(KVC_ERR_INVALID_ARG, "int_meta[%zu] has a NULL key", i);
        strings += strlen(int_meta[i].key) + 1;
    }
    const size_t arrays_at = (strings + 7) & ~(size_t)7;
    const size_t total = arrays_at + num_str_meta * sizeof(kvc_str_meta_t) + num_int_meta * sizeof(kvc_int_meta_t);
    rec_node_t *n = calloc(1, sizeof(*n));
    char *storage = malloc(total);
    if (!n || !storage) {
        free(n);
        free(storage);
        return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate an event record of %zu bytes", total);
    }
    char *p = storage;
#define COPY_STR(dst, src)                         \
    do {                                           \
        const size_t len_ = strlen(src) + 1;       \
        memcpy(p, (src), len_);                    \
        (dst) = p;                                 \
        p += len_;                                 \
    } while (0)
    kvc_event_record_t *e = &n->r.event;
    COPY_STR(e->name, name);
    COPY_STR(e->session_id, session_id);
    kvc_str_meta_t *sm = (kvc_str_meta_t *)(void *)(storage + arrays_at);
    kvc_int_meta_t *im = (kvc_int_meta_t *)(void *)(storage + arrays_at + num_str_meta * sizeof(kvc_str_meta_t));
    for (size_t i = 0; i < num_str_meta; i++) {
        COPY_STR(sm[i].key, str_meta[i].key);
        COPY_STR(sm[i].value, str_meta[i].value);
    }
    for (size_t i = 0; i < num_int_meta; i++) {
        COPY_STR(im[i].key, int_meta[i].key);
        im[i].value = int_meta[i].value;
    }
#undef COPY_STR
    e->str_meta = num_str_meta ? sm : NULL;
    e->num_str_meta = num_str_meta;
    e->int_meta = num_int_meta ? im : NULL;
    e->num_int_meta = num_int_meta;
    n->is_event = 1;
    return enqueue(ctx, stream, n);
}

KVC_API kvc_status_t kvc_drain_events(kvc_context_t *ctx, kvc_event_record_t **records, size_t *count)
{
    if (!ctx || !records || !count) return kvc_error(KVC_ERR_INVALID_ARG, "ctx, records and count must not be NULL");
    rec_list_t taken = list_take(ctx->recorder, &ctx->recorder->events);
    *records = NULL;
    *count = 0;
    if (!taken.count) return KVC_OK;
    kvc_event_record_t *out = malloc(taken.count * sizeof(*out));
    if (!out) {
        list_put_back(ctx->recorder, &ctx->recorder->events, taken);
        return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate %zu event records", taken.count);
    }
    size_t i = 0;
    for (rec_node_t *n = taken.head, *next; n; n = next) {
        next = n->next;
        out[i++] = n->r.event;
        free(n);
    }
    *records = out;
    *count = i;
    return KVC_OK;
}

KVC_API void kvc_event_records_free(kvc_event_record_t *records, size_t count)
{
    if (!records) return;
    for (size_t i = 0; i < count; i++) free((void *)records[i].name);
    free(records);
}
