/* SPDX-License-Identifier: BSD-3-Clause */
/* RoPE re-rotation of stored keys (rope.h, docs/LMCACHE.md) on the GPU.
 * One thread per (token, head, pair), grid-stride over the flattened index (nothing depends on
 * the head count or the warp width). Math in fp32 with one rounding to the key dtype at the end,
 * the operations of the CPU backend's scalar tier in the same order (none contracted); angles
 * p*theta_i are formed and reduced modulo 2*pi in double, then sincosf (the CPU backend takes
 * cos/sin in double and rounds once: docs/ROPE.md), so the delta variant and the table agree with
 * the CPU backend within a few ulp, not bit for bit; the fused variant's combination of two table
 * rows is common/rope.h's, bit for bit.
 * Host positions (the core has read them) and the frequencies theta_i (computed on the host
 * exactly as the CPU backend does) are staged to the device; calls are asynchronous on the given
 * stream. Device-resident positions (positions_on_device) are read where they are: a check kernel
 * flags the first one out of range in the staging slot's first word, the rotation kernel then
 * writes nothing, and the error waits for kvc_stream_synchronize (the transfers' deferred check,
 * transfer.cu). */
#include "gpu_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore/rope.h>

#include "common/half.h"
#include "common/rope.h"

#define ROPE_THREADS 256

static __device__ __forceinline__ float rope_load(const void *p, int dt, uint64_t i)
{
    if (dt == KVC_DTYPE_F16) return kvc_f16_to_f32(((const uint16_t *)p)[i]);
    if (dt == KVC_DTYPE_BF16) return kvc_bf16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

static __device__ __forceinline__ void rope_store(void *p, int dt, uint64_t i, float v)
{
    if (dt == KVC_DTYPE_F16) ((uint16_t *)p)[i] = kvc_f32_to_f16(v);
    else if (dt == KVC_DTYPE_BF16) ((uint16_t *)p)[i] = kvc_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

/* cos / sin of a*theta: a - 2*pi*round(a / 2*pi) in double (Cody-Waite), then sincosf of its fp32
 * rounding with a first-order correction for that rounding. */
static __device__ __forceinline__ void rope_sincos(double a, float *c, float *s)
{
    const double k = rint(a * 0.15915494309189535);
    const double r = fma(-k, 2.4492935982947064e-16, fma(-k, 6.283185307179586, a));
    const float hi = (float)r, lo = (float)(r - (double)hi);
    float sn, cs;
    sincosf(hi, &sn, &cs);
    *s = kvc_fadd(sn, kvc_fmul(cs, lo));
    *c = kvc_fsub(cs, kvc_fmul(sn, lo));
}

typedef struct rope_keys {
    void *data;
    int dtype;
    uint64_t heads, head_stride, token_stride;
} rope_keys_t;

/* Rotate pair i of head h of token t by (c, s). */
static __device__ __forceinline__ void rope_rotate(const rope_keys_t *k, uint64_t t, uint64_t h, uint64_t i,
                                                   uint64_t half, int is_neox, float c, float s)
{
    const size_t es = k->dtype == KVC_DTYPE_F32 ? 4 : 2;
    char *head = (char *)k->data + (t * k->token_stride + h * k->head_stride) * es;
    const uint64_t xi = is_neox ? i : 2 * i, yi = is_neox ? i + half : 2 * i + 1;
    const float x = rope_load(head, k->dtype, xi), y = rope_load(head, k->dtype, yi);
    rope_store(head, k->dtype, xi, kvc_fsub(kvc_fmul(x, c), kvc_fmul(y, s)));
    rope_store(head, k->dtype, yi, kvc_fadd(kvc_fmul(y, c), kvc_fmul(x, s)));
}

/* (t, h, i) of flat index idx over [tokens, heads, half]. */
static __device__ __forceinline__ void rope_split(uint64_t idx, uint64_t heads, uint64_t half, uint64_t *t, uint64_t *h,
                                                  uint64_t *i)
{
    uint64_t th;
    kvc_divmod(idx, half, &th, i);
    kvc_divmod(th, heads, t, h);
}

/* First i in [0, 2n) whose position (old[i], then new[i - n]) is outside [0, limit). */
static __global__ void __launch_bounds__(ROPE_THREADS)
    position_check_kernel(const int64_t *old_pos, const int64_t *new_pos, int64_t n, int64_t limit,
                          unsigned long long *bad)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < 2 * n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t v = i < n ? old_pos[i] : new_pos[i - n];
        if (v < 0 || v >= limit) atomicMin(bad, (unsigned long long)i);
    }
}

/* The position check's verdict (bad NULL: host positions, checked by the core). When set, one
 * thread stores {index, value} in report and the kernel writes nothing. */
static __device__ __forceinline__ int positions_bad(const unsigned long long *bad, unsigned long long *report,
                                                    const int64_t *old_pos, const int64_t *new_pos, uint64_t tokens)
{
    if (!bad || *bad == ~0ull) return 0;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        const unsigned long long i = *bad;
        report[1] = (unsigned long long)(i < tokens ? old_pos[i] : new_pos[i - tokens]);
        report[0] = i;
    }
    return 1;
}

