#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The shipped documentation stands on its own (TAP): the installed headers, docs/ and the README
# cite no document outside the distribution (the compatibility spec kvcore was written from, "SPEC",
# "§" section numbers, ../shared), and every docs/NAME.md they mention exists.
set -u
s="${KVC_TEST_SRCDIR:-.}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-docs.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
echo "1..2"
(cd "$s" && grep -rn -e 'SPEC' -e '§' -e 'shared/docs' include docs README.md) >"$tmp/hits"
if [ -s "$tmp/hits" ]; then
    echo "not ok 1 - no citation of documents outside the distribution"; sed 's/^/# /' "$tmp/hits"
else
    echo "ok 1 - no citation of documents outside the distribution"
fi
(cd "$s" && grep -rhoE 'docs/[A-Za-z_]+\.md' include docs README.md examples man 2>/dev/null | sort -u) >"$tmp/refs"
missing=
while read -r f; do [ -f "$s/$f" ] || missing="$missing $f"; done <"$tmp/refs"
if [ -z "$missing" ]; then echo "ok 2 - every docs/*.md referred to exists ($(wc -l <"$tmp/refs") names)"
else echo "not ok 2 - every docs/*.md referred to exists"; echo "# missing:$missing"; fi
