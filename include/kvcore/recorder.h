/* SPDX-License-Identifier: BSD-3-Clause */
/* Completion and event recorders (docs/RECORDERS.md): record something "when the stream gets there"
 * and collect it later from any thread. A record goes through the backend's host callback on the
 * stream: on the CPU backend it is taken at once; GPU backends run it on the host once the work
 * queued before it on the stream is done. Records live in the context; drain takes them all
 * atomically, in the order they were taken (so records made by one thread keep that thread's order).
 * Destroying the context frees undrained records; synchronise the streams first on GPU backends.
 * Thread safety: recording and draining may run from any number of threads on one context at once
 * (one lock per context; context.h). */
#ifndef KVCORE_RECORDER_H
#define KVCORE_RECORDER_H

#include <stddef.h>
#include <stdint.h>
#include <kvcore/export.h>
#include <kvcore/status.h>
#include <kvcore/context.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- completion recorder: (kind, payload bytes) ---- */

typedef struct kvc_completion_record {
    const char *kind;      /* NUL-terminated copy of the kind */
    const void *payload;   /* copy of the payload bytes (any bytes, NULs included); NULL when empty */
    size_t payload_len;
} kvc_completion_record_t;

/* Record (kind, payload[0..payload_len)) on `stream`; both are copied. payload may be NULL only when
 * payload_len is 0. KVC_ERR_INVALID_ARG for a NULL ctx or kind, or a NULL payload with a length;
 * KVC_ERR_NO_MEMORY; a backend error if the host callback cannot be enqueued (nothing is recorded). */
KVC_API kvc_status_t kvc_record_completion(kvc_context_t *ctx, kvc_stream_t stream, const char *kind,
                                           const void *payload, size_t payload_len);

/* Take every completion recorded so far: *records receives an array of *count records (NULL and 0
 * when there are none) to free with kvc_completion_records_free. On KVC_ERR_NO_MEMORY the records
 * stay in the context for a later drain. */
KVC_API kvc_status_t kvc_drain_completions(kvc_context_t *ctx, kvc_completion_record_t **records, size_t *count);

/* Free an array returned by kvc_drain_completions (NULL is a no-op). */
KVC_API void kvc_completion_records_free(kvc_completion_record_t *records, size_t count);

/* ---- event recorder: (name, session id, string and integer metadata, timestamp) ---- */

typedef struct kvc_str_meta {
    const char *key;
    const char *value;
} kvc_str_meta_t;

typedef struct kvc_int_meta {
    const char *key;
    int64_t value;
} kvc_int_meta_t;

typedef struct kvc_event_record {
    const char *name;
    const char *session_id;
    double timestamp;            /* Unix-epoch seconds when the stream reached the record (see below) */
    const kvc_str_meta_t *str_meta;
    size_t num_str_meta;
    const kvc_int_meta_t *int_meta;
    size_t num_int_meta;
} kvc_event_record_t;

/* Record an event on `stream`; every string and both metadata arrays are copied. The timestamp is
 * taken when the host callback runs: wall-clock time at the first timestamp in the process plus the
 * monotonic time elapsed since, so timestamps never go backwards (NTP steps do not reorder events).
 * KVC_ERR_INVALID_ARG for a NULL ctx, name or session_id, a NULL metadata array with a count, or a
 * NULL key or string value (the message names the array and index); otherwise as
 * kvc_record_completion. */
KVC_API kvc_status_t kvc_record_event(kvc_context_t *ctx, kvc_stream_t stream, const char *name,
                                      const char *session_id, const kvc_str_meta_t *str_meta, size_t num_str_meta,
                                      const kvc_int_meta_t *int_meta, size_t num_int_meta);

/* As kvc_drain_completions, for events; free with kvc_event_records_free. */
KVC_API kvc_status_t kvc_drain_events(kvc_context_t *ctx, kvc_event_record_t **records, size_t *count);

KVC_API void kvc_event_records_free(kvc_event_record_t *records, size_t count);

/* The recorders' clock: monotonic Unix-epoch seconds, as stamped on events. */
KVC_API double kvc_recorder_now(void);

#ifdef __cplusplus
}
#endif
#endif
