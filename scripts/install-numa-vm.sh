#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Install what `make check-numa` needs on Debian (run as root): qemu to boot the two-node guest,
# Debian's kernel for it, a static busybox and cpio for its initramfs. Packages already present
# are left alone. Without them check-numa skips and says why; .ci/run calls this script first.
# No recommends: the guest needs the kernel image and qemu's x86 system emulator, nothing else.
exec sh "$(dirname "$0")/apt-install-missing.sh" install-numa-vm qemu-system-x86 linux-image-amd64 busybox-static cpio
