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

echo "1..23"
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
# Quality options (encode --level / --bins-k / --bins-v / --key-scaling).
K="$data/story_prompt_K.npy" V="$data/story_prompt_V.npy"
check "encode --level 2" "$kvcore" encode "$K" "$V" -o "$tmp/l2.kvc" -q --level 2
"$kvcore" inspect "$tmp/l2.kvc" --json >"$tmp/out" 2>"$tmp/err"
if has '"cdf_bins": 46' && has '"lmcache_readable": true' && [ ! -s "$tmp/err" ] &&
   [ "$(wc -c <"$tmp/l2.kvc")" -lt "$(wc -c <"$tmp/a.kvc")" ]; then ok "level 2: 46 bins, LMCache-readable, smaller than the default"; else not_ok "level 2: 46 bins, LMCache-readable, smaller than the default"; fi
check "encode --key-scaling channel" "$kvcore" encode "$K" "$V" -o "$tmp/pc.kvc" -q --key-scaling channel
if grep -q "warning: .* not readable by LMCache (.*per channel" "$tmp/err"; then ok "per-channel keys: warning on encode"; else not_ok "per-channel keys: warning on encode"; fi
"$kvcore" inspect "$tmp/pc.kvc" --json >"$tmp/out" 2>"$tmp/err"
if has '"format_version_minor": 1' && has '"key_scaling": "channel"' && has '"lmcache_readable": false'; then ok "per-channel keys: format 1.1, not LMCache-readable"; else not_ok "per-channel keys: format 1.1, not LMCache-readable"; fi
check "encode per-layer --bins-k list" "$kvcore" encode "$K" "$V" -o "$tmp/pl.kvc" -q --bins-k 40,32,16,16,16 --bins-v 8
"$kvcore" inspect "$tmp/pl.kvc" --json | tr -d ' \n' >"$tmp/out"
if has '"plane":"K","layer":0,"bins":40' && has '"plane":"K","layer":1,"bins":32' && has '"plane":"K","layer":4,"bins":16' &&
   has '"plane":"V","layer":2,"bins":8'; then ok "per-layer bins reach the container"; else not_ok "per-layer bins reach the container"; fi
status_is 2 "a bins list of the wrong length is a usage error" "$kvcore" encode "$K" "$V" -o "$tmp/x.kvc" --bins-k 32,32
status_is 2 "an unknown level is a usage error" "$kvcore" encode "$K" "$V" -o "$tmp/x.kvc" --level 9
exit $fail
