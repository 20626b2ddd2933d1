/* RoPE re-rotation of stored keys (rope.h, SPEC §5) on the GPU.
 * One thread per (token, head, pair), grid-stride over the flattened index (nothing depends on
 * the head count or the warp width). Math in fp32 with one rounding to the key dtype at the end,
 * the operations of the CPU backend's scalar tier in the same order (none contracted); angles
 * p*theta_i are reduced modulo 2*pi in double as on the CPU, then sincosf (the CPU uses SLEEF's
 * 1-ulp sincosf), so results agree with the CPU backend within a few ulp, not bit for bit.
 * Positions (host memory: the core has read them) and the frequencies theta_i (computed on the
 * host exactly as the CPU backend does) are staged to the device; calls are asynchronous on the
 * given stream. */
#include "gpu_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore/rope.h>

#include "common/half.h"

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

/* cos / sin of a*theta: a - 2*pi*round(a / 2*pi) in double (Cody-Waite, as kvc_rope_reduce), then
 * sincosf of its fp32 rounding with a first-order correction for that rounding. */
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

static __global__ void __launch_bounds__(ROPE_THREADS)
    rope_fused_kernel(rope_keys_t k, uint64_t tokens, const int64_t *old_pos, const int64_t *new_pos, const void *table,
                      int table_dtype, uint64_t rot_dim, int is_neox)
{
    const uint64_t half = rot_dim / 2, n = tokens * k.heads * half;
    for (uint64_t idx = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t t, h, i;
        rope_split(idx, k.heads, half, &t, &h, &i);
        const uint64_t ro = (uint64_t)old_pos[t] * rot_dim, rn = (uint64_t)new_pos[t] * rot_dim;
        const float co = rope_load(table, table_dtype, ro + i), so = rope_load(table, table_dtype, ro + half + i);
        const float cn = rope_load(table, table_dtype, rn + i), sn = rope_load(table, table_dtype, rn + half + i);
        const float c = kvc_fadd(kvc_fmul(cn, co), kvc_fmul(sn, so));
        const float s = kvc_fsub(kvc_fmul(sn, co), kvc_fmul(cn, so));
        rope_rotate(&k, t, h, i, half, is_neox, c, s);
    }
}

static __global__ void __launch_bounds__(ROPE_THREADS)
    rope_delta_kernel(rope_keys_t k, uint64_t tokens, const int64_t *old_pos, const int64_t *new_pos,
                      const double *theta, uint64_t half, int is_neox)
{
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

/* Stage [old positions, new positions] (n each, may be 0) and theta_i = base^(-2i/rot_dim) for
 * i < half (when base > 0), as the CPU backend computes them. */
static kvc_status_t stage_inputs(kvc_backend_ctx_t *b, gpu_stage_t *s, const int64_t *old_pos, const int64_t *new_pos,
                                 size_t n, size_t rot_dim, double base, gpuStream_t stream)
{
    const size_t half = rot_dim / 2, bytes = 16 * n + (base > 0 ? 8 * half : 0);
    kvc_status_t st = kvc_gpu_stage_begin(b, bytes, s);
    if (st != KVC_OK) return st;
    if (n) {
        memcpy(s->host, old_pos, 8 * n);
        memcpy(s->host + 8 * n, new_pos, 8 * n);
    }
    if (base > 0) {
        double *theta = (double *)(s->host + 16 * n);
        for (size_t i = 0; i < half; i++) theta[i] = pow(base, -(double)(2 * i) / (double)rot_dim);
    }
    st = kvc_gpu_stage_upload(b, s, bytes, stream);
    return st == KVC_OK ? st : kvc_gpu_stage_end(b, s, stream, st);
}

kvc_status_t kvc_gpu_rope_k_fused(kvc_backend_ctx_t *b, const struct kvc_rope_args *a)
{
    const size_t n = a->keys.num_tokens, half = a->table.rot_dim / 2;
    if (!n || !half) return KVC_OK;
    const gpuStream_t stream = (gpuStream_t)a->stream;
    gpu_stage_t s;
    kvc_status_t st = stage_inputs(b, &s, a->old_positions, a->new_positions, n, a->table.rot_dim, 0, stream);
    if (st != KVC_OK) return st;
    const int64_t *dpos = (const int64_t *)s.dev;
    rope_fused_kernel<<<kvc_gpu_grid(b, (uint64_t)n * a->keys.num_heads * half, ROPE_THREADS), ROPE_THREADS, 0,
                        stream>>>(keys_of(&a->keys), n, dpos, dpos + n, a->table.data, (int)a->table.dtype,
                                  a->table.rot_dim, a->is_neox);
    st = kvc_gpu_launch_status(b, "rope_k_fused");
    return kvc_gpu_stage_end(b, &s, stream, st);
}

kvc_status_t kvc_gpu_rope_k_delta(kvc_backend_ctx_t *b, const struct kvc_rope_delta_args *a)
{
    const size_t n = a->keys.num_tokens, half = a->rot_dim / 2;
    if (!n || !half) return KVC_OK;
    const gpuStream_t stream = (gpuStream_t)a->stream;
    gpu_stage_t s;
    kvc_status_t st = stage_inputs(b, &s, a->old_positions, a->new_positions, n, a->rot_dim, a->base, stream);
    if (st != KVC_OK) return st;
    const int64_t *dpos = (const int64_t *)s.dev;
    rope_delta_kernel<<<kvc_gpu_grid(b, (uint64_t)n * a->keys.num_heads * half, ROPE_THREADS), ROPE_THREADS, 0,
                        stream>>>(keys_of(&a->keys), n, dpos, dpos + n, (const double *)(s.dev + 16 * n), half,
                                  a->is_neox);
    st = kvc_gpu_launch_status(b, "rope_k_delta");
    return kvc_gpu_stage_end(b, &s, stream, st);
}

kvc_status_t kvc_gpu_rope_cache_build(kvc_backend_ctx_t *b, const struct kvc_rope_cache_args *a)
{
    const size_t rows = a->table.max_position, half = a->table.rot_dim / 2;
    if (!rows || !half) return KVC_OK;
    const gpuStream_t stream = (gpuStream_t)a->stream;
    gpu_stage_t s;
    kvc_status_t st = stage_inputs(b, &s, NULL, NULL, 0, a->table.rot_dim, a->base, stream);
    if (st != KVC_OK) return st;
    rope_table_kernel<<<kvc_gpu_grid(b, (uint64_t)rows * half, ROPE_THREADS), ROPE_THREADS, 0, stream>>>(
        a->table.data, (int)a->table.dtype, rows, (const double *)s.dev, half);
    st = kvc_gpu_launch_status(b, "rope_cache_build");
    return kvc_gpu_stage_end(b, &s, stream, st);
}
