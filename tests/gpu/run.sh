#!/bin/sh
# GPU check in one go (docs/GPU.md): configure with CUDA for sm_90 only (fast), build, run the GPU
# comparison suite (tests/test_gpu on the CUDA module), then `kvcore bench --json` of the transfer
# and coder_dev suites on the CUDA backend, and print a summary. Meant for one H200 in < 5 minutes.
#   tests/gpu/run.sh [BUILD_DIR]     (default: build-gpu next to this checkout)
# Environment: CUDA_ARCH (default 90), JOBS (default: all cores), KVC_TEST_GPU (default cuda).
# Exit status: 0 all passed, 1 a step failed, 77 no GPU device (the suite skipped: nothing verified).
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build-gpu}
arch=${CUDA_ARCH:-90}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
export KVC_TEST_GPU=${KVC_TEST_GPU:-cuda}
log=$build/gpu-run.log
mkdir -p "$build" || exit 1
: >"$log"
t0=$(date +%s)
step() { printf '== %s\n' "$*" | tee -a "$log"; }
fail() { printf 'FAILED: %s (log: %s)\n' "$*" "$log"; exit 1; }

step "configure (CUDA sm_$arch, no HIP)"
if [ -f "$src/config.status" ] && [ "$(cd "$build" && pwd)" != "$src" ]; then
    fail "$src is configured in place: run 'make distclean' there, or pass it as BUILD_DIR to build in place"
fi
if [ ! -x "$src/configure" ]; then (cd "$src" && autoreconf -fi) >>"$log" 2>&1 || fail "autoreconf"; fi
(cd "$build" && "$src/configure" --with-cuda --with-cuda-arch="$arch" --without-hip) >>"$log" 2>&1 || fail configure
step "build (-j$jobs)"
make -C "$build" -j"$jobs" >>"$log" 2>&1 || fail build
make -C "$build" -j"$jobs" tests/test_gpu tests/modules/gpu_emu.la >>"$log" 2>&1 || fail "build tests"
t_build=$(date +%s)

step "GPU suite (tests/test_gpu, KVC_TEST_GPU=$KVC_TEST_GPU)"
env KVCORE_MODULE_PATH="$build/.libs" KVC_TEST_BUILDDIR="$build" KVC_TEST_SRCDIR="$src" \
    KVC_TEST_DATA="$src/tests/data" "$build/tests/test_gpu" --verbose=0 -j1 --tap="$build/test_gpu.tap" >>"$log" 2>&1
suite_rc=$?
pass=$(grep -c '^ok ' "$build/test_gpu.tap" 2>/dev/null)
skip=$(grep -c '# SKIP' "$build/test_gpu.tap" 2>/dev/null)
failn=$(grep -c '^not ok ' "$build/test_gpu.tap" 2>/dev/null)
gpu_skip=$(grep '^ok .*gpu::.*# SKIP' "$build/test_gpu.tap" 2>/dev/null | head -1)
t_tests=$(date +%s)

bench_rc=0
if [ -z "$gpu_skip" ]; then
    step "kvcore bench transfer coder_dev --json (backend cuda)"
    env KVCORE_BACKEND=cuda KVCORE_MODULE_PATH="$build/.libs" "$build/kvcore" bench transfer coder_dev --json \
        >"$build/bench-gpu.json" 2>>"$log"
    bench_rc=$?
fi
t_end=$(date +%s)

echo
echo "== summary"
echo "build:  $((t_build - t0)) s (sm_$arch)"
echo "tests:  $pass ok ($skip skipped), $failn failed, in $((t_tests - t_build)) s  [$build/test_gpu.tap]"
if [ -n "$gpu_skip" ]; then
    echo "GPU:    ${gpu_skip#*# SKIP }"
    echo "        nothing ran on a GPU; the emu:: tests checked the kernels' arithmetic on the CPU."
    exit 77
fi
if [ $bench_rc -eq 0 ] && [ -s "$build/bench-gpu.json" ]; then
    echo "bench:  $build/bench-gpu.json"
    # case  value unit  (baseline)
    sed -n 's/.*"suite": *"\([^"]*\)".*"case": *"\([^"]*\)".*"value": *\([0-9.e+-]*\).*"unit": *"\([^"]*\)".*"baseline_name": *"\([^"]*\)".*"baseline_value": *\([0-9.e+-]*\).*/  \1 \2: \3 \4 (\5 \6)/p' \
        "$build/bench-gpu.json"
else
    echo "bench:  FAILED (see $log)"
fi
echo "total:  $((t_end - t0)) s"
[ "$suite_rc" -eq 0 ] && [ "$failn" -eq 0 ] && [ $bench_rc -eq 0 ] || exit 1
exit 0
