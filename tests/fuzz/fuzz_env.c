/* SPDX-License-Identifier: BSD-3-Clause */
/* Environment knobs and context parameters: KVCORE_BACKEND, KVCORE_ISA, KVCORE_LOG_LEVEL,
 * KVCORE_NUM_THREADS, KVCORE_DEVICE and KVCORE_MODULE_PATH set from the input, then
 * kvc_context_create (from the environment, or with the same strings as parameters) and every
 * introspection call on the result. Invariants: no crash or leak; an unknown backend name is
 * KVC_ERR_INVALID_ARG; a context reports a known backend and ISA, at least one thread, and the ISA
 * cap it was given; every knob of the table is readable.
 *
 * Input: a control byte (bit i set: knob i is set; bit 6: pass backend and module path as
 * parameters; bit 7: also pass device and thread count), then the knob values separated by '\n'.
 * HWLOC_XMLFILE points at a recorded topology with NVIDIA and AMD PCI devices (so GPU modules are
 * looked for) that costs little to load. KVCORE_LOG_LEVEL is read
 * once per process (pthread_once): only the first input of a run exercises its parser. */
#include "fuzz.h"

static const char *const knobs[] = { "KVCORE_BACKEND",     "KVCORE_ISA",    "KVCORE_LOG_LEVEL",
                                     "KVCORE_NUM_THREADS", "KVCORE_DEVICE", "KVCORE_MODULE_PATH" };
#define NKNOBS (sizeof(knobs) / sizeof(knobs[0]))

static int one_of(const char *s, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, set[i])) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static kvc_context_t *keeper;
    if (!keeper) {
        setenv("HWLOC_XMLFILE", KVC_FUZZ_SRCDIR "/tests/data/topologies/24em64t-2n6c2t-pci.xml", 1);
        setenv("HWLOC_LIBXML", "0", 0); /* hwloc's own XML reader: a few times faster than libxml2's */
        /* While one topology lives, hwloc keeps its plugins loaded: without it every input would
         * dlopen them again (about 100 ms). */
        keeper = fuzz_cpu_context("best");
    }
    fuzz_input_t in = { data, size };
    const unsigned control = fuzz_u8(&in);
    char *values[NKNOBS] = { 0 };
    for (size_t k = 0; k < NKNOBS; k++) {
        const uint8_t *nl = memchr(in.p, '\n', in.n);
        const size_t len = nl ? (size_t)(nl - in.p) : in.n;
        values[k] = malloc(len + 1);
        memcpy(values[k], in.p, len);
        values[k][len] = '\0';
        in.p += nl ? len + 1 : len;
        in.n -= nl ? len + 1 : len;
        if (control & (1u << k)) setenv(knobs[k], values[k], 1);
        else unsetenv(knobs[k]);
    }

    kvc_context_params_t p = { .field_mask = 0 };
    if (control & 64) {
        p.field_mask |= KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_MODULE_PATH;
        p.backend = values[0];
        p.module_path = values[5];
    }
    if (control & 128) {
        p.field_mask |= KVC_CONTEXT_PARAM_DEVICE | KVC_CONTEXT_PARAM_NUM_THREADS;
        p.device = (int)strtol(values[4], NULL, 10);
        p.num_threads = (int)strtol(values[3], NULL, 10) % 64;
    }
    kvc_context_t *ctx = NULL;
    const kvc_status_t st = kvc_context_create(p.field_mask ? &p : NULL, &ctx);
    FUZZ_CHECK(strlen(kvc_last_error()) < 4096, "last error unterminated");

    /* The backend string the context saw, and whether it names a backend at all. */
    const char *backend = (control & 64) ? values[0] : (control & 1) ? values[0] : NULL;
    static const char *const names[] = { "", "auto", "cpu", "cuda", "hip" };
    if (backend && !one_of(backend, names, 5))
        FUZZ_CHECK(st == KVC_ERR_INVALID_ARG, "backend \"%s\" gave %s", backend, kvc_status_name(st));
    if (st == KVC_OK) {
        static const char *const backends[] = { "cpu", "cuda", "hip" };
        static const char *const isas[] = { "scalar", "avx2", "avx512", "neon" };
        FUZZ_CHECK(one_of(kvc_context_backend_name(ctx), backends, 3), "backend %s", kvc_context_backend_name(ctx));
        FUZZ_CHECK(one_of(kvc_context_isa(ctx), isas, 4), "isa %s", kvc_context_isa(ctx));
        if ((control & 2) && !strcmp(values[1], "scalar"))
            FUZZ_CHECK(!strcmp(kvc_context_isa(ctx), "scalar"), "KVCORE_ISA=scalar gave %s", kvc_context_isa(ctx));
        FUZZ_CHECK(kvc_context_num_threads(ctx) >= 1, "%d threads", kvc_context_num_threads(ctx));
        const int n = kvc_context_backend_count(ctx);
        for (int i = 0; i < n; i++) {
            kvc_backend_info_t bi;
            FUZZ_CHECK(kvc_context_backend_info(ctx, i, &bi) == KVC_OK, "backend_info(%d)", i);
            FUZZ_CHECK(strlen(bi.origin) < 4096 && strlen(bi.reason) < 4096, "backend %d strings", i);
        }
        kvc_backend_info_t past;
        FUZZ_CHECK(kvc_context_backend_info(ctx, n, &past) == KVC_ERR_OUT_OF_RANGE, "backend_info past the count");
        kvc_context_destroy(ctx);
    } else {
        FUZZ_CHECK(ctx == NULL, "context set on failure");
    }
    for (size_t i = 0; i < kvc_env_knob_count(); i++) {
        kvc_env_knob_t k;
        FUZZ_CHECK(kvc_env_knob_get(i, &k) == KVC_OK && k.name && k.help, "knob %zu", i);
    }
    for (size_t k = 0; k < NKNOBS; k++) free(values[k]);
    return 0;
}
