#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# apt-install-missing.sh NAME PACKAGE...: install the Debian packages of the list that are not
# installed yet (run as root; no recommends), saying so as NAME. Exit 0 when all are there. Used by
# scripts/install-numa-vm.sh and scripts/install-neon-cross.sh.
set -eu
name=$1
shift
missing=
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "$name: missing packages:$missing (run as root, or install them yourself)" >&2
    exit 1
fi
echo "$name: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing >/dev/null
