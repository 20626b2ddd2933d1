/* SPDX-License-Identifier: BSD-3-Clause */
/* A backend module that runs the GPU kernels' arithmetic on the CPU and models a GPU's memory
 * spaces. The transfer addressing (gpu_transfer.h), the per-stream coder (gpu_coder.h) and the
 * quantiser's per-element code (gpu_quant.h) are the very functions the CUDA/HIP kernels call,
 * compiled here by gcc and driven by plain loops in place of the grid. tests/unit/test_gpu.c and
 * tests/shell/test_cli_emu.sh load it as the "cuda" module.
 *
 * Memory spaces, as the real runtimes present them:
 *   - device memory comes from a separate arena: a memfd mapped twice, once PROT_NONE (the
 *     addresses handed out: the host faults on them, as on a GPU without HMM) and once read-write
 *     (the view the emulated kernels and copies use);
 *   - registered host memory is what host_register recorded;
 *   - anything else is pageable host memory. pointer_kind answers like cudaPointerGetAttributes,
 *     and every op refuses pageable host memory with the real module's message
 *     (kvc_gpu_require_device_ptr), while copies accept any memory (cudaMemcpy with UVA).
 * What it cannot check: launch shapes, shared-memory staging, atomics, the device-side data checks
 * and the runtime calls (those run only on a real GPU). RoPE fused / delta repeat rope.cu's
 * per-element code (delta with libm's sin/cos: within a few ulp of the CPU, not equal); no table
 * build. Streams are synchronous, but a bad device-resident index table or position table is
 * reported like the real module does it, at the next stream_synchronize of the call's stream
 * (docs/GPU.md); kvc_emu_syncs() counts the host waits. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <kvcore/backend.h>
#include <kvcore/cachegen.h>
#include <kvcore/transfer.h>

#include "../../src/backends/gpu/gpu_coder.h"
#include "../../src/backends/gpu/gpu_quant.h"
#include "../../src/backends/gpu/gpu_transfer.h"
#include "../../src/common/rope.h"

#define ARENA_BYTES ((size_t)2 << 30) /* sparse: only touched pages cost memory */
#define ARENA_ALIGN 256
#define MAX_REGISTERED 256
#define MAX_FAILED 64 /* KVC_GPU_CHECKS in the real module */

typedef struct span {
    size_t off, len;
} span_t;

struct kvc_backend_ctx {
    const kvc_backend_services_t *svc;
    pthread_mutex_t lock;
    int fd;
    char *dev;    /* PROT_NONE view: device addresses */
    char *shadow; /* read-write view of the same pages */
    span_t *allocs; /* live device allocations, sorted by offset */
    size_t nallocs, cap;
    struct {
        const char *p;
        size_t len;
    } reg[MAX_REGISTERED];
    int nreg;
    struct failed { /* device-resident tables found bad, not yet reported; oldest first */
        kvc_stream_t stream;
        char msg[256];
    } failed[MAX_FAILED];
    int nfailed;
};

/* Host waits for the "device" (stream_synchronize), for tests asserting that none happens. */
static unsigned long syncs;
KVC_API unsigned long kvc_emu_syncs(void);
KVC_API unsigned long kvc_emu_syncs(void) { return __atomic_load_n(&syncs, __ATOMIC_RELAXED); }

static kvc_status_t emu_probe(const kvc_backend_services_t *svc, int *n, char *why, size_t len)
{
    (void)svc;
    (void)why;
    (void)len;
    *n = 1;
    return KVC_OK;
}

