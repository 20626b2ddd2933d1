#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs libFuzzer targets for a set time each: run_fuzz.sh BUILD_DIR FUZZ_SRC_DIR SECONDS NAME...
# BUILD_DIR holds the fuzz_<name> binaries; new inputs go to BUILD_DIR/corpus/<name> (the committed
# seeds in FUZZ_SRC_DIR/corpus/<name> are read, never written), crash inputs to BUILD_DIR/artifacts,
# the log to BUILD_DIR/<name>.log. Exits non-zero when a target finds a crash, leak or timeout.
set -u
build=$1 src=$2 seconds=$3
shift 3
status=0
mkdir -p "$build/artifacts"
for name in "$@"; do
    mkdir -p "$build/corpus/$name"
    dict=
    [ -f "$src/dict/$name.dict" ] && dict="-dict=$src/dict/$name.dict"
    echo "=== fuzz_$name: $seconds s"
    # shellcheck disable=SC2086
    "$build/fuzz_$name" -max_total_time="$seconds" -print_final_stats=1 -timeout=20 -max_len=8192 $dict \
        -artifact_prefix="$build/artifacts/$name-" "$build/corpus/$name" "$src/corpus/$name" \
        >"$build/$name.log" 2>&1
    rc=$?
    grep -E '^#[0-9]+[[:space:]]+DONE|^stat::|ERROR|SUMMARY' "$build/$name.log" | tail -12
    if [ "$rc" -ne 0 ]; then
        echo "fuzz_$name FAILED (exit $rc); see $build/$name.log and $build/artifacts/" >&2
        status=1
    fi
done
exit $status
