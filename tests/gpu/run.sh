#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# GPU check in one go (docs/GPU.md), for a machine with an NVIDIA GPU (H200: sm_90) and nvcc:
# configure a separate build directory with the CUDA module for one architecture and no HIP, build,
# run the GPU comparison suite (tests/unit/test_gpu on the CUDA module against the CPU backend), the
# codec suite (tests/unit/test_codec) and the CLI tests (tests/shell/test_cli.sh: encode / decode / inspect /
# demo) on a CUDA context, an encode / decode round trip compared with the CPU backend's bytes,
# then `kvcore bench transfer coder_dev --json` on the CUDA backend (each op next to the device's
# own device-to-device copy), and print a summary. Works from a fresh copy of the tree (runs
# autoreconf when `configure` is missing). Every step's time limit is cut to what is left of a
# 470 s budget, so the whole run ends within 8 minutes.
#   tests/gpu/run.sh [BUILD_DIR]     (default: build-gpu in this checkout)
# Environment: OUT (folder for the logs; default BUILD_DIR), CUDA_ARCH (default 90), JOBS (default:
# all cores), KVC_TEST_GPU (default cuda).
# Files in $OUT: gpu-run.log (everything), summary.txt, config-summary.txt, device.txt (nvidia-smi,
# nvcc), test_gpu.tap, test_codec.tap, cli.tap, bench-gpu.json.
# Exit status: 0 all passed, 1 a step failed, 77 no GPU device (the gpu:: tests skipped: nothing
# ran on a GPU, only the emu:: tests did).
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build-gpu}
arch=${CUDA_ARCH:-90}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
export KVC_TEST_GPU=${KVC_TEST_GPU:-cuda}
mkdir -p "$build" || exit 1
build=$(cd "$build" && pwd)
out=${OUT:-$build}
mkdir -p "$out" || exit 1
log=$out/gpu-run.log
: >"$log"
t0=$(date +%s)
step() { printf '== %s (%ss)\n' "$*" "$(($(date +%s) - t0))" | tee -a "$log"; }
fail() { printf 'FAILED: %s (log: %s)\n' "$*" "$log" | tee -a "$out/summary.txt"; exit 1; }
budget=470
# lim SECONDS CMD...: run CMD for at most SECONDS, and never past the budget.
lim() {
    left=$((budget - ($(date +%s) - t0)))
    s=$1
    shift
    [ "$left" -lt "$s" ] && s=$left
    [ "$s" -gt 0 ] || { echo "no time left for: $*" >>"$log"; return 124; }
    if command -v timeout >/dev/null 2>&1; then timeout "$s" "$@"; else "$@"; fi
}

{ nvidia-smi 2>&1 || echo "nvidia-smi: not available"; nvcc --version 2>&1 || /usr/local/cuda/bin/nvcc --version 2>&1; } \
    >"$out/device.txt"

step "configure (CUDA sm_$arch, no HIP) in $build"
if [ -f "$src/config.status" ] && [ "$build" != "$src" ]; then
    fail "$src is configured in place: run 'make distclean' there, or pass it as BUILD_DIR to build in place"
fi
if [ ! -x "$src/configure" ]; then (cd "$src" && autoreconf -fi) >>"$log" 2>&1 || fail "autoreconf"; fi
(cd "$build" && "$src/configure" --with-cuda --with-cuda-arch="$arch" --without-hip) >>"$log" 2>&1 || fail configure
sed -n '/configuration summary/,$p' "$log" >"$out/config-summary.txt"
step "build (-j$jobs)"
lim 240 make -C "$build" -j"$jobs" all >>"$log" 2>&1 || fail build
lim 120 make -C "$build" -j"$jobs" tests/unit/test_gpu tests/unit/test_codec tests/modules/gpu_emu.la >>"$log" 2>&1 ||
    fail "build tests"
t_build=$(date +%s)

step "GPU suite (tests/unit/test_gpu, KVC_TEST_GPU=$KVC_TEST_GPU)"
(cd "$build" && lim 120 env KVCORE_MODULE_PATH="$build/.libs" KVC_TEST_BUILDDIR="$build" KVC_TEST_SRCDIR="$src" \
    KVC_TEST_DATA="$src/tests/data" "$build/tests/unit/test_gpu" --verbose=0 -j1 --tap="$out/test_gpu.tap") >>"$log" 2>&1
