#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Install what kvcore needs on Debian (run as root); packages already present are left alone.
#   install-deps.sh --lean   the library, the kvcore tool and its demo: compiler, autotools, hwloc,
#                            SLEEF, zlib, libdeflate (a few hundred MB less, minutes faster)
#   install-deps.sh --python the lean set and what the Python package needs: python3, numpy, venv
#   install-deps.sh [--test] also what `make check` uses: Criterion, hipcc and clang (the HIP module
#                            and its checks), valgrind, strace, cmake, python3 and man-db for the packaging
#                            checks, numpy, pytest, torch (~80 MB) and hypothesis for the Python
#                            binding's tests, python3-venv (its fresh-venv install test), mypy,
#                            bash-completion (tests/shell/test_completion.sh), and what LMCache's own test
#                            suite imports (numba, fastapi, zmq, ...: tests/lmcache/run.sh)
#   install-deps.sh --update-only  only refresh the package lists (waiting for the locks as below)
# lmod and Environment Modules (tests/shell/test_modulefiles.sh) conflict as Debian packages: the latter
# is unpacked into /opt/kvcore-deps/environment-modules (--test), not installed.
# The CUDA Toolkit is not a Debian package here: when nvcc is found (PATH or /usr/local/cuda)
# configure builds the CUDA module, otherwise it is skipped and says so.
# Another apt or dpkg at work (unattended upgrades, a parallel job) is waited for, up to
# KVC_APT_WAIT seconds (default 600): the dpkg lock through DPkg::Lock::Timeout, the package
# lists' lock of apt-get update (which that option does not cover) by retrying while apt says
# "Could not get lock".
set -eu
# What LMCache's own test suite imports (tests/lmcache/run.sh runs it against kvcore).
lmcache_test="python3-numba python3-prometheus-client python3-aiofiles python3-cpuinfo python3-zmq python3-redis \
python3-uvicorn python3-httptools python3-cachetools python3-fastapi python3-httpx python3-pytest-asyncio \
python3-setuptools-scm python3-pytest-benchmark python3-xxhash python3-aiohttp python3-msgpack python3-yaml"
lean="build-essential autoconf automake libtool pkg-config libhwloc-dev hwloc libsleef-dev zlib1g-dev libdeflate-dev"
test_only="libcriterion-dev hipcc clang libclang-rt-14-dev valgrind strace cmake python3 man-db \
python3-numpy python3-pytest python3-torch python3-hypothesis python3-venv mypy lmod tcl bash-completion \
$lmcache_test"
mode=test
case "${1:-}" in
--lean) mode=lean ;;
--python) mode=python ;;
--test | "") ;;
--update-only) mode=update ;;
*)
    echo "usage: install-deps.sh [--lean | --python | --test | --update-only]" >&2
    exit 2
    ;;
esac
limit=${KVC_APT_WAIT:-600}
say() { echo "install-deps: $*"; }

# apt_get ARGS...: apt-get, retried every 5 s while another process holds one of its locks.
apt_get() {
    errf=$(mktemp) || return 1
    waited=0
    while :; do
        rc=0
        apt-get -o DPkg::Lock::Timeout="$limit" "$@" 2>"$errf" || rc=$?
        if [ $rc -ne 0 ] && grep -q "Could not get lock" "$errf" && [ $waited -lt "$limit" ]; then
            [ $waited -eq 0 ] && say "another apt or dpkg holds a lock ($(sed -n 's/.*Could not get lock \([^ ]*\)\. It is \(held by process [0-9]* ([^)]*)\).*/\1, \2/p' "$errf" | head -1)); waiting up to $limit s"
            sleep 5
            waited=$((waited + 5))
            continue
        fi
        [ $waited -gt 0 ] && [ $rc -eq 0 ] && say "the lock was free after about $waited s"
        cat "$errf" >&2
        rm -f "$errf"
        return $rc
    done
}

# The package lists, refreshed once per run (before the first download).
refreshed=
refresh() {
    [ -n "$refreshed" ] && return 0
    export DEBIAN_FRONTEND=noninteractive
    say "refreshing the package lists (apt-get update, usually under a minute)"
    apt_get update -qq
    refreshed=1
}

if [ "$mode" = update ]; then
    [ "$(id -u)" = 0 ] || { echo "install-deps: --update-only needs root" >&2; exit 1; }
    say "refreshing the package lists (apt-get update)"
    apt_get update -qq
    exit 0
fi
pkgs=$lean
[ "$mode" = python ] && pkgs="$lean python3 python3-numpy python3-venv"
[ "$mode" = test ] && pkgs="$lean $test_only"
envmod=${KVC_ENVMODULES_ROOT:-/opt/kvcore-deps/environment-modules} # where tests/shell/test_modulefiles.sh looks
if [ "$mode" = test ] && ! [ -f /usr/lib/x86_64-linux-gnu/modulecmd.tcl ] \
    && ! [ -f "$envmod/usr/lib/x86_64-linux-gnu/modulecmd.tcl" ]; then
    [ "$(id -u)" = 0 ] || { echo "install-deps: environment-modules not unpacked in $envmod (run as root)" >&2; exit 1; }
    say "unpacking environment-modules in $envmod"
    refresh
    dl=$(mktemp -d) && chmod 755 "$dl"
    # apt downloads as the user _apt where it exists: the directory is its, or apt warns that it
    # downloads "unsandboxed as root"
    id _apt >/dev/null 2>&1 && chown _apt "$dl"
    (cd "$dl" && apt_get download -qq environment-modules) \
        && mkdir -p "$envmod" && dpkg-deb -x "$dl"/environment-modules_*.deb "$envmod"
    rm -rf "$dl"
fi
missing=
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    say "all $(echo $pkgs | wc -w) packages of the $mode set are installed"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing packages:$missing (run as root, or install them yourself)" >&2
    exit 1
fi
refresh
# What apt will do: the packages with everything they pull in, and the sizes it reports.
# shellcheck disable=SC2086
plan=$(LC_ALL=C apt-get install --assume-no $missing 2>/dev/null || true)
total=$(printf '%s\n' "$plan" | sed -n 's/^\([0-9]*\) upgraded, \([0-9]*\) newly installed.*/\2/p')
get=$(printf '%s\n' "$plan" | sed -n 's/^Need to get \([0-9.,]* [kMG]*B\).*/\1/p')
disk=$(printf '%s\n' "$plan" | sed -n 's/^After this operation, \([0-9.,]* [kMG]*B\) of additional.*/\1/p')
say "installing $(echo $missing | wc -w) missing of the $mode set's $(echo $pkgs | wc -w) packages:$missing"
say "with what they need: ${total:-?} packages, ${get:-?} to download, ${disk:-?} on disk; a few minutes, nothing is printed until apt is done"
# shellcheck disable=SC2086
apt_get install -y -qq $missing >/dev/null
say "done"
