#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The Python package's pytest suite (python/tests) against the library just built, as TAP: one line
# per test (skips with pytest's reason). Skips as a whole only when configure found no Python 3;
# a Python without numpy or pytest fails, saying what to install.
set -u
py="${KVC_PYTHON:-python3}"
build="${KVC_TEST_BUILDDIR:-.}"
src="${KVC_TEST_SRCDIR:-.}"
if [ "$py" = ":" ] || ! command -v "$py" >/dev/null 2>&1; then
    echo "1..0 # SKIP no Python 3 interpreter (configure found none, or '$py' is gone; set PYTHON=... and re-run configure)"
    exit 0
fi
if ! "$py" -c 'import numpy, pytest' 2>/dev/null; then
    echo "1..1"
    echo "not ok 1 - $py cannot import numpy and pytest (Debian: apt-get install python3-numpy python3-pytest," \
         "or configure with PYTHON=/usr/bin/python3)"
    exit 0
fi
. "$src/tests/python-sanitizers.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-py.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
KVCORE_LIBRARY="$build/.libs/libkvcore.so" KVC_ABI_PROBE="$build/tests/python_abi" KVC_CLI="$build/kvcore" \
    PYTHONPATH="$src/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1 \
    "$py" -m pytest -p no:cacheprovider -q -rA "$src/python/tests" >"$tmp/out" 2>&1
rc=$?
sed 's/^/# /' "$tmp/out"
[ -n "$sanitized" ] && echo "$sanitized"
# -rA summary lines -> TAP: "PASSED file::test", "FAILED file::test - msg", "SKIPPED [n] file:line: reason"
awk -v rc="$rc" '
    /^PASSED /  { n++; line[n] = "ok " n " - " $2 }
    /^XFAIL /   { n++; line[n] = "ok " n " - " $2 " # TODO expected failure" }
    /^(FAILED|ERROR|XPASS) / { n++; bad = 1; line[n] = "not ok " n " - " $0 }
    /^SKIPPED / { n++; r = $0; sub(/^SKIPPED \[[0-9]+\] /, "", r); line[n] = "ok " n " # SKIP " r }
    END {
        if (rc != 0 && !bad) { n++; line[n] = "not ok " n " - pytest exited with status " rc }
        if (n == 0) { n = 1; line[1] = "not ok 1 - pytest ran no test" }
        print "1.." n
        for (i = 1; i <= n; i++) print line[i]
    }' "$tmp/out"
