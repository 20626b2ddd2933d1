/* SPDX-License-Identifier: BSD-3-Clause */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
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
