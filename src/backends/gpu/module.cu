/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU backend module (CUDA or HIP: the vendor folder supplies gpu_runtime.h and the entry): descriptor, probe, device and memory ops,
 * the staging ring and pointer translation the kernels of the other files use.
 * Probing only counts devices; no GPU context is created before the first op. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_backend.h"

kvc_status_t kvc_gpu_status(const kvc_backend_services_t *svc, gpuError_t err, const char *what, int level)
{
    if (err == gpuSuccess) return KVC_OK;
    kvc_status_t st;
    switch (err) {
    case gpuErrorMemoryAllocation: st = KVC_ERR_NO_MEMORY; break;
    case gpuErrorNoDevice: st = KVC_ERR_NO_DEVICE; break;
    case gpuErrorHostMemoryAlreadyRegistered: st = KVC_ERR_EXISTS; break;
    default: st = KVC_ERR_BACKEND; break;
    }
    (void)gpuGetLastError(); /* clear the sticky-free error state */
    if (svc) {
        if (svc->log_enabled(level))
            svc->log(level, KVC_GPU_NAME, "%s failed: %s (%s)", what, gpuGetErrorName(err), gpuGetErrorString(err));
        svc->set_error(st, KVC_GPU_RUNTIME " call %s failed: %s", what, gpuGetErrorString(err));
    }
    return st;
}

kvc_status_t kvc_gpu_activate(kvc_backend_ctx_t *b)
{
    if (b->activated) return gpuSetDevice(b->device) == gpuSuccess ? KVC_OK : KVC_ERR_BACKEND;
    kvc_status_t st = KVC_GPU_CALL(b, gpuSetDevice(b->device), 1);
    if (st != KVC_OK) return st;
    int v = 0;
    if (gpuDeviceGetAttribute(&v, gpuDevAttrMultiProcessorCount, b->device) == gpuSuccess) b->sm_count = v;
    v = 0;
    if (gpuDeviceGetAttribute(&v, gpuDevAttrPageableMemoryAccess, b->device) == gpuSuccess) b->pageable_access = v;
    (void)gpuGetLastError();
    b->activated = 1;
    return KVC_OK;
}

kvc_status_t kvc_gpu_launch_status(kvc_backend_ctx_t *b, const char *kernel)
{
    const gpuError_t err = gpuGetLastError();
    if (err == gpuSuccess) return KVC_OK;
    return kvc_gpu_status(b->svc, err, kernel, 1);
}

/* ---------------------------------------------------------------- staging ring */

kvc_status_t kvc_gpu_stage_begin(kvc_backend_ctx_t *b, size_t bytes, gpu_stage_t *s)
{
    kvc_status_t st = kvc_gpu_activate(b);
    if (st != KVC_OK) return st;
    pthread_mutex_lock(&b->stage_lock);
    gpu_stage_slot_t *slot = &b->stage[b->stage_next++ % KVC_GPU_STAGE_SLOTS];
    if (!slot->has_event) {
        st = KVC_GPU_CALL(b, gpuEventCreateWithFlags(&slot->done, gpuEventDisableTiming), 1);
        if (st != KVC_OK) goto fail;
        slot->has_event = 1;
    } else {
        /* The slot's previous user has queued its last read of it before this event. */
        st = KVC_GPU_CALL(b, gpuEventSynchronize(slot->done), 1);
        if (st != KVC_OK) goto fail;
    }
    if (slot->cap < bytes) {
        size_t cap = slot->cap ? 2 * slot->cap : 64 * 1024;
        while (cap < bytes) cap *= 2;
        if (slot->host) (void)gpuFreeHost(slot->host);
        if (slot->dev) (void)gpuFree(slot->dev);
        slot->host = slot->dev = NULL;
        slot->cap = 0;
        st = KVC_GPU_CALL(b, gpuHostAllocDefault(&slot->host, cap), 1);
        if (st == KVC_OK) st = KVC_GPU_CALL(b, gpuMalloc(&slot->dev, cap), 1);
        if (st != KVC_OK) {
            if (slot->host) (void)gpuFreeHost(slot->host);
            slot->host = NULL;
            goto fail;
        }
        slot->cap = cap;
    }
    s->host = (char *)slot->host;
    s->dev = (char *)slot->dev;
    s->slot = slot;
    return KVC_OK;
fail:
    pthread_mutex_unlock(&b->stage_lock);
    return st;
}

