/* SPDX-License-Identifier: BSD-3-Clause */
/* The CPU runtime behind gpu_runtime.h in this folder (see there for the model): one emulated
 * device with a memory-space-aware arena, lazily run streams, events, host callbacks and a fiber
 * launcher for the kernels. Everything the device does runs under one lock, in the thread that
 * waits for it. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "gpu_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define HOST_ASAN 1
#endif

namespace {

constexpr size_t ARENA_BYTES = (size_t)2 << 30; /* sparse: only touched pages cost memory */
constexpr size_t ARENA_ALIGN = 256;
constexpr size_t POISON_MAX = (size_t)64 << 20; /* fresh allocations up to this size read 0xCD */
constexpr size_t FIBER_STACK = (size_t)256 << 10;
constexpr unsigned MAX_BLOCK_THREADS = 1024;

[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("gpu_host: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* A queued piece of device work. */
struct item {
    enum { KERNEL, COPY, HOST_FN, EVENT } kind;
    const char *name;
    dim3 grid, block;
    std::function<void()> body; /* KERNEL, HOST_FN */
    void *dst;                  /* COPY: host-accessible views */
    const void *src;
    size_t n;
    gpu_host_event *event; /* EVENT */
};

struct region {
    size_t len;
    bool host_alloc; /* from gpuHostAlloc (else gpuHostRegister) */
};

struct device {
    std::recursive_mutex lock;
    char *dev = nullptr;    /* the addresses handed out: no access but while a kernel runs */
    char *shadow = nullptr; /* read-write view of the same pages (copies) */
    std::map<size_t, size_t> allocs;            /* offset -> length */
    std::map<uintptr_t, region> host;           /* registered / page-locked host ranges */
    std::map<gpuStream_t, std::deque<item>> queues;
    bool running = false; /* a flush is under way (host callbacks must not wait for the device) */
};

device *the_device()
{
    static device *d = [] {
        /* shared anonymous memory, mapped a second time by mremap (no file: a file size limit does
         * not apply); without it there is no device (gpuGetDeviceCount, gpuSetDevice) */
        device *x = new device;
        void *b = mmap(nullptr, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        void *a = b == MAP_FAILED ? MAP_FAILED : mremap(b, 0, ARENA_BYTES, MREMAP_MAYMOVE);
        if (a != MAP_FAILED && mprotect(a, ARENA_BYTES, PROT_NONE) == 0) {
            x->dev = (char *)a;
            x->shadow = (char *)b;
        }
        return x;
    }();
    return d;
}

thread_local gpuError_t last_error = gpuSuccess;

gpuError_t fail(gpuError_t e)
{
    last_error = e;
    return e;
}

bool in_arena(const device *d, const void *p)
{
    return d->dev && (const char *)p >= d->dev && (const char *)p < d->dev + ARENA_BYTES;
}

/* The registered / page-locked range holding p, or end(). */
std::map<uintptr_t, region>::iterator host_range(device *d, const void *p)
{
    const uintptr_t a = (uintptr_t)p;
    auto it = d->host.upper_bound(a);
    if (it == d->host.begin()) return d->host.end();
    --it;
    return a < it->first + it->second.len ? it : d->host.end();
}

/* What copies touch: the read-write view for device memory. */
void *view(device *d, const void *p) { return in_arena(d, p) ? d->shadow + ((const char *)p - d->dev) : (void *)p; }

bool reachable(device *d, const void *p) { return in_arena(d, p) || host_range(d, p) != d->host.end(); }

/* ---------------------------------------------------------------- fibers */

struct fiber {
    ucontext_t ctx;
    char *stack = nullptr; /* FIBER_STACK bytes above a guard page */
    gpu_host_thread_t self;
    enum { READY, WAITING, DONE } state = READY;
    const char *site = nullptr;
#ifdef HOST_ASAN
    void *fake = nullptr;
#endif
};

struct block_runner {
    ucontext_t sched;
    std::vector<fiber> fibers;
    const std::function<void()> *body = nullptr;
    fiber *cur = nullptr;
#ifdef HOST_ASAN
    void *sched_fake = nullptr;
    const void *sched_bottom = nullptr;
    size_t sched_size = 0;
#endif
    ~block_runner()
    {
        for (fiber &f : fibers)
            if (f.stack) munmap(f.stack - 4096, FIBER_STACK + 4096);
    }
};

thread_local block_runner runner_of_thread; /* per OS thread, kept for its stacks */

#ifdef HOST_ASAN
/* The C library's swapcontext, not ASan's interceptor (which warns once per process, a report for
 * tests/harness/criterion_tap.sh): every switch here is annotated for ASan (__sanitizer_*_switch_fiber). */
int switch_context(ucontext_t *from, const ucontext_t *to)
{
    static int (*real)(ucontext_t *, const ucontext_t *) = [] {
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        void *f = libc ? dlsym(libc, "swapcontext") : nullptr;
        if (!f) die("cannot find the C library's swapcontext");
        return (int (*)(ucontext_t *, const ucontext_t *))f;
    }();
    return real(from, to);
}
#else
int switch_context(ucontext_t *from, const ucontext_t *to) { return swapcontext(from, to); }
#endif

} // namespace

thread_local gpu_host_thread_t *gpu_host_self = nullptr;

namespace {

/* Switch from fiber f to the scheduler (f resumes after this returns). */
void to_scheduler(block_runner *r, fiber *f, bool dying)
{
#ifdef HOST_ASAN
    __sanitizer_start_switch_fiber(dying ? nullptr : &f->fake, r->sched_bottom, r->sched_size);
#else
    (void)dying;
#endif
    switch_context(&f->ctx, &r->sched);
#ifdef HOST_ASAN
    __sanitizer_finish_switch_fiber(f->fake, &r->sched_bottom, &r->sched_size);
#endif
}

void fiber_main()
{
    block_runner *r = &runner_of_thread;
    fiber *f = r->cur;
#ifdef HOST_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &r->sched_bottom, &r->sched_size);
#endif
    (*r->body)();
    f->state = fiber::DONE;
    to_scheduler(r, f, true);
    die("a finished fiber was resumed");
}

void run_block(block_runner *r, const dim3 &grid, const dim3 &block, const uint3 &bidx)
{
    const unsigned n = block.x * block.y * block.z;
    if (r->fibers.size() < n) r->fibers.resize(n);
    for (unsigned i = 0; i < n; i++) {
        fiber &f = r->fibers[i];
        if (!f.stack) {
            void *m = mmap(nullptr, FIBER_STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                           -1, 0);
            if (m == MAP_FAILED) die("no memory for a fiber stack");
            mprotect(m, 4096, PROT_NONE); /* guard page: an overflow faults */
            f.stack = (char *)m + 4096;
        }
#ifdef HOST_ASAN
        ASAN_UNPOISON_MEMORY_REGION(f.stack, FIBER_STACK);
#endif
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = FIBER_STACK;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_main, 0);
        f.state = fiber::READY;
        f.site = nullptr;
        f.self.thread_idx = uint3{ i % block.x, i / block.x % block.y, i / (block.x * block.y) };
        f.self.block_idx = bidx;
        f.self.block_dim = uint3{ block.x, block.y, block.z };
        f.self.grid_dim = uint3{ grid.x, grid.y, grid.z };
    }
    for (;;) {
        unsigned live = 0;
        const char *site = nullptr;
        for (unsigned i = 0; i < n; i++) {
            fiber &f = r->fibers[i];
            if (f.state == fiber::DONE) continue;
            f.state = fiber::READY;
            r->cur = &f;
            gpu_host_self = &f.self;
#ifdef HOST_ASAN
            __sanitizer_start_switch_fiber(&r->sched_fake, f.stack, FIBER_STACK);
#endif
            switch_context(&r->sched, &f.ctx);
#ifdef HOST_ASAN
            __sanitizer_finish_switch_fiber(r->sched_fake, nullptr, nullptr);
#endif
            gpu_host_self = nullptr;
            if (f.state != fiber::WAITING) continue;
            live++;
            if (!site) site = f.site;
            else if (strcmp(site, f.site) != 0)
                die("block (%u,%u,%u): threads wait at different __syncthreads (%s, %s)", bidx.x, bidx.y, bidx.z, site,
                    f.site);
        }
        if (!live) break;
    }
    r->cur = nullptr;
}

/* Run a kernel: every block in turn, its threads as fibers; device memory is accessible meanwhile. */
void run_kernel(device *d, const item &it)
{
    block_runner *r = &runner_of_thread;
    if (r->body) die("kernel %s launched from device code", it.name);
    r->body = &it.body;
    if (mprotect(d->dev, ARENA_BYTES, PROT_READ | PROT_WRITE) != 0) die("mprotect of the device arena failed");
    for (unsigned z = 0; z < it.grid.z; z++)
        for (unsigned y = 0; y < it.grid.y; y++)
            for (unsigned x = 0; x < it.grid.x; x++) run_block(r, it.grid, it.block, uint3{ x, y, z });
    if (mprotect(d->dev, ARENA_BYTES, PROT_NONE) != 0) die("mprotect of the device arena failed");
    r->body = nullptr;
}

} // namespace

struct gpu_host_event {
    int pending = 0; /* records queued on a stream and not yet reached */
};

namespace {

/* Run what is queued on s (all streams: every one) in order; the caller holds the lock. */
void flush(device *d, gpuStream_t s, bool all)
{
    if (d->running) die("a host callback waited for the device");
    d->running = true;
    /* a stream's work also waits for the legacy default stream's (queued first: it is key 0) */
    for (auto &q : d->queues) {
        if (!all && q.first != s && q.first != nullptr) continue;
        while (!q.second.empty()) {
            item it = std::move(q.second.front());
            q.second.pop_front();
            switch (it.kind) {
            case item::KERNEL: run_kernel(d, it); break;
            case item::COPY: memmove(it.dst, it.src, it.n); break;
            case item::HOST_FN: it.body(); break; /* a host function: device memory faults */
            case item::EVENT: it.event->pending--; break;
            }
        }
    }
    d->running = false;
}

void enqueue(device *d, gpuStream_t s, item &&it) { d->queues[s].push_back(std::move(it)); }

/* Stream, event and device synchronisations (tests assert where none may happen). */
unsigned long host_waits;

} // namespace

extern "C" KVC_API unsigned long kvc_gpu_host_waits(void);
extern "C" KVC_API unsigned long kvc_gpu_host_waits(void) { return __atomic_load_n(&host_waits, __ATOMIC_RELAXED); }

/* ---------------------------------------------------------------- the runtime calls */

gpuError_t gpuGetDeviceCount(int *n)
{
    *n = the_device()->dev ? 1 : 0;
    return *n ? gpuSuccess : fail(gpuErrorNoDevice);
}

/* A driver is always "installed" here (a missing device is gpuGetDeviceCount's answer); 1 is this
 * runtime's only version. */
gpuError_t gpuDriverGetVersion(int *v)
{
    *v = 1;
    return gpuSuccess;
}

gpuError_t gpuRuntimeGetVersion(int *v)
{
    *v = 1;
    return gpuSuccess;
}

const char *gpuGetErrorName(gpuError_t e)
{
    switch (e) {
    case gpuSuccess: return "gpuSuccess";
    case gpuErrorInvalidValue: return "gpuErrorInvalidValue";
    case gpuErrorMemoryAllocation: return "gpuErrorMemoryAllocation";
    case gpuErrorInvalidConfiguration: return "gpuErrorInvalidConfiguration";
    case gpuErrorNoDevice: return "gpuErrorNoDevice";
    case gpuErrorInvalidDevice: return "gpuErrorInvalidDevice";
    case gpuErrorInvalidResourceHandle: return "gpuErrorInvalidResourceHandle";
    case gpuErrorNotReady: return "gpuErrorNotReady";
    case gpuErrorHostMemoryAlreadyRegistered: return "gpuErrorHostMemoryAlreadyRegistered";
    case gpuErrorHostMemoryNotRegistered: return "gpuErrorHostMemoryNotRegistered";
    }
    return "gpuErrorUnknown";
}

const char *gpuGetErrorString(gpuError_t e)
{
    switch (e) {
    case gpuSuccess: return "no error";
    case gpuErrorInvalidValue: return "invalid argument";
    case gpuErrorMemoryAllocation: return "out of memory";
    case gpuErrorInvalidConfiguration: return "invalid configuration argument";
    case gpuErrorNoDevice: return "no CUDA-capable device is detected";
    case gpuErrorInvalidDevice: return "invalid device ordinal";
    case gpuErrorInvalidResourceHandle: return "invalid resource handle";
    case gpuErrorNotReady: return "device not ready";
    case gpuErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case gpuErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    }
    return "unrecognized error code";
}

gpuError_t gpuGetLastError(void)
{
    const gpuError_t e = last_error;
    last_error = gpuSuccess;
    return e;
}

gpuError_t gpuSetDevice(int device)
{
    if (!the_device()->dev) return fail(gpuErrorNoDevice);
    return device == 0 ? gpuSuccess : fail(gpuErrorInvalidDevice);
}

gpuError_t gpuDeviceGetPCIBusId(char *buf, int len, int device)
{
    if (device != 0) return fail(gpuErrorInvalidDevice);
    if (snprintf(buf, (size_t)len, "0000:3B:00.0") >= len) return fail(gpuErrorInvalidValue);
    return gpuSuccess;
}

gpuError_t gpuDeviceGetAttribute(int *v, gpuDeviceAttr attr, int device)
{
    if (device != 0) return fail(gpuErrorInvalidDevice);
    switch (attr) {
    case gpuDevAttrMultiProcessorCount: {
        /* few, so that the grid-stride loops go round (KVC_GPU_HOST_SMS overrides) */
        const char *e = getenv("KVC_GPU_HOST_SMS");
        *v = e && atoi(e) > 0 ? atoi(e) : 2;
        return gpuSuccess;
    }
    case gpuDevAttrPageableMemoryAccess: *v = 0; return gpuSuccess;
    }
    return fail(gpuErrorInvalidValue);
}

gpuError_t gpuMalloc(void **p, size_t n)
{
    if (!n) {
        *p = nullptr;
        return gpuSuccess;
    }
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    const size_t len = (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    size_t at = 0; /* first fit */
    for (const auto &a : d->allocs) {
        if (a.first - at >= len) break;
        at = a.first + a.second;
    }
    if (len > ARENA_BYTES || ARENA_BYTES - at < len) return fail(gpuErrorMemoryAllocation);
    d->allocs[at] = len;
    if (len <= POISON_MAX) memset(d->shadow + at, 0xCD, len); /* device memory starts undefined */
    *p = d->dev + at;
    return gpuSuccess;
}

gpuError_t gpuFree(void *p)
{
    if (!p) return gpuSuccess;
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    flush(d, nullptr, true); /* cudaFree waits for the device */
    if (!in_arena(d, p)) return fail(gpuErrorInvalidValue);
    auto it = d->allocs.find((size_t)((char *)p - d->dev));
    if (it == d->allocs.end()) return fail(gpuErrorInvalidValue);
    /* the whole pages go back (a later allocation reads zeros there); the ends, which share a page
     * with a neighbour, read 0xDD */
    const size_t page = 4096, lo = (it->first + page - 1) / page * page, hi = (it->first + it->second) / page * page;
    if (lo < hi) {
        memset(d->shadow + it->first, 0xDD, lo - it->first);
        (void)madvise(d->shadow + lo, hi - lo, MADV_REMOVE);
        memset(d->shadow + hi, 0xDD, it->first + it->second - hi);
    } else {
        memset(d->shadow + it->first, 0xDD, it->second);
    }
    d->allocs.erase(it);
    return gpuSuccess;
}

namespace {

/* Check a copy's sides against its kind; *sync: pageable host memory makes it synchronous. */
gpuError_t copy_check(device *d, void *dst, const void *src, gpuMemcpyKind kind, bool *sync)
{
    const bool dd = in_arena(d, dst), sd = in_arena(d, src);
    *sync = (!dd && host_range(d, dst) == d->host.end()) || (!sd && host_range(d, src) == d->host.end());
    switch (kind) {
    case gpuMemcpyHostToDevice: return !sd && reachable(d, dst) ? gpuSuccess : gpuErrorInvalidValue;
    case gpuMemcpyDeviceToHost: return !dd && reachable(d, src) ? gpuSuccess : gpuErrorInvalidValue;
    case gpuMemcpyDeviceToDevice: return reachable(d, dst) && reachable(d, src) ? gpuSuccess : gpuErrorInvalidValue;
    case gpuMemcpyHostToHost: return !dd && !sd ? gpuSuccess : gpuErrorInvalidValue;
    case gpuMemcpyDefault: return gpuSuccess;
    }
    return gpuErrorInvalidValue;
}

} // namespace

gpuError_t gpuMemcpy(void *dst, const void *src, size_t n, gpuMemcpyKind kind)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    bool sync;
    const gpuError_t e = copy_check(d, dst, src, kind, &sync);
    if (e != gpuSuccess) return fail(e);
    flush(d, nullptr, true); /* the legacy default stream: after everything queued */
    if (n) memmove(view(d, dst), view(d, src), n);
    return gpuSuccess;
}

gpuError_t gpuMemcpyAsync(void *dst, const void *src, size_t n, gpuMemcpyKind kind, gpuStream_t s)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    bool sync;
    const gpuError_t e = copy_check(d, dst, src, kind, &sync);
    if (e != gpuSuccess) return fail(e);
    if (!n) return gpuSuccess;
    if (sync) { /* pageable host memory: the runtime copies it before returning */
        flush(d, s, false);
        memmove(view(d, dst), view(d, src), n);
        return gpuSuccess;
    }
    item it{};
    it.kind = item::COPY;
    it.name = "memcpy";
    it.dst = view(d, dst);
    it.src = view(d, src);
    it.n = n;
    enqueue(d, s, std::move(it));
    return gpuSuccess;
}

