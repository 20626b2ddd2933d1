/* SPDX-License-Identifier: BSD-3-Clause */
/* The copy engine (cpu_transfer_engine.h) compiled with the avx2 tier's flags: short runs are
 * copied inline with 32-byte moves. */
#include "config.h"

#define XFER_FN(name) kvc_cpu_transfer_##name##_avx2
#include "cpu_transfer_engine.h"