kvc_status_t kvc_gpu_stage_upload(kvc_backend_ctx_t *b, gpu_stage_t *s, size_t bytes, gpuStream_t stream)
{
    if (!bytes) return KVC_OK;
    return KVC_GPU_CALL(b, gpuMemcpyAsync(s->dev, s->host, bytes, gpuMemcpyHostToDevice, stream), 1);
}

kvc_status_t kvc_gpu_stage_download(kvc_backend_ctx_t *b, gpu_stage_t *s, size_t bytes, gpuStream_t stream)
{
    kvc_status_t st = KVC_GPU_CALL(b, gpuMemcpyAsync(s->host, s->dev, bytes, gpuMemcpyDeviceToHost, stream), 1);
    if (st == KVC_OK) st = KVC_GPU_CALL(b, gpuStreamSynchronize(stream), 1);
    return st;
}

kvc_status_t kvc_gpu_stage_end(kvc_backend_ctx_t *b, gpu_stage_t *s, gpuStream_t stream, kvc_status_t st)
{
    /* Recorded even after a failure: whatever was queued must finish before the slot is reused. */
    const kvc_status_t ev = KVC_GPU_CALL(b, gpuEventRecord(s->slot->done, stream), 1);
    pthread_mutex_unlock(&b->stage_lock);
    return st != KVC_OK ? st : ev;
}

static void stage_release_all(kvc_backend_ctx_t *b)
{
    for (int i = 0; i < KVC_GPU_STAGE_SLOTS; i++) {
        gpu_stage_slot_t *slot = &b->stage[i];
        if (slot->has_event) {
            (void)gpuEventSynchronize(slot->done);
            (void)gpuEventDestroy(slot->done);
        }
        if (slot->host) (void)gpuFreeHost(slot->host);
        if (slot->dev) (void)gpuFree(slot->dev);
    }
    (void)gpuGetLastError();
}

/* ---------------------------------------------------------------- pointer translation */

void *kvc_gpu_device_ptr(kvc_backend_ctx_t *b, const void *p)
{
    return gpu_host_to_device_ptr(p, b->pageable_access);
}

kvc_status_t kvc_gpu_require_device_ptr(kvc_backend_ctx_t *b, const void *p, const char *op, const char *what,
                                        long long index, void **out)
{
    void *d = kvc_gpu_device_ptr(b, p);
    if (d) {
        *out = d;
        return KVC_OK;
    }
    char idx[32] = "";
    if (index >= 0) snprintf(idx, sizeof(idx), "[%lld]", index);
    return b->svc->set_error(KVC_ERR_INVALID_ARG,
                             "%s: %s%s = %p is pageable host memory the " KVC_GPU_RUNTIME
                             " device cannot access: use device memory, or register / pin the host memory",
                             op, what, idx, p);
}

static kvc_status_t gpu_probe(const kvc_backend_services_t *svc, int *ndevices, char *why, size_t whylen)
{
    (void)svc;
    int n = 0;
    gpuError_t err = gpuGetDeviceCount(&n);
    if (err != gpuSuccess) {
        /* No driver or no device: a result, not an error. Without any driver the runtime calls it
         * "driver version is insufficient"; the driver version (0: none) tells the two apart. */
        int driver = 0, runtime = 0;
        (void)gpuDriverGetVersion(&driver);
        (void)gpuRuntimeGetVersion(&runtime);
        if (why && driver == 0)
            snprintf(why, whylen, "no GPU driver is installed or loadable (" KVC_GPU_RUNTIME " reports %s)",
                     gpuGetErrorString(err));
        else if (why)
            snprintf(why, whylen, KVC_GPU_RUNTIME " reports %s (driver version %d, runtime version %d)",
                     gpuGetErrorString(err), driver, runtime);
        (void)gpuGetLastError();
        *ndevices = 0;
        return KVC_OK;
    }
    if (n == 0 && why) snprintf(why, whylen, KVC_GPU_RUNTIME " reports 0 devices");
    *ndevices = n;
    return KVC_OK;
}

