#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# `make performance`: every bench suite at each CPU tier and thread count asked for, then the
# generated part of docs/PERFORMANCE.md (between its two performance-tables markers) rewritten
# from those runs by scripts/performance-tables.py. Run it on a quiet machine; it takes minutes.
#   performance.sh KVCORE PYTHON DOC "TIERS" "THREADS" COMPILER ["BENCH ARGUMENTS"]
# TIERS empty: the best tier the CPU has, and avx2 as well where the best is avx512. The bench
# arguments default to `all` (tests/shell/test_bench.sh passes one suite and --quick).
set -eu
kvcore=$1 py=$2 doc=$3 tiers=$4 threads=$5 compiler=$6 args=${7:-all}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-perf.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ -z "$tiers" ]; then
    tiers=$("$kvcore" info | sed -n 's/^cpu: isa \([a-z0-9]*\),.*/\1/p')
    [ "$tiers" = avx512 ] && tiers="avx512 avx2"
fi
grep -q '^<!-- performance-tables -->$' "$doc" && grep -q '^<!-- end of performance-tables -->$' "$doc" ||
    { echo "performance.sh: $doc lacks the <!-- performance-tables --> ... <!-- end of performance-tables --> markers" >&2; exit 1; }
runs=
for isa in $tiers; do
    for t in $threads; do
        f="$tmp/$isa-$t.jsonl"
        cmd="KVCORE_ISA=$isa kvcore bench $args --json --threads $t"
        echo "performance: $cmd" >&2
        echo "# $cmd" >"$f"
        # shellcheck disable=SC2086
        KVCORE_ISA=$isa "$kvcore" bench $args --json --threads "$t" >>"$f"
        runs="$runs $f"
    done
done
version=$("$kvcore" --version | sed -n '1s/^kvcore //p')
rev=$(git -C "$here/.." describe --always --dirty 2>/dev/null || true)
# shellcheck disable=SC2086
"$py" "$here/performance-tables.py" --compiler "$compiler" --version "$version${rev:+ (git $rev)}" $runs >"$tmp/tables.md"
awk -v tables="$tmp/tables.md" '
    $0 == "<!-- performance-tables -->" { print; print ""; while ((getline l < tables) > 0) print l; print ""; skip = 1; next }
    $0 == "<!-- end of performance-tables -->" { skip = 0 }
    !skip' "$doc" >"$tmp/doc.md"
cp "$tmp/doc.md" "$doc"
echo "performance: $doc rewritten ($(echo $runs | wc -w) runs)" >&2
