/* SPDX-License-Identifier: BSD-3-Clause */
/* Completion and event recorders: contents and order, payloads with NUL bytes, drain empties,
 * timestamps, several threads recording and draining at once, and every bad argument. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>
#include <kvcore.h>

#include "test_util.h"

/* CPU context on a recorded topology without hwloc's PCI component: recorders do not depend on it,
 * and the PCI component (libpciaccess) leaks ~8500 allocations per load, which makes LeakSanitizer
 * crawl. */
static kvc_context_t *cpu_context(void)
{
    setenv("HWLOC_XMLFILE", kvc_test_data("topologies/16amd64-4distances.xml"), 1);
    setenv("HWLOC_COMPONENTS", "-pci", 1);
    return kvc_test_cpu_context();
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

Test(recorder, completions_in_order_with_nul_bytes)
{
    kvc_context_t *ctx = cpu_context();
    static const char p0[] = { 'a', 0, 'b', 0, 0 };
    static const unsigned char p2[] = { 0, 0xff, 0, 0x80 };
    cr_assert_eq(kvc_record_completion(ctx, NULL, "store", p0, sizeof(p0)), KVC_OK);
    cr_assert_eq(kvc_record_completion(ctx, NULL, "", NULL, 0), KVC_OK);
    cr_assert_eq(kvc_record_completion(ctx, NULL, "retrieve", p2, sizeof(p2)), KVC_OK);
    kvc_completion_record_t *r = NULL;
    size_t n = 0;
    cr_assert_eq(kvc_drain_completions(ctx, &r, &n), KVC_OK);
    cr_assert_eq(n, 3u);
    cr_assert_str_eq(r[0].kind, "store");
    cr_assert_eq(r[0].payload_len, sizeof(p0));
    cr_assert(memcmp(r[0].payload, p0, sizeof(p0)) == 0, "payload with NUL bytes changed");
    cr_assert_str_eq(r[1].kind, "");
    cr_assert_null(r[1].payload);
    cr_assert_eq(r[1].payload_len, 0u);
    cr_assert_str_eq(r[2].kind, "retrieve");
    cr_assert_eq(r[2].payload_len, sizeof(p2));
    cr_assert(memcmp(r[2].payload, p2, sizeof(p2)) == 0);
    kvc_completion_records_free(r, n);

    cr_assert_eq(kvc_drain_completions(ctx, &r, &n), KVC_OK);
    cr_assert_eq(n, 0u, "drain must empty the recorder");
    cr_assert_null(r);
    kvc_completion_records_free(NULL, 0);
    kvc_context_destroy(ctx);
}

Test(recorder, events_fields_and_timestamps)
{
    kvc_context_t *ctx = cpu_context();
    const double before = wall_now();
    const kvc_str_meta_t sm[] = { { "model", "llama" }, { "empty", "" } };
    const kvc_int_meta_t im[] = { { "tokens", 256 }, { "layer", -3 }, { "big", INT64_MIN } };
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof(name), "ev%d", i);
        cr_assert_eq(kvc_record_event(ctx, NULL, name, "session-7", sm, i % 2 ? 2 : 0, im, i % 2 ? 0 : 3), KVC_OK);
    }
    kvc_event_record_t *e = NULL;
    size_t n = 0;
    cr_assert_eq(kvc_drain_events(ctx, &e, &n), KVC_OK);
    cr_assert_eq(n, 5u);
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "ev%zu", i);
        cr_assert_str_eq(e[i].name, name);
        cr_assert_str_eq(e[i].session_id, "session-7");
        if (i % 2) {
            cr_assert_eq(e[i].num_str_meta, 2u);
            cr_assert_str_eq(e[i].str_meta[0].key, "model");
            cr_assert_str_eq(e[i].str_meta[0].value, "llama");
            cr_assert_str_eq(e[i].str_meta[1].key, "empty");
            cr_assert_str_eq(e[i].str_meta[1].value, "");
            cr_assert_eq(e[i].num_int_meta, 0u);
            cr_assert_null(e[i].int_meta);
        } else {
            cr_assert_eq(e[i].num_str_meta, 0u);
            cr_assert_null(e[i].str_meta);
            cr_assert_eq(e[i].num_int_meta, 3u);
            cr_assert_str_eq(e[i].int_meta[0].key, "tokens");
            cr_assert_eq(e[i].int_meta[0].value, 256);
            cr_assert_eq(e[i].int_meta[1].value, -3);
            cr_assert_eq(e[i].int_meta[2].value, INT64_MIN);
        }
        /* Unix-epoch seconds, close to the wall clock, never decreasing */
        cr_assert(e[i].timestamp > before - 1.0 && e[i].timestamp < wall_now() + 1.0, "timestamp %.6f vs wall %.6f",
                  e[i].timestamp, before);
        if (i) cr_assert_geq(e[i].timestamp, e[i - 1].timestamp);
    }
    kvc_event_records_free(e, n);
    cr_assert_eq(kvc_drain_events(ctx, &e, &n), KVC_OK);
    cr_assert_eq(n, 0u);
    cr_assert_null(e);
    kvc_context_destroy(ctx);
}