static void emu_fini(kvc_backend_ctx_t *b)
{
    if (b->dev && b->dev != MAP_FAILED) munmap(b->dev, ARENA_BYTES);
    if (b->shadow && b->shadow != MAP_FAILED) munmap(b->shadow, ARENA_BYTES);
    if (b->fd >= 0) close(b->fd);
    free(b->allocs);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

static kvc_status_t emu_init(const kvc_backend_services_t *svc, int device, kvc_backend_ctx_t **out)
{
    (void)device;
    kvc_backend_ctx_t *b = calloc(1, sizeof(*b));
    if (!b) return KVC_ERR_NO_MEMORY;
    b->svc = svc;
    pthread_mutex_init(&b->lock, NULL);
    b->fd = memfd_create("kvc-emu-device", MFD_CLOEXEC);
    if (b->fd < 0 || ftruncate(b->fd, (off_t)ARENA_BYTES) != 0) goto fail;
    b->dev = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_SHARED, b->fd, 0);
    b->shadow = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
    if (b->dev == MAP_FAILED || b->shadow == MAP_FAILED) goto fail;
    *out = b;
    return KVC_OK;
fail:
    emu_fini(b);
    return svc->set_error(KVC_ERR_NO_MEMORY, "emu: cannot map the %zu-byte device arena", ARENA_BYTES);
}

static int in_arena(const kvc_backend_ctx_t *b, const void *p)
{
    return (const char *)p >= b->dev && (const char *)p < b->dev + ARENA_BYTES;
}

static int is_registered(kvc_backend_ctx_t *b, const void *p)
{
    int hit = 0;
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < b->nreg && !hit; i++)
        hit = (const char *)p >= b->reg[i].p && (const char *)p < b->reg[i].p + b->reg[i].len;
    pthread_mutex_unlock(&b->lock);
    return hit;
}

static kvc_status_t emu_kind(kvc_backend_ctx_t *b, const void *p, int *kind)
{
    *kind = in_arena(b, p) ? KVC_RES_DEVICE : is_registered(b, p) ? KVC_RES_REGISTERED : KVC_RES_PAGEABLE;
    return KVC_OK;
}

/* Where the host-side emulation touches p: the read-write view for device memory. */
static void *view(const kvc_backend_ctx_t *b, const void *p)
{
    return in_arena(b, p) ? b->shadow + ((const char *)p - b->dev) : (void *)p;
}

/* What a kernel may dereference: device or registered memory (kvc_gpu_require_device_ptr). */
static kvc_status_t reach(kvc_backend_ctx_t *b, const void *p, const char *op, const char *what, long long index,
                          void *out)
{
    void *r = NULL;
    if (p) {
        int kind;
        emu_kind(b, p, &kind);
        if (kind == KVC_RES_PAGEABLE) {
            char idx[32] = "";
            if (index >= 0) snprintf(idx, sizeof(idx), "[%lld]", index);
            return b->svc->set_error(KVC_ERR_INVALID_ARG,
                                     "%s: %s%s = %p is pageable host memory the CUDA device cannot access: use "
                                     "device memory, or register / pin the host memory",
                                     op, what, idx, p);
        }
        r = view(b, p);
    }
    memcpy(out, &r, sizeof(r)); /* out: any pointer type */
    return KVC_OK;
}

static kvc_status_t emu_alloc(kvc_backend_ctx_t *b, size_t len, void **out)
{
    len = (len + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    kvc_status_t st = KVC_ERR_NO_MEMORY;
    pthread_mutex_lock(&b->lock);
    size_t at = 0, i = 0; /* first fit */
    for (; i < b->nallocs && b->allocs[i].off - at < len; i++) at = b->allocs[i].off + b->allocs[i].len;
    if (ARENA_BYTES - at >= len) {
        if (b->nallocs == b->cap) {
            const size_t cap = b->cap ? 2 * b->cap : 64;
            span_t *a = realloc(b->allocs, cap * sizeof(*a));
            if (a) {
                b->allocs = a;
                b->cap = cap;
            }
        }
        if (b->nallocs < b->cap) {
            memmove(b->allocs + i + 1, b->allocs + i, (b->nallocs - i) * sizeof(*b->allocs));
            b->allocs[i] = (span_t){ at, len };
            b->nallocs++;
            *out = b->dev + at;
            st = KVC_OK;
        }
    }
    pthread_mutex_unlock(&b->lock);
    return st == KVC_OK ? st : b->svc->set_error(st, "emu: device arena full (%zu bytes asked)", len);
}

static kvc_status_t emu_free(kvc_backend_ctx_t *b, void *p)
{
    kvc_status_t st = KVC_ERR_INVALID_ARG;
    pthread_mutex_lock(&b->lock);
    for (size_t i = 0; i < b->nallocs; i++)
        if (b->dev + b->allocs[i].off == (char *)p) {
            /* the pages go back, and a later allocation reads zeros, not old data */
            (void)fallocate(b->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)b->allocs[i].off,
                            (off_t)b->allocs[i].len);
            memmove(b->allocs + i, b->allocs + i + 1, (b->nallocs - i - 1) * sizeof(*b->allocs));
            b->nallocs--;
            st = KVC_OK;
            break;
        }
    pthread_mutex_unlock(&b->lock);
    return st == KVC_OK ? st : b->svc->set_error(st, "emu: %p is not a device allocation", p);
}