suite_rc=$?
pass=$(grep -c '^ok ' "$out/test_gpu.tap" 2>/dev/null)
skip=$(grep -c '# SKIP' "$out/test_gpu.tap" 2>/dev/null)
failn=$(grep -c '^not ok ' "$out/test_gpu.tap" 2>/dev/null)
gpu_skip=$(grep '^ok .*gpu::.*# SKIP' "$out/test_gpu.tap" 2>/dev/null | head -1)
[ -s "$out/test_gpu.tap" ] || gpu_skip="no test_gpu.tap: the suite did not run (exit $suite_rc)"
t_tests=$(date +%s)

export KVCORE_MODULE_PATH="$build/.libs" KVC_TEST_BUILDDIR="$build" KVC_TEST_SRCDIR="$src" KVC_TEST_DATA="$src/tests/data"
host_rc=0
if [ -z "$gpu_skip" ]; then
    step "codec suite on a cuda context (tests/unit/test_codec, KVC_TEST_BACKEND=cuda)"
    (cd "$build" && lim 90 env KVC_TEST_BACKEND=cuda "$build/tests/unit/test_codec" --verbose=0 -j1 \
        --tap="$out/test_codec.tap") >>"$log" 2>&1 || host_rc=1
    step "CLI tests on the cuda backend (tests/shell/test_cli.sh: encode, decode, inspect, demo)"
    (cd "$build" && lim 90 env KVCORE_BACKEND=cuda sh "$src/tests/shell/test_cli.sh" >"$out/cli.tap") 2>>"$log" ||
        host_rc=1
    step "encode / decode round trip: cuda against cpu"
    kv="$src/tests/data/kvdata/story_prompt"
    for be in cpu cuda; do
        lim 60 env KVCORE_BACKEND=$be "$build/kvcore" encode "${kv}_K.npy" "${kv}_V.npy" -o "$out/rt-$be.kvc" -q &&
            lim 60 env KVCORE_BACKEND=$be "$build/kvcore" decode "$out/rt-$be.kvc" -o "$out/rt-$be.npy"
    done >>"$log" 2>&1
    if cmp -s "$out/rt-cpu.kvc" "$out/rt-cuda.kvc" && cmp -s "$out/rt-cpu.npy" "$out/rt-cuda.npy"; then rt="same bytes"
    else rt="DIFFERENT or failed"; host_rc=1; fi
fi

bench_rc=0
if [ -z "$gpu_skip" ]; then
    step "kvcore bench transfer coder_dev --json (backend cuda)"
    lim 120 env KVCORE_BACKEND=cuda KVCORE_MODULE_PATH="$build/.libs" "$build/kvcore" bench transfer coder_dev --json \
        >"$out/bench-gpu.json" 2>>"$log"
    bench_rc=$?
fi
t_end=$(date +%s)

{
    echo "== summary"
    echo "build:  $((t_build - t0)) s (sm_$arch)"
    echo "tests:  $pass ok ($skip of them skipped), $failn failed, exit $suite_rc, in $((t_tests - t_build)) s  [test_gpu.tap]"
    if [ -n "$gpu_skip" ]; then
        echo "GPU:    ${gpu_skip#*# SKIP }"
        echo "        nothing ran on a GPU; the emu:: tests checked the kernels' arithmetic on the CPU."
    else
        echo "codec:  $(grep -c '^ok ' "$out/test_codec.tap" 2>/dev/null) ok, $(grep -c '^not ok ' "$out/test_codec.tap" 2>/dev/null) failed  [test_codec.tap, cuda context]"
        echo "CLI:    $(grep -c '^ok ' "$out/cli.tap" 2>/dev/null) ok, $(grep -c '^not ok ' "$out/cli.tap" 2>/dev/null) failed  [cli.tap: encode, decode, inspect, demo on cuda]"
        echo "round trip (encode + decode, cuda vs cpu): $rt"
    fi
    if [ -n "$gpu_skip" ]; then :
    elif [ $bench_rc -eq 0 ] && [ -s "$out/bench-gpu.json" ]; then
        echo "bench:  bench-gpu.json"
        # suite case: value unit (baseline value)
        sed -n 's/.*"suite": *"\([^"]*\)".*"case": *"\([^"]*\)".*"value": *\([0-9.e+-]*\).*"unit": *"\([^"]*\)".*"baseline_name": *"\([^"]*\)".*"baseline_value": *\([0-9.e+-]*\).*/  \1 \2: \3 \4 (\5 \6)/p' \
            "$out/bench-gpu.json"
    else
        echo "bench:  FAILED, exit $bench_rc (124: time limit; see gpu-run.log)"
    fi
    echo "total:  $((t_end - t0)) s"
} | tee "$out/summary.txt"
[ "$suite_rc" -eq 0 ] && [ "$failn" = 0 ] && [ $bench_rc -eq 0 ] && [ $host_rc -eq 0 ] || exit 1
[ -z "$gpu_skip" ] || exit 77
exit 0
