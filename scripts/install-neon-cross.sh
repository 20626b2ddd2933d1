#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Install what `sh tests/neon/run.sh` needs on Debian (run as root): the AArch64 cross compiler
# (with its static C library) and user-mode qemu, to build the NEON tier's kernels and check them
# against the scalar tier on an x86 machine. Packages already present are left alone. Without them
# .ci/run counts the NEON step as one skip and says why; it calls this script first.
exec sh "$(dirname "$0")/apt-install-missing.sh" install-neon-cross gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
