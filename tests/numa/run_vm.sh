#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# make check-numa: boot a two-socket, two-node Linux guest under qemu and run kvcore's placement
# checks inside it (docs/MEMORY.md, "Proof on a two-node kernel").
#
#   run_vm.sh SRCDIR BUILDDIR
#
# The guest: q35, 2 sockets with one CPU each, node 0 = socket 0 + 1 GiB, node 1 = socket 1 +
# 512 MiB (smaller on purpose), distance 21; a pxb-pcie expander bus on node 1 carrying a PCIe root
# port and a display-class device (bochs-display), as a GPU on the second socket would be. The
# kernel is the host's Debian kernel; the initramfs holds busybox, tests/numa/init.sh, the test
# program, the kvcore CLI and the shared libraries they load. No network, no disk; output on the
# serial console; the guest powers off at the end and a host-side timeout kills it otherwise.
#
# Exit: 0 all checks passed, 1 a check failed or the guest did not finish, 77 skipped (no qemu,
# kernel or static busybox: the reason is printed). It never passes without the guest's TAP.
#
# Environment: KVC_NUMA_QEMU (default qemu-system-x86_64), KVC_NUMA_KERNEL (default the newest
# /boot/vmlinuz-*), KVC_NUMA_BUSYBOX (default /bin/busybox), KVC_NUMA_TIMEOUT (seconds, default
# 170), KVC_NUMA_LOG (a file to keep the guest's console log in), KVC_NUMA_ACCEL (tcg or kvm; default kvm only when a kvm_intel/kvm_amd module is loaded,
# which the paravirtual /dev/kvm of some cloud VMs is not: a stock kernel hangs there).
set -u
srcdir=${1:?usage: run_vm.sh SRCDIR BUILDDIR}
builddir=${2:?usage: run_vm.sh SRCDIR BUILDDIR}

skip() { echo "SKIP: check-numa: $*"; exit 77; }

