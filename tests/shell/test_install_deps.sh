#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# scripts/install-deps.sh against the real apt (TAP): while another process holds the package
# lists' lock with the same kind of lock apt takes (fcntl), the script's apt-get update waits for
# it instead of failing at once with "Could not get lock" (exit 100); the README's main command
# installs the lean set, its test command the full one; a bad argument is a usage error.
# Skips with the reason when not root, without apt-get or python3, or without a reachable mirror.
set -u
src="${KVC_TEST_SRCDIR:-.}"
script="$src/scripts/install-deps.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-deps.XXXXXX") || exit 99
holder=""
trap '[ -n "$holder" ] && kill "$holder" 2>/dev/null; rm -rf "$tmp"' EXIT
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); fail=1; echo "not ok $n - $1"; sed 's/^/# /' "$tmp/out" "$tmp/err" 2>/dev/null; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
readme() { awk -v m="<!-- $1 -->" '$0 == m {f = 1; next} f && /^```/ {if (b) exit; b = 1; next} f && b {print}' "$src/README.md"; }

case "$(readme main-command)" in *"install-deps.sh --lean"*) ok "README main command installs the lean set" ;; *) not_ok "README main command installs the lean set" ;; esac
case "$(readme test-command)" in *"install-deps.sh --lean"*) not_ok "README test command installs the full set" ;; *install-deps.sh*) ok "README test command installs the full set" ;; *) not_ok "README test command installs the full set" ;; esac
sh "$script" --no-such-set >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 2 ] && grep -q "usage: install-deps.sh" "$tmp/err"; then ok "a bad argument is a usage error (exit 2)"; else not_ok "a bad argument is a usage error (exit 2)"; fi

py=$(command -v /usr/bin/python3 || command -v python3 || true)
if [ "$(id -u)" -ne 0 ]; then
    skip "apt-get update waits for a held package lists lock" "needs root (apt-get update)"
elif ! command -v apt-get >/dev/null 2>&1; then
    skip "apt-get update waits for a held package lists lock" "no apt-get here"
elif [ -z "$py" ]; then
    skip "apt-get update waits for a held package lists lock" "no python3 to hold the lock as apt does (fcntl)"
else
    hold=12
    "$py" -c '
import fcntl, os, sys, time
fd = os.open("/var/lib/apt/lists/lock", os.O_RDWR | os.O_CREAT, 0o640)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(int(sys.argv[1]))' $hold >"$tmp/held" 2>&1 &
    holder=$!
    i=0
    while [ "$(cat "$tmp/held")" != held ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    t0=$(date +%s)
    KVC_APT_WAIT=120 sh "$script" --update-only >"$tmp/out" 2>"$tmp/err"
    rc=$?
    t1=$(date +%s)
    if grep -q "Failed to fetch\|Temporary failure resolving\|Could not resolve" "$tmp/err"; then
        skip "apt-get update waits for a held package lists lock" "no reachable package mirror"
    elif [ $rc -eq 0 ] && grep -q "waiting up to 120 s" "$tmp/out" && grep -q "lists/lock" "$tmp/out" &&
         [ $((t1 - t0)) -ge $((hold - 2)) ] && ! grep -q "Could not get lock" "$tmp/err"; then
        ok "apt-get update waited $((t1 - t0)) s for the held lists lock (held $hold s), then succeeded"
    else
        echo "exit $rc after $((t1 - t0)) s" >>"$tmp/err"
        not_ok "apt-get update waits for a held package lists lock"
    fi
fi

# The download of environment-modules (the test set unpacks it): as apt's own user where there is
# one, so apt does not warn that it downloads "unsandboxed as root".
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    skip "environment-modules is downloaded and unpacked without apt's sandbox warning" "needs root and apt-get"
elif [ -f /usr/lib/x86_64-linux-gnu/modulecmd.tcl ]; then
    skip "environment-modules is downloaded and unpacked without apt's sandbox warning" "the system has environment-modules: the script downloads none"
else
    KVC_ENVMODULES_ROOT="$tmp/envmod" sh "$script" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if grep -q "Failed to fetch\|Temporary failure resolving\|Could not resolve" "$tmp/err"; then
        skip "environment-modules is downloaded and unpacked without apt's sandbox warning" "no reachable package mirror"
    elif [ $rc -eq 0 ] && [ -f "$tmp/envmod/usr/lib/x86_64-linux-gnu/modulecmd.tcl" ] && ! grep -qi "unsandboxed" "$tmp/out" "$tmp/err"; then
        ok "environment-modules is downloaded and unpacked without apt's sandbox warning"
    else
        echo "exit $rc" >>"$tmp/err"
        not_ok "environment-modules is downloaded and unpacked without apt's sandbox warning"
    fi
fi
echo "1..$n"
exit $fail
