#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The "gpu" tests of tests/unit/test_gpu (every GPU op against the CPU backend, byte for byte: transfers
# of every format per token and per block, layer ops, plans, coder, quantiser, RoPE, copies,
# device-resident tables and their deferred errors) on tests/modules/gpu_host.so: the GPU module's
# own source, kernels and glue, compiled for the CPU against tests/modules/gpu_host/gpu_runtime.h.
# TAP on stdout.
set -u
build="${KVC_TEST_BUILDDIR:-.}"
mod="$build/tests/modules/.libs/gpu_host.so"
[ -f "$mod" ] || { echo "1..0 # SKIP $mod not built"; exit 0; }
KVC_TEST_GPU_MODULE="$(cd "$(dirname "$mod")" && pwd)/gpu_host.so" \
    exec sh "$(dirname "$0")/../harness/criterion_tap.sh" "$build/tests/unit/test_gpu" --filter='gpu/*'
