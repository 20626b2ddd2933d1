# SPDX-License-Identifier: BSD-3-Clause
# Sourced by the Python test scripts. A library built with --enable-sanitizers needs the ASan/UBSan
# runtimes loaded before it: preload them into Python. Leak checking stays off here (CPython keeps its
# own allocations until exit; the C suites check kvcore's leaks). Sets $sanitized to a TAP comment.
sanitized=
case "${KVC_SAN_FLAGS:-}" in
*address*)
    cc="${KVC_CC:-cc}"
    asan=$($cc -print-file-name=libasan.so) ubsan=$($cc -print-file-name=libubsan.so)
    export LD_PRELOAD="$asan $ubsan${LD_PRELOAD:+ $LD_PRELOAD}"
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    sanitized="# sanitizers: LD_PRELOAD=$LD_PRELOAD ASAN_OPTIONS=$ASAN_OPTIONS"
    ;;
esac