static __global__ void __launch_bounds__(ROPE_THREADS)
    rope_fused_kernel(rope_keys_t k, uint64_t tokens, const int64_t *old_pos, const int64_t *new_pos, const void *table,
                      int table_dtype, uint64_t rot_dim, int is_neox, const unsigned long long *bad,
                      unsigned long long *report)
{
    if (positions_bad(bad, report, old_pos, new_pos, tokens)) return;
    const uint64_t half = rot_dim / 2, n = tokens * k.heads * half;
    for (uint64_t idx = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t t, h, i;
        rope_split(idx, k.heads, half, &t, &h, &i);
        const uint64_t ro = (uint64_t)old_pos[t] * rot_dim, rn = (uint64_t)new_pos[t] * rot_dim;
        const float co = rope_load(table, table_dtype, ro + i), so = rope_load(table, table_dtype, ro + half + i);
        const float cn = rope_load(table, table_dtype, rn + i), sn = rope_load(table, table_dtype, rn + half + i);
        float c, s;
        kvc_rope_combine1(co, so, cn, sn, &c, &s);
        rope_rotate(&k, t, h, i, half, is_neox, c, s);
    }
}

static __global__ void __launch_bounds__(ROPE_THREADS)
    rope_delta_kernel(rope_keys_t k, uint64_t tokens, const int64_t *old_pos, const int64_t *new_pos,
                      const double *theta, uint64_t half, int is_neox, const unsigned long long *bad,
                      unsigned long long *report)
{
    if (positions_bad(bad, report, old_pos, new_pos, tokens)) return;
    const uint64_t n = tokens * k.heads * half;
    for (uint64_t idx = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t t, h, i;
        rope_split(idx, k.heads, half, &t, &h, &i);
        float c, s;
        rope_sincos((double)(new_pos[t] - old_pos[t]) * theta[i], &c, &s);
        rope_rotate(&k, t, h, i, half, is_neox, c, s);
    }
}

static __global__ void __launch_bounds__(ROPE_THREADS)
    rope_table_kernel(void *table, int dtype, uint64_t rows, const double *theta, uint64_t half)
{
    const uint64_t n = rows * half;
    for (uint64_t idx = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t p, i;
        kvc_divmod(idx, half, &p, &i);
        float c, s;
        rope_sincos((double)p * theta[i], &c, &s);
        rope_store(table, dtype, p * 2 * half + i, c);
        rope_store(table, dtype, p * 2 * half + half + i, s);
    }
}

static rope_keys_t keys_of(const kvc_rope_keys_t *k)
{
    rope_keys_t r;
    r.data = k->data;
    r.dtype = (int)k->dtype;
    r.heads = k->num_heads;
    r.head_stride = k->head_stride;
    r.token_stride = k->token_stride;
    return r;
}

/* The staging slot: [check word][old positions, new positions] (n each; 0 for device-resident
 * positions or none) then theta_i = base^(-2i/rot_dim) for i < half (when base > 0), as the CPU
 * backend computes them. */
typedef struct rope_stage {
    gpu_stage_t s;
    const int64_t *old_pos, *new_pos; /* what the kernels read */
    const double *theta;
    const unsigned long long *bad; /* NULL: host positions */
    unsigned long long *report;
    int rec; /* check record, -1 with host positions */
} rope_stage_t;

static kvc_status_t stage_inputs(kvc_backend_ctx_t *b, rope_stage_t *r, const char *op, const int64_t *old_pos,
                                 const int64_t *new_pos, size_t n, int on_device, int64_t limit, size_t rot_dim,
                                 double base, gpuStream_t stream)
{
    const size_t half = rot_dim / 2, staged = on_device ? 0 : n, theta_at = 8 + 16 * staged;
    const size_t bytes = theta_at + (base > 0 ? 8 * half : 0);
    r->rec = -1;
    r->bad = NULL;
    r->report = NULL;
    r->s.slot = NULL; /* set once the slot is held */
    kvc_status_t st = kvc_gpu_stage_begin(b, bytes, &r->s);
    if (st != KVC_OK) return st;
    *(unsigned long long *)r->s.host = ~0ull;
    if (staged) {
        memcpy(r->s.host + 8, old_pos, 8 * n);
        memcpy(r->s.host + 8 + 8 * n, new_pos, 8 * n);
    }
    if (base > 0) {
        double *theta = (double *)(r->s.host + theta_at);
        for (size_t i = 0; i < half; i++) theta[i] = pow(base, -(double)(2 * i) / (double)rot_dim);
    }
    r->old_pos = (const int64_t *)(r->s.dev + 8);
    r->new_pos = r->old_pos + n;
    r->theta = (const double *)(r->s.dev + theta_at);
    if (on_device) {
        void *o = NULL, *w = NULL;
        st = kvc_gpu_require_device_ptr(b, old_pos, op, "old_positions", -1, &o);
        if (st == KVC_OK) st = kvc_gpu_require_device_ptr(b, new_pos, op, "new_positions", -1, &w);
        if (st == KVC_OK) st = kvc_gpu_check_acquire(b, stream, op, &r->rec, &r->report);
        r->old_pos = (const int64_t *)o;
        r->new_pos = (const int64_t *)w;
    }
    if (st == KVC_OK) st = kvc_gpu_stage_upload(b, &r->s, bytes, stream);
    if (st == KVC_OK && on_device) {
        r->bad = (const unsigned long long *)r->s.dev;
        gpuLaunch(position_check_kernel, kvc_gpu_grid(b, 2 * (uint64_t)n, ROPE_THREADS), ROPE_THREADS, stream)(
            r->old_pos, r->new_pos, (int64_t)n, limit, (unsigned long long *)r->s.dev);
        st = kvc_gpu_launch_status(b, "position check");
    }
    return st;
}

