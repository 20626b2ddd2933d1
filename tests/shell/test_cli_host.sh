#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/shell/test_cli_emu.sh on tests/modules/gpu_host.so (the GPU module's own source, kernels and glue,
# built for the CPU against tests/modules/gpu_host/gpu_runtime.h) in place of the emulation module.
build="${KVC_TEST_BUILDDIR:-.}"
KVC_EMU_MODULE="$build/tests/modules/.libs/gpu_host.so" exec sh "$(dirname "$0")/test_cli_emu.sh"
