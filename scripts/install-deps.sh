#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Install what kvcore needs to build and test on Debian (run as root); packages already present are
# left alone. cmake, python3 and man-db are for the packaging checks (make installcheck, the recipe
# check, man pages); numpy, pytest and torch (~80 MB) run the Python binding's tests. The CUDA
# Toolkit is not a Debian package here: when nvcc is found (PATH or /usr/local/cuda) configure builds
# the CUDA module, otherwise it is skipped and says so. lmod and Environment Modules (tests/
# test_modulefiles.sh) conflict as Debian packages: the latter is unpacked beside, not installed.
set -eu
pkgs="build-essential autoconf automake libtool pkg-config libhwloc-dev hwloc libsleef-dev zlib1g-dev \
libcriterion-dev hipcc clang libclang-rt-14-dev valgrind cmake python3 man-db \
python3-numpy python3-pytest python3-torch lmod tcl"
missing=
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: missing packages:$missing (run as root, or install them yourself)" >&2
        exit 1
    fi
    echo "install-deps: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    # wait for another apt/dpkg (unattended upgrades, a parallel job) rather than fail at once
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq $missing >/dev/null
fi
envmod=/opt/kvcore-deps/environment-modules
if ! [ -f /usr/lib/x86_64-linux-gnu/modulecmd.tcl ] && ! [ -f "$envmod/usr/lib/x86_64-linux-gnu/modulecmd.tcl" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: environment-modules not unpacked in $envmod (run as root)" >&2
        exit 1
    fi
    echo "install-deps: unpacking environment-modules in $envmod"
    dl=$(mktemp -d) && chmod 755 "$dl"  # apt-get download runs as _apt
    (cd "$dl" && apt-get -o DPkg::Lock::Timeout=600 download -qq environment-modules) &&
        mkdir -p "$envmod" && dpkg-deb -x "$dl"/environment-modules_*.deb "$envmod"
    rm -rf "$dl"
fi
