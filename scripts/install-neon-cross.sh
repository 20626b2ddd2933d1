#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Install what `sh tests/neon/run.sh` needs on Debian (run as root): the AArch64 cross compiler
# (with its static C library) and user-mode qemu, to build the NEON tier's kernels and check them
# against the scalar tier on an x86 machine. Packages already present are left alone. Without them
# .ci/run counts the NEON step as one skip and says why; it calls this script first.
set -eu
pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"
missing=
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "install-neon-cross: missing packages:$missing (run as root, or install them yourself)" >&2
    exit 1
fi
echo "install-neon-cross: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing >/dev/null
