# SPDX-License-Identifier: BSD-3-Clause
# KVC_CHECK_HWLOC: hwloc >= 2.0 is required (topology, PCI discovery, NUMA memory binding).
AC_DEFUN([KVC_CHECK_HWLOC], [
  KVC_REQUIRE_PKG([HWLOC], [hwloc >= 2.0], [hwloc], [hwloc.h], [hwloc_topology_init], [hwloc],
                  [install it (Debian: apt-get install libhwloc-dev) or set PKG_CONFIG_PATH])
  KVC_SUMMARY_ADD([hwloc], [yes ($HWLOC_LIBS)])
])
