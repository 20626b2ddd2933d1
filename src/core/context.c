/* SPDX-License-Identifier: BSD-3-Clause */
/* Context: topology, backend discovery and selection, resolved ops table. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef KVC_HAVE_OPENMP
#include <omp.h>
#endif

#include <kvcore/version.h>

#include "env.h"
#include "hostmem.h"
#include "internal.h"
#include "sysinfo.h"

KVC_API unsigned kvc_version(void) { return KVC_VERSION_NUMBER; }
KVC_API const char *kvc_version_string(void) { return KVC_VERSION_STRING; }

static int svc_log_enabled(int level) { return kvc_log_level_g >= level; }

static void svc_log(int level, const char *backend, const char *fmt, ...)
{
    if (kvc_log_level_g < level) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    kvc_log_emit(level, backend, "%s", buf);
}

static kvc_status_t svc_set_error(kvc_status_t status, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return kvc_error(status, "%s", buf);
}

static int parse_positive(const char *v, int fallback)
{
    if (!v || !*v) return fallback;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 0 || n > INT_MAX) {
        KVC_WARN("ignoring malformed number '%s'", v);
        return fallback;
    }
    return (int)n;
}

/* CPUs this process may run on: its affinity mask, lowered to the cgroup CPU quota (rounded up). */
static int usable_cpus(void)
{
    int n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
    if (n <= 0) {
        const long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    const double quota = kvc_sys_cpu_quota_at(KVC_SYS_CGROUP_ROOT, KVC_SYS_SELF_CGROUP);
    if (quota > 0 && ceil(quota) < n) n = (int)ceil(quota);
    return n;
}

/* libgomp ends the process when it cannot create a team's thread ("Thread creation failed"), so a
 * team size is tried first with plain threads (RLIMIT_NPROC, RLIMIT_AS for their stacks, the
 * kernel's threads-max): how many of want-1 helpers can exist at once, plus the caller. The largest
 * size that worked is remembered for the process. A limit that tightens later, or other threads
 * taking the room between this check and the first parallel region, is not covered. */
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER, probe_gate = PTHREAD_MUTEX_INITIALIZER;
static int probed_team = 1;

static void *probe_wait(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&probe_gate);
    pthread_mutex_unlock(&probe_gate);
    return NULL;
}

static int creatable_team(int want)
{
    pthread_mutex_lock(&probe_lock);
    int ok = want <= probed_team ? want : probed_team;
    pthread_t *t = want > probed_team ? malloc((size_t)(want - 1) * sizeof(*t)) : NULL;
    if (t) {
        int made = 0;
        pthread_mutex_lock(&probe_gate);
        while (made < want - 1 && pthread_create(&t[made], NULL, probe_wait, NULL) == 0) made++;
        pthread_mutex_unlock(&probe_gate);
        for (int i = 0; i < made; i++) pthread_join(t[i], NULL);
        free(t);
        ok = made + 1;
        if (ok > probed_team) probed_team = ok;
    }
    pthread_mutex_unlock(&probe_lock);
    return ok;
}

/* The thread count a context gets for a request (0 = the OpenMP default): at most
 * KVC_THREADS_PER_CPU per usable CPU, and no more than can be created now; lowered with a warning. */
static int resolve_threads(int requested, const char *origin)
{
#ifdef KVC_HAVE_OPENMP
    int n = requested > 0 ? requested : omp_get_max_threads();
    if (requested <= 0) origin = "the OpenMP default";
    const int cpus = usable_cpus(), cap = cpus > INT_MAX / KVC_THREADS_PER_CPU ? INT_MAX : cpus * KVC_THREADS_PER_CPU;
    if (n > cap) {
        KVC_WARN("%s asks for %d threads; this process may use %d CPU(s) (affinity and cgroup quota): using %d", origin, n,
                 cpus, cap);
        n = cap;
    }
    const int room = creatable_team(n);
    if (room < n) {
        KVC_WARN("only %d of %d threads can be created (RLIMIT_NPROC, RLIMIT_AS or threads-max): using %d", room, n, room);
        n = room;
    }
    return n;
#else
    (void)requested;
    (void)origin;
    return 1;
#endif
}

/* A byte count knob: a non-negative decimal integer, or -1 when unset or malformed. */
static int64_t parse_bytes(const char *v)
{
    if (!v || !*v) return -1;
    char *end;
    const long long n = strtoll(v, &end, 10);
    if (*end || n < 0) {
        KVC_WARN("ignoring malformed byte count '%s'", v);
        return -1;
    }
    return (int64_t)n;
}

/* KVCORE_STREAM_MIN_BYTES, else 3/4 of the last-level cache (kvc_llc_info; glibc's memcpy uses the
 * same fraction), at least 4 MiB. */
static int64_t stream_threshold(void)
{
    const int64_t env = parse_bytes(kvc_env_get("KVCORE_STREAM_MIN_BYTES"));
    if (env >= 0) return env;
    kvc_llc_info_t llc;
    (void)kvc_llc_info(&llc);
    const int64_t t = llc.bytes / 4 * 3;
    return t > ((int64_t)4 << 20) ? t : (int64_t)4 << 20;
}

