#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Install what `make check-numa` needs on Debian (run as root): qemu to boot the two-node guest,
# Debian's kernel for it, a static busybox and cpio for its initramfs. Packages already present
# are left alone. Without them check-numa skips and says why; .ci/run calls this script first.
set -eu
pkgs="qemu-system-x86 linux-image-amd64 busybox-static cpio"
missing=
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "install-numa-vm: missing packages:$missing (run as root, or install them yourself)" >&2
    exit 1
fi
echo "install-numa-vm: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
# No recommends: the guest needs the kernel image and qemu's x86 system emulator, nothing else.
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing >/dev/null
