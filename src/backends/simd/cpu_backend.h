/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU backend internals shared by the files of src/backends/simd. */
#ifndef KVC_CPU_BACKEND_H
#define KVC_CPU_BACKEND_H

#include <stdint.h>

#include <kvcore/backend.h>

struct kvc_backend_ctx {
    const kvc_backend_services_t *svc;
    int isa;         /* kvc_isa_t tier chosen by the context */
    int num_threads; /* OpenMP threads for parallel regions */
    int64_t stream_min_bytes; /* transfers above this use streaming stores (cpu_transfer.c) */
};

#endif
