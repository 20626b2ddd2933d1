#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# valgrind_check.sh PROGRAM [ARG...]: run PROGRAM (a libtool wrapper is fine) under valgrind memcheck
# with full leak checking, following child processes (Criterion runs each test in a worker process
# and ignores the worker's exit status, so valgrind's --error-exitcode alone would miss errors
# there). Writes one log per process; fails when the program fails or any process reports an
# error or a definite or possible leak. Run from the build directory (LIBTOOL: ./libtool).
set -u
libtool=${LIBTOOL:-./libtool}
supp=$(dirname "$0")/valgrind.supp
logs=$(mktemp -d "${TMPDIR:-/tmp}/kvc-valgrind.XXXXXX") || exit 99
# OpenMP: one thread keeps the run deterministic and short; libgomp's pool is covered by the
# suppressions either way.
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$libtool" --mode=execute valgrind -q --error-exitcode=1 --leak-check=full \
    --show-leak-kinds=definite,possible --errors-for-leak-kinds=definite,possible --trace-children=yes \
    --suppressions="$supp" --log-file="$logs/vg.%p" "$@"
rc=$?
# -q: a process's log holds only its errors, so any non-empty log is a failure.
bad=$(find "$logs" -type f -size +0c)
if [ -n "$bad" ]; then
    cat $bad
    rc=1
fi
nlogs=$(ls "$logs" | wc -l)
echo "valgrind: $* -> exit $rc, $nlogs process(es), $(echo "$bad" | grep -c .) with errors"
rm -rf "$logs"
exit $rc
