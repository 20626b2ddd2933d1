#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Faults around the files kvcore reads and writes, TAP on stdout. Each case asserts the exact
# outcome: an output that existed before is byte for byte unchanged after a failed or killed write,
# no temporary remains after SIGINT/SIGTERM, and SIGKILL leaves only OUT.tmp.PID.* (the documented
# name). Writes are held half done by an LD_PRELOAD shim (tests/modules/pause_write.c) so the signal
# lands inside the write, not at a random point. Disk full uses a private small tmpfs (needs root
# and unshare -m: skipped with the reason otherwise). Non-regular inputs (FIFO with and without a
# writer, directory, /dev/zero) must neither block nor read without bound.
set -u
builddir="$(cd "${KVC_TEST_BUILDDIR:-.}" && pwd)"
kvcore="$builddir/kvcore"
shim="$builddir/tests/modules/.libs/pause_write.so"
data="${KVC_TEST_DATA:-tests/data}/kvdata"
K="$data/story_prompt_K.npy"
V="$data/story_prompt_V.npy"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-faults.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
not_ok() { n=$((n + 1)); fail=1; echo "not ok $n - $1"; [ -s "$tmp/err" ] && sed 's/^/# /' "$tmp/err"; }
verdict() { if [ "$1" = 0 ]; then ok "$2"; else not_ok "$2"; fi; }
temporaries() { ls "$tmp" | grep -c "^$1\.tmp\." ; }

"$kvcore" encode "$K" "$V" -o "$tmp/a.kvc" >/dev/null 2>"$tmp/err" || { not_ok "setup: encode"; echo "1..$n"; exit 1; }
"$kvcore" decode "$tmp/a.kvc" -o "$tmp/ref.npy" >/dev/null 2>"$tmp/err" || { not_ok "setup: decode"; echo "1..$n"; exit 1; }
head -c 50000 /dev/urandom >"$tmp/old"

# ---------------------------------------------------------------- signals during a write
# run_held SIG CMD OUT ARGS...: start kvcore with the shim, wait until its write is half done,
# send SIG, and check the outcome.
run_held() {
    sig=$1 cmd=$2 out=$3
    shift 3
    cp "$tmp/old" "$tmp/$out"
    rm -f "$tmp/marker"
    # env --default-signal: a background job of a non-interactive shell starts with SIGINT ignored
    # (and kvcore, like any tool, leaves an inherited SIG_IGN alone).
    KVC_FAULT_MARKER="$tmp/marker" LD_PRELOAD="$preload" ASAN_OPTIONS="$asan_options" \
        env --default-signal=INT "$kvcore" "$cmd" -q -f "$@" -o "$tmp/$out" 2>"$tmp/err" &
    pid=$!
    i=0
    while [ ! -e "$tmp/marker" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
    if [ ! -e "$tmp/marker" ]; then
        kill -KILL $pid 2>/dev/null
        wait $pid
        not_ok "$cmd, $sig during the write: the write was never reached"
        return
    fi
    kill -$sig $pid
    i=0
    while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL $pid 2>/dev/null && echo "# still running 10 s after SIG$sig: killed" >>"$tmp/err"
    wait $pid
    st=$?
    case $sig in KILL) want=137 ;; INT) want=130 ;; TERM) want=143 ;; esac
    cmp -s "$tmp/$out" "$tmp/old"
    unchanged=$?
    left=$(temporaries "$out")
    own=$(ls "$tmp" | grep -c "^$out\.tmp\.$pid\.")
    echo "# exit $st (want $want), existing output unchanged: $([ $unchanged = 0 ] && echo yes || echo no), temporaries left: $left" >>"$tmp/err"
    if [ $sig = KILL ]; then
        # SIGKILL cannot be caught: what remains is OUT.tmp.PID.* (documented), OUT untouched.
        [ $st = $want ] && [ $unchanged = 0 ] && [ "$left" = "$own" ] && [ "$left" -le 1 ]
        verdict $? "$cmd, SIGKILL during the write: $out unchanged, only $out.tmp.$pid.* left"
        rm -f "$tmp/$out".tmp.*
    else
        [ $st = $want ] && [ $unchanged = 0 ] && [ "$left" = 0 ]
        verdict $? "$cmd, SIG$sig during the write: $out unchanged, no temporary left"
    fi
}

