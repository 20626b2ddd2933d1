/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU KV transfers: the copy engine (cpu_transfer_engine.h) at the baseline ISA, and the dispatch
 * to the avx2 tier's instance (cpu_transfer_avx2.c) on the context's kvc_isa_t. */
#include "config.h"

#define XFER_FN(name) cpu_transfer_##name##_base
#include "cpu_transfer_engine.h"

kvc_status_t kvc_cpu_transfer_tokens(kvc_backend_ctx_t *b, const struct kvc_token_plan *p)
{
#ifdef KVC_HAVE_X86_SIMD
    if (b->isa >= KVC_ISA_AVX2) return kvc_cpu_transfer_tokens_avx2(b, p);
#endif
    return cpu_transfer_tokens_base(b, p);
}

kvc_status_t kvc_cpu_transfer_blocks(kvc_backend_ctx_t *b, const struct kvc_block_plan *p)
{
#ifdef KVC_HAVE_X86_SIMD
    if (b->isa >= KVC_ISA_AVX2) return kvc_cpu_transfer_blocks_avx2(b, p);
#endif
    return cpu_transfer_blocks_base(b, p);
}

kvc_status_t kvc_cpu_transfer_tokens_parts(kvc_backend_ctx_t *b, const struct kvc_token_plan *p,
                                           const struct kvc_row_parts *rp)
{
#ifdef KVC_HAVE_X86_SIMD
    if (b->isa >= KVC_ISA_AVX2) return kvc_cpu_transfer_tokens_parts_avx2(b, p, rp);
#endif
    return cpu_transfer_tokens_parts_base(b, p, rp);
}

kvc_status_t kvc_cpu_transfer_blocks_parts(kvc_backend_ctx_t *b, const struct kvc_block_plan *p,
                                           const struct kvc_row_parts *rp)
{
#ifdef KVC_HAVE_X86_SIMD
    if (b->isa >= KVC_ISA_AVX2) return kvc_cpu_transfer_blocks_parts_avx2(b, p, rp);
#endif
    return cpu_transfer_blocks_parts_base(b, p, rp);
}
