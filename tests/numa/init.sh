#!/bin/busybox sh
# SPDX-License-Identifier: BSD-3-Clause
# /init of the NUMA test VM (tests/numa/run_vm.sh builds the initramfs around it). Runs the
# placement checks and the CLI checks, prints TAP between the KVC-NUMA markers on the serial
# console, and powers off. Any line outside the markers is ignored by the host.
/bin/busybox --install -s /bin
export PATH=/bin LD_LIBRARY_PATH=/kvc/lib
mkdir -p /proc /sys /dev /tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/shm
mount -t tmpfs shm /dev/shm
mount -t tmpfs tmp /tmp
ulimit -l unlimited # busybox ash has -l (shellcheck disable=SC3045)
echo 0 >/proc/sys/kernel/printk_ratelimit 2>/dev/null
echo "KVC-NUMA-BEGIN uptime $(cut -d' ' -f1 /proc/uptime)"

/kvc/bin/numa_place >/tmp/place.tap 2>/tmp/place.err
rc=$?
cat /tmp/place.tap
sed 's/^/# stderr: /' /tmp/place.err
# A crash or an early exit must not pass: the program's own plan line closes its output, and its
# status is 0 (all ok) or 1 (a check failed); anything else (a sanitizer report at exit) fails.
grep -q '^1\.\.[1-9]' /tmp/place.tap && [ "$rc" -le 1 ] || echo "not ok - numa_place ran to its end (status $rc)"

echo "# info and bench start at $(cut -d' ' -f1 /proc/uptime)s"
# kvcore info: both nodes, and the display device on node 1.
/kvc/bin/kvcore info >/tmp/info 2>&1
rc=$?
sed 's/^/# info: /' /tmp/info
[ "$rc" = 0 ] || echo "not ok - kvcore info exited with status $rc"
grep -q '^  node 0: ' /tmp/info && grep -q '^  node 1: ' /tmp/info \
    && echo "ok - kvcore info lists nodes 0 and 1" || echo "not ok - kvcore info lists nodes 0 and 1"
grep -q '^  [0-9a-f:.]* \[1234:[0-9a-f]*\] class 03[0-9a-f]* numa node 1$' /tmp/info \
    && echo "ok - kvcore info shows the display device on node 1" \
    || echo "not ok - kvcore info shows the display device on node 1"

echo "# bench starts at $(cut -d' ' -f1 /proc/uptime)s"
# kvcore bench memory: a local and a remote figure (its JSON lines: the table's layout is for people).
/kvc/bin/kvcore bench memory --quick --case read_numa --json >/tmp/bench 2>&1
rc=$?
sed 's/^/# bench: /' /tmp/bench
if [ "$rc" = 0 ] && grep -q '"case":"read_numa_local","value":[0-9]' /tmp/bench && grep -q '"case":"read_numa_remote","value":[0-9]' /tmp/bench; then
    echo "ok - kvcore bench memory reports local and remote reads"
else
    echo "not ok - kvcore bench memory reports local and remote reads (status $rc)"
fi
echo "KVC-NUMA-END uptime $(cut -d' ' -f1 /proc/uptime)"
poweroff -f
