/* SPDX-License-Identifier: BSD-3-Clause */
/* A program built against an installed kvcore (make installcheck, tests/installcheck/run.sh): the
 * headers and the library it links must be the same release, and a context must start on the CPU
 * backend. Exit 0 only when all of that holds. */
#include <kvcore.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    if (kvc_version() != KVC_VERSION_NUMBER || strcmp(kvc_version_string(), KVC_VERSION_STRING) != 0) {
        fprintf(stderr, "headers %s, library %s\n", KVC_VERSION_STRING, kvc_version_string());
        return 1;
    }
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND, .backend = "cpu" };
    kvc_context_t *ctx = NULL;
    kvc_status_t st = kvc_context_create(&p, &ctx);
    if (st != KVC_OK) {
        fprintf(stderr, "kvc_context_create: %s: %s\n", kvc_status_name(st), kvc_last_error());
        return 1;
    }
    printf("kvcore %s, backend %s\n", kvc_version_string(), kvc_context_backend_name(ctx));
    kvc_context_destroy(ctx);
    return 0;
}
