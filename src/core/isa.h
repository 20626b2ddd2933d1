/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU SIMD tier, detected once (CPUID + XCR0) and capped by KVCORE_ISA. */
#ifndef KVC_CORE_ISA_H
#define KVC_CORE_ISA_H

#include <kvcore/backend.h> /* kvc_isa_t */

/* Best tier the CPU and OS support (ignores KVCORE_ISA). */
kvc_isa_t kvc_isa_detect(void);
/* Tier to use: detected, capped by KVCORE_ISA. Called once per context (so tests can run every
 * tier in one process by changing KVCORE_ISA between contexts). */
kvc_isa_t kvc_isa_select(void);
const char *kvc_isa_name(kvc_isa_t isa);
/* Parse a KVCORE_ISA value; returns -1 for an unknown name. "best" gives the detected tier. */
int kvc_isa_parse(const char *name);

#endif
