/* CPU kernels of the KV transfer plans (include/kvcore/transfer.h, "for backends"). */
#ifndef KVC_CPU_TRANSFER_H
#define KVC_CPU_TRANSFER_H

#include <kvcore/backend.h>
#include <kvcore/transfer.h>

kvc_status_t kvc_cpu_transfer_tokens(kvc_backend_ctx_t *b, const struct kvc_token_plan *p);
kvc_status_t kvc_cpu_transfer_blocks(kvc_backend_ctx_t *b, const struct kvc_block_plan *p);

#endif