qemu=${KVC_NUMA_QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null 2>&1 || skip "$qemu not found (Debian: apt-get install qemu-system-x86)"
kernel=${KVC_NUMA_KERNEL:-$(ls -1v /boot/vmlinuz-* 2>/dev/null | tail -1)}
[ -n "$kernel" ] && [ -r "$kernel" ] || skip "no readable kernel image (Debian: apt-get install linux-image-amd64)"
busybox=${KVC_NUMA_BUSYBOX:-/bin/busybox}
[ -x "$busybox" ] && ! ldd "$busybox" >/dev/null 2>&1 \
    || skip "no static busybox at $busybox (Debian: apt-get install busybox-static)"
command -v cpio >/dev/null 2>&1 || skip "cpio not found (Debian: apt-get install cpio)"
[ "$(uname -m)" = x86_64 ] || skip "the guest is x86_64 and this host is $(uname -m)"

# Real binaries, not libtool's wrapper scripts.
real() { if [ -x "$builddir/$(dirname "$1")/.libs/$(basename "$1")" ]; then echo "$builddir/$(dirname "$1")/.libs/$(basename "$1")"; else echo "$builddir/$1"; fi; }
kvcore_bin=$(real kvcore)
place_bin=$(real tests/numa/numa_place)
for f in "$kvcore_bin" "$place_bin" "$builddir/.libs/libkvcore.so"; do
    [ -e "$f" ] || { echo "check-numa: $f is missing (build first)" >&2; exit 1; }
done

stage=$(mktemp -d "${TMPDIR:-/tmp}/kvcore-numa.XXXXXX") || exit 1
trap 'rm -rf "$stage" "$stage.cpio.gz" "$stage.log"' EXIT
mkdir -p "$stage/bin" "$stage/kvc/bin" "$stage/kvc/lib"
cp "$busybox" "$stage/bin/busybox"
cp "$srcdir/tests/numa/init.sh" "$stage/init"
chmod 755 "$stage/init"
cp "$kvcore_bin" "$stage/kvc/bin/kvcore"
cp "$place_bin" "$stage/kvc/bin/numa_place"
cp -L "$builddir/.libs/libkvcore.so.0" "$stage/kvc/lib/"
# Every shared library the two programs load, at the path the loader finds it on the host.
for lib in $(LD_LIBRARY_PATH="$builddir/.libs" ldd "$kvcore_bin" "$place_bin" "$builddir/.libs/libkvcore.so" |
             awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | grep -v "^$builddir" | sort -u); do
    mkdir -p "$stage$(dirname "$lib")"
    cp -L "$lib" "$stage$lib"
done
(cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) >"$stage.cpio.gz" || exit 1

if [ -z "${KVC_NUMA_ACCEL:-}" ]; then
    KVC_NUMA_ACCEL=tcg
    grep -qE '^kvm_(intel|amd) ' /proc/modules 2>/dev/null && [ -w /dev/kvm ] && KVC_NUMA_ACCEL=kvm
fi
timeout_s=${KVC_NUMA_TIMEOUT:-170}

boot() { # $1: accelerator, $2: time limit in seconds; serial console to $stage.log
    cpu=max
    [ "$1" = kvm ] && cpu=host
    echo "# check-numa: booting $(basename "$kernel") under $qemu -accel $1 (time limit $2 s)"
    t0=$(date +%s)
    timeout -k 5 "$2" "$qemu" -nodefaults -no-user-config -display none -no-reboot -nic none \
        -machine q35 -accel "$1" -cpu "$cpu" -smp 2,sockets=2,cores=1,threads=1 -m 1536M \
        -object memory-backend-ram,id=m0,size=1024M -object memory-backend-ram,id=m1,size=512M \
        -numa node,nodeid=0,cpus=0,memdev=m0 -numa node,nodeid=1,cpus=1,memdev=m1 \
        -numa dist,src=0,dst=1,val=21 \
        -device pxb-pcie,id=pxb1,bus_nr=128,numa_node=1,bus=pcie.0 \
        -device pcie-root-port,id=rp1,bus=pxb1,chassis=1 -device bochs-display,bus=rp1 \
        -kernel "$kernel" -initrd "$stage.cpio.gz" \
        -append "console=ttyS0 quiet panic=-1 rdinit=/init transparent_hugepage=madvise" \
        -serial "file:$stage.log" </dev/null
    qrc=$?
    elapsed=$(( $(date +%s) - t0 ))
    tr -d '\r' <"$stage.log" >"$stage.log.txt" && mv "$stage.log.txt" "$stage.log"
}

if [ "$KVC_NUMA_ACCEL" = kvm ]; then
    # A working KVM finishes in seconds; one that hangs the guest must not eat TCG's time.
    boot kvm 60
    if ! grep -q '^KVC-NUMA-END' "$stage.log"; then
        echo "# check-numa: no result under kvm (qemu status $qrc after ${elapsed}s); falling back to tcg"
        boot tcg "$timeout_s"
    fi
else
    boot "$KVC_NUMA_ACCEL" "$timeout_s"
fi

# The guest's TAP, renumbered into one stream (numa_place and init.sh each count their own).
awk '
    /^KVC-NUMA-BEGIN/ { inside = 1; begin = $3; next }
    /^KVC-NUMA-END/ { inside = 0; end = $3; done = 1; next }
    !inside { next }
    /^ok / || /^not ok/ {
        ok = ($1 == "ok"); sub(/^(not )?ok( [0-9]+)?( - )?/, ""); n++
        printf "%s %d - %s\n", ok ? "ok" : "not ok", n, $0; if (!ok) bad++; next
    }
    /^#/ { print }
    END {
        if (!done) { print "not ok " ++n " - the guest finished its checks"; bad++ }
        printf "1..%d\n", n
        printf "# check-numa: guest ran checks from %ss to %ss after its kernel started\n", begin, end
        exit bad ? 1 : 0
    }' "$stage.log"
rc=$?
[ -n "${KVC_NUMA_LOG:-}" ] && cp "$stage.log" "$KVC_NUMA_LOG"
echo "# check-numa: qemu exited with status $qrc after ${elapsed}s"
if [ "$rc" -ne 0 ] || [ "$qrc" -ne 0 ]; then
    echo "# check-numa: FAILED; the guest console follows"
    sed 's/^/#   /' "$stage.log" | tail -60
    exit 1
fi
echo "# check-numa: PASSED"
exit 0
