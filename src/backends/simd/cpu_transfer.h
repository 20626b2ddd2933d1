/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU kernels of the KV transfer plans (include/kvcore/backend.h). */
#ifndef KVC_CPU_TRANSFER_H
#define KVC_CPU_TRANSFER_H

#include <kvcore/backend.h>

kvc_status_t kvc_cpu_transfer_tokens(kvc_backend_ctx_t *b, const struct kvc_token_plan *p);
kvc_status_t kvc_cpu_transfer_blocks(kvc_backend_ctx_t *b, const struct kvc_block_plan *p);
kvc_status_t kvc_cpu_transfer_tokens_parts(kvc_backend_ctx_t *b, const struct kvc_token_plan *p,
                                           const struct kvc_row_parts *rp);
kvc_status_t kvc_cpu_transfer_blocks_parts(kvc_backend_ctx_t *b, const struct kvc_block_plan *p,
                                           const struct kvc_row_parts *rp);
#ifdef KVC_HAVE_X86_SIMD
/* cpu_transfer_avx2.c */
kvc_status_t kvc_cpu_transfer_tokens_avx2(kvc_backend_ctx_t *b, const struct kvc_token_plan *p);
kvc_status_t kvc_cpu_transfer_blocks_avx2(kvc_backend_ctx_t *b, const struct kvc_block_plan *p);
kvc_status_t kvc_cpu_transfer_tokens_parts_avx2(kvc_backend_ctx_t *b, const struct kvc_token_plan *p,
                                                const struct kvc_row_parts *rp);
kvc_status_t kvc_cpu_transfer_blocks_parts_avx2(kvc_backend_ctx_t *b, const struct kvc_block_plan *p,
                                                const struct kvc_row_parts *rp);
#endif

#endif