gpuError_t gpuStreamSynchronize(gpuStream_t s)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    __atomic_add_fetch(&host_waits, 1, __ATOMIC_RELAXED);
    flush(d, s, s == nullptr); /* the legacy default stream waits for every stream */
    return gpuSuccess;
}

gpuError_t gpuDeviceSynchronize(void)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    __atomic_add_fetch(&host_waits, 1, __ATOMIC_RELAXED);
    flush(d, nullptr, true);
    return gpuSuccess;
}

gpuError_t gpuHostRegister(void *p, size_t n, unsigned flags)
{
    (void)flags;
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    if (!p || !n || in_arena(d, p)) return fail(gpuErrorInvalidValue);
    const uintptr_t a = (uintptr_t)p;
    auto it = d->host.lower_bound(a);
    if ((it != d->host.end() && it->first < a + n) || host_range(d, p) != d->host.end())
        return fail(gpuErrorHostMemoryAlreadyRegistered);
    d->host[a] = region{ n, false };
    return gpuSuccess;
}

gpuError_t gpuHostUnregister(void *p)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    auto it = d->host.find((uintptr_t)p);
    if (it == d->host.end() || it->second.host_alloc) return fail(gpuErrorHostMemoryNotRegistered);
    flush(d, nullptr, true);
    d->host.erase(it);
    return gpuSuccess;
}

