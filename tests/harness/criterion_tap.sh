#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Automake LOG_COMPILER for Criterion suites: run one suite and print its TAP report on stdout, so
# tap-driver.sh counts skips as SKIP (never as PASS). Criterion writes TAP to stderr with --tap=-.
#
# Sanitizer reports (ASan, LeakSanitizer, UBSan, TSan builds) go to files in a fresh directory and
# any report fails the suite ("Bail out!"): Criterion runs each test in a worker process and ignores
# the worker's exit status once the test has reported, so a leak that LeakSanitizer finds when the
# worker exits would otherwise pass unnoticed. Options the caller set in *SAN_OPTIONS are kept.
dir=$(mktemp -d "${TMPDIR:-/tmp}/kvc-san.XXXXXX") || exit 99
for var in ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS; do
    eval "cur=\${$var:-}"
    eval "$var=\"\${cur:+\$cur:}log_path=\$dir/report\""
    export "${var?}"
done
# Every skip names its reason. A test outside --filter is reported as skipped with none: say which
# filter left it out (the suite's own run, without the filter, runs it). Any other skip without a
# reason (cr_skip_test() with no message) fails.
filter=
for a in "$@"; do case $a in --filter=*) filter=${a#--filter=} ;; esac; done
{ "$@" --tap=- 2>&1; echo "rc=$?" >"$dir/rc"; } | awk -v filter="$filter" -v suite="$(basename "$1")" '
    / # SKIP test was skipped$/ && filter != "" {
        sub(/ # SKIP test was skipped$/, " # SKIP not selected by --filter=\047" filter "\047 here (" suite " runs it without the filter)")
    }
    /^ok .* # SKIP( test was skipped)?$/ { sub(/^ok /, "not ok "); sub(/ # SKIP.*$/, " (skipped without saying why: give cr_skip_test a reason)") }
    { print }'
rc=$(sed -n 's/^rc=//p' "$dir/rc"); rm -f "$dir/rc"
if [ -n "$(ls -A "$dir")" ]; then
    echo "Bail out! sanitizer report(s) from $1 (see below)"
    cat "$dir"/*
    rc=1
fi
rm -rf "$dir"
exit $rc
