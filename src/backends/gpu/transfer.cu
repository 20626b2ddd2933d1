/* SPDX-License-Identifier: BSD-3-Clause */
/* KV transfer plans on the GPU: one kernel for per-token and per-block plans.
 *
 * A plan is a set of units (a token row, or a whole block) per (layer, plane), each split into
 * runs of run_bytes contiguous on both sides (kvc_run_shape_t); gpu_transfer.h holds the
 * addressing. Launch shape:
 *   grid.y strides over layers, grid.z over planes, grid.x over (unit, run) pairs;
 *   each 256-thread block is cut into teams of a power-of-two size close to the run length (in
 *   copy words), a team copies one run, its threads striding over the run's words.
 * Nothing depends on the head count or the warp/wavefront width; every loop is grid-stride, so
 * any geometry (128+ heads, 64K-token chunks) runs with any grid. Copy words are 16, 8, 4, 2 or
 * 1 bytes: the widest that every address and stride of the plan is aligned to.
 * The host tables (engine pointer table, object list, slots or block ids) are staged to the
 * device through the context's staging ring; the call is asynchronous on the plan's stream.
 * A device-resident index table (plan.index_on_device) is read where it is, without the host
 * waiting: a check kernel records the first entry out of range (atomicMin into the staging slot's
 * first word), the copy kernel reads that word and writes nothing when it is set (one thread
 * stores the index and its value in the call's check record), and the error is reported with
 * the core's message at the next kvc_stream_synchronize of the stream (kvc_gpu_check_report). */
#include <stdio.h>
#include <string.h>

#include "gpu_backend.h"
#include "gpu_transfer.h"

#define XFER_THREADS 256

/* bad: the check kernel's result for a device-resident table (NULL for a host table); when set,
 * nothing is copied and report[] gets {first bad index, its value}. */
template <typename W>
static __global__ void __launch_bounds__(XFER_THREADS)
    xfer_kernel(const kvc_xfer_args_t a, const int team_shift, const unsigned long long *bad,
                unsigned long long *report)
{
    if (bad && *bad != ~0ull) {
        if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0) {
            report[1] = (unsigned long long)a.index[*bad - (unsigned long long)a.first];
            report[0] = *bad;
        }
        return;
    }
    const unsigned team_size = 1u << team_shift, teams = blockDim.x >> team_shift;
    const unsigned team = threadIdx.x >> team_shift, lane = threadIdx.x & (team_size - 1);
    const uint64_t total = kvc_xfer_pairs(&a);
    for (int64_t l = blockIdx.y; l < a.num_layers; l += gridDim.y)
        for (int64_t p = blockIdx.z; p < a.num_planes; p += gridDim.z)
            for (uint64_t q = (uint64_t)blockIdx.x * teams + team; q < total; q += (uint64_t)gridDim.x * teams) {
                char *dst;
                const char *src;
                if (!kvc_xfer_locate(&a, l, p, q, &dst, &src)) continue;
                W *d = (W *)dst;
                const W *s = (const W *)src;
                for (int64_t k = lane; k < a.run_words; k += team_size) d[k] = s[k];
            }
}

#define CHECK_THREADS 256

/* First i in [first, end) with idx[i] outside [0, limit) (negative entries skip when allowed). */
static __global__ void __launch_bounds__(CHECK_THREADS)
    index_check_kernel(const int64_t *idx, int64_t first, int64_t end, int64_t limit, int negative_skips,
                       unsigned long long *bad)
{
    for (int64_t i = first + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < end;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t v = idx[i];
        if (v >= limit || (v < 0 && !negative_skips)) atomicMin(bad, (unsigned long long)i);
    }
}

/* ---------------------------------------------------------------- deferred checks */

static unsigned long long *check_words(kvc_backend_ctx_t *b, int i) { return b->check_words + 2 * i; }

/* A queued record whose event completed becomes free (table good, or the call failed on the
 * host) or failed (reported later). wait: block on the event instead of asking. */
static kvc_status_t check_settle(kvc_backend_ctx_t *b, int i, int wait)
{
    gpu_check_t *c = &b->check[i];
    if (c->state != GPU_CHECK_QUEUED) return KVC_OK;
    const gpuError_t err = wait ? gpuEventSynchronize(c->done) : gpuEventQuery(c->done);
    if (err == gpuErrorNotReady) return KVC_OK;
    if (err != gpuSuccess) return kvc_gpu_status(b->svc, err, "gpuEventQuery(check)", 1);
    const volatile unsigned long long *w = check_words(b, i);
    c->state = !c->discard && w[0] != ~0ull ? GPU_CHECK_FAILED : GPU_CHECK_FREE;
    return KVC_OK;
}

