/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore: KV-cache compute kernels for LLM serving (CPU SIMD built in; CUDA and HIP modules).
 * Umbrella header: include this one; the topic headers live in kvcore/. Each states what may be
 * called concurrently; the common rule is in kvcore/context.h. The backend ABI
 * (kvcore/backend.h) is not included: only backend modules need it. */
#ifndef KVCORE_H
#define KVCORE_H

#include <kvcore/export.h>
#include <kvcore/version.h>
#include <kvcore/status.h>
#include <kvcore/context.h>
#include <kvcore/topology.h>
#include <kvcore/types.h>
#include <kvcore/io.h>
#include <kvcore/rope.h>
#include <kvcore/recorder.h>
#include <kvcore/memory.h>
#include <kvcore/transfer.h>
#include <kvcore/cachegen.h>
#include <kvcore/codec.h>
#include <kvcore/plan.h>

#endif