gpuError_t gpuHostAlloc(void **p, size_t n)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    void *m = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    if (!m) return fail(gpuErrorMemoryAllocation);
    memset(m, 0xCD, n);
    d->host[(uintptr_t)m] = region{ n, true };
    *p = m;
    return gpuSuccess;
}

gpuError_t gpuFreeHost(void *p)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    auto it = d->host.find((uintptr_t)p);
    if (it == d->host.end() || !it->second.host_alloc) return fail(gpuErrorInvalidValue);
    flush(d, nullptr, true);
    d->host.erase(it);
    free(p);
    return gpuSuccess;
}

gpuError_t gpuEventCreateWithFlags(gpuEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = new gpu_host_event;
    return gpuSuccess;
}

gpuError_t gpuEventRecord(gpuEvent_t e, gpuStream_t s)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    if (!e) return fail(gpuErrorInvalidResourceHandle);
    e->pending++;
    item it{};
    it.kind = item::EVENT;
    it.name = "event";
    it.event = e;
    enqueue(d, s, std::move(it));
    return gpuSuccess;
}

namespace {

/* The stream an event is queued on (nullptr when it is not queued). */
bool event_stream(device *d, gpuEvent_t e, gpuStream_t *s)
{
    for (auto &q : d->queues)
        for (auto &it : q.second)
            if (it.kind == item::EVENT && it.event == e) {
                *s = q.first;
                return true;
            }
    return false;
}

} // namespace

