/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU backend: host memory ops (mlock pinning) and copies. */
#ifndef KVC_CPU_MEMORY_H
#define KVC_CPU_MEMORY_H

#include <kvcore/memory.h>

#include "cpu_backend.h"

kvc_status_t kvc_cpu_host_register(kvc_backend_ctx_t *b, void *ptr, size_t len);
kvc_status_t kvc_cpu_host_unregister(kvc_backend_ctx_t *b, void *ptr, size_t len);
kvc_status_t kvc_cpu_memcpy_split(kvc_backend_ctx_t *b, const struct kvc_copy_split *a);
kvc_status_t kvc_cpu_batched_memcpy(kvc_backend_ctx_t *b, const struct kvc_batched_copy *a);

#endif
