/* SPDX-License-Identifier: BSD-3-Clause */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

const char *kvc_test_data(const char *rel)
{
    static char buf[4096];
    const char *d = getenv("KVC_TEST_DATA");
    snprintf(buf, sizeof(buf), "%s/%s", d ? d : "tests/data", rel);
    return buf;
}

const char *kvc_test_build(const char *rel)
{
    static char buf[4096];
    const char *d = getenv("KVC_TEST_BUILDDIR");
    snprintf(buf, sizeof(buf), "%s/%s", d ? d : ".", rel);
    return buf;
}

const char *kvc_test_module_dir(const char *module_so, const char *as)
{
    static char dir[256];
    snprintf(dir, sizeof(dir), "/tmp/kvc-test-mod-XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp failed");
    char dst[512];
    snprintf(dst, sizeof(dst), "%s/%s", dir, as);
    cr_assert_eq(symlink(module_so, dst), 0, "symlink %s -> %s failed", dst, module_so);
    return dir;
}

kvc_context_t *kvc_test_cpu_context(void)
{
    /* KVC_TEST_BACKEND reruns a suite on another backend's context (tests/gpu/run.sh: the codec
     * suite on cuda, where host data runs on the context's CPU ops). */
    const char *be = getenv("KVC_TEST_BACKEND");
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND, .backend = be && *be ? be : "cpu" };
    kvc_context_t *ctx = NULL;
    kvc_status_t st = kvc_context_create(&p, &ctx);
    cr_assert_eq(st, KVC_OK, "cpu context: %s (%s)", kvc_status_string(st), kvc_last_error());
    return ctx;
}

kvc_context_t *kvc_test_isa_context(const char *isa)
{
    setenv("KVCORE_ISA", isa, 1);
    kvc_context_t *ctx = kvc_test_cpu_context();
    unsetenv("KVCORE_ISA");
    return ctx;
}

int kvc_test_has_isa(const char *isa)
{
    kvc_context_t *c = kvc_test_isa_context(isa);
    const int ok = strcmp(kvc_context_isa(c), isa) == 0;
    kvc_context_destroy(c);
    return ok;
}

int kvc_test_tiers(kvc_context_t *out[3])
{
    static const char *const names[] = { "scalar", "avx2", "avx512" };
    int n = 0;
    for (int i = 0; i < 3; i++) {
        kvc_context_t *c = kvc_test_isa_context(names[i]);
        if (strcmp(kvc_context_isa(c), names[i]) != 0) { /* capped to a lower tier: not available */
            kvc_context_destroy(c);
            continue;
        }
        out[n++] = c;
    }
    cr_assert_geq(n, 1);
    return n;
}

void kvc_test_destroy_tiers(kvc_context_t *c[3], int n)
{
    for (int i = 0; i < n; i++) kvc_context_destroy(c[i]);
}

uint64_t kvc_test_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void kvc_test_random_cdf(uint64_t *rng, uint16_t *cdf, size_t n, unsigned B)
{
    for (size_t k = 0; k < n; k++) {
        uint16_t *row = cdf + k * (B + 1);
        unsigned at = (unsigned)(kvc_test_rng_next(rng) % 200);
        const unsigned room = (65535 - at) / B;
        for (unsigned i = 0; i < B; i++) {
            row[i] = (uint16_t)at;
            const uint64_t r = kvc_test_rng_next(rng);
            at += 1 + (unsigned)(r % 4 == 0 ? 0 : (r >> 8) % room);
        }
        row[B] = (uint16_t)kvc_test_rng_next(rng);
    }
}

void *kvc_test_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    cr_assert_not_null(p);
    return p;
}

size_t kvc_test_first_diff(const void *a, const void *b, size_t n)
{
    const uint8_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i]) return i;
    return n;
}