static kvc_status_t emu_register(kvc_backend_ctx_t *b, void *p, size_t len)
{
    kvc_status_t st = KVC_ERR_NO_MEMORY;
    pthread_mutex_lock(&b->lock);
    if (b->nreg < MAX_REGISTERED) {
        b->reg[b->nreg].p = p;
        b->reg[b->nreg++].len = len;
        st = KVC_OK;
    }
    pthread_mutex_unlock(&b->lock);
    return st == KVC_OK ? st : b->svc->set_error(st, "emu: more than %d registered ranges", MAX_REGISTERED);
}

static kvc_status_t emu_unregister(kvc_backend_ctx_t *b, void *p, size_t len)
{
    (void)len;
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < b->nreg; i++)
        if (b->reg[i].p == p) {
            b->reg[i] = b->reg[--b->nreg];
            break;
        }
    pthread_mutex_unlock(&b->lock);
    return KVC_OK;
}

/* Copies take any memory, as cudaMemcpy* do with unified addressing. */
static kvc_status_t emu_memcpy(kvc_backend_ctx_t *b, void *dst, const void *src, size_t n)
{
    memmove(view(b, dst), view(b, src), n);
    return KVC_OK;
}

static kvc_status_t emu_split(kvc_backend_ctx_t *b, const struct kvc_copy_split *a)
{
    return emu_memcpy(b, a->dst, a->src, a->nbytes);
}

static kvc_status_t emu_batched(kvc_backend_ctx_t *b, const struct kvc_batched_copy *a)
{
    for (size_t i = 0; i < a->count; i++)
        if (a->sizes[i]) emu_memcpy(b, a->dsts[i], a->srcs[i], a->sizes[i]);
    return KVC_OK;
}

/* Report and forget the oldest unreported failure on stream s (or on any stream when any). */
static kvc_status_t report_failed(kvc_backend_ctx_t *b, kvc_stream_t s, int any)
{
    char msg[sizeof(b->failed[0].msg)] = "";
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < b->nfailed; i++)
        if (any || b->failed[i].stream == s) {
            memcpy(msg, b->failed[i].msg, sizeof(msg));
            memmove(b->failed + i, b->failed + i + 1, (size_t)(b->nfailed - i - 1) * sizeof(b->failed[0]));
            b->nfailed--;
            break;
        }
    pthread_mutex_unlock(&b->lock);
    return msg[0] ? b->svc->set_error(KVC_ERR_OUT_OF_RANGE, "%s", msg) : KVC_OK;
}

static kvc_status_t emu_sync(kvc_backend_ctx_t *b, kvc_stream_t s)
{
    __atomic_add_fetch(&syncs, 1, __ATOMIC_RELAXED);
    return report_failed(b, s, 0); /* every op is done when it returns */
}

static kvc_status_t emu_host_fn(kvc_backend_ctx_t *b, kvc_stream_t s, kvc_host_fn_t fn, void *arg)
{
    (void)b;
    (void)s;
    fn(arg); /* the stream's earlier work is done already */
    return KVC_OK;
}

