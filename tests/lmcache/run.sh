#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# LMCache itself on kvcore (make check-lmcache; part of make check), as TAP:
#  - LMCache's own test suite run twice by the snapshot's run-tests.sh, on its fallback and with
#    kvcore.lmcache_ops as lmcache.c_ops: one line, ok when no test fails only with kvcore;
#  - tests/lmcache/test_*.py: kvcore.lmcache_ops side by side with LMCache's fallback, and LMCache's
#    CacheGen serde (both generations) with kvcore plugged in by `python3 -m kvcore.lmcache install`.
# LMCache's snapshot (source, tests, run-tests.sh) is KVC_LMCACHE_DIR, by default ../shared/lmcache
# beside the source tree; without it, or without the Python modules LMCache needs, this skips and
# says which (scripts/install-deps.sh installs them with the test set).
set -u
build=$(cd "${KVC_TEST_BUILDDIR:-.}" && pwd)
src=$(cd "${KVC_TEST_SRCDIR:-.}" && pwd)
lmc=${KVC_LMCACHE_DIR:-$src/../shared/lmcache}
py=${KVC_LMCACHE_PYTHON:-/usr/bin/python3}
if [ ! -f "$lmc/run-tests.sh" ] || [ ! -d "$lmc/src/lmcache" ]; then
    echo "1..0 # SKIP no LMCache snapshot at $lmc (run-tests.sh and src/lmcache; set KVC_LMCACHE_DIR)"
    exit 0
fi
lmc=$(cd "$lmc" && pwd)
if [ ! -x "$py" ]; then
    echo "1..0 # SKIP no $py (LMCache's suite runs on Debian's python3 with python3-torch; set KVC_LMCACHE_PYTHON)"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-lmcache.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
export KVCORE_LIBRARY="$build/.libs/libkvcore.so" PYTHONDONTWRITEBYTECODE=1 NUMBA_CACHE_DIR="$tmp/numba" \
    HYPOTHESIS_STORAGE_DIRECTORY="$tmp/hypothesis" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
unset KVCORE_LMCACHE

KVCORE_PYTHONPATH="$src/python" PYTHON="$py" sh "$lmc/run-tests.sh" "$tmp/suite" >"$tmp/suite.out" 2>&1
suite=$?
sed 's/^/# /' "$tmp/suite.out"
if [ $suite -eq 77 ]; then
    echo "1..0 # SKIP $(grep -m1 '^SKIP' "$tmp/suite.out" | sed 's/^SKIP: //')"
    exit 0
fi

(cd "$tmp" && KVC_LMCACHE_DIR="$lmc" PYTHONPATH="$lmc/compat:$lmc/compat/stubs:$src/python:$lmc/src" \
    "$py" -m pytest -p kvwire -p no:cacheprovider -q -rA -s "$src/tests/lmcache" >"$tmp/own.out" 2>&1)
rc=$?
grep -v ' LMCache INFO:' "$tmp/own.out" | sed 's/^/# /'
awk -v rc="$rc" -v root="$src" -f "$src/tests/harness/pytest_tap.awk" "$tmp/own.out" >"$tmp/own.tap"
summary=$(tail -n 1 "$tmp/suite.out")
awk -v suite="$suite" -v summary="$summary" '
    NR == 1 { n = substr($0, 4) + 0; next }
    { print }
    END {
        n++
        if (suite == 0) print "ok " n " - LMCache'"'"'s own test suite on kvcore: no kvcore-only failure (" summary ")"
        else print "not ok " n " - LMCache'"'"'s own test suite on kvcore (run-tests.sh exit " suite "): " summary
        print "1.." n
    }' "$tmp/own.tap"
