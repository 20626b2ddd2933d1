#!/bin/sh
# The kvcore program as a user runs it, TAP on stdout: encode / decode / inspect (text and --json)
# on the real K/V of tests/data, exit statuses for bad usage and for a corrupt container, and the
# demo (the README's main job) passing its own verification.
set -u
kvcore="${KVC_TEST_BUILDDIR:-.}/kvcore"
data="${KVC_TEST_DATA:-tests/data}/kvdata"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-cli.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); fail=1; echo "not ok $n - $1"; [ -s "$tmp/err" ] && sed 's/^/# /' "$tmp/err"; }
check() { desc=$1; shift; if "$@" >"$tmp/out" 2>"$tmp/err"; then ok "$desc"; else not_ok "$desc"; fi; }
status_is() { want=$1; desc=$2; shift 2; "$@" >"$tmp/out" 2>"$tmp/err"; got=$?; if [ "$got" -eq "$want" ]; then ok "$desc"; else echo "# exit $got, want $want" >>"$tmp/err"; not_ok "$desc"; fi; }
has() { grep -q -- "$1" "$tmp/out"; }

echo "1..14"
check "encode K V pair" "$kvcore" encode "$data/story_prompt_K.npy" "$data/story_prompt_V.npy" -o "$tmp/a.kvc" -q
status_is 0 "encode --json" "$kvcore" encode "$data/story_prompt_K.npy" "$data/story_prompt_V.npy" -o "$tmp/b.kvc" --json
if has '"output_bytes"' && has '"ratio"' && has '"layers": 5' && has '"tokens": 512'; then ok "encode --json fields"; else not_ok "encode --json fields"; fi
if cmp -s "$tmp/a.kvc" "$tmp/b.kvc"; then ok "encoding is deterministic"; else not_ok "encoding is deterministic"; fi
status_is 0 "decode --json" "$kvcore" decode "$tmp/a.kvc" -o "$tmp/a.npy" --json
if has '"output_bytes": 327680' && has '"heads": 4' && has '"head_size": 8' && [ -s "$tmp/a.npy" ]; then ok "decode --json fields and output"; else not_ok "decode --json fields and output"; fi
status_is 0 "inspect --json" "$kvcore" inspect "$tmp/a.kvc" --json
if has '"lmcache_layout"' && has '"cdf_bins": 32'; then ok "inspect --json fields"; else not_ok "inspect --json fields"; fi
status_is 2 "encode without -o is a usage error" "$kvcore" encode "$data/story_prompt_K.npy"
head -c 1000 "$tmp/a.kvc" >"$tmp/cut.kvc"
status_is 1 "decoding a truncated container fails" "$kvcore" decode "$tmp/cut.kvc" -o "$tmp/cut.npy"
if grep -q "corrupt" "$tmp/err" && [ ! -e "$tmp/cut.npy" ]; then ok "truncated: says corrupt, writes nothing"; else not_ok "truncated: says corrupt, writes nothing"; fi
status_is 0 "demo passes its verification" "$kvcore" demo
status_is 0 "bench --case runs" "$kvcore" bench memory --quick --case split_copy_align_4KiB
if [ "$(grep -c '^memory ' "$tmp/out")" -eq 1 ] && has '^memory  *split_copy_align_4KiB '; then ok "bench --case reports only the matching case"; else not_ok "bench --case reports only the matching case"; fi
exit $fail