gpuError_t gpuEventSynchronize(gpuEvent_t e)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    if (!e) return fail(gpuErrorInvalidResourceHandle);
    gpuStream_t s;
    if (e->pending) __atomic_add_fetch(&host_waits, 1, __ATOMIC_RELAXED);
    while (e->pending && event_stream(d, e, &s)) flush(d, s, false);
    return gpuSuccess;
}

gpuError_t gpuEventQuery(gpuEvent_t e)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    if (!e) return fail(gpuErrorInvalidResourceHandle);
    return e->pending ? gpuErrorNotReady : gpuSuccess; /* not sticky: no fail() */
}

gpuError_t gpuEventDestroy(gpuEvent_t e)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    if (!e) return fail(gpuErrorInvalidResourceHandle);
    gpuStream_t s;
    while (e->pending && event_stream(d, e, &s)) flush(d, s, false); /* destroyed once reached */
    delete e;
    return gpuSuccess;
}

void *gpu_host_to_device_ptr(const void *p, int pageable)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    return reachable(d, p) || pageable ? (void *)p : nullptr;
}

int gpu_pointer_kind(const void *p, int pageable)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    if (in_arena(d, p)) return KVC_RES_DEVICE;
    if (host_range(d, p) != d->host.end()) return KVC_RES_REGISTERED;
    return pageable ? KVC_RES_MANAGED : KVC_RES_PAGEABLE;
}

