# SPDX-License-Identifier: BSD-3-Clause
# KVC_CHECK_ZLIB: zlib's crc32 checksums the sections of the CacheGen container.
AC_DEFUN([KVC_CHECK_ZLIB], [
  KVC_REQUIRE_PKG([ZLIB], [zlib], [zlib], [zlib.h], [crc32], [z],
                  [install it (Debian: apt-get install zlib1g-dev)])
  KVC_SUMMARY_ADD([zlib], [yes ($ZLIB_LIBS)])
])
