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
. "$src/tests/harness/python_sanitizers.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-py.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
build=$(cd "$build" && pwd) src=$(cd "$src" && pwd)
# Run from the temporary directory, with hypothesis's cache there too: test caches (.hypothesis,
# which Debian's pydantic plugin makes hypothesis write, .benchmarks) stay out of the build tree.
(cd "$tmp" && KVCORE_LIBRARY="$build/.libs/libkvcore.so" KVC_ABI_PROBE="$build/tests/harness/python_abi" KVC_CLI="$build/kvcore" \
    PYTHONPATH="$src/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1 HYPOTHESIS_STORAGE_DIRECTORY="$tmp/hypothesis" \
    "$py" -m pytest -p no:cacheprovider -q -rA "$src/python/tests" >"$tmp/out" 2>&1)
rc=$?
sed 's/^/# /' "$tmp/out"
[ -n "$sanitized" ] && echo "$sanitized"
awk -v rc="$rc" -v root="$src" -f "$src/tests/harness/pytest_tap.awk" "$tmp/out"