# A sanitizer build needs its runtime first in the preload list (leak checks off for these runs:
# the libtool wrapper's own tools would report theirs).
preload="$shim"
asan_options="${ASAN_OPTIONS:-}"
if [ -e "$shim" ] && ! LD_PRELOAD="$preload" "$kvcore" --version >/dev/null 2>&1; then
    rt=$(ldd "$builddir/.libs/kvcore" 2>/dev/null | awk '/libasan/ {print $3}')
    if [ -n "$rt" ]; then
        preload="$rt $shim"
        asan_options="${asan_options:+$asan_options:}detect_leaks=0"
    fi
fi
if [ ! -e "$shim" ]; then
    for c in "decode KILL" "decode INT" "decode TERM" "encode KILL" "encode INT" "encode TERM"; do
        skip "$c during the write" "the shim $shim is not built"
    done
elif ! LD_PRELOAD="$preload" ASAN_OPTIONS="$asan_options" "$kvcore" --version >/dev/null 2>&1; then
    for c in "decode KILL" "decode INT" "decode TERM" "encode KILL" "encode INT" "encode TERM"; do
        skip "$c during the write" "kvcore does not run with the shim preloaded"
    done
else
    for sig in KILL INT TERM; do run_held $sig decode out.npy "$tmp/a.kvc"; done
    for sig in KILL INT TERM; do run_held $sig encode out.kvc "$K" "$V"; done
fi

# ---------------------------------------------------------------- disk full
if [ "$(id -u)" != 0 ]; then
    skip "disk full: decode over an existing file" "needs root to mount a private tmpfs"
    skip "disk full: encode over an existing file" "needs root to mount a private tmpfs"
elif ! unshare -m true 2>/dev/null; then
    skip "disk full: decode over an existing file" "unshare -m is not permitted here"
    skip "disk full: encode over an existing file" "unshare -m is not permitted here"
else
    mkdir "$tmp/full"
    head -c 100000 /dev/urandom >"$tmp/old100k"
    # In a private mount namespace: a 200 KiB tmpfs holding an existing 100 KB output; the 320 KiB
    # decode (and, with 150 KB taken, the 93 KiB container) cannot fit. Prints one line per case.
    unshare -m sh -c '
        kvcore=$1 tmp=$2 K=$3 V=$4
        mount -t tmpfs -o size=200k kvc-full "$tmp/full" || exit 3
        cp "$tmp/old100k" "$tmp/full/out.npy"
        "$kvcore" decode -q -f "$tmp/a.kvc" -o "$tmp/full/out.npy" 2>"$tmp/full-decode.err"
        st=$?
        cmp -s "$tmp/full/out.npy" "$tmp/old100k" && same=yes || same=no
        echo "decode $st $same $(ls "$tmp/full" | grep -c "\.tmp\.")"
        rm -f "$tmp/full/out.npy"
        head -c 150000 /dev/zero >"$tmp/full/filler"
        cp "$tmp/old" "$tmp/full/out.kvc"
        "$kvcore" encode -q -f "$K" "$V" -o "$tmp/full/out.kvc" 2>"$tmp/full-encode.err"
        st=$?
        cmp -s "$tmp/full/out.kvc" "$tmp/old" && same=yes || same=no
        echo "encode $st $same $(ls "$tmp/full" | grep -c "\.tmp\.")"
    ' sh "$kvcore" "$tmp" "$K" "$V" >"$tmp/full.out" 2>"$tmp/err" &
    wait $!
    mstat=$?
    if [ $mstat = 3 ]; then
        skip "disk full: decode over an existing file" "mount -t tmpfs failed in the private namespace"
        skip "disk full: encode over an existing file" "mount -t tmpfs failed in the private namespace"
    else
        for c in decode encode; do
            line=$(grep "^$c " "$tmp/full.out")
            cat "$tmp/full-$c.err" >"$tmp/err" 2>/dev/null
            echo "# $line (command exit, existing output unchanged, temporaries left)" >>"$tmp/err"
            # (and not "output buffer too small", which a full disk used to be reported as)
            [ "$line" = "$c 1 yes 0" ] && grep -q "No space left" "$tmp/full-$c.err" && ! grep -q "buffer too small" "$tmp/full-$c.err"
            verdict $? "disk full: $c over an existing file fails with 'No space left', file unchanged, no temporary"
        done
    fi
