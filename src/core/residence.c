/* SPDX-License-Identifier: BSD-3-Clause */
/* Dispatch by residence (docs/ARCHITECTURE.md): on a context whose selected backend is a GPU, a
 * call's data pointers decide which op table runs it. Device memory pulls the call onto the GPU
 * module; host memory (pageable or registered) keeps it on the CPU table every context keeps;
 * managed memory goes either way (the GPU when nothing else decides). Pageable host memory next to
 * device memory in one call is an error naming both pointers: the call runs on one side only. */
#include "config.h"

#include <stdio.h>

#include "internal.h"

void kvc_res_init(kvc_residence_t *r, kvc_context_t *ctx, const char *op)
{
    *r = (kvc_residence_t){ .ctx = ctx, .op = op, .by_kind = ctx->cpu_bctx != NULL };
}

void kvc_res_add(kvc_residence_t *r, const char *name, long long index, const void *p)
{
    if (!r->by_kind || !p) return;
    int kind = KVC_RES_PAGEABLE;
    if (r->ctx->ops.pointer_kind(r->ctx->bctx, p, &kind) != KVC_OK) {
        r->by_kind = 0; /* a module without the slot gets every call, as before it existed */
        return;
    }
    kvc_res_ptr_t *slot = NULL;
    if (kind == KVC_RES_DEVICE) slot = &r->device;
    else if (kind == KVC_RES_PAGEABLE) slot = &r->pageable;
    else if (kind == KVC_RES_REGISTERED) r->registered = 1;
    if (slot && !slot->name) *slot = (kvc_res_ptr_t){ .name = name, .index = index, .ptr = p };
}

static const char *idx(char *buf, size_t len, long long i)
{
    buf[0] = 0;
    if (i >= 0) snprintf(buf, len, "[%lld]", i);
    return buf;
}

kvc_status_t kvc_res_route(const kvc_residence_t *r, kvc_route_t *out)
{
    kvc_context_t *ctx = r->ctx;
    *out = (kvc_route_t){ .ops = &ctx->ops, .b = ctx->bctx, .on_gpu = ctx->cpu_bctx != NULL };
    if (!r->by_kind) return KVC_OK;
    if (r->device.name) {
        if (r->pageable.name) {
            char i1[32], i2[32];
            return kvc_error(KVC_ERR_INVALID_ARG,
                             "%s: %s%s = %p is pageable host memory and %s%s = %p is %s device memory; a call runs "
                             "on one side: copy the host data to the device (kvc_memcpy), register it "
                             "(kvc_host_register), or pass host memory only",
                             r->op, r->pageable.name, idx(i1, sizeof(i1), r->pageable.index), r->pageable.ptr,
                             r->device.name, idx(i2, sizeof(i2), r->device.index), r->device.ptr, ctx->backend->name);
        }
        return KVC_OK;
    }
    if (r->pageable.name || r->registered)
        *out = (kvc_route_t){ .ops = &ctx->cpu_ops, .b = ctx->cpu_bctx, .on_gpu = 0 };
    return KVC_OK;
}

int kvc_res_on_device(kvc_context_t *ctx, const void *p)
{
    int kind = KVC_RES_PAGEABLE;
    return ctx->cpu_bctx && p && ctx->ops.pointer_kind(ctx->bctx, p, &kind) == KVC_OK && kind == KVC_RES_DEVICE;
}