static kvc_status_t gpu_init(const kvc_backend_services_t *svc, int device, kvc_backend_ctx_t **out)
{
    kvc_backend_ctx_t *b = (kvc_backend_ctx_t *)calloc(1, sizeof(*b));
    if (!b) return KVC_ERR_NO_MEMORY;
    b->svc = svc;
    b->device = device;
    if (pthread_mutex_init(&b->stage_lock, NULL) != 0) {
        free(b);
        return KVC_ERR_NO_MEMORY;
    }
    *out = b;
    return KVC_OK;
}

static void gpu_fini(kvc_backend_ctx_t *b)
{
    if (b->activated && gpuSetDevice(b->device) == gpuSuccess) {
        kvc_gpu_check_release_all(b);
        stage_release_all(b);
    }
    pthread_mutex_destroy(&b->stage_lock);
    free(b);
}

static kvc_status_t gpu_pci_bus_id(kvc_backend_ctx_t *b, int device, char *buf, size_t len)
{
    char tmp[32];
    kvc_status_t st = KVC_GPU_CALL(b, gpuDeviceGetPCIBusId(tmp, (int)sizeof(tmp), device), 2);
    if (st != KVC_OK) return st;
    /* Runtimes print upper-case hex ("0000:3B:00.0"); kvcore uses hwloc's lower-case form. */
    for (char *p = tmp; *p; p++)
        if (*p >= 'A' && *p <= 'F') *p = (char)(*p - 'A' + 'a');
    if (strlen(tmp) + 1 > len) return KVC_ERR_NO_SPACE;
    memcpy(buf, tmp, strlen(tmp) + 1);
    return KVC_OK;
}

static kvc_status_t gpu_device_alloc(kvc_backend_ctx_t *b, size_t len, void **out)
{
    kvc_status_t st = kvc_gpu_activate(b);
    if (st != KVC_OK) return st;
    return KVC_GPU_CALL(b, gpuMalloc(out, len), 1);
}

static kvc_status_t gpu_device_free(kvc_backend_ctx_t *b, void *p)
{
    kvc_status_t st = kvc_gpu_activate(b);
    if (st != KVC_OK) return st;
    return KVC_GPU_CALL(b, gpuFree(p), 1);
}

static kvc_status_t gpu_memcpy_sync(kvc_backend_ctx_t *b, void *dst, const void *src, size_t len)
{
    kvc_status_t st = kvc_gpu_activate(b);
    if (st != KVC_OK) return st;
    return KVC_GPU_CALL(b, gpuMemcpy(dst, src, len, gpuMemcpyDefault), 1);
}

static kvc_status_t gpu_stream_synchronize(kvc_backend_ctx_t *b, kvc_stream_t s)
{
    kvc_status_t st = kvc_gpu_activate(b);
    if (st != KVC_OK) return st;
    st = KVC_GPU_CALL(b, gpuStreamSynchronize((gpuStream_t)s), 1);
    return st == KVC_OK ? kvc_gpu_check_report(b, (gpuStream_t)s) : st;
}

static kvc_status_t gpu_host_register(kvc_backend_ctx_t *b, void *p, size_t len)
{
    kvc_status_t st = kvc_gpu_activate(b);
    if (st != KVC_OK) return st;
    return KVC_GPU_CALL(b, gpuHostRegister(p, len, gpuHostRegisterDefault), 1);
}