/* Pick the backend; fills ctx->backend or returns the error of a forced backend. */
static kvc_status_t select_backend(kvc_context_t *ctx, const char *forced)
{
    kvc_backend_slot_t *best = NULL;
    if (forced) {
        for (int i = 0; i < ctx->num_slots; i++)
            if (!strcmp(ctx->slots[i].name, forced)) best = &ctx->slots[i];
        if (!best)
            return kvc_error(KVC_ERR_INVALID_ARG, "backend '%s' is unknown: use auto, cpu, cuda or hip", forced);
        if (!best->built) {
            /* Whether this build made the module decides the advice: configure, or find it. */
            char built[32];
            snprintf(built, sizeof(built), "\n%s_module=yes", forced);
            if (strstr(KVC_BUILD_CONFIG, built))
                return kvc_error(KVC_ERR_NOT_FOUND,
                                 "backend '%s' was forced but its module is missing (%s): this kvcore was configured "
                                 "with it: run make (or make install), or point KVCORE_MODULE_PATH at the directory "
                                 "holding kvcore_%s.so", forced, best->reason, forced);
            return kvc_error(KVC_ERR_NOT_FOUND,
                             "backend '%s' was forced but its module is missing (%s): this kvcore was configured "
                             "without it: configure with --with-%s, or point KVCORE_MODULE_PATH at the directory "
                             "holding a kvcore_%s.so", forced, best->reason, forced, forced);
        }
        if (best->loaded == -1)
            return kvc_error(KVC_ERR_ABI, "backend '%s' was forced but %s: %s; rebuild the module with this kvcore",
                             forced, best->origin, best->reason);
        if (best->loaded != 1)
            return kvc_error(KVC_ERR_BACKEND, "backend '%s' was forced but could not be loaded from %s: %s", forced,
                             best->origin, best->reason);
        if (best->num_devices <= 0)
            return kvc_error(KVC_ERR_NO_DEVICE,
                             "backend '%s' was forced but %s; check the driver and visible devices, or unset "
                             "KVCORE_BACKEND to fall back to the CPU backend",
                             forced, best->reason);
        if (ctx->device >= best->num_devices)
            return kvc_error(KVC_ERR_NO_DEVICE, "backend '%s' has %d device(s); device %d was requested", forced,
                             best->num_devices, ctx->device);
    } else {
        for (int i = 0; i < ctx->num_slots; i++) {
            kvc_backend_slot_t *s = &ctx->slots[i];
            if (s->loaded == 1 && s->num_devices > ctx->device && (!best || s->priority > best->priority)) best = s;
        }
        if (!best) best = &ctx->slots[0];
    }
    best->selected = 1;
    ctx->backend = best->desc;
    for (int i = 0; i < ctx->num_slots; i++) {
        kvc_backend_slot_t *s = &ctx->slots[i];
        if (s == best || s->loaded != 1 || s->num_devices <= 0) continue;
        char r[sizeof(s->reason)];
        snprintf(r, sizeof(r), "%s; not selected: %s", s->reason,
                 forced ? "another backend was forced" : "a higher-priority backend was chosen");
        memcpy(s->reason, r, sizeof(r));
    }
    return KVC_OK;
}

KVC_API kvc_status_t kvc_context_create(const kvc_context_params_t *params, kvc_context_t **out)
{
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "out must not be NULL");
    kvc_log_init();
    const uint64_t mask = params ? params->field_mask : 0;
    const char *forced = (mask & KVC_CONTEXT_PARAM_BACKEND) ? params->backend : kvc_env_get("KVCORE_BACKEND");
    if (forced && (!*forced || !strcmp(forced, "auto"))) forced = NULL;
    const char *module_path =
        (mask & KVC_CONTEXT_PARAM_MODULE_PATH) ? params->module_path : kvc_env_get("KVCORE_MODULE_PATH");
    const int load_all = (mask & KVC_CONTEXT_PARAM_LOAD_ALL) ? params->load_all_modules : 0;

    kvc_context_t *ctx = calloc(1, sizeof(*ctx));
    if (!ctx) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate a context");
    ctx->device = (mask & KVC_CONTEXT_PARAM_DEVICE) ? params->device : parse_positive(kvc_env_get("KVCORE_DEVICE"), 0);
    if (ctx->device < 0) {
        const int dev = ctx->device;
        free(ctx);
        return kvc_error(KVC_ERR_INVALID_ARG, "device ordinal %d is negative", dev);
    }
    const int from_params = (mask & KVC_CONTEXT_PARAM_NUM_THREADS) != 0;
    ctx->num_threads = resolve_threads(from_params ? params->num_threads : parse_positive(kvc_env_get("KVCORE_NUM_THREADS"), 0),
                                       from_params ? "params.num_threads" : "KVCORE_NUM_THREADS");
    ctx->isa = kvc_isa_select();
    ctx->svc = (kvc_backend_services_t){ .abi_version = KVC_BACKEND_ABI_VERSION,
                                         .log_enabled = svc_log_enabled,
                                         .log = svc_log,
                                         .set_error = svc_set_error,
                                         .num_threads = ctx->num_threads,
                                         .cpu_isa = (int)ctx->isa,
                                         .stream_min_bytes = stream_threshold() };

    kvc_status_t st = kvc_recorder_create(&ctx->recorder);
    if (st != KVC_OK) goto fail;
    st = kvc_topology_load(ctx);
    if (st != KVC_OK) goto fail;
    st = kvc_backends_discover(ctx, forced, module_path, load_all);
    if (st != KVC_OK) goto fail;
    st = select_backend(ctx, forced);
    if (st != KVC_OK) goto fail;
    st = ctx->backend->init(&ctx->svc, ctx->device, &ctx->bctx);
    if (st != KVC_OK) {
        st = kvc_error(st, "backend '%s' failed to initialise: %s", ctx->backend->name, kvc_last_error());
        goto fail;
    }
    kvc_ops_resolve(&ctx->ops, ctx->backend);
    if (ctx->backend != &kvc_cpu_backend) { /* host-resident work runs on the CPU table */
        st = kvc_cpu_backend.init(&ctx->svc, 0, &ctx->cpu_bctx);
        if (st != KVC_OK) {
            ctx->backend->fini(ctx->bctx);
            goto fail;
        }
        kvc_ops_resolve(&ctx->cpu_ops, &kvc_cpu_backend);
    }
    st = kvc_hostmem_init(ctx);
    if (st != KVC_OK) {
        if (ctx->cpu_bctx) kvc_cpu_backend.fini(ctx->cpu_bctx);
        ctx->backend->fini(ctx->bctx);
        goto fail;
    }
    KVC_INFO("context: backend %s, isa %s, %d threads", ctx->backend->name, kvc_isa_name(ctx->isa), ctx->num_threads);
    *out = ctx;
    return KVC_OK;