/* The kernel's loops (layer, plane, pair) with the kernel's word size. */
static void run_plan(kvc_xfer_args_t *a, void *const *objects, int64_t run_bytes)
{
    uint64_t align = kvc_xfer_stride_bits(a, run_bytes);
    for (int64_t i = 0; i < kvc_xfer_ptr_count(a); i++) align |= (uint64_t)(uintptr_t)a->ptrs[i];
    if (a->blocks)
        for (int64_t i = 0; i <= (a->first + a->count - 1) / a->bpo; i++) align |= (uint64_t)(uintptr_t)objects[i];
    else
        align |= (uint64_t)(uintptr_t)a->chunk;
    a->word_bytes = kvc_xfer_word_bytes(align);
    a->run_words = run_bytes / a->word_bytes;
    for (int64_t l = 0; l < a->num_layers; l++)
        for (int64_t p = 0; p < a->num_planes; p++)
            for (uint64_t q = 0; q < kvc_xfer_pairs(a); q++) {
                char *dst;
                const char *src;
                if (kvc_xfer_locate(a, l, p, q, &dst, &src))
                    memcpy(dst, src, (size_t)(a->run_words * a->word_bytes));
            }
}

/* The engine pointer table (and the objects) with each entry checked and translated, as the real
 * module does before its kernels run; *out is freed by the caller. */
static kvc_status_t reach_table(kvc_backend_ctx_t *b, void *const *in, int64_t n, const char *op, const char *what,
                                char ***out)
{
    char **t = calloc((size_t)n, sizeof(*t));
    if (!t) return b->svc->set_error(KVC_ERR_NO_MEMORY, "emu: no memory for a pointer table");
    for (int64_t i = 0; i < n; i++) {
        const kvc_status_t st = reach(b, in[i], op, what, i, &t[i]);
        if (st != KVC_OK) {
            free(t);
            return st;
        }
    }
    *out = t;
    return KVC_OK;
}

/* Record a bad device-resident table's error for the next sync of stream (the real module's
 * check record). */
static void defer_failure(kvc_backend_ctx_t *b, kvc_stream_t stream, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void defer_failure(kvc_backend_ctx_t *b, kvc_stream_t stream, const char *fmt, ...)
{
    pthread_mutex_lock(&b->lock);
    struct failed *f = &b->failed[b->nfailed++];
    f->stream = stream;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof(f->msg), fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&b->lock);
}

/* With MAX_FAILED failures unreported, a call with a device-resident table fails with the oldest
 * (the real module waits for the stream there). */
static kvc_status_t defer_room(kvc_backend_ctx_t *b)
{
    pthread_mutex_lock(&b->lock);
    const int full = b->nfailed == MAX_FAILED;
    pthread_mutex_unlock(&b->lock);
    if (!full) return KVC_OK;
    __atomic_add_fetch(&syncs, 1, __ATOMIC_RELAXED);
    return report_failed(b, NULL, 1);
}

/* A device-resident index table (plan.index_on_device): checked "on the device" (through the
 * read-write view) before any write. A bad entry is the real module's deferred error: the call
 * writes nothing and returns KVC_OK (*out = NULL), and the core's status and message wait for the
 * stream's next synchronisation. With MAX_FAILED failures unreported, the call fails with the
 * oldest one first (the real module waits for the stream there). *out is the table's view. */
static kvc_status_t device_index(kvc_backend_ctx_t *b, const int64_t *table, int64_t first, int64_t end,
                                 int64_t limit, int negative_skips, const char *what, const char *limit_name,
                                 kvc_stream_t stream, const int64_t **out)
{
    const int64_t *v = NULL;
    kvc_status_t st = reach(b, table, "transfer", what, -1, &v);
    if (st != KVC_OK) return st;
    if ((st = defer_room(b)) != KVC_OK) return st;
    *out = v;
    for (int64_t i = first; i < end; i++)
        if (v[i] >= limit || (v[i] < 0 && !negative_skips)) {
            defer_failure(b, stream, "%s[%lld] = %lld outside [0, %lld) (%s)", what, (long long)i, (long long)v[i],
                          (long long)limit, limit_name);
            *out = NULL;
            break;
        }
    return KVC_OK;
}

