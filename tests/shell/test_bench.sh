#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# `kvcore bench --json` lines as a consumer parses them (smoke runs with --quick; no timing is
# asserted): every line names the CPU model and the ISA tier, carries the interleaved baseline's
# statistics, and prints integers as integers (a byte count must not lose digits to %g).
set -u
kvcore="${KVC_TEST_BUILDDIR:-.}/kvcore"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-bench.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); fail=1; echo "not ok $n - $1"; [ -s "$tmp/err" ] && sed 's/^/# /' "$tmp/err"; }
# every line of $tmp/out matches the pattern (and there is at least one line)
all_lines() { [ -s "$tmp/out" ] && ! grep -v -e "$1" "$tmp/out" >/dev/null; }

if KVCORE_BACKEND=cpu "$kvcore" bench rope codec --quick --json --threads 2 >"$tmp/out" 2>"$tmp/err"; then ok "bench rope codec --quick --json"; else not_ok "bench rope codec --quick --json"; fi
if all_lines '"cpu":"[^"][^"]*"'; then ok "every line names the CPU model"; else not_ok "every line names the CPU model"; fi
if all_lines '"isa":"\(scalar\|neon\|avx2\|avx512\)"'; then ok "every line names the ISA tier"; else not_ok "every line names the ISA tier"; fi
if ! grep -q '"isa".*"isa"' "$tmp/out"; then ok "no line repeats the isa key"; else not_ok "no line repeats the isa key"; fi
grep '"unit":"GB/s"' "$tmp/out" >"$tmp/rates"
if [ -s "$tmp/rates" ] && ! grep -v '"baseline_median":[0-9].*"samples":[1-9]' "$tmp/rates" >/dev/null; then
    ok "every rate carries the baseline's median and its sample count"
else not_ok "every rate carries the baseline's median and its sample count"; fi
# glibc fills each malloc'ed block with a pattern under MALLOC_PERTURB_: a suite that reads bytes
# it never wrote then fails instead of finding zeros (coder_dev packed 4x the rANS streams there
# are, from 8-channel streams: lengths read past the encoder's, a crash after other suites ran).
if MALLOC_PERTURB_=165 KVCORE_BACKEND=cpu "$kvcore" bench coder_dev coder --quick --json --threads 1 >"$tmp/perturb" 2>"$tmp/err"; then
    ok "bench coder_dev coder --quick under MALLOC_PERTURB_"; else not_ok "bench coder_dev coder --quick under MALLOC_PERTURB_"; fi
# The codec's container size is a byte count: digits only (3.34755e+06 lost the last ones).
# The text table says what its ratio and median columns are.
if KVCORE_BACKEND=cpu "$kvcore" bench rope --quick --threads 1 >"$tmp/text" 2>&1 && grep -q "^  (ratio: best run / baseline's best; median: median / median" "$tmp/text"; then
    ok "the table's legend says what ratio and median are"; else not_ok "the table's legend says what ratio and median are"; fi
# make performance's generator (scripts/performance.sh) on a copy of docs/PERFORMANCE.md: a table
# per suite with a column per run, between the markers, and the same shape when run again.
py=${KVC_PYTHON:-}
if [ -z "$py" ]; then
    n=$((n + 1)); echo "ok $n - make performance rewrites the tables between the markers # SKIP no python3 (configure found none)"
else
    cp "${KVC_TEST_SRCDIR:-.}/docs/PERFORMANCE.md" "$tmp/perf.md"
    sed '/^<!-- performance-tables -->$/q' "$tmp/perf.md" >"$tmp/head"
    sed -n '/^<!-- end of performance-tables -->$/,$p' "$tmp/perf.md" >"$tmp/tail"
    gen() { sh "${KVC_TEST_SRCDIR:-.}/scripts/performance.sh" "$kvcore" "$py" "$tmp/perf.md" "scalar" "1 2" "cc 0" "rope --quick" 2>"$tmp/err"; }
    if gen && gen && [ "$(grep -c '^<!-- performance-tables -->$' "$tmp/perf.md")" -eq 1 ] &&
       [ "$(grep -c '^### rope$' "$tmp/perf.md")" -eq 1 ] && grep -q '^| case | unit | baseline | scalar, 1 thr | scalar, 2 thr |$' "$tmp/perf.md" &&
       grep -q '^| fused f16 neox table-f32 | GB/s | memcpy | [0-9.e+-]* ([0-9.e+-]*x) | [0-9.e+-]* ([0-9.e+-]*x) |$' "$tmp/perf.md" &&
       grep -q '^    KVCORE_ISA=scalar kvcore bench rope --quick --json --threads 2$' "$tmp/perf.md" &&
       sed '/^<!-- performance-tables -->$/q' "$tmp/perf.md" | cmp -s - "$tmp/head" &&
       sed -n '/^<!-- end of performance-tables -->$/,$p' "$tmp/perf.md" | cmp -s - "$tmp/tail"; then
        ok "make performance rewrites the tables between the markers, the rest kept"
    else
        not_ok "make performance rewrites the tables between the markers, the rest kept"
    fi
fi
if grep '"case":"size_vs_fp16"' "$tmp/out" | grep -q '"value":[0-9][0-9]*,'; then ok "byte counts print as integers"; else not_ok "byte counts print as integers"; fi
if ! grep -q '[0-9]e+[0-9]' "$tmp/out"; then ok "no large value in exponent form"; else not_ok "no large value in exponent form"; fi
# Rates keep more than %.6g's six significant digits (23.0669 GB/s had four decimals).
if grep '"suite":"rope"' "$tmp/out" | grep -q '"value":[0-9][0-9]*\.[0-9]\{6,\}'; then ok "rates keep their digits"; else not_ok "rates keep their digits"; fi
# The conditions a ratio depends on travel with it (issue #32): the cache the streaming threshold
# comes from, the threshold, THP, the clock, the baseline's own spread; transfers say if they streamed.
if all_lines '"llc_bytes":[0-9][0-9]*,"llc_source":"[a-z, ]*","stream_min_bytes":[0-9][0-9]*,"thp":"[a-z]*","cpu_mhz":'; then
    ok "every line carries the cache, threshold, THP and clock"
else not_ok "every line carries the cache, threshold, THP and clock"; fi
if [ -s "$tmp/rates" ] && ! grep -v '"baseline_spread":[0-9.-]' "$tmp/rates" >/dev/null; then ok "every rate carries the baseline's spread"
else not_ok "every rate carries the baseline's spread"; fi
if KVCORE_BACKEND=cpu KVCORE_STREAM_MIN_BYTES=0 "$kvcore" bench transfer --quick --json --case tokens/NL_X_NB_NH_BS_CS/H2D >"$tmp/out" 2>"$tmp/err" \
    && all_lines '"streaming":true,"pool_huge_bytes":-\{0,1\}[0-9][0-9]*,"chunk_huge_bytes":' \
    && KVCORE_BACKEND=cpu KVCORE_STREAM_MIN_BYTES=1000000000 "$kvcore" bench transfer --quick --json --case tokens/NL_X_NB_NH_BS_CS/H2D >"$tmp/out" 2>"$tmp/err" \
    && all_lines '"streaming":false'; then
    ok "transfer lines say whether they streamed and how much THP backs the buffers"
else not_ok "transfer lines say whether they streamed and how much THP backs the buffers"; fi
echo "1..$n" # the plan at the end: it counts what ran, so a new check cannot outgrow it
exit $fail