fail:
    kvc_backends_unload(ctx);
    kvc_topology_unload(ctx);
    kvc_recorder_destroy(ctx->recorder);
    free(ctx);
    return st;
}

KVC_API void kvc_context_destroy(kvc_context_t *ctx)
{
    if (!ctx) return;
    kvc_hostmem_teardown(ctx); /* before fini: unpinning needs the backend */
    kvc_device_teardown(ctx); /* before fini: freeing needs the backend */
    if (ctx->cpu_bctx) kvc_cpu_backend.fini(ctx->cpu_bctx);
    if (ctx->backend && ctx->bctx) ctx->backend->fini(ctx->bctx);
    kvc_backends_unload(ctx);
    kvc_topology_unload(ctx);
    kvc_recorder_destroy(ctx->recorder);
    kvc_codec_scratch_free(ctx->codec_scratch);
    free(ctx);
}

KVC_API const char *kvc_context_backend_name(const kvc_context_t *ctx)
{
    return ctx && ctx->backend ? ctx->backend->name : "none";
}

KVC_API int kvc_context_backend_count(const kvc_context_t *ctx) { return ctx ? ctx->num_slots : 0; }

KVC_API kvc_status_t kvc_context_backend_info(const kvc_context_t *ctx, int index, kvc_backend_info_t *out)
{
    if (!ctx || !out) return kvc_error(KVC_ERR_INVALID_ARG, "ctx and out must not be NULL");
    if (index < 0 || index >= ctx->num_slots)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "backend index %d outside [0, %d)", index, ctx->num_slots);
    const kvc_backend_slot_t *s = &ctx->slots[index];
    *out = (kvc_backend_info_t){ .name = s->name,
                                 .origin = s->origin,
                                 .priority = s->priority,
                                 .built = s->built,
                                 .loaded = s->loaded == 1,
                                 .num_devices = s->num_devices,
                                 .selected = s->selected,
                                 .reason = s->reason };
    return KVC_OK;
}

KVC_API const char *kvc_context_isa(const kvc_context_t *ctx) { return ctx ? kvc_isa_name(ctx->isa) : "scalar"; }

KVC_API int kvc_context_num_threads(const kvc_context_t *ctx) { return ctx ? ctx->num_threads : 0; }

KVC_API int64_t kvc_context_stream_min_bytes(const kvc_context_t *ctx) { return ctx ? ctx->svc.stream_min_bytes : -1; }

KVC_API const char *kvc_build_config(void) { return KVC_BUILD_CONFIG; }

KVC_API kvc_status_t kvc_stream_synchronize(kvc_context_t *ctx, kvc_stream_t stream)
{
    if (!ctx) return kvc_error(KVC_ERR_INVALID_ARG, "ctx must not be NULL");
    return ctx->ops.stream_synchronize(ctx->bctx, stream);
}

KVC_API kvc_status_t kvc_device_pci_bus_id(kvc_context_t *ctx, int device, char *buf, size_t len)
{
    if (!ctx || !buf) return kvc_error(KVC_ERR_INVALID_ARG, "ctx and buf must not be NULL");
    if (len < 16) return kvc_error(KVC_ERR_NO_SPACE, "buffer of %zu bytes; a PCI bus id needs 16", len);
    if (device < 0) return kvc_error(KVC_ERR_OUT_OF_RANGE, "device %d is negative", device);
    return ctx->ops.pci_bus_id(ctx->bctx, device, buf, len);
}