static kvc_status_t emu_tokens(kvc_backend_ctx_t *b, const struct kvc_token_plan *p)
{
    if (p->end_token <= p->first_token) return KVC_OK;
    kvc_xfer_args_t a = kvc_xfer_from_plan(p->direction, p->num_layers, p->num_planes, &p->engine, &p->chunk_map,
                                           &p->runs);
    char **ptrs = NULL;
    const int64_t *slots = p->slots;
    kvc_status_t st = KVC_OK;
    if (p->index_on_device)
        st = device_index(b, p->slots, p->first_token, p->end_token, p->index_limit, 1, "slots", "nb*bs slots",
                          p->stream, &slots);
    if (p->index_on_device && !slots) return st; /* bad: nothing written, reported at the next sync */
    if (st == KVC_OK)
        st = reach_table(b, p->engine.ptrs, kvc_xfer_ptr_count(&a), "transfer", "engine_ptrs", &ptrs);
    if (st == KVC_OK) st = reach(b, p->chunk, "transfer", "chunk", -1, &a.chunk);
    if (st == KVC_OK) {
        a.ptrs = ptrs;
        a.index = slots + p->first_token;
        a.first = p->first_token;
        a.count = p->end_token - p->first_token;
        run_plan(&a, NULL, p->runs.run_bytes);
    }
    free(ptrs);
    return st;
}

static kvc_status_t emu_blocks(kvc_backend_ctx_t *b, const struct kvc_block_plan *p)
{
    if (p->end_block <= p->first_block) return KVC_OK;
    kvc_xfer_args_t a = kvc_xfer_from_plan(p->direction, p->num_layers, p->num_planes, &p->engine, &p->chunk_map,
                                           &p->runs);
    char **ptrs = NULL, **objects = NULL;
    const int64_t *ids = p->block_ids;
    kvc_status_t st = KVC_OK;
    if (p->index_on_device)
        st = device_index(b, p->block_ids, p->first_block, p->end_block, p->index_limit, 0, "block_ids", "nb blocks",
                          p->stream, &ids);
    if (p->index_on_device && !ids) return st; /* bad: nothing written, reported at the next sync */
    if (st == KVC_OK)
        st = reach_table(b, p->engine.ptrs, kvc_xfer_ptr_count(&a), "transfer_blocks", "engine_ptrs", &ptrs);
    if (st == KVC_OK)
        st = reach_table(b, p->objects, (p->end_block - 1) / p->blocks_per_object + 1, "transfer_blocks", "objects",
                         &objects);
    if (st == KVC_OK) {
        a.blocks = 1;
        a.ptrs = ptrs;
        a.objects = objects;
        a.bpo = p->blocks_per_object;
        a.index = ids + p->first_block;
        a.first = p->first_block;
        a.count = p->end_block - p->first_block;
        run_plan(&a, (void *const *)objects, p->runs.run_bytes);
    }
    free(ptrs);
    free(objects);
    return st;
}