static kvc_status_t gpu_host_register_io(kvc_backend_ctx_t *b, void *p, size_t len)
{
    kvc_status_t st = kvc_gpu_activate(b);
    if (st != KVC_OK) return st;
    return KVC_GPU_CALL(b, gpuHostRegister(p, len, gpuHostRegisterMapped | gpuHostRegisterIoMemory), 1);
}

static kvc_status_t gpu_host_unregister(kvc_backend_ctx_t *b, void *p, size_t len)
{
    (void)len;
    kvc_status_t st = kvc_gpu_activate(b);
    if (st != KVC_OK) return st;
    return KVC_GPU_CALL(b, gpuHostUnregister(p), 1);
}

static kvc_status_t gpu_launch_host_callback(kvc_backend_ctx_t *b, kvc_stream_t s, kvc_host_fn_t fn, void *arg)
{
    kvc_status_t st = kvc_gpu_activate(b);
    if (st != KVC_OK) return st;
    return KVC_GPU_CALL(b, gpu_launch_host_fn((gpuStream_t)s, fn, arg), 1);
}

/* Residence of a call's pointers: the core routes host data to its CPU ops (docs/ARCHITECTURE.md). */
static kvc_status_t gpu_pointer_kind_op(kvc_backend_ctx_t *b, const void *p, int *kind)
{
    kvc_status_t st = kvc_gpu_activate(b); /* pageable_access is known once the device is active */
    if (st != KVC_OK) return st;
    *kind = gpu_pointer_kind(p, b->pageable_access);
    return KVC_OK;
}

static kvc_backend_t make_descriptor(void)
{
    kvc_backend_t d;
    memset(&d, 0, sizeof(d));
    d.abi_version = KVC_BACKEND_ABI_VERSION;
    d.struct_size = sizeof(kvc_backend_t);
    d.name = KVC_GPU_NAME;
    d.priority = KVC_GPU_PRIORITY;
    d.probe = gpu_probe;
    d.init = gpu_init;
    d.fini = gpu_fini;
    d.ops.host_register = gpu_host_register;
    d.ops.host_unregister = gpu_host_unregister;
    d.ops.host_register_io = gpu_host_register_io;
    d.ops.device_alloc = gpu_device_alloc;
    d.ops.device_free = gpu_device_free;
    d.ops.memcpy_sync = gpu_memcpy_sync;
    d.ops.stream_synchronize = gpu_stream_synchronize;
    d.ops.pci_bus_id = gpu_pci_bus_id;
    d.ops.launch_host_callback = gpu_launch_host_callback;
    d.ops.transfer_tokens = kvc_gpu_transfer_tokens;
    d.ops.transfer_blocks = kvc_gpu_transfer_blocks;
    d.ops.cg_cdf = kvc_gpu_cg_cdf;
    d.ops.cg_encode = kvc_gpu_cg_encode;
    d.ops.cg_decode = kvc_gpu_cg_decode;
    d.ops.cg_decode_packed = kvc_gpu_cg_decode_packed;
    d.ops.quantise = kvc_gpu_quantise;
    d.ops.dequantise = kvc_gpu_dequantise;
    d.ops.memcpy_split = kvc_gpu_memcpy_split;
    d.ops.batched_memcpy = kvc_gpu_batched_memcpy;
    d.ops.rope_k_fused = kvc_gpu_rope_k_fused;
    d.ops.rope_cache_build = kvc_gpu_rope_cache_build;
    d.ops.rope_k_delta = kvc_gpu_rope_k_delta;
    d.ops.pointer_kind = gpu_pointer_kind_op;
    d.ops.run_plan = kvc_gpu_run_plan;
    d.ops.rans_encode = kvc_gpu_rans_encode;
    d.ops.rans_decode = kvc_gpu_rans_decode;
    d.ops.rans_tables = kvc_gpu_rans_tables;
    return d;
}

static const kvc_backend_t descriptor = make_descriptor();

const kvc_backend_t *kvc_gpu_descriptor(void) { return &descriptor; }
