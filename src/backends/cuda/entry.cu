/* SPDX-License-Identifier: BSD-3-Clause */
/* The CUDA module's only exported symbol: the shared GPU backend (src/backends/gpu) built against
 * the CUDA runtime (gpu_runtime.h in this folder). */
#include "gpu_backend.h"

extern "C" KVC_API const kvc_backend_t *kvc_backend_entry(void) { return kvc_gpu_descriptor(); }
