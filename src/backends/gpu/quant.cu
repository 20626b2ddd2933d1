/* SPDX-License-Identifier: BSD-3-Clause */
/* CacheGen quantise / dequantise on the GPU (cachegen.h, docs/LMCACHE.md).
 * One 256-thread block per (layer, token) row, grid-stride over rows: the row's scale is a
 * shared-memory tree reduction of max |x| (exact, so independent of the order), then the threads
 * stride over the row's channels. Per-element arithmetic is gpu_quant.h, shared with the tests.
 * The per-layer M = bins/2 - 1 comes from the host (bins is host memory) through a staging slot.
 * Dequantise first checks scales and symbols on the device and fails like the CPU backend before
 * writing anything; both ops run on the default stream (no stream argument). */
#include <stdio.h>
#include <string.h>

#include <kvcore/cachegen.h>

#include "gpu_backend.h"
#include "gpu_quant.h"

#define Q_THREADS 256
#define Q_NONE (~0ull)

static __device__ __forceinline__ size_t dtype_bytes(int dtype) { return dtype == KVC_DTYPE_F32 ? 4 : 2; }

static __global__ void __launch_bounds__(Q_THREADS)
    quantise_kernel(int dtype, const void *values, uint8_t *symbols, float *scales, const uint32_t *m_of_layer,
                    uint64_t rows, uint64_t T, uint64_t C)
{
    __shared__ float red[Q_THREADS];
    const unsigned tid = threadIdx.x;
    for (uint64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const char *x = (const char *)values + row * C * dtype_bytes(dtype);
        float mx = 0.0f;
        for (uint64_t i = tid; i < C; i += Q_THREADS) {
            const float v = kvc_gq_abs_finite(kvc_gq_load(dtype, x, i));
            mx = v > mx ? v : mx;
        }
        __syncthreads(); /* red[] of the previous row is no longer read */
        red[tid] = mx;
        __syncthreads();
        for (unsigned s = Q_THREADS / 2; s; s >>= 1) {
            if (tid < s) red[tid] = red[tid + s] > red[tid] ? red[tid + s] : red[tid];
            __syncthreads();
        }
        const float scale = red[0];
        const unsigned m = m_of_layer[row / T];
        const float f = kvc_gq_prescale(scale), inv = kvc_gq_inv(scale, m);
        uint8_t *q = symbols + row * C;
        for (uint64_t i = tid; i < C; i += Q_THREADS) q[i] = kvc_gq_quantise(kvc_gq_load(dtype, x, i), f, inv, m);
        if (tid == 0) scales[row] = scale;
    }
}

/* First bad scale (row) and first symbol above 2M (flat index). */
static __global__ void __launch_bounds__(Q_THREADS)
    dequant_check_kernel(const uint8_t *symbols, const float *scales, const uint32_t *m_of_layer, uint64_t rows,
                         uint64_t T, uint64_t C, unsigned long long *bad)
{
    for (uint64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float sc = scales[row];
        if (threadIdx.x == 0 && !(sc >= 0.0f && sc <= 0x1.fffffep127f)) atomicMin(&bad[0], (unsigned long long)row);
        const unsigned top = 2 * m_of_layer[row / T];
        const uint8_t *q = symbols + row * C;
        for (uint64_t i = threadIdx.x; i < C; i += Q_THREADS)
            if (q[i] > top) {
                atomicMin(&bad[1], (unsigned long long)(row * C + i));
                break;
            }
    }
}

static __global__ void __launch_bounds__(Q_THREADS)
    dequantise_kernel(int dtype, void *values, const uint8_t *symbols, const float *scales, const uint32_t *m_of_layer,
                      uint64_t rows, uint64_t T, uint64_t C)
{
    for (uint64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float scale = scales[row];
        const unsigned m = m_of_layer[row / T];
        const float step = kvc_gq_step(scale, m), unscale = kvc_gq_unscale(scale);
        char *x = (char *)values + row * C * dtype_bytes(dtype);
        const uint8_t *q = symbols + row * C;
        for (uint64_t i = threadIdx.x; i < C; i += Q_THREADS)
            kvc_gq_store(dtype, x, i, kvc_gq_dequantise(q[i], step, unscale, m));
    }
}

/* Stage M per layer (then, for dequantise, two "first bad" slots after it). */
static kvc_status_t stage_m(kvc_backend_ctx_t *b, const struct kvc_quant_args *a, int with_checks, gpu_stage_t *s,
                            size_t *check_off)
{
    const size_t mbytes = 4 * a->layers, off = (mbytes + 7) & ~(size_t)7;
    kvc_status_t st = kvc_gpu_stage_begin(b, off + 16, s);
    if (st != KVC_OK) return st;
    uint32_t *m = (uint32_t *)s->host;
    for (size_t l = 0; l < a->layers; l++) m[l] = a->bins[l] / 2 - 1;
    unsigned long long *bad = (unsigned long long *)(s->host + off);
    bad[0] = bad[1] = Q_NONE;
    *check_off = off;
    st = kvc_gpu_stage_upload(b, s, with_checks ? off + 16 : mbytes, 0);
    return st == KVC_OK ? st : kvc_gpu_stage_end(b, s, 0, st);
}

