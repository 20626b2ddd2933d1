#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/shell/test_cli.sh again, on a GPU context: the emulated device (tests/modules/gpu_emu.c, whose
# device memory the host cannot dereference and whose ops refuse pageable host memory) loaded as
# the "cuda" module and forced with KVCORE_BACKEND=cuda. encode / decode / inspect / demo must work
# there (host data runs on the CPU ops, docs/ARCHITECTURE.md) and give the CPU backend's bytes.
set -u
build="${KVC_TEST_BUILDDIR:-.}"
src="$(dirname "$0")"
# KVC_EMU_MODULE: another module file in its place (tests/shell/test_cli_host.sh: tests/modules/gpu_host.so)
emu="${KVC_EMU_MODULE:-$build/tests/modules/.libs/gpu_emu.so}"
[ -f "$emu" ] || { echo "1..0 # SKIP $emu not built"; exit 0; }
mods=$(mktemp -d "${TMPDIR:-/tmp}/kvc-cli-emu.XXXXXX") || exit 99
trap 'rm -rf "$mods"' EXIT
ln -s "$(cd "$(dirname "$emu")" && pwd)/$(basename "$emu")" "$mods/kvcore_cuda.so"
data="${KVC_TEST_DATA:-tests/data}/kvdata"
echo "# emulated cuda module: $mods/kvcore_cuda.so"
KVCORE_MODULE_PATH=$mods KVCORE_BACKEND=cuda "$build/kvcore" info --json >"$mods/info.json" 2>&1
if ! grep -q '"selected_backend": "cuda"' "$mods/info.json"; then
    echo "1..1"
    echo "not ok 1 - kvcore info selects the emulated cuda backend"
    sed 's/^/# /' "$mods/info.json"
    exit 1
fi
# the same container bytes as the CPU backend
KVCORE_BACKEND=cpu "$build/kvcore" encode "$data/story_prompt_K.npy" "$data/story_prompt_V.npy" -o "$mods/cpu.kvc" -q ||
    { echo "1..1"; echo "not ok 1 - encode on the CPU backend"; exit 1; }
KVCORE_MODULE_PATH=$mods KVCORE_BACKEND=cuda "$build/kvcore" encode "$data/story_prompt_K.npy" \
    "$data/story_prompt_V.npy" -o "$mods/emu.kvc" -q 2>"$mods/err"
if cmp -s "$mods/cpu.kvc" "$mods/emu.kvc"; then same="ok"; else same="not ok"; fi
KVCORE_MODULE_PATH=$mods KVCORE_BACKEND=cuda sh "$src/test_cli.sh" >"$mods/tap"
rc=$?
# renumber: our check first, then test_cli.sh's
n=$(sed -n 's/^1\.\.//p' "$mods/tap")
echo "1..$((n + 1))"
echo "$same 1 - encode on the emulated cuda backend gives the CPU backend's container bytes"
[ "$same" = ok ] || { sed 's/^/# /' "$mods/err"; rc=1; }
sed -n 's/^\(not ok\|ok\) \([0-9]*\) - \(.*\)$/\1 \2 - emulated cuda: \3/p; /^#/p' "$mods/tap" |
    awk '{ if ($1 == "ok") { $2 = $2 + 1 } else if ($1 == "not") { $3 = $3 + 1 } print }'
exit $rc
