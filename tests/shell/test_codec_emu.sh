#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The codec suite (tests/unit/test_codec) on a GPU context: its contexts come from kvc_test_cpu_context,
# which KVC_TEST_BACKEND=cuda turns into a context on the emulated device (tests/modules/gpu_emu.c,
# loaded as the "cuda" module). Host data runs on that context's CPU ops, so every result must be
# the CPU backend's (docs/ARCHITECTURE.md, "Dispatch by residence"). TAP on stdout.
set -u
build="${KVC_TEST_BUILDDIR:-.}"
# KVC_EMU_MODULE: another module file in its place (tests/shell/test_codec_host.sh: tests/modules/gpu_host.so)
emu="${KVC_EMU_MODULE:-$build/tests/modules/.libs/gpu_emu.so}"
[ -f "$emu" ] || { echo "1..0 # SKIP $emu not built"; exit 0; }
mods=$(mktemp -d "${TMPDIR:-/tmp}/kvc-codec-emu.XXXXXX") || exit 99
trap 'rm -rf "$mods"' EXIT
ln -s "$(cd "$(dirname "$emu")" && pwd)/$(basename "$emu")" "$mods/kvcore_cuda.so"
KVCORE_MODULE_PATH=$mods KVC_TEST_BACKEND=cuda sh "$(dirname "$0")/../harness/criterion_tap.sh" "$build/tests/unit/test_codec"
