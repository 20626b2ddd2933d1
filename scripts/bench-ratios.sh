#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Consecutive runs of `kvcore bench transfer --json` and `kvcore bench rope --json` (issue #21's
# check), then the worst ratio of every case over the runs next to its target:
#   transfers of a head-major (HND) or fused head-major layout >= 0.85 of memcpy,
#   RoPE GPT-J, bf16 and the cos/sin table build >= 0.7 of memcpy,
# at 1 and 2 threads. Usage: scripts/bench-ratios.sh [RUNS (3)] [KVCORE (./kvcore)]; KVCORE_ISA
# caps the tier as usual. The raw JSON lines stay in bench-ratios.jsonl; run it on a quiet machine
# (the load average is in every line).
set -eu
runs=${1:-3}
kvcore=${2:-./kvcore}
out=bench-ratios.jsonl
: >"$out"
i=1
while [ "$i" -le "$runs" ]; do
    "$kvcore" bench transfer --json >>"$out"
    "$kvcore" bench rope --json >>"$out"
    i=$((i + 1))
done
awk '
function field(line, key,    m) {
    if (match(line, "\"" key "\":\"[^\"]*\"")) { m = substr(line, RSTART, RLENGTH); sub(/^"[^"]*":"/, "", m); sub(/"$/, "", m); return m }
    if (match(line, "\"" key "\":[^,}]*")) { m = substr(line, RSTART, RLENGTH); sub(/^"[^"]*":/, "", m); return m }
    return ""
}
{
    suite = field($0, "suite"); name = field($0, "case"); th = field($0, "threads"); r = field($0, "ratio") + 0
    k = suite "|" name "|" th
    if (!(k in worst)) { order[++n] = k; worst[k] = r; best[k] = r }
    if (r < worst[k]) worst[k] = r
    if (r > best[k]) best[k] = r
    target[k] = 0
    if (suite == "transfer" && field($0, "layout") == "HND") target[k] = 0.85
    if (suite == "rope" && (name ~ /gptj|bf16|cache_build/)) target[k] = 0.7
    cpu = field($0, "cpu"); isa = field($0, "isa")
    llc = field($0, "llc_bytes"); src = field($0, "llc_source"); smin = field($0, "stream_min_bytes")
    thp = field($0, "thp"); l = field($0, "load1") + 0
    if (!seen++ || l < lmin) lmin = l
    if (l > lmax) lmax = l
    if (field($0, "streaming") == "true") streamed++
    if (field($0, "streaming") == "false") cached++
}
END {
    printf "# %s, isa %s, last-level cache %.1f MiB (%s), streaming above %.1f MiB, THP %s, load %.2f-%.2f\n", \
        cpu, isa, llc / 1048576, src, smin / 1048576, thp, lmin, lmax
    printf "# transfer lines with streaming stores: %d, with cached stores: %d\n", streamed, cached
    below = 0
    for (i = 1; i <= n; i++) {
        k = order[i]; split(k, p, "|")
        flag = (target[k] > 0) ? ((worst[k] >= target[k]) ? "ok" : "BELOW") : "-"
        if (flag == "BELOW") below++
        printf "%-9s %-42s %s thr  worst %.3f  best %.3f  target %s  %s\n", p[1], p[2], p[3], worst[k], best[k],
               (target[k] > 0 ? target[k] : "-"), flag
    }
    printf "# %d case(s) below target\n", below
}' "$out"