Test(recorder, completions_and_events_are_separate)
{
    kvc_context_t *ctx = cpu_context();
    cr_assert_eq(kvc_record_completion(ctx, NULL, "k", "x", 1), KVC_OK);
    cr_assert_eq(kvc_record_event(ctx, NULL, "e", "s", NULL, 0, NULL, 0), KVC_OK);
    kvc_event_record_t *e;
    size_t ne;
    cr_assert_eq(kvc_drain_events(ctx, &e, &ne), KVC_OK);
    cr_assert_eq(ne, 1u);
    cr_assert_str_eq(e[0].name, "e");
    kvc_event_records_free(e, ne);
    kvc_completion_record_t *c;
    size_t nc;
    cr_assert_eq(kvc_drain_completions(ctx, &c, &nc), KVC_OK);
    cr_assert_eq(nc, 1u);
    cr_assert_str_eq(c[0].kind, "k");
    kvc_completion_records_free(c, nc);
    kvc_context_destroy(ctx);
}

/* Undrained records are freed with the context (ASan/LSan checks the leak side). */
Test(recorder, destroy_with_pending_records)
{
    kvc_context_t *ctx = cpu_context();
    const kvc_str_meta_t sm[] = { { "a", "b" } };
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(kvc_record_completion(ctx, NULL, "pending", "\0\0", 2), KVC_OK);
        cr_assert_eq(kvc_record_event(ctx, NULL, "pending", "s", sm, 1, NULL, 0), KVC_OK);
    }
    kvc_context_destroy(ctx);
}

Test(recorder, clock_is_monotonic_unix_seconds)
{
    double prev = kvc_recorder_now();
    cr_assert(prev > 1.6e9 && prev - wall_now() < 1.0 && wall_now() - prev < 1.0, "now %.3f", prev);
    for (int i = 0; i < 10000; i++) {
        const double t = kvc_recorder_now();
        cr_assert_geq(t, prev);
        prev = t;
    }
}

/* ---------------------------------------------------------------- threads */

#define PRODUCERS 4
#define PER_PRODUCER 3000
#define DRAINERS 2

/* Payload: producer id, sequence number, and NUL bytes that must survive. */
typedef struct payload {
    uint32_t producer, seq;
    uint32_t zero;
    char tail[3];
} payload_t;

typedef struct stress {
    kvc_context_t *ctx;
    int producers_left; /* protected by lock */
    pthread_mutex_t lock;
    /* seen[kind][producer][seq], kind 0 completions, 1 events; written only by drainers under lock */
    unsigned char seen[2][PRODUCERS][PER_PRODUCER];
    size_t failures;
} stress_t;

typedef struct producer_arg {
    stress_t *s;
    uint32_t id;
} producer_arg_t;