/* Report and free failed record i: the core's status and message for the table. */
static kvc_status_t check_raise(kvc_backend_ctx_t *b, int i)
{
    gpu_check_t *c = &b->check[i];
    const volatile unsigned long long *w = check_words(b, i);
    c->state = GPU_CHECK_FREE;
    const long long at = (long long)w[0], second = c->what2 && at >= c->split;
    return b->svc->set_error(KVC_ERR_OUT_OF_RANGE, "%s[%lld] = %lld outside [0, %lld)%s%s%s",
                             second ? c->what2 : c->what, second ? at - (long long)c->split : at, (long long)w[1],
                             (long long)c->limit, c->limit_name ? " (" : "", c->limit_name ? c->limit_name : "",
                             c->limit_name ? ")" : "");
}

static int check_oldest(const kvc_backend_ctx_t *b, int state, const gpuStream_t *stream)
{
    int best = -1;
    for (int i = 0; i < KVC_GPU_CHECKS; i++) {
        const gpu_check_t *c = &b->check[i];
        if (c->state == state && (!stream || c->stream == *stream) && (best < 0 || c->seq < b->check[best].seq))
            best = i;
    }
    return best;
}

/* A free record for a call on `stream`. With every record busy the host waits for the oldest
 * queued call; with every one failed and unreported, the oldest is reported as this call's error
 * (the call writes nothing). */
kvc_status_t kvc_gpu_check_acquire(kvc_backend_ctx_t *b, gpuStream_t stream, const char *op, int *out,
                                   unsigned long long **report)
{
    kvc_status_t st = KVC_OK;
    if (!b->check_words) {
        void *w = NULL;
        st = KVC_GPU_CALL(b, gpuHostAllocDefault(&w, 2 * sizeof(unsigned long long) * KVC_GPU_CHECKS), 1);
        if (st != KVC_OK) return st;
        b->check_words = (unsigned long long *)w;
    }
    for (int i = 0; i < KVC_GPU_CHECKS && st == KVC_OK; i++) st = check_settle(b, i, 0);
    int i = check_oldest(b, GPU_CHECK_FREE, NULL);
    while (st == KVC_OK && i < 0) {
        const int q = check_oldest(b, GPU_CHECK_QUEUED, NULL);
        if (q < 0) return check_raise(b, check_oldest(b, GPU_CHECK_FAILED, NULL));
        st = check_settle(b, q, 1);
        i = check_oldest(b, GPU_CHECK_FREE, NULL);
    }
    if (st != KVC_OK) return st;
    gpu_check_t *c = &b->check[i];
    if (!c->has_event) {
        st = KVC_GPU_CALL(b, gpuEventCreateWithFlags(&c->done, gpuEventDisableTiming), 1);
        if (st != KVC_OK) return st;
        c->has_event = 1;
    }
    void *d = NULL;
    st = kvc_gpu_require_device_ptr(b, check_words(b, i), op, "check record", -1, &d);
    if (st != KVC_OK) return st;
    c->stream = stream;
    c->seq = ++b->check_seq;
    check_words(b, i)[0] = ~0ull;
    *out = i;
    *report = (unsigned long long *)d;
    return KVC_OK;
}

kvc_status_t kvc_gpu_check_queue(kvc_backend_ctx_t *b, int rec, gpuStream_t stream, kvc_status_t st,
                                 const gpu_check_t *what)
{
    /* Queued even after a host-side failure (discard): a launched check may still write. */
    gpu_check_t *c = &b->check[rec];
    *c = (gpu_check_t){ .state = GPU_CHECK_QUEUED, .has_event = 1, .discard = st != KVC_OK, .stream = stream,
                        .done = c->done, .seq = c->seq, .what = what->what, .what2 = what->what2,
                        .limit_name = what->limit_name, .limit = what->limit, .split = what->split };
    const kvc_status_t ev = KVC_GPU_CALL(b, gpuEventRecord(c->done, stream), 1);
    return st != KVC_OK ? st : ev;
}