static kvc_status_t quantise_on_device(kvc_backend_ctx_t *b, const struct kvc_quant_args *a)
{
    const uint64_t rows = (uint64_t)a->layers * a->tokens;
    if (rows == 0) return KVC_OK;
    gpu_stage_t s;
    size_t off;
    kvc_status_t st = stage_m(b, a, 0, &s, &off);
    if (st != KVC_OK) return st;
    gpuLaunch(quantise_kernel, kvc_gpu_grid(b, rows, 1), Q_THREADS, 0)((int)a->dtype, a->values, a->symbols, a->scales,
                                                             (const uint32_t *)s.dev, rows, a->tokens, a->channels);
    st = kvc_gpu_launch_status(b, "quantise");
    return kvc_gpu_stage_end(b, &s, 0, st);
}

static kvc_status_t dequantise_on_device(kvc_backend_ctx_t *b, const struct kvc_quant_args *a)
{
    const uint64_t rows = (uint64_t)a->layers * a->tokens, T = a->tokens, C = a->channels;
    if (rows == 0) return KVC_OK;
    gpu_stage_t s;
    size_t off;
    kvc_status_t st = stage_m(b, a, 1, &s, &off);
    if (st != KVC_OK) return st;
    const uint32_t *dm = (const uint32_t *)s.dev;
    gpuLaunch(dequant_check_kernel, kvc_gpu_grid(b, rows, 1), Q_THREADS, 0)(a->symbols, a->scales, dm, rows, T, C,
                                                                  (unsigned long long *)(s.dev + off));
    st = kvc_gpu_launch_status(b, "dequantise check");
    if (st == KVC_OK) st = KVC_GPU_CALL(b, gpuMemcpy(s.host + off, s.dev + off, 16, gpuMemcpyDeviceToHost), 1);
    const unsigned long long *bad = (const unsigned long long *)(s.host + off);
    if (st == KVC_OK && bad[0] != Q_NONE) {
        const size_t row = (size_t)bad[0];
        float v = 0.0f;
        st = KVC_GPU_CALL(b, gpuMemcpy(&v, a->scales + row, 4, gpuMemcpyDeviceToHost), 1);
        if (st == KVC_OK)
            st = b->svc->set_error(KVC_ERR_INVALID_ARG,
                                   "dequantise: scales[%zu] (layer %zu, token %zu) = %g is not a finite value >= 0", row,
                                   row / T, row % T, (double)v);
    }
    if (st == KVC_OK && bad[1] != Q_NONE) {
        const size_t i = (size_t)bad[1], l = i / C / T;
        uint8_t v = 0;
        st = KVC_GPU_CALL(b, gpuMemcpy(&v, a->symbols + i, 1, gpuMemcpyDeviceToHost), 1);
        if (st == KVC_OK)
            st = b->svc->set_error(KVC_ERR_OUT_OF_RANGE,
                                   "dequantise: symbols[%zu] (layer %zu, token %zu, channel %zu) = %u is above 2M = %u "
                                   "for %u bins",
                                   i, l, i / C % T, i % C, v, 2 * (a->bins[l] / 2 - 1), a->bins[l]);
    }
    if (st == KVC_OK) {
        gpuLaunch(dequantise_kernel, kvc_gpu_grid(b, rows, 1), Q_THREADS, 0)(
            (int)a->dtype, a->values, a->symbols, a->scales, dm,
                                                                   rows, T, C);
        st = kvc_gpu_launch_status(b, "dequantise");
    }
    return kvc_gpu_stage_end(b, &s, 0, st);
}

/* The public slots: every data pointer (bins is host memory) checked and translated as transfer.cu does (device and
 * managed memory as is, registered host memory through its device address, pageable host memory
 * refused with KVC_ERR_INVALID_ARG naming it). The core never sends pageable host memory here (it
 * routes host-only calls to its CPU ops and refuses device + pageable mixes); the check keeps the
 * module safe on its own, as transfer.cu is. */

kvc_status_t kvc_gpu_quantise(kvc_backend_ctx_t *b, const struct kvc_quant_args *a_in)
{
    struct kvc_quant_args a = *a_in;
    KVC_GPU_REACH(b, "quantise", a, values);
    KVC_GPU_REACH(b, "quantise", a, symbols);
    KVC_GPU_REACH(b, "quantise", a, scales);
    return quantise_on_device(b, &a);
}

kvc_status_t kvc_gpu_dequantise(kvc_backend_ctx_t *b, const struct kvc_quant_args *a_in)
{
    struct kvc_quant_args a = *a_in;
    KVC_GPU_REACH(b, "dequantise", a, values);
    KVC_GPU_REACH(b, "dequantise", a, symbols);
    KVC_GPU_REACH(b, "dequantise", a, scales);
    return dequantise_on_device(b, &a);
}