static void *producer(void *arg)
{
    producer_arg_t *a = arg;
    char kind[16], session[16];
    snprintf(kind, sizeof(kind), "p%u", a->id);
    snprintf(session, sizeof(session), "s%u", a->id);
    for (uint32_t i = 0; i < PER_PRODUCER; i++) {
        const payload_t p = { a->id, i, 0, { 0, 'z', 0 } };
        const kvc_int_meta_t im[] = { { "producer", a->id }, { "seq", i } };
        const kvc_str_meta_t sm[] = { { "kind", kind } };
        if (kvc_record_completion(a->s->ctx, NULL, kind, &p, sizeof(p)) != KVC_OK ||
            kvc_record_event(a->s->ctx, NULL, "ev", session, sm, 1, im, 2) != KVC_OK) {
            pthread_mutex_lock(&a->s->lock);
            a->s->failures++;
            pthread_mutex_unlock(&a->s->lock);
        }
    }
    pthread_mutex_lock(&a->s->lock);
    a->s->producers_left--;
    pthread_mutex_unlock(&a->s->lock);
    return NULL;
}

/* Marks each record seen; within the drainer's successive batches, every producer's sequence numbers
 * must strictly increase (a drain takes everything recorded before it, in order). Returns problems. */
static size_t absorb(stress_t *s, int64_t last[2][PRODUCERS])
{
    size_t bad = 0;
    kvc_completion_record_t *c;
    size_t nc;
    if (kvc_drain_completions(s->ctx, &c, &nc) != KVC_OK) return 1;
    kvc_event_record_t *e;
    size_t ne;
    if (kvc_drain_events(s->ctx, &e, &ne) != KVC_OK) return 1;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < nc; i++) {
        payload_t p;
        if (c[i].payload_len != sizeof(p)) { bad++; continue; }
        memcpy(&p, c[i].payload, sizeof(p));
        char kind[16];
        snprintf(kind, sizeof(kind), "p%u", p.producer);
        if (p.producer >= PRODUCERS || p.seq >= PER_PRODUCER || p.zero || memcmp(p.tail, "\0z\0", 3) ||
            strcmp(c[i].kind, kind) || s->seen[0][p.producer][p.seq]++ || (int64_t)p.seq <= last[0][p.producer])
            bad++;
        else last[0][p.producer] = p.seq;
    }
    for (size_t i = 0; i < ne; i++) {
        if (e[i].num_int_meta != 2 || e[i].num_str_meta != 1) { bad++; continue; }
        const int64_t prod = e[i].int_meta[0].value, seq = e[i].int_meta[1].value;
        if (prod < 0 || prod >= PRODUCERS || seq < 0 || seq >= PER_PRODUCER || s->seen[1][prod][seq]++ ||
            seq <= last[1][prod] || e[i].session_id[0] != 's' || atoi(e[i].session_id + 1) != prod)
            bad++;
        else last[1][prod] = seq;
    }
    pthread_mutex_unlock(&s->lock);
    kvc_completion_records_free(c, nc);
    kvc_event_records_free(e, ne);
    return bad;
}

typedef struct drainer_arg {
    stress_t *s;
    size_t bad;
} drainer_arg_t;

static void *drainer(void *arg)
{
    drainer_arg_t *d = arg;
    int64_t last[2][PRODUCERS];
    for (int k = 0; k < 2; k++)
        for (int p = 0; p < PRODUCERS; p++) last[k][p] = -1;
    for (;;) {
        pthread_mutex_lock(&d->s->lock);
        const int done = d->s->producers_left == 0;
        pthread_mutex_unlock(&d->s->lock);
        d->bad += absorb(d->s, last);
        if (done) break; /* this drain started after every producer finished: nothing is left */
        nanosleep(&(struct timespec){ 0, 100000 }, NULL); /* let producers take the lock */
    }
    return NULL;
}