fi

# ---------------------------------------------------------------- inputs that are not regular files
mkfifo "$tmp/fifo"
for c in "decode -o $tmp/f.npy" "encode -o $tmp/f.kvc" "inspect"; do
    set -- $c
    timeout 20 "$kvcore" "$@" "$tmp/fifo" >/dev/null 2>"$tmp/err"
    st=$?
    [ $st = 1 ] && grep -q "FIFO" "$tmp/err" && [ ! -e "$tmp/f.npy" ] && [ ! -e "$tmp/f.kvc" ]
    verdict $? "$1: a FIFO without a writer is refused after a bounded wait (exit $st), nothing written"
done
cat "$tmp/a.kvc" >"$tmp/fifo" &
wpid=$!
timeout 20 "$kvcore" decode -q "$tmp/fifo" -o "$tmp/fromfifo.npy" 2>"$tmp/err"
st=$?
kill $wpid 2>/dev/null # still blocked in open() when kvcore never opened the FIFO
wait $wpid
[ $st = 0 ] && cmp -s "$tmp/fromfifo.npy" "$tmp/ref.npy"
verdict $? "decode: a FIFO with a writer is read like standard input"
# A writer that opens the FIFO a second after kvcore did (a producer still starting up).
sh -c "sleep 1; cat '$tmp/a.kvc' >'$tmp/fifo'" &
wpid=$!
rm -f "$tmp/fromfifo.npy"
timeout 20 "$kvcore" decode -q "$tmp/fifo" -o "$tmp/fromfifo.npy" 2>"$tmp/err"
st=$?
kill $wpid 2>/dev/null
wait $wpid
[ $st = 0 ] && cmp -s "$tmp/fromfifo.npy" "$tmp/ref.npy"
verdict $? "decode: a FIFO whose writer opens it a second later is waited for (exit $st)"
for c in "decode -o $tmp/d.npy" "encode -o $tmp/d.kvc" "inspect"; do
    set -- $c
    timeout 20 "$kvcore" "$@" "$tmp" >/dev/null 2>"$tmp/err"
    st=$?
    [ $st = 1 ] && grep -q "is a directory" "$tmp/err"
    verdict $? "$1: a directory input says 'is a directory' (exit $st)"
done
for c in "decode -o $tmp/z.npy" "encode -o $tmp/z.kvc" "inspect"; do
    set -- $c
    timeout 20 "$kvcore" "$@" /dev/zero >/dev/null 2>"$tmp/err"
    st=$?
    [ $st = 1 ] && [ ! -e "$tmp/z.npy" ] && [ ! -e "$tmp/z.kvc" ]
    verdict $? "$1 /dev/zero: ends at once with exit 1 (got $st), nothing written"
done
# A valid header declaring the container's size, then endless zeros: read only that many bytes.
{ head -c 48 "$tmp/a.kvc"; cat /dev/zero; } 2>/dev/null | timeout 20 "$kvcore" decode - -o "$tmp/z.npy" 2>"$tmp/err"
st=$?
[ $st = 1 ] && [ ! -e "$tmp/z.npy" ]
verdict $? "decode: a valid header then endless zeros ends (exit $st)"

echo "1..$n"
exit $fail