/* Each coder and quantiser pointer checked and translated like a kernel argument. */
#define REACH(op, field)                                                                                              \
    do {                                                                                                              \
        const kvc_status_t st_ = reach(b, a->field, op, #field, -1, &t.field);                                        \
        if (st_ != KVC_OK) return st_;                                                                                \
    } while (0)

static kvc_status_t emu_cdf(kvc_backend_ctx_t *b, const struct kvc_cdf_args *a_in)
{
    struct kvc_cdf_args t = *a_in, *a = &t;
    REACH("cg_cdf", symbols);
    REACH("cg_cdf", cdf);
    const size_t T = a->tokens, C = a->channels;
    for (size_t k = 0; k < a->layers * C; k++) {
        uint32_t hist[KVC_CG_MAX_BINS] = { 0 };
        for (size_t t = 0; t < T; t++) hist[a->symbols[(k / C * T + t) * C + k % C]]++;
        kvc_cdf_from_hist(hist, 1, a->num_bins, T, NULL, a->cdf + k * (a->num_bins + 1), 1);
    }
    return KVC_OK;
}

static kvc_status_t emu_encode(kvc_backend_ctx_t *b, const struct kvc_encode_args *a_in)
{
    struct kvc_encode_args t = *a_in, *a = &t;
    REACH("cg_encode", cdf);
    REACH("cg_encode", symbols);
    REACH("cg_encode", streams);
    REACH("cg_encode", lengths);
    const size_t T = a->tokens, C = a->channels;
    size_t longest = 0, first_over = a->layers * C;
    for (size_t k = 0; k < a->layers * C; k++) {
        const uint64_t len =
            kvc_cg_encode_stream(a->cdf + k * (a->num_bins + 1), 1, a->num_bins,
                                 a->symbols ? a->symbols + k / C * T * C + k % C : NULL, C, T,
                                 a->streams ? a->streams + k * a->capacity : NULL, a->capacity);
        a->lengths[k] = (int32_t)len;
        if (len > longest) longest = len;
        if (len > a->capacity && first_over == a->layers * C) first_over = k;
    }
    *a->needed = longest;
    if (first_over < a->layers * C)
        return b->svc->set_error(KVC_ERR_NO_SPACE, "emu cg_encode: stream %zu does not fit", first_over);
    return KVC_OK;
}

static void decode_all(const uint16_t *cdf, unsigned B, const uint8_t *base, size_t cap, const int32_t *lengths,
                       const int64_t *prefsum, uint8_t *sym, size_t L, size_t T, size_t C)
{
    for (size_t k = 0; k < L * C; k++) {
        size_t start, len;
        if (prefsum) {
            start = k ? (size_t)prefsum[k - 1] : 0;
            len = (size_t)prefsum[k] - start;
        } else {
            start = k * cap;
            len = (size_t)lengths[k];
        }
        kvc_cg_decode_stream(cdf + k * (B + 1), 1, B, base ? base + start : NULL, len,
                             sym ? sym + k / C * T * C + k % C : NULL, C, T);
    }
}

static kvc_status_t emu_decode(kvc_backend_ctx_t *b, const struct kvc_decode_args *a_in)
{
    struct kvc_decode_args t = *a_in, *a = &t;
    REACH("cg_decode", cdf);
    REACH("cg_decode", streams);
    REACH("cg_decode", lengths);
    REACH("cg_decode", symbols);
    decode_all(a->cdf, a->num_bins, a->streams, a->capacity, a->lengths, NULL, a->symbols, a->layers, a->tokens,
               a->channels);
    return KVC_OK;
}

static kvc_status_t emu_decode_packed(kvc_backend_ctx_t *b, const struct kvc_decode_packed_args *a_in)
{
    struct kvc_decode_packed_args t = *a_in, *a = &t;
    REACH("cg_decode_packed", cdf);
    REACH("cg_decode_packed", bytes);
    REACH("cg_decode_packed", prefsum);
    REACH("cg_decode_packed", symbols);
    decode_all(a->cdf, a->num_bins, a->bytes, 0, NULL, a->prefsum, a->symbols, a->layers, a->tokens, a->channels);
    return KVC_OK;
}

static size_t dtype_size(kvc_dtype_t dt) { return dt == KVC_DTYPE_F32 ? 4 : 2; }

static kvc_status_t emu_quantise(kvc_backend_ctx_t *b, const struct kvc_quant_args *a_in)
{
    struct kvc_quant_args t = *a_in, *a = &t; /* bins is host memory */
    REACH("quantise", values);
    REACH("quantise", symbols);
    REACH("quantise", scales);
    const size_t T = a->tokens, C = a->channels, es = dtype_size(a->dtype);
    for (size_t row = 0; row < a->layers * T; row++) {
        const char *x = (const char *)a->values + row * C * es;
        float mx = 0.0f;
        for (size_t i = 0; i < C; i++) {
            const float v = kvc_gq_abs_finite(kvc_gq_load((int)a->dtype, x, i));
            mx = v > mx ? v : mx;
        }
        const unsigned m = a->bins[row / T] / 2 - 1;
        const float f = kvc_gq_prescale(mx), inv = kvc_gq_inv(mx, m);
        for (size_t i = 0; i < C; i++)
            a->symbols[row * C + i] = kvc_gq_quantise(kvc_gq_load((int)a->dtype, x, i), f, inv, m);
        a->scales[row] = mx;
    }
    return KVC_OK;
}

static kvc_status_t emu_dequantise(kvc_backend_ctx_t *b, const struct kvc_quant_args *a_in)
{
    struct kvc_quant_args t = *a_in, *a = &t; /* bins is host memory */
    REACH("dequantise", values);
    REACH("dequantise", symbols);
    REACH("dequantise", scales);
    const size_t T = a->tokens, C = a->channels, es = dtype_size(a->dtype);
    for (size_t row = 0; row < a->layers * T; row++) {
        const unsigned m = a->bins[row / T] / 2 - 1;
        const float scale = a->scales[row], step = kvc_gq_step(scale, m), unscale = kvc_gq_unscale(scale);
        char *x = (char *)a->values + row * C * es;
        for (size_t i = 0; i < C; i++)
            kvc_gq_store((int)a->dtype, x, i, kvc_gq_dequantise(a->symbols[row * C + i], step, unscale, m));
    }
    return KVC_OK;
}

/* RoPE with the CUDA kernels' per-element operations (rope.cu), for device-resident keys and
 * positions. Positions on the device are checked before any write, with the deferred reporting. */
static float rope_load(const void *p, int dt, uint64_t i)
{
    if (dt == KVC_DTYPE_F16) return kvc_f16_to_f32(((const uint16_t *)p)[i]);
    if (dt == KVC_DTYPE_BF16) return kvc_bf16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

static void rope_store(void *p, int dt, uint64_t i, float v)
{
    if (dt == KVC_DTYPE_F16) ((uint16_t *)p)[i] = kvc_f32_to_f16(v);
    else if (dt == KVC_DTYPE_BF16) ((uint16_t *)p)[i] = kvc_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

static void rope_rotate(const kvc_rope_keys_t *k, char *data, uint64_t t, uint64_t h, uint64_t i, uint64_t half,
                        int is_neox, float c, float s)
{
    const size_t es = k->dtype == KVC_DTYPE_F32 ? 4 : 2;
    char *head = data + (t * k->token_stride + h * k->head_stride) * es;
    const uint64_t xi = is_neox ? i : 2 * i, yi = is_neox ? i + half : 2 * i + 1;
    const float x = rope_load(head, (int)k->dtype, xi), y = rope_load(head, (int)k->dtype, yi);
    rope_store(head, (int)k->dtype, xi, kvc_fsub(kvc_fmul(x, c), kvc_fmul(y, s)));
    rope_store(head, (int)k->dtype, yi, kvc_fadd(kvc_fmul(y, c), kvc_fmul(x, s)));
}

/* The positions the "kernel" reads: host tables as given (the core checked them), device tables
 * through the view after the check; NULL when a device table is bad (deferred, nothing written). */
static kvc_status_t rope_positions(kvc_backend_ctx_t *b, const char *op, const int64_t *old_in, const int64_t *new_in,
                                   size_t n, int on_device, int64_t limit, kvc_stream_t stream, const int64_t **old_pos,
                                   const int64_t **new_pos)
{
    *old_pos = old_in;
    *new_pos = new_in;
    if (!on_device) return KVC_OK;
    kvc_status_t st = reach(b, old_in, op, "old_positions", -1, old_pos);
    if (st == KVC_OK) st = reach(b, new_in, op, "new_positions", -1, new_pos);
    if (st == KVC_OK) st = defer_room(b);
    if (st != KVC_OK) return st;
    for (size_t i = 0; i < 2 * n; i++) {
        const int64_t v = i < n ? (*old_pos)[i] : (*new_pos)[i - n];
        if (v < 0 || v >= limit) {
            defer_failure(b, stream, "%s[%zu] = %lld outside [0, %lld)", i < n ? "old_positions" : "new_positions",
                          i < n ? i : i - n, (long long)v, (long long)limit);
            *old_pos = *new_pos = NULL;
            break;
        }
    }
    return KVC_OK;
}

static kvc_status_t emu_rope_fused(kvc_backend_ctx_t *b, const struct kvc_rope_args *a)
{
    const int64_t *op, *np;
    char *data;
    const void *table;
    kvc_status_t st = reach(b, a->keys.data, "rope_k_fused", "keys->data", -1, &data);
    if (st == KVC_OK) st = reach(b, a->table.data, "rope_k_fused", "table->data", -1, &table);
    if (st == KVC_OK)
        st = rope_positions(b, "rope_k_fused", a->old_positions, a->new_positions, a->keys.num_tokens,
                            a->positions_on_device, a->position_limit, a->stream, &op, &np);
    if (st != KVC_OK || !op) return st;
    const uint64_t rot = a->table.rot_dim, half = rot / 2;
    const int td = (int)a->table.dtype;
    for (uint64_t t = 0; t < a->keys.num_tokens; t++)
        for (uint64_t h = 0; h < a->keys.num_heads; h++)
            for (uint64_t i = 0; i < half; i++) {
                const uint64_t ro = (uint64_t)op[t] * rot, rn = (uint64_t)np[t] * rot;
                const float co = rope_load(table, td, ro + i), so = rope_load(table, td, ro + half + i);
                const float cn = rope_load(table, td, rn + i), sn = rope_load(table, td, rn + half + i);
                float c, s;
                kvc_rope_combine1(co, so, cn, sn, &c, &s);
                rope_rotate(&a->keys, data, t, h, i, half, a->is_neox, c, s);
            }
    return KVC_OK;
}

static kvc_status_t emu_rope_delta(kvc_backend_ctx_t *b, const struct kvc_rope_delta_args *a)
{
    const int64_t *op, *np;
    char *data;
    kvc_status_t st = reach(b, a->keys.data, "rope_k_delta", "keys->data", -1, &data);
    if (st == KVC_OK)
        st = rope_positions(b, "rope_k_delta", a->old_positions, a->new_positions, a->keys.num_tokens,
                            a->positions_on_device, a->position_limit, a->stream, &op, &np);
    if (st != KVC_OK || !op) return st;
    const uint64_t half = a->rot_dim / 2;
    for (uint64_t t = 0; t < a->keys.num_tokens; t++)
        for (uint64_t h = 0; h < a->keys.num_heads; h++)
            for (uint64_t i = 0; i < half; i++) {
                /* libm in place of the kernel's reduction + sincosf: close to, not equal to, the CPU */
                const double ang = (double)(np[t] - op[t]) * pow(a->base, -(double)(2 * i) / (double)a->rot_dim);
                rope_rotate(&a->keys, data, t, h, i, half, a->is_neox, (float)cos(ang), (float)sin(ang));
            }
    return KVC_OK;
}

static unsigned long plans;
/* Plans the module ran (tests/unit/test_gpu.c: a plan reached run_plan, not the single-op slots). */
KVC_API unsigned long kvc_emu_plans(void);
KVC_API unsigned long kvc_emu_plans(void) { return __atomic_load_n(&plans, __ATOMIC_RELAXED); }

static const kvc_backend_t emu;

/* As the real module (plan.cu): the ops in order through this module's own slots. */
static kvc_status_t emu_run_plan(kvc_backend_ctx_t *b, const struct kvc_plan_args *a)
{
    __atomic_add_fetch(&plans, 1, __ATOMIC_RELAXED);
    return kvc_plan_run_ops(b, &emu.ops, a);
}

static const kvc_backend_t emu = {
    .abi_version = KVC_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kvc_backend_t),
    .name = "cuda",
    .priority = KVC_BACKEND_PRIORITY_CUDA,
    .probe = emu_probe,
    .init = emu_init,
    .fini = emu_fini,
    .ops = { .host_register = emu_register,
             .host_unregister = emu_unregister,
             .device_alloc = emu_alloc,
             .device_free = emu_free,
             .memcpy_sync = emu_memcpy,
             .memcpy_split = emu_split,
             .batched_memcpy = emu_batched,
             .stream_synchronize = emu_sync,
             .transfer_tokens = emu_tokens,
             .transfer_blocks = emu_blocks,
             .cg_cdf = emu_cdf,
             .cg_encode = emu_encode,
             .cg_decode = emu_decode,
             .cg_decode_packed = emu_decode_packed,
             .quantise = emu_quantise,
             .dequantise = emu_dequantise,
             .rope_k_fused = emu_rope_fused,
             .rope_k_delta = emu_rope_delta,
             .launch_host_callback = emu_host_fn,
             .pointer_kind = emu_kind,
             .run_plan = emu_run_plan,
             .host_register_io = emu_register },
};

KVC_API const kvc_backend_t *kvc_backend_entry(void) { return &emu; }
