/* A backend module that runs the GPU kernels' arithmetic on the CPU: the transfer addressing
 * (gpu_transfer.h), the per-stream coder (gpu_coder.h) and the quantiser's per-element code
 * (gpu_quant.h) are the very functions the CUDA/HIP kernels call, compiled here by gcc and driven
 * by plain loops in place of the grid. tests/test_gpu.c loads it as the "cuda" module and runs the
 * GPU comparison suite against it, so CPU-only CI checks that code byte for byte against the CPU
 * backend. What it cannot check: launch shapes, shared-memory staging, atomics, the device-side
 * data checks and the runtime calls (those run only on a real GPU). "Device" memory is host memory. */
#include <stdlib.h>
#include <string.h>

#include <kvcore/backend.h>
#include <kvcore/cachegen.h>
#include <kvcore/transfer.h>

#include "../../src/backends/gpu/gpu_coder.h"
#include "../../src/backends/gpu/gpu_quant.h"
#include "../../src/backends/gpu/gpu_transfer.h"

struct kvc_backend_ctx {
    const kvc_backend_services_t *svc;
};

static kvc_status_t emu_probe(const kvc_backend_services_t *svc, int *n, char *why, size_t len)
{
    (void)svc;
    (void)why;
    (void)len;
    *n = 1;
    return KVC_OK;
}

static kvc_status_t emu_init(const kvc_backend_services_t *svc, int device, kvc_backend_ctx_t **out)
{
    (void)device;
    kvc_backend_ctx_t *b = calloc(1, sizeof(*b));
    if (!b) return KVC_ERR_NO_MEMORY;
    b->svc = svc;
    *out = b;
    return KVC_OK;
}

static void emu_fini(kvc_backend_ctx_t *b) { free(b); }

static kvc_status_t emu_alloc(kvc_backend_ctx_t *b, size_t len, void **out)
{
    (void)b;
    return posix_memalign(out, 256, len) == 0 ? KVC_OK : KVC_ERR_NO_MEMORY;
}

static kvc_status_t emu_free(kvc_backend_ctx_t *b, void *p)
{
    (void)b;
    free(p);
    return KVC_OK;
}

static kvc_status_t emu_memcpy(kvc_backend_ctx_t *b, void *dst, const void *src, size_t n)
{
    (void)b;
    memmove(dst, src, n);
    return KVC_OK;
}

static kvc_status_t emu_sync(kvc_backend_ctx_t *b, kvc_stream_t s)
{
    (void)b;
    (void)s;
    return KVC_OK; /* every op is done when it returns */
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

static kvc_status_t emu_tokens(kvc_backend_ctx_t *b, const struct kvc_token_plan *p)
{
    (void)b;
    if (p->end_token <= p->first_token) return KVC_OK;
    kvc_xfer_args_t a = kvc_xfer_from_plan(p->direction, p->num_layers, p->num_planes, &p->engine, &p->chunk_map,
                                           &p->runs);
    a.ptrs = (char *const *)p->engine.ptrs;
    a.chunk = (char *)p->chunk;
    a.index = p->slots + p->first_token;
    a.first = p->first_token;
    a.count = p->end_token - p->first_token;
    run_plan(&a, NULL, p->runs.run_bytes);
    return KVC_OK;
}

static kvc_status_t emu_blocks(kvc_backend_ctx_t *b, const struct kvc_block_plan *p)
{
    (void)b;
    if (p->end_block <= p->first_block) return KVC_OK;
    kvc_xfer_args_t a = kvc_xfer_from_plan(p->direction, p->num_layers, p->num_planes, &p->engine, &p->chunk_map,
                                           &p->runs);
    a.blocks = 1;
    a.ptrs = (char *const *)p->engine.ptrs;
    a.objects = (char *const *)p->objects;
    a.bpo = p->blocks_per_object;
    a.index = p->block_ids + p->first_block;
    a.first = p->first_block;
    a.count = p->end_block - p->first_block;
    run_plan(&a, p->objects, p->runs.run_bytes);
    return KVC_OK;
}

static kvc_status_t emu_cdf(kvc_backend_ctx_t *b, const struct kvc_cdf_args *a)
{
    (void)b;
    const size_t T = a->tokens, C = a->channels;
    for (size_t k = 0; k < a->layers * C; k++) {
        uint32_t hist[KVC_CG_MAX_BINS] = { 0 };
        for (size_t t = 0; t < T; t++) hist[a->symbols[(k / C * T + t) * C + k % C]]++;
        kvc_cdf_from_hist(hist, 1, a->num_bins, T, NULL, a->cdf + k * (a->num_bins + 1), 1);
    }
    return KVC_OK;
}

static kvc_status_t emu_encode(kvc_backend_ctx_t *b, const struct kvc_encode_args *a)
{
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

static kvc_status_t emu_decode(kvc_backend_ctx_t *b, const struct kvc_decode_args *a)
{
    (void)b;
    decode_all(a->cdf, a->num_bins, a->streams, a->capacity, a->lengths, NULL, a->symbols, a->layers, a->tokens,
               a->channels);
    return KVC_OK;
}

static kvc_status_t emu_decode_packed(kvc_backend_ctx_t *b, const struct kvc_decode_packed_args *a)
{
    (void)b;
    decode_all(a->cdf, a->num_bins, a->bytes, 0, NULL, a->prefsum, a->symbols, a->layers, a->tokens, a->channels);
    return KVC_OK;
}

static size_t dtype_size(kvc_dtype_t dt) { return dt == KVC_DTYPE_F32 ? 4 : 2; }

static kvc_status_t emu_quantise(kvc_backend_ctx_t *b, const struct kvc_quant_args *a)
{
    (void)b;
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

static kvc_status_t emu_dequantise(kvc_backend_ctx_t *b, const struct kvc_quant_args *a)
{
    (void)b;
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

static const kvc_backend_t emu = {
    .abi_version = KVC_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kvc_backend_t),
    .name = "cuda",
    .priority = KVC_BACKEND_PRIORITY_CUDA,
    .probe = emu_probe,
    .init = emu_init,
    .fini = emu_fini,
    .ops = { .device_alloc = emu_alloc,
             .device_free = emu_free,
             .memcpy_sync = emu_memcpy,
             .stream_synchronize = emu_sync,
             .transfer_tokens = emu_tokens,
             .transfer_blocks = emu_blocks,
             .cg_cdf = emu_cdf,
             .cg_encode = emu_encode,
             .cg_decode = emu_decode,
             .cg_decode_packed = emu_decode_packed,
             .quantise = emu_quantise,
             .dequantise = emu_dequantise },
};

KVC_API const kvc_backend_t *kvc_backend_entry(void) { return &emu; }
