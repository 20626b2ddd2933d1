#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# A/B of two libkvcore builds on the real K/V of tests/data/kvdata (story_prompt, sampled_t1_512):
# PROCS processes of each build alternate (bench/ab_codec, one build a process), each printing the
# best times of REPS rANS / ac decodes and encodes; then the medians, B's speed-up over A for each
# coder (the ac columns show the noise: the ac code is the same in most A/Bs) and each build's
# rANS speed as a multiple of its ac. Interleaving the processes keeps the machine's drift out of
# the B/A columns, not out of the "x ac" ones. Build the helper first: make bench/ab_codec.
# Usage: scripts/ab-codec.sh A.so B.so [SET (story_prompt)] [THREADS (1)] [PROCS (8)] [REPS (40)]
#        (run from the build directory; KVCORE_ISA caps the tier as usual)
set -eu
a=$1 b=$2 set=${3:-story_prompt} threads=${4:-1} procs=${5:-8} reps=${6:-40}
here=$(cd "$(dirname "$0")" && pwd)
data=${KVC_KVDATA:-$here/../tests/data/kvdata}
helper=${AB_CODEC:-./bench/ab_codec}
i=0
while [ "$i" -lt "$procs" ]; do
    echo "A $("$helper" "$a" "$data" "$set" "$threads" "$reps")"
    echo "B $("$helper" "$b" "$data" "$set" "$threads" "$reps")"
    i=$((i + 1))
done | awk -v set="$set" -v threads="$threads" '
{ for (c = 2; c <= 5; c++) v[$1, c, ++cnt[$1, c]] = $c }
function median(side, c,    n, i, j, t, x) {
    n = cnt[side, c]
    for (i = 1; i <= n; i++) x[i] = v[side, c, i]
    for (i = 2; i <= n; i++) for (j = i; j > 1 && x[j - 1] > x[j]; j--) { t = x[j]; x[j] = x[j - 1]; x[j - 1] = t }
    return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
}
END {
    for (c = 2; c <= 5; c++) { A[c] = median("A", c); B[c] = median("B", c) }
    printf "%s, %s threads, medians (us): A rans dec %.1f ac dec %.1f rans enc %.1f ac enc %.1f | B %.1f %.1f %.1f %.1f\n", set, threads, A[2], A[3], A[4], A[5], B[2], B[3], B[4], B[5]
    printf "B/A speed: rans decode %.3f encode %.3f | ac decode %.3f encode %.3f || x ac: A decode %.2f encode %.2f, B decode %.2f encode %.2f\n", A[2] / B[2], A[4] / B[4], A[3] / B[3], A[5] / B[5], A[3] / A[2], A[5] / A[4], B[3] / B[2], B[5] / B[4]
}'
