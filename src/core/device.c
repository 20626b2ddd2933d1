/* SPDX-License-Identifier: BSD-3-Clause */
/* Device memory through the selected backend (kvc_device_alloc / kvc_device_free / kvc_memcpy):
 * the context remembers every allocation so a bad free is an error instead of a crash, and
 * destroying the context frees what is left. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "internal.h"

typedef struct kvc_device_registry {
    pthread_mutex_t lock;
    void **ptrs;
    size_t *sizes;
    size_t count, cap;
} kvc_device_registry_t;

static pthread_mutex_t registry_create_lock = PTHREAD_MUTEX_INITIALIZER;

static kvc_device_registry_t *registry(kvc_context_t *ctx)
{
    pthread_mutex_lock(&registry_create_lock);
    if (!ctx->devmem) {
        kvc_device_registry_t *r = calloc(1, sizeof(*r));
        if (r && pthread_mutex_init(&r->lock, NULL) != 0) {
            free(r);
            r = NULL;
        }
        ctx->devmem = r;
    }
    pthread_mutex_unlock(&registry_create_lock);
    return ctx->devmem;
}

KVC_API kvc_status_t kvc_device_alloc(kvc_context_t *ctx, size_t size, void **out)
{
    if (!ctx || !out) return kvc_error(KVC_ERR_INVALID_ARG, "device_alloc: ctx and out must not be NULL");
    if (size == 0) return kvc_error(KVC_ERR_INVALID_ARG, "device_alloc: size must be at least 1 byte");
    kvc_device_registry_t *r = registry(ctx);
    if (!r) return kvc_error(KVC_ERR_NO_MEMORY, "device_alloc: no memory for the allocation list");
    pthread_mutex_lock(&r->lock);
    kvc_status_t st = KVC_OK;
    if (r->count == r->cap) {
        const size_t cap = r->cap ? 2 * r->cap : 16;
        void **p = realloc(r->ptrs, cap * sizeof(*p));
        if (p) r->ptrs = p;
        size_t *s = p ? realloc(r->sizes, cap * sizeof(*s)) : NULL;
        if (s) {
            r->sizes = s;
            r->cap = cap;
        } else {
            st = kvc_error(KVC_ERR_NO_MEMORY, "device_alloc: no memory for the allocation list");
        }
    }
    void *p = NULL;
    if (st == KVC_OK) {
        st = ctx->ops.device_alloc(ctx->bctx, size, &p);
        if (st == KVC_OK && !p) st = kvc_error(KVC_ERR_NO_MEMORY, "device_alloc: backend returned NULL");
        else if (st != KVC_OK)
            st = kvc_error(st, "device_alloc: %zu bytes on backend %s: %s", size, ctx->backend->name, kvc_last_error());
    }
    if (st == KVC_OK) {
        r->ptrs[r->count] = p;
        r->sizes[r->count++] = size;
        *out = p;
    }
    pthread_mutex_unlock(&r->lock);
    return st;
}

KVC_API kvc_status_t kvc_device_free(kvc_context_t *ctx, void *ptr)
{
    if (!ctx) return kvc_error(KVC_ERR_INVALID_ARG, "device_free: ctx must not be NULL");
    if (!ptr) return KVC_OK;
    kvc_device_registry_t *r = ctx->devmem;
    if (!r) return kvc_error(KVC_ERR_STATE, "device_free: %p was not allocated by kvc_device_alloc on this context", ptr);
    pthread_mutex_lock(&r->lock);
    size_t i = 0;
    while (i < r->count && r->ptrs[i] != ptr) i++;
    kvc_status_t st;
    if (i == r->count) {
        st = kvc_error(KVC_ERR_STATE, "device_free: %p is not a live kvc_device_alloc allocation of this context", ptr);
    } else {
        st = ctx->ops.device_free(ctx->bctx, ptr);
        r->ptrs[i] = r->ptrs[r->count - 1];
        r->sizes[i] = r->sizes[--r->count];
    }
    pthread_mutex_unlock(&r->lock);
    return st;
}

KVC_API kvc_status_t kvc_memcpy(kvc_context_t *ctx, void *dst, const void *src, size_t nbytes)
{
    if (!ctx) return kvc_error(KVC_ERR_INVALID_ARG, "memcpy: ctx must not be NULL");
    if (nbytes == 0) return KVC_OK;
    if (!dst || !src)
        return kvc_error(KVC_ERR_INVALID_ARG, "memcpy: %s is NULL with nbytes %zu", !dst ? "dst" : "src", nbytes);
    /* No object is larger than PTRDIFF_MAX: a bigger size is a negative count converted to size_t. */
    if (nbytes > PTRDIFF_MAX)
        return kvc_error(KVC_ERR_INVALID_ARG, "memcpy: nbytes %zu is larger than PTRDIFF_MAX (a negative size?)",
                         nbytes);
    if ((uintptr_t)dst > UINTPTR_MAX - nbytes || (uintptr_t)src > UINTPTR_MAX - nbytes)
        return kvc_error(KVC_ERR_INVALID_ARG, "memcpy: a %zu-byte range at %s wraps around the address space", nbytes,
                         (uintptr_t)dst > UINTPTR_MAX - nbytes ? "dst" : "src");
    return ctx->ops.memcpy_sync(ctx->bctx, dst, src, nbytes);
}

void kvc_device_teardown(kvc_context_t *ctx)
{
    kvc_device_registry_t *r = ctx->devmem;
    if (!r) return;
    for (size_t i = 0; i < r->count; i++) {
        KVC_WARN("context destroyed with device allocation %p (%zu bytes) still live: freeing it", r->ptrs[i],
                 r->sizes[i]);
        (void)ctx->ops.device_free(ctx->bctx, r->ptrs[i]);
    }
    pthread_mutex_destroy(&r->lock);
    free(r->ptrs);
    free(r->sizes);
    free(r);
    ctx->devmem = NULL;
}