/* After the kernel: queue the check record (if any) and release the slot. */
static kvc_status_t stage_finish(kvc_backend_ctx_t *b, rope_stage_t *r, int64_t n, int64_t limit, gpuStream_t stream,
                                 kvc_status_t st)
{
    if (!r->s.slot) return st;
    if (r->rec >= 0) {
        gpu_check_t what = {};
        what.what = "old_positions";
        what.what2 = "new_positions";
        what.split = n;
        what.limit = limit;
        st = kvc_gpu_check_queue(b, r->rec, stream, st, &what);
    }
    return kvc_gpu_stage_end(b, &r->s, stream, st);
}

kvc_status_t kvc_gpu_rope_k_fused(kvc_backend_ctx_t *b, const struct kvc_rope_args *a)
{
    const size_t n = a->keys.num_tokens, half = a->table.rot_dim / 2;
    if (!n || !half) return KVC_OK;
    const gpuStream_t stream = (gpuStream_t)a->stream;
    rope_stage_t r;
    kvc_status_t st = stage_inputs(b, &r, "rope_k_fused", a->old_positions, a->new_positions, n,
                                   a->positions_on_device, a->position_limit, a->table.rot_dim, 0, stream);
    if (st == KVC_OK) {
        const unsigned grid = kvc_gpu_grid(b, (uint64_t)n * a->keys.num_heads * half, ROPE_THREADS);
        gpuLaunch(rope_fused_kernel, grid, ROPE_THREADS, stream)(keys_of(&a->keys), n, r.old_pos, r.new_pos, a->table.data,
                                                                 (int)a->table.dtype, a->table.rot_dim, a->is_neox,
                                                                 r.bad, r.report);
        st = kvc_gpu_launch_status(b, "rope_k_fused");
    }
    return stage_finish(b, &r, (int64_t)n, a->position_limit, stream, st);
}

kvc_status_t kvc_gpu_rope_k_delta(kvc_backend_ctx_t *b, const struct kvc_rope_delta_args *a)
{
    const size_t n = a->keys.num_tokens, half = a->rot_dim / 2;
    if (!n || !half) return KVC_OK;
    const gpuStream_t stream = (gpuStream_t)a->stream;
    rope_stage_t r;
    kvc_status_t st = stage_inputs(b, &r, "rope_k_delta", a->old_positions, a->new_positions, n,
                                   a->positions_on_device, a->position_limit, a->rot_dim, a->base, stream);
    if (st == KVC_OK) {
        const unsigned grid = kvc_gpu_grid(b, (uint64_t)n * a->keys.num_heads * half, ROPE_THREADS);
        gpuLaunch(rope_delta_kernel, grid, ROPE_THREADS, stream)(keys_of(&a->keys), n, r.old_pos, r.new_pos, r.theta,
                                                                 half, a->is_neox, r.bad, r.report);
        st = kvc_gpu_launch_status(b, "rope_k_delta");
    }
    return stage_finish(b, &r, (int64_t)n, a->position_limit, stream, st);
}

kvc_status_t kvc_gpu_rope_cache_build(kvc_backend_ctx_t *b, const struct kvc_rope_cache_args *a)
{
    const size_t rows = a->table.max_position, half = a->table.rot_dim / 2;
    if (!rows || !half) return KVC_OK;
    const gpuStream_t stream = (gpuStream_t)a->stream;
    rope_stage_t r;
    kvc_status_t st = stage_inputs(b, &r, "rope_cache_build", NULL, NULL, 0, 0, 0, a->table.rot_dim, a->base, stream);
    if (st == KVC_OK) {
        gpuLaunch(rope_table_kernel, kvc_gpu_grid(b, (uint64_t)rows * half, ROPE_THREADS), ROPE_THREADS, stream)(
            a->table.data, (int)a->table.dtype, rows, r.theta, half);
        st = kvc_gpu_launch_status(b, "rope_cache_build");
    }
    return stage_finish(b, &r, 0, 0, stream, st);
}
