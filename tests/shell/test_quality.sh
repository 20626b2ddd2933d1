#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# bench/quality/kvc_quality (TAP): usage errors and a missing model always; with the stories260K
# GGUF named by KVC_QUALITY_MODEL, the forward pass reproduces the model's loss on the tuning
# sequences (bench/quality/README.md) and a tuning-set run pairs a level with level 0.
set -u
b="${KVC_TEST_BUILDDIR:-.}"
s="${KVC_TEST_SRCDIR:-.}"
q="$b/bench/quality/kvc_quality"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-quality.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); fail=1; echo "not ok $n - $1"; sed 's/^/# /' "$tmp/err"; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
run() { "$q" "$@" >"$tmp/out" 2>"$tmp/err"; }

run --model "$tmp/none.gguf" --data "$s/bench/quality/data" --config k46
if [ $? -eq 2 ] && grep -q "config 'k46': expected default, levelN" "$tmp/err"; then ok "a malformed --config is a usage error"; else not_ok "a malformed --config is a usage error"; fi
run --model "$tmp/none.gguf" --data "$s/bench/quality/data"
if [ $? -eq 1 ] && grep -q "cannot open $tmp/none.gguf" "$tmp/err"; then ok "a missing model fails with its path"; else not_ok "a missing model fails with its path"; fi
run --data "$s/bench/quality/data"
if [ $? -eq 2 ] && grep -q "\-\-model and \-\-data are required" "$tmp/err"; then ok "--model is required"; else not_ok "--model is required"; fi

if [ -z "${KVC_QUALITY_MODEL:-}" ] || [ ! -r "${KVC_QUALITY_MODEL:-}" ]; then
    skip "the forward pass and a paired run" "no model: make check QUALITY_MODEL=PATH/stories260K.gguf (ggml-org/models on Hugging Face, tinyllamas/stories260K.gguf; bench/quality/README.md)${KVC_QUALITY_MODEL:+; $KVC_QUALITY_MODEL is not readable}"
else
    if run --model "$KVC_QUALITY_MODEL" --data "$s/bench/quality/data" --check-nll --config level0 --config level1 &&
       grep -q '"check":"story_prompt","mean_nll":1.2254' "$tmp/out" && grep -q '"check":"greedy_512","mean_nll":0.4868' "$tmp/out" &&
       grep -q '"check":"sampled_t1_512","mean_nll":1.2742' "$tmp/out"; then ok "the forward pass reproduces the model's loss"; else not_ok "the forward pass reproduces the model's loss"; fi
    if [ "$(grep -c '"config":"level1"' "$tmp/out")" -eq 6 ] &&
       grep '"summary":"level1"' "$tmp/out" | grep -q '"bits_vs_first":0\.9[0-9]*,.*"dkl_mean":-0\.0'; then
        ok "level 1 on the tuning set: 6 runs, smaller than level 0 at lower KL"
    else not_ok "level 1 on the tuning set: 6 runs, smaller than level 0 at lower KL"; fi
fi
echo "1..$n"
exit $fail