kvc_status_t kvc_gpu_check_report(kvc_backend_ctx_t *b, gpuStream_t s)
{
    pthread_mutex_lock(&b->stage_lock);
    kvc_status_t st = KVC_OK;
    for (int i = 0; i < KVC_GPU_CHECKS && st == KVC_OK; i++) st = check_settle(b, i, 0);
    const int f = check_oldest(b, GPU_CHECK_FAILED, &s);
    if (st == KVC_OK && f >= 0) st = check_raise(b, f);
    pthread_mutex_unlock(&b->stage_lock);
    return st;
}

void kvc_gpu_check_release_all(kvc_backend_ctx_t *b)
{
    for (int i = 0; i < KVC_GPU_CHECKS; i++)
        if (b->check[i].has_event) {
            (void)gpuEventSynchronize(b->check[i].done);
            (void)gpuEventDestroy(b->check[i].done);
        }
    if (b->check_words) (void)gpuFreeHost(b->check_words);
    (void)gpuGetLastError();
}

/* ---------------------------------------------------------------- launch */

/* Where a plan's index table lives, and how a device-resident one is checked. */
typedef struct index_table {
    const int64_t *index;
    int on_device, negative_skips;
    int64_t limit;
    const char *what, *limit_name;
} index_table_t;

static kvc_status_t launch(kvc_backend_ctx_t *b, const char *op, kvc_xfer_args_t a, void *const *engine_ptrs,
                           void *const *objects, const index_table_t *ix, int64_t run_bytes, gpuStream_t stream)
{
    /* Staged, 8 bytes an entry: the check result word, pointer table, objects up to the last
     * unit's, and the index list when it is a host table. */
    const int64_t nptr = kvc_xfer_ptr_count(&a), nobj = a.blocks ? (a.first + a.count - 1) / a.bpo + 1 : 0;
    const int64_t nidx = ix->on_device ? 0 : a.count;
    const size_t bytes = 8 * (size_t)(1 + nptr + nobj + nidx);
    gpu_stage_t s;
    kvc_status_t st = kvc_gpu_stage_begin(b, bytes, &s);
    if (st != KVC_OK) return st;
    *(unsigned long long *)s.host = ~0ull;
    void **tptr = (void **)s.host + 1, **tobj = tptr + nptr;
    uint64_t align = kvc_xfer_stride_bits(&a, run_bytes);
    for (int64_t i = 0; i < nptr && st == KVC_OK; i++) {
        st = kvc_gpu_require_device_ptr(b, engine_ptrs[i], op, "engine_ptrs", i, &tptr[i]);
        align |= (uint64_t)(uintptr_t)tptr[i];
    }
    for (int64_t i = 0; i < nobj && st == KVC_OK; i++) {
        st = kvc_gpu_require_device_ptr(b, objects[i], op, "objects", i, &tobj[i]);
        align |= (uint64_t)(uintptr_t)tobj[i];
    }
    if (st == KVC_OK && !a.blocks) {
        void *chunk = NULL;
        st = kvc_gpu_require_device_ptr(b, a.chunk, op, "chunk", -1, &chunk);
        a.chunk = (char *)chunk;
        align |= (uint64_t)(uintptr_t)chunk;
    }
    const int64_t *dindex = NULL;
    if (st == KVC_OK && ix->on_device) {
        void *d = NULL;
        st = kvc_gpu_require_device_ptr(b, ix->index, op, ix->what, -1, &d);
        dindex = (const int64_t *)d;
    }
    if (st != KVC_OK) return kvc_gpu_stage_end(b, &s, stream, st);
    if (!ix->on_device) memcpy(tobj + nobj, ix->index + a.first, 8 * (size_t)a.count);
    a.ptrs = (char *const *)(s.dev + 8);
    a.objects = (char *const *)(s.dev + 8 * (1 + nptr));
    a.index = ix->on_device ? dindex + a.first : (const int64_t *)(s.dev + 8 * (1 + nptr + nobj));
    const int w = kvc_xfer_word_bytes(align);
    a.word_bytes = w;
    a.run_words = run_bytes / w;

    int team_shift = 0;
    while ((1 << team_shift) < XFER_THREADS && (int64_t)(1 << team_shift) < a.run_words) team_shift++;
    const unsigned teams = XFER_THREADS >> team_shift;
    dim3 grid;
    grid.y = (unsigned)(a.num_layers < 65535 ? a.num_layers : 65535);
    grid.z = (unsigned)(a.num_planes < 64 ? a.num_planes : 64);
    /* x: enough blocks over the pairs to fill the device together with the y*z blocks. */
    const uint64_t yz = (uint64_t)grid.y * grid.z, want = (uint64_t)(b->sm_count > 0 ? b->sm_count : 16) * 16;
    const uint64_t cap = want > yz ? (want + yz - 1) / yz : 1;
    uint64_t gx = (kvc_xfer_pairs(&a) + teams - 1) / teams;
    grid.x = (unsigned)(gx < 1 ? 1 : gx > cap ? cap : gx);

    int rec = -1;
    const unsigned long long *bad = NULL;
    unsigned long long *report = NULL;
    if (ix->on_device) st = kvc_gpu_check_acquire(b, stream, op, &rec, &report);
    if (st == KVC_OK) st = kvc_gpu_stage_upload(b, &s, bytes, stream);
    if (st == KVC_OK && ix->on_device) {
        bad = (const unsigned long long *)s.dev;
        gpuLaunch(index_check_kernel, kvc_gpu_grid(b, (uint64_t)a.count, CHECK_THREADS), CHECK_THREADS, stream)(
            dindex, a.first, a.first + a.count, ix->limit, ix->negative_skips, (unsigned long long *)s.dev);
        st = kvc_gpu_launch_status(b, "index check");
    }
    if (st == KVC_OK) {
        switch (w) {
        case 16: gpuLaunch(xfer_kernel<uint4>, grid, XFER_THREADS, stream)(a, team_shift, bad, report); break;
        case 8: gpuLaunch(xfer_kernel<uint2>, grid, XFER_THREADS, stream)(a, team_shift, bad, report); break;
        case 4: gpuLaunch(xfer_kernel<uint32_t>, grid, XFER_THREADS, stream)(a, team_shift, bad, report); break;
        case 2: gpuLaunch(xfer_kernel<uint16_t>, grid, XFER_THREADS, stream)(a, team_shift, bad, report); break;
        default: gpuLaunch(xfer_kernel<uint8_t>, grid, XFER_THREADS, stream)(a, team_shift, bad, report); break;
        }
        st = kvc_gpu_launch_status(b, op);
    }
    if (rec >= 0) {
        gpu_check_t what = {};
        what.what = ix->what;
        what.limit_name = ix->limit_name;
        what.limit = ix->limit;
        st = kvc_gpu_check_queue(b, rec, stream, st, &what);
    }
    return kvc_gpu_stage_end(b, &s, stream, st);
}

