#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The man pages against the program (TAP): every command of `kvcore --help`, every option of each
# `kvcore COMMAND --help`, every bench suite and every environment knob of `kvcore info` appears in
# kvcore(1); the knobs in libkvcore(3) too; both pages format without groff warnings; every
# docs/*.md is in the installed documentation list of Makefile.am.
set -u
b="${KVC_TEST_BUILDDIR:-.}"
s="${KVC_TEST_SRCDIR:-.}"
kvcore="$b/kvcore"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-man.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
n=0
fail=0
result() { # result DESC MISSING-LIST
    n=$((n + 1))
    if [ -z "$2" ]; then echo "ok $n - $1"; else echo "not ok $n - $1"; echo "# missing: $2"; fail=1; fi
}
# The roff sources with "\-" as "-", so options read as typed.
sed 's/\\-/-/g' "$b/man/kvcore.1" >"$tmp/kvcore.1"
sed 's/\\-/-/g' "$b/man/libkvcore.3" >"$tmp/libkvcore.3"
in1() { grep -q -e "$1" "$tmp/kvcore.1"; }

commands=$("$kvcore" --help | awk '/^commands:/ {f = 1; next} f && !NF {exit} f {print $1}')
missing=
for c in $commands; do in1 "^\.B kvcore $c\b" || missing="$missing $c"; done
result "kvcore(1) has a section for every command ($(echo $commands))" "$missing"

for c in $commands; do
    opts=$("$kvcore" "$c" --help | grep -o -e '--[a-z][a-z-]*' -e '\[-[a-z]\]' -e ' -[a-z] ' | tr -d '[] ' | sort -u)
    missing=
    for o in $opts; do in1 "$o\b" || missing="$missing $o"; done
    result "kvcore(1) documents the options of kvcore $c ($(echo $opts))" "$missing"
done

suites=$("$kvcore" bench --list | awk 'NF {print $1}')
missing=
for x in $suites; do in1 "^\.BR* $x\b" || missing="$missing $x"; done
result "kvcore(1) names every bench suite" "$missing"

knobs=$("$kvcore" info | awk '/^environment:/ {f = 1; next} f && /=/ {print $1}')
missing=
for k in $knobs; do grep -q "^\.B $k$" "$tmp/kvcore.1" || missing="$missing $k"; done
result "kvcore(1) ENVIRONMENT has every knob ($(echo $knobs))" "$missing"
missing=
for k in $knobs; do grep -q "$k" "$tmp/libkvcore.3" || missing="$missing $k"; done
result "libkvcore(3) names every knob" "$missing"

missing=
for sec in "EXIT STATUS" ENVIRONMENT "SEE ALSO"; do grep -q "^\.SH $sec" "$tmp/kvcore.1" || missing="$missing '$sec'"; done
for sec in LINKING ERRORS "THREAD SAFETY"; do grep -q "^\.SH $sec" "$tmp/libkvcore.3" || missing="$missing '$sec'"; done
result "sections: kvcore(1) EXIT STATUS, ENVIRONMENT; libkvcore(3) LINKING, ERRORS, THREAD SAFETY" "$missing"

missing=$(grep -l '@[A-Za-z_]*@' "$b/man/kvcore.1" "$b/man/libkvcore.3")
result "no placeholder left unfilled" "$missing"

if command -v groff >/dev/null 2>&1; then
    for p in kvcore.1 libkvcore.3; do
        # At the widths of a narrow, a usual and a wide terminal (man formats at the terminal's): a
        # long install path must break at its slashes, not leave a line it "cannot adjust".
        : >"$tmp/warn"
        for w in 60 80 120; do
            groff -man -Tutf8 -ww -z -rLL=${w}n "$b/man/$p" 2>&1 | sed "s/^/(width $w) /" >>"$tmp/warn"
        done
        result "$p formats without groff warnings at 60, 80 and 120 columns" "$(tr '\n' ' ' <"$tmp/warn")"
    done
else
    n=$((n + 1)); echo "ok $n # SKIP groff not found (Debian: groff-base)"
fi

missing=
for f in "$s"/docs/*.md; do
    grep -q "docs/$(basename "$f")" "$s/Makefile.am" || missing="$missing $(basename "$f")"
done
result "every docs/*.md is installed (dist_kvcdocs_DATA)" "$missing"
echo "1..$n"
exit $fail