gpuError_t gpu_launch_host_fn(gpuStream_t s, kvc_host_fn_t fn, void *arg)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    if (!fn) return fail(gpuErrorInvalidValue);
    item it{};
    it.kind = item::HOST_FN;
    it.name = "host function";
    it.body = [fn, arg] { fn(arg); };
    enqueue(d, s, std::move(it));
    return gpuSuccess;
}

/* ---------------------------------------------------------------- kernels */

void gpu_host_syncthreads(const char *site)
{
    block_runner *r = &runner_of_thread;
    if (!r->cur) die("__syncthreads outside a kernel");
    fiber *f = r->cur;
    f->state = fiber::WAITING;
    f->site = site;
    to_scheduler(r, f, false);
}

void gpu_host_check_arg(const char *kernel, int index, const void *p)
{
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    if (p && !reachable(d, p))
        die("kernel %s: argument %d = %p is pageable host memory, which the device cannot access", kernel, index, p);
}

void gpu_host_launch(const char *kernel, dim3 grid, dim3 block, gpuStream_t s, std::function<void()> body)
{
    const uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || grid.y > 65535 || grid.z > 65535 || !threads || threads > MAX_BLOCK_THREADS ||
        block.z > 64) {
        fail(gpuErrorInvalidConfiguration);
        return;
    }
    device *d = the_device();
    std::lock_guard<std::recursive_mutex> g(d->lock);
    item it{};
    it.kind = item::KERNEL;
    it.name = kernel;
    it.grid = grid;
    it.block = block;
    it.body = std::move(body);
    enqueue(d, s, std::move(it));
}