kvc_status_t kvc_gpu_transfer_tokens(kvc_backend_ctx_t *b, const struct kvc_token_plan *p)
{
    const int64_t n = p->end_token - p->first_token;
    if (n <= 0 || p->num_layers <= 0 || p->num_planes <= 0 || p->runs.run_bytes <= 0) return KVC_OK;
    kvc_xfer_args_t a = kvc_xfer_from_plan(p->direction, p->num_layers, p->num_planes, &p->engine, &p->chunk_map,
                                           &p->runs);
    a.chunk = (char *)p->chunk;
    a.first = p->first_token;
    a.count = n;
    const index_table_t ix = { p->slots, p->index_on_device, 1, p->index_limit, "slots", "nb*bs slots" };
    return launch(b, "transfer_tokens", a, p->engine.ptrs, NULL, &ix, p->runs.run_bytes, (gpuStream_t)p->stream);
}

kvc_status_t kvc_gpu_transfer_blocks(kvc_backend_ctx_t *b, const struct kvc_block_plan *p)
{
    const int64_t n = p->end_block - p->first_block;
    if (n <= 0 || p->num_layers <= 0 || p->num_planes <= 0 || p->runs.run_bytes <= 0) return KVC_OK;
    kvc_xfer_args_t a = kvc_xfer_from_plan(p->direction, p->num_layers, p->num_planes, &p->engine, &p->chunk_map,
                                           &p->runs);
    a.blocks = 1;
    a.bpo = p->blocks_per_object;
    a.first = p->first_block;
    a.count = n;
    const index_table_t ix = { p->block_ids, p->index_on_device, 0, p->index_limit, "block_ids", "nb blocks" };
    return launch(b, "transfer_blocks", a, p->engine.ptrs, p->objects, &ix, p->runs.run_bytes,
                  (gpuStream_t)p->stream);
}