Test(recorder, many_threads_record_and_drain, .timeout = 60)
{
    stress_t *s = calloc(1, sizeof(*s));
    cr_assert_not_null(s);
    s->ctx = cpu_context();
    s->producers_left = PRODUCERS;
    pthread_mutex_init(&s->lock, NULL);
    pthread_t pt[PRODUCERS], dt[DRAINERS];
    producer_arg_t pa[PRODUCERS];
    drainer_arg_t da[DRAINERS];
    for (int i = 0; i < DRAINERS; i++) {
        da[i] = (drainer_arg_t){ s, 0 };
        cr_assert_eq(pthread_create(&dt[i], NULL, drainer, &da[i]), 0);
    }
    for (uint32_t i = 0; i < PRODUCERS; i++) {
        pa[i] = (producer_arg_t){ s, i };
        cr_assert_eq(pthread_create(&pt[i], NULL, producer, &pa[i]), 0);
    }
    for (int i = 0; i < PRODUCERS; i++) pthread_join(pt[i], NULL);
    for (int i = 0; i < DRAINERS; i++) pthread_join(dt[i], NULL);
    cr_assert_eq(s->failures, 0u, "record calls failed");
    for (int i = 0; i < DRAINERS; i++) cr_assert_eq(da[i].bad, 0u, "drainer %d saw bad, duplicated or reordered records", i);
    for (int k = 0; k < 2; k++)
        for (int p = 0; p < PRODUCERS; p++)
            for (int q = 0; q < PER_PRODUCER; q++)
                cr_assert_eq(s->seen[k][p][q], 1, "%s %d/%d seen %d times", k ? "event" : "completion", p, q,
                             s->seen[k][p][q]);
    kvc_completion_record_t *c;
    size_t n;
    cr_assert_eq(kvc_drain_completions(s->ctx, &c, &n), KVC_OK);
    cr_assert_eq(n, 0u);
    kvc_context_destroy(s->ctx);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* ---------------------------------------------------------------- errors */

static void expect_nothing_recorded(kvc_context_t *ctx)
{
    kvc_completion_record_t *c;
    kvc_event_record_t *e;
    size_t nc, ne;
    cr_assert_eq(kvc_drain_completions(ctx, &c, &nc), KVC_OK);
    cr_assert_eq(kvc_drain_events(ctx, &e, &ne), KVC_OK);
    cr_assert(nc == 0 && ne == 0, "a failed call recorded something (%zu completions, %zu events)", nc, ne);
}

Test(recorder, bad_arguments)
{
    kvc_context_t *ctx = cpu_context();
    kvc_completion_record_t *c;
    kvc_event_record_t *e;
    size_t n;
    cr_assert_eq(kvc_record_completion(NULL, NULL, "k", "x", 1), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_record_completion(ctx, NULL, NULL, "x", 1), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "kind"), "%s", kvc_last_error());
    cr_assert_eq(kvc_record_completion(ctx, NULL, "k", NULL, 5), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "payload"), "%s", kvc_last_error());
    cr_assert_eq(kvc_drain_completions(NULL, &c, &n), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_drain_completions(ctx, NULL, &n), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_drain_completions(ctx, &c, NULL), KVC_ERR_INVALID_ARG);

    const kvc_str_meta_t sm_bad_key[] = { { "a", "b" }, { NULL, "v" } };
    const kvc_str_meta_t sm_bad_value[] = { { "a", NULL } };
    const kvc_int_meta_t im_bad[] = { { "ok", 1 }, { "ok2", 2 }, { NULL, 3 } };
    cr_assert_eq(kvc_record_event(NULL, NULL, "n", "s", NULL, 0, NULL, 0), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_record_event(ctx, NULL, NULL, "s", NULL, 0, NULL, 0), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_record_event(ctx, NULL, "n", NULL, NULL, 0, NULL, 0), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_record_event(ctx, NULL, "n", "s", NULL, 1, NULL, 0), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_record_event(ctx, NULL, "n", "s", NULL, 0, NULL, 2), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_record_event(ctx, NULL, "n", "s", sm_bad_key, 2, NULL, 0), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "str_meta[1]"), "%s", kvc_last_error());
    cr_assert_eq(kvc_record_event(ctx, NULL, "n", "s", sm_bad_value, 1, NULL, 0), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "str_meta[0]"), "%s", kvc_last_error());
    cr_assert_eq(kvc_record_event(ctx, NULL, "n", "s", NULL, 0, im_bad, 3), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "int_meta[2]"), "%s", kvc_last_error());
    cr_assert_eq(kvc_drain_events(NULL, &e, &n), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_drain_events(ctx, NULL, &n), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_drain_events(ctx, &e, NULL), KVC_ERR_INVALID_ARG);
    expect_nothing_recorded(ctx);
    kvc_event_records_free(NULL, 3);
    kvc_context_destroy(ctx);
}
