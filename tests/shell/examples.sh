#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs the programs of examples/ (built by `make check`); each checks its own result and exits 0
# only when it holds. TAP on stdout.
set -u
b="${KVC_TEST_BUILDDIR:-.}/examples"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-examples.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
n=0
fail=0
run() {
    n=$((n + 1)); desc=$1; shift
    if "$@" >"$tmp/out" 2>&1; then echo "ok $n - $desc"; else echo "not ok $n - $desc"; fail=1; fi
    sed 's/^/# /' "$tmp/out"
}
echo "1..4"
run "examples/transfer: pool -> pinned NUMA chunk -> pool" "$b/transfer"
run "examples/codec_file: .kvc file round trip within the error bound" "$b/codec_file" "$tmp/example.kvc"
run "examples/rope: re-rotation matches the direct rotation" "$b/rope"
run "examples/rans: rANS streams decode to their symbols; sizes next to the arithmetic coder's" "$b/rans"
exit $fail
