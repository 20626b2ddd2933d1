/* SPDX-License-Identifier: BSD-3-Clause */
/* Copies (memory.h): LMCache's region-split async copy (docs/LMCACHE.md) and batched copies, queued on
 * the caller's stream. */
#include "gpu_backend.h"

#include <kvcore/memory.h>

/* One async copy per piece: a piece never crosses a host_alignment boundary of the host buffer's
 * offset space (one registration of a pool registered in chunks). The runtime infers the
 * direction from the addresses (UVA), so the H2D / D2H flag only names the host side. */
kvc_status_t kvc_gpu_memcpy_split(kvc_backend_ctx_t *b, const struct kvc_copy_split *a)
{
    kvc_status_t st = kvc_gpu_activate(b);
    for (size_t off = 0; off < a->nbytes && st == KVC_OK;) {
        const size_t n = kvc_copy_split_piece(a, off);
        st = KVC_GPU_CALL(b,
                          gpuMemcpyAsync((char *)a->dst + off, (const char *)a->src + off, n, gpuMemcpyDefault,
                                         (gpuStream_t)a->stream),
                          1);
        off += n;
    }
    return st;
}

/* The core rejects overlap across entries; within one entry src and dst may overlap (memmove),
 * which an async copy does not allow: such an entry goes through a staging slot's device buffer. */
kvc_status_t kvc_gpu_batched_memcpy(kvc_backend_ctx_t *b, const struct kvc_batched_copy *a)
{
    kvc_status_t st = kvc_gpu_activate(b);
    const gpuStream_t stream = (gpuStream_t)a->stream;
    for (size_t i = 0; i < a->count && st == KVC_OK; i++) {
        const size_t n = a->sizes[i];
        if (!n) continue;
        char *d = (char *)a->dsts[i];
        const char *s = (const char *)a->srcs[i];
        if (d < s + n && s < d + n) {
            gpu_stage_t tmp;
            st = kvc_gpu_stage_begin(b, n, &tmp);
            if (st != KVC_OK) break;
            st = KVC_GPU_CALL(b, gpuMemcpyAsync(tmp.dev, s, n, gpuMemcpyDefault, stream), 1);
            if (st == KVC_OK) st = KVC_GPU_CALL(b, gpuMemcpyAsync(d, tmp.dev, n, gpuMemcpyDefault, stream), 1);
            st = kvc_gpu_stage_end(b, &tmp, stream, st);
        } else {
            st = KVC_GPU_CALL(b, gpuMemcpyAsync(d, s, n, gpuMemcpyDefault, stream), 1);
        }
    }
    return st;
}
