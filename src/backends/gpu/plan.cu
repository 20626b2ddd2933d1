/* SPDX-License-Identifier: BSD-3-Clause */
/* Plans (plan.h): the core hands over one ordered list of validated copies, block and token
 * transfers and RoPE rotations; they are queued in that order on the plan's one stream, with the
 * device made current once, so each op sees what the ones before it wrote (staging buffers are
 * reused from step to step) without a host wait in between. */
#include "gpu_backend.h"

kvc_status_t kvc_gpu_run_plan(kvc_backend_ctx_t *b, const struct kvc_plan_args *a)
{
    const kvc_status_t st = kvc_gpu_activate(b);
    if (st != KVC_OK) return st;
    return kvc_plan_run_ops(b, &kvc_gpu_descriptor()->ops, a);
}
