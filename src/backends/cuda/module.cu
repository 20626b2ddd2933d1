/* GPU backend module (CUDA or HIP, see gpu_port.h): descriptor, probe, device and memory ops.
 * Probing only counts devices; no GPU context is created before the first op. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_port.h"

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
    if (st == KVC_OK) b->activated = 1;
    return st;
}

static kvc_status_t gpu_probe(const kvc_backend_services_t *svc, int *ndevices, char *why, size_t whylen)
{
    (void)svc;
    int n = 0;
    gpuError_t err = gpuGetDeviceCount(&n);
    if (err != gpuSuccess) {
        /* No driver or no device: a result, not an error. */
        if (why) snprintf(why, whylen, KVC_GPU_RUNTIME " reports %s", gpuGetErrorString(err));
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
    *out = b;
    return KVC_OK;
}

static void gpu_fini(kvc_backend_ctx_t *b) { free(b); }

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
    return KVC_GPU_CALL(b, gpuStreamSynchronize((gpuStream_t)s), 1);
}

static kvc_status_t gpu_host_register(kvc_backend_ctx_t *b, void *p, size_t len)
{
    kvc_status_t st = kvc_gpu_activate(b);
    if (st != KVC_OK) return st;
    return KVC_GPU_CALL(b, gpuHostRegister(p, len, gpuHostRegisterDefault), 1);
}

static kvc_status_t gpu_host_unregister(kvc_backend_ctx_t *b, void *p, size_t len)
{
    (void)len;
    kvc_status_t st = kvc_gpu_activate(b);
    if (st != KVC_OK) return st;
    return KVC_GPU_CALL(b, gpuHostUnregister(p), 1);
}

#if defined(KVC_GPU_HIP)
/* ROCm 5.x declares hipLaunchHostFunc but does not export it; hipStreamAddCallback is the portable
 * equivalent (the callback runs on a runtime thread once prior work on the stream is done). */
typedef struct {
    kvc_host_fn_t fn;
    void *arg;
} host_cb_t;

static void hip_stream_cb(hipStream_t s, hipError_t status, void *user)
{
    (void)s;
    (void)status;
    host_cb_t *cb = (host_cb_t *)user;
    cb->fn(cb->arg);
    free(cb);
}
#endif

static kvc_status_t gpu_launch_host_callback(kvc_backend_ctx_t *b, kvc_stream_t s, kvc_host_fn_t fn, void *arg)
{
    kvc_status_t st = kvc_gpu_activate(b);
    if (st != KVC_OK) return st;
#if defined(KVC_GPU_HIP)
    host_cb_t *cb = (host_cb_t *)malloc(sizeof(*cb));
    if (!cb) return KVC_ERR_NO_MEMORY;
    cb->fn = fn;
    cb->arg = arg;
    st = KVC_GPU_CALL(b, hipStreamAddCallback((hipStream_t)s, hip_stream_cb, cb, 0), 1);
    if (st != KVC_OK) free(cb);
    return st;
#else
    return KVC_GPU_CALL(b, gpuLaunchHostFunc((gpuStream_t)s, fn, arg), 1);
#endif
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
    d.ops.device_alloc = gpu_device_alloc;
    d.ops.device_free = gpu_device_free;
    d.ops.memcpy_sync = gpu_memcpy_sync;
    d.ops.stream_synchronize = gpu_stream_synchronize;
    d.ops.pci_bus_id = gpu_pci_bus_id;
    d.ops.launch_host_callback = gpu_launch_host_callback;
    return d;
}

static const kvc_backend_t descriptor = make_descriptor();

/* The module's only exported symbol. */
extern "C" KVC_API const kvc_backend_t *kvc_backend_entry(void) { return &descriptor; }
