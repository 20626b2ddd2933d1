#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Fault injection under resource limits (issue #20), TAP on stdout: RLIMIT_AS, RLIMIT_MEMLOCK,
# RLIMIT_NPROC with many threads, a small /dev/shm in a private mount namespace, and a SIGKILLed
# shared-memory creator followed by attach and reclaim. Each case runs tests/harness/limits_helper under
# the limit and asserts the exact outcome: the library's status, the process still alive (exit 0),
# and what is left in /dev/shm. Parts that need root (a private mount, dropping capabilities,
# switching user) are skipped with the reason otherwise; parts a sanitizer build cannot run under
# (RLIMIT_AS: ASan reserves terabytes of shadow) likewise.
set -u
helper="${KVC_TEST_BUILDDIR:-.}/tests/harness/limits_helper"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-limits.XXXXXX") || exit 99
shm="/kvc-limits-$$"
pids=""
cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    rm -f "/dev/shm$shm" "/dev/shm$shm-empty"
    rm -rf "$tmp" ${pubs:-}
}
trap cleanup EXIT
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); fail=1; echo "not ok $n - $1"; sed 's/^/# /' "$tmp/out" "$tmp/err" 2>/dev/null; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
# expect DESC WANT CMD...: CMD exits 0 and its stdout is exactly WANT.
expect() {
    desc=$1 want=$2
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -eq 0 ] && [ "$(cat "$tmp/out")" = "$want" ]; then ok "$desc"; else echo "exit $rc, want output '$want'" >>"$tmp/err"; not_ok "$desc"; fi
}
# Start the helper in the background until it prints "ready"; its pid in $bg.
start() {
    "$helper" "$@" >"$tmp/bg" 2>&1 &
    bg=$!
    pids="$pids $bg"
    i=0
    while [ "$(cat "$tmp/bg")" != ready ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
}
kill9() { kill -9 "$1" && wait "$1" 2>/dev/null; }

root=0
[ "$(id -u)" -eq 0 ] && root=1
asan=0
[ "$("$helper" config)" = "sanitizers=yes" ] && asan=1

echo "1..15"

# RLIMIT_AS: an allocation above the address-space limit is KVC_ERR_NO_MEMORY, not a crash; the
# thread-count check (its test threads need stacks) still leaves a working context.
if [ $asan -eq 1 ]; then
    skip "RLIMIT_AS: 1 GiB allocation under a 512 MiB limit" "sanitizer build (ASan needs its shadow address space)"
    skip "RLIMIT_AS: 64 threads asked under a 512 MiB limit" "sanitizer build"
else
    expect "RLIMIT_AS: 1 GiB allocation under a 512 MiB limit is KVC_ERR_NO_MEMORY" KVC_ERR_NO_MEMORY \
        prlimit --as=536870912 "$helper" alloc plain 1073741824
    prlimit --as=536870912 "$helper" threads 64 >"$tmp/out" 2>"$tmp/err"
    if [ $? -eq 0 ] && grep -Eq '^threads [0-9]+ KVC_OK$' "$tmp/out"; then ok "RLIMIT_AS: 64 threads asked under a 512 MiB limit: a working context"; else not_ok "RLIMIT_AS: 64 threads asked"; fi
fi

# RLIMIT_MEMLOCK: pinning beyond it is KVC_ERR_LIMIT. Root pins regardless (CAP_IPC_LOCK): drop it.
if [ $root -eq 1 ]; then
    expect "RLIMIT_MEMLOCK: pinning 1 MiB under a 64 KiB limit is KVC_ERR_LIMIT" KVC_ERR_LIMIT \
        prlimit --memlock=65536 setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock "$helper" alloc pinned 1048576
else
    expect "RLIMIT_MEMLOCK: pinning 1 MiB under a 64 KiB limit is KVC_ERR_LIMIT" KVC_ERR_LIMIT \
        prlimit --memlock=65536 "$helper" alloc pinned 1048576
fi
expect "RLIMIT_MEMLOCK: a plain allocation under the same limit works" KVC_OK prlimit --memlock=65536 "$helper" alloc plain 1048576

# RLIMIT_NPROC: root's uid is exempt, so root runs the helper as nobody (whose own processes the
# limit counts); others get their current thread count plus 4. OpenMP used to end the process
# ("Thread creation failed"); now the team is lowered and the work done.
as_user=""
nproc_helper=$helper
nproc_skip=""
if [ $root -eq 1 ]; then
    as_user="setpriv --reuid=65534 --regid=65534 --clear-groups"
    used=$(ps -L -u 65534 --no-headers 2>/dev/null | wc -l)
    # nobody must be able to run the helper and load libkvcore: the build tree may sit in a 0700
    # home or temporary directory. A world-readable copy of both, in a 0755 directory that nobody
    # can reach, is run instead (LD_LIBRARY_PATH is searched before the helper's RUNPATH).
    lib=$(ldd "$helper" 2>/dev/null | sed -n 's/^[[:space:]]*libkvcore\.so[^ ]* => \([^ ]*\) .*/\1/p')
    for base in "${TMPDIR:-/tmp}" /tmp /dev/shm; do
        pub=$(mktemp -d "$base/kvc-limits-pub.XXXXXX" 2>/dev/null) || continue
        chmod 0755 "$pub"
        pubs="${pubs:-} $pub"
        if cp "$helper" "$pub/limits_helper" && { [ -z "$lib" ] || cp "$lib" "$pub/"; } && chmod 0755 "$pub"/* &&
           $as_user env LD_LIBRARY_PATH="$pub" "$pub/limits_helper" config >/dev/null 2>&1; then
            nproc_helper="env LD_LIBRARY_PATH=$pub $pub/limits_helper"
            break
        fi
    done
    [ "$nproc_helper" = "$helper" ] && nproc_skip="user nobody cannot run a copy of the helper from ${TMPDIR:-/tmp}, /tmp or /dev/shm"
else
    used=$(ps -L -u "$(id -u)" --no-headers 2>/dev/null | wc -l)
fi
limit=$((used + 4))
# LeakSanitizer stops the world at exit from a thread of its own, which the limit refuses.
[ $asan -eq 1 ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
for req in 64 100000; do
    if [ -n "$nproc_skip" ]; then skip "RLIMIT_NPROC: $req threads asked" "$nproc_skip"; continue; fi
    # shellcheck disable=SC2086
    prlimit --nproc=$limit $as_user $nproc_helper threads $req >"$tmp/out" 2>"$tmp/err"
    rc=$?
    got=$(sed -n 's/^threads \([0-9]*\) KVC_OK$/\1/p' "$tmp/out")
    if [ $rc -eq 0 ] && [ -n "$got" ] && [ "$got" -ge 1 ] && [ "$got" -le 5 ]; then
        ok "RLIMIT_NPROC $limit ($used in use): $req threads asked, $got used, the copy done"
    else
        not_ok "RLIMIT_NPROC $limit: $req threads asked (exit $rc)"
    fi
done
if [ -n "$nproc_skip" ]; then
    skip "RLIMIT_NPROC: KVCORE_NUM_THREADS=4096 lowered, the process lives" "$nproc_skip"
else
    # shellcheck disable=SC2086
    KVCORE_NUM_THREADS=4096 prlimit --nproc=$limit $as_user $nproc_helper threads 0 >"$tmp/out" 2>"$tmp/err"
    if [ $? -eq 0 ] && grep -Eq '^threads [1-5] KVC_OK$' "$tmp/out"; then ok "RLIMIT_NPROC: KVCORE_NUM_THREADS=4096 lowered, the process lives"; else not_ok "RLIMIT_NPROC: KVCORE_NUM_THREADS=4096"; fi
fi
[ $asan -eq 1 ] && export ASAN_OPTIONS="${ASAN_OPTIONS%detect_leaks=0}"

# A small /dev/shm (1 MiB tmpfs in a private mount namespace): a 4 MiB segment is KVC_ERR_NO_SPACE
# at allocation, and no segment is left behind.
if [ $root -eq 1 ] && unshare -m --propagation private true 2>/dev/null; then
    unshare -m --propagation private sh -c "mount -t tmpfs -o size=1m tmpfs /dev/shm && \"$helper\" shm-create $shm 4194304 && ls -A /dev/shm" >"$tmp/out" 2>"$tmp/err"
    if [ $? -eq 0 ] && [ "$(cat "$tmp/out")" = KVC_ERR_NO_SPACE ]; then ok "small /dev/shm: KVC_ERR_NO_SPACE, nothing left"; else not_ok "small /dev/shm"; fi
else
    skip "small /dev/shm: KVC_ERR_NO_SPACE, nothing left" "needs root for a private tmpfs mount (unshare -m)"
fi

# A creator SIGKILLed while holding a segment: attach still reads its data; a plain create says
# abandoned (KVC_ERR_EXISTS); reclaim replaces it; after the reclaimer frees it, nothing is left.
start shm-create "$shm" 1048576 hold
expect "a live creator's segment is not reclaimed" KVC_ERR_EXISTS "$helper" shm-reclaim "$shm" 1048576
kill9 "$bg"
expect "killed creator: attach reads what it wrote" "KVC_OK hello" "$helper" shm-attach "$shm"
"$helper" shm-create "$shm" 1048576 >"$tmp/out" 2>"$tmp/err"
if [ "$(cat "$tmp/out")" = KVC_ERR_EXISTS ] && grep -q abandoned "$tmp/err"; then ok "killed creator: a plain create says abandoned"; else not_ok "killed creator: a plain create says abandoned"; fi
expect "killed creator: reclaim replaces the segment" KVC_OK "$helper" shm-reclaim "$shm" 1048576
if [ ! -e "/dev/shm$shm" ]; then ok "reclaimed segment freed: nothing left in /dev/shm"; else not_ok "reclaimed segment freed: nothing left"; fi

# A creator killed while reserving (empty segment, owner lock held): attach says "retry" while it
# lives, "not found" once it is dead, never "retry" forever.
start shm-empty "$shm-empty"
expect "empty segment, creator alive: attach is KVC_ERR_STATE (retry)" "KVC_ERR_STATE -" "$helper" shm-attach "$shm-empty"
kill9 "$bg"
expect "empty segment, creator dead: attach is KVC_ERR_NOT_FOUND" "KVC_ERR_NOT_FOUND -" "$helper" shm-attach "$shm-empty"
exit $fail
