/* SPDX-License-Identifier: BSD-3-Clause */
/* The CPU backend: built into libkvcore, always available, cannot fail to probe. Every op runs
 * synchronously on the calling thread (OpenMP inside), so "streams" are immediate. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "cpu_rope.h"
#include "cpu_memory.h"
#include "cpu_transfer.h"
#include "cpu_cachegen.h"
#include "cpu_codec.h"
#include "cpu_rans.h"

static kvc_status_t cpu_probe(const kvc_backend_services_t *svc, int *ndevices, char *why, size_t whylen)
{
    (void)svc;
    (void)why;
    (void)whylen;
    *ndevices = 1;
    return KVC_OK;
}

static kvc_status_t cpu_init(const kvc_backend_services_t *svc, int device, kvc_backend_ctx_t **out)
{
    (void)device;
    kvc_backend_ctx_t *b = calloc(1, sizeof(*b));
    if (!b) return KVC_ERR_NO_MEMORY;
    b->svc = svc;
    b->isa = svc->cpu_isa;
    b->num_threads = svc->num_threads > 0 ? svc->num_threads : 1;
    b->stream_min_bytes = svc->stream_min_bytes;
    *out = b;
    return KVC_OK;
}

static void cpu_fini(kvc_backend_ctx_t *b) { free(b); }

static kvc_status_t cpu_memcpy_sync(kvc_backend_ctx_t *b, void *dst, const void *src, size_t len)
{
    (void)b;
    if (len) memmove(dst, src, len);
    return KVC_OK;
}

/* "Device" memory of the CPU backend: 64-byte aligned host memory. */
static kvc_status_t cpu_device_alloc(kvc_backend_ctx_t *b, size_t len, void **out)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, len) != 0)
        return b->svc->set_error(KVC_ERR_NO_MEMORY, "cpu: cannot allocate %zu bytes", len);
    *out = p;
    return KVC_OK;
}

static kvc_status_t cpu_device_free(kvc_backend_ctx_t *b, void *p)
{
    (void)b;
    free(p);
    return KVC_OK;
}

static kvc_status_t cpu_stream_synchronize(kvc_backend_ctx_t *b, kvc_stream_t s)
{
    (void)b;
    (void)s;
    return KVC_OK; /* every CPU op has completed when it returns */
}

static kvc_status_t cpu_launch_host_callback(kvc_backend_ctx_t *b, kvc_stream_t s, kvc_host_fn_t fn, void *arg)
{
    (void)b;
    (void)s;
    fn(arg); /* prior work on the "stream" is already done */
    return KVC_OK;
}

extern const kvc_backend_t kvc_cpu_backend;

/* The rans_decode slot: one window, every check, no fusion (cpu_rans.h). */
static kvc_status_t cpu_rans_decode(kvc_backend_ctx_t *b, const struct kvc_rans_decode_args *a)
{
    return kvc_cpu_rans_decode_run(b, a, NULL, NULL, NULL);
}

/* The codec's decode (cpu_codec.h), with this backend's dequantiser for x->then_dequantise. */
kvc_status_t kvc_cpu_rans_decode_windows(kvc_backend_ctx_t *b, const struct kvc_rans_decode_args *a,
                                         const struct kvc_cpu_windows *w, const struct kvc_cpu_decode_extras *x)
{
    return kvc_cpu_rans_decode_run(b, a, w, x, cpu_dequantise_blocks);
}

/* The ops in order, each through this backend's own slot (synchronous: each finishes first). */
static kvc_status_t cpu_run_plan(kvc_backend_ctx_t *b, const struct kvc_plan_args *a)
{
    return kvc_plan_run_ops(b, &kvc_cpu_backend.ops, a);
}

const kvc_backend_t kvc_cpu_backend = {
    .abi_version = KVC_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kvc_backend_t),
    .name = "cpu",
    .priority = KVC_BACKEND_PRIORITY_CPU,
    .probe = cpu_probe,
    .init = cpu_init,
    .fini = cpu_fini,
    .ops = {
        .memcpy_sync = cpu_memcpy_sync,
        .device_alloc = cpu_device_alloc,
        .device_free = cpu_device_free,
        .stream_synchronize = cpu_stream_synchronize,
        .launch_host_callback = cpu_launch_host_callback,
        .rope_k_fused = kvc_cpu_rope_k_fused,
        .rope_cache_build = kvc_cpu_rope_cache_build,
        .rope_k_delta = kvc_cpu_rope_k_delta,
        .host_register = kvc_cpu_host_register,
        .host_register_io = kvc_cpu_host_register,
        .host_unregister = kvc_cpu_host_unregister,
        .memcpy_split = kvc_cpu_memcpy_split,
        .batched_memcpy = kvc_cpu_batched_memcpy,
        .transfer_tokens = kvc_cpu_transfer_tokens,
        .transfer_blocks = kvc_cpu_transfer_blocks,
        .cg_cdf = cpu_cg_cdf,
        .cg_encode = cpu_cg_encode,
        .cg_decode = cpu_cg_decode,
        .cg_decode_packed = cpu_cg_decode_packed,
        .quantise = cpu_quantise,
        .dequantise = cpu_dequantise,
        .run_plan = cpu_run_plan,
        .transfer_tokens_parts = kvc_cpu_transfer_tokens_parts,
        .transfer_blocks_parts = kvc_cpu_transfer_blocks_parts,
        .rans_encode = kvc_cpu_rans_encode,
        .rans_decode = cpu_rans_decode,
        .rans_tables = kvc_cpu_rans_tables,
    },
};
