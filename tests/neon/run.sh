#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The NEON tier against the scalar one on an x86 machine, cross-compiled for AArch64 and run under
# qemu-aarch64: RoPE bit for bit (cpu_rope.c, its tier slots, cpu_rope_neon.c and
# neon_rope_check.c), and the rANS coder byte for byte (cpu_rans.c, cpu_rans_neon.c and
# neon_rans_check.c: encoder bytes, decoder symbols and statuses on intact and damaged streams), and
# the lane-parallel arithmetic coder against the reference coder (cpu_cachegen*.c,
# bench/ref_coder.c and neon_cachegen_check.c: the divide, stream bytes and lengths at every
# capacity, decoded symbols of valid and damaged streams, per-stream and packed).
# Needs: gcc-aarch64-linux-gnu qemu-user (Debian/Ubuntu packages). Not part of `make check` or CI.
# Usage: sh tests/neon/run.sh   (from any directory; CC, QEMU and OPT (default -O2) may be overridden)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
CC=${CC:-aarch64-linux-gnu-gcc}
OPT=${OPT:--O2}
QEMU=${QEMU:-qemu-aarch64}
out=${TMPDIR:-/tmp}/kvc_neon_rope_check.$$
rans=${TMPDIR:-/tmp}/kvc_neon_rans_check.$$
cg=${TMPDIR:-/tmp}/kvc_neon_cachegen_check.$$
trap 'rm -f "$out" "$rans" "$cg"' EXIT INT TERM
# -ffp-contract=off as in Makefile.am (the kernels write their FMAs explicitly); no OpenMP, so its
# pragmas are ignored (-Wno-unknown-pragmas). The shim dir stands in for config.h and sleef.h only.
"$CC" -std=gnu11 $OPT -static -ffp-contract=off -Wall -Wextra -Werror -Wno-unknown-pragmas \
    -I"$here/shim" -I"$top/src/backends/simd" -I"$top/src" -I"$top/src/core" -I"$top/include" \
    "$here/neon_rope_check.c" "$top/src/backends/simd/cpu_rope.c" "$top/src/backends/simd/cpu_rope_neon.c" \
    -lm -o "$out"
"$QEMU" "$out"
"$CC" -std=gnu11 $OPT -static -ffp-contract=off -Wall -Wextra -Werror -Wno-unknown-pragmas \
    -I"$here/shim" -I"$top/src/backends/simd" -I"$top/src" -I"$top/src/core" -I"$top/include" \
    "$here/neon_rans_check.c" "$top/src/backends/simd/cpu_rans.c" "$top/src/backends/simd/cpu_rans_neon.c" \
    -lpthread -o "$rans"
"$QEMU" "$rans"
# cpu_cachegen_quant.c's row counts are used only in OpenMP clauses: -Wno-unused-variable.
"$CC" -std=gnu11 $OPT -static -ffp-contract=off -Wall -Wextra -Werror -Wno-unknown-pragmas -Wno-unused-variable \
    -I"$here/shim" -I"$top/src/backends/simd" -I"$top/src" -I"$top/src/core" -I"$top/include" \
    "$here/neon_cachegen_check.c" "$top/src/backends/simd/cpu_cachegen.c" "$top/src/backends/simd/cpu_cachegen_quant.c" \
    "$top/src/backends/simd/cpu_cachegen_neon.c" "$top/bench/ref_coder.c" -lm -o "$cg"
"$QEMU" "$cg"
