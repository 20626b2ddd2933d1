# SPDX-License-Identifier: BSD-3-Clause
# KVC_CHECK_ZLIB: zlib's crc32 checksums the sections of the CacheGen container (and
# crc32_combine joins the checksums of a section written in pieces).
AC_DEFUN([KVC_CHECK_ZLIB], [
  KVC_REQUIRE_PKG([ZLIB], [zlib], [zlib], [zlib.h], [crc32], [z],
                  [install it (Debian: apt-get install zlib1g-dev)])
  KVC_SUMMARY_ADD([zlib], [yes ($ZLIB_LIBS)])
])

# KVC_CHECK_LIBDEFLATE: libdeflate's CRC-32 (the same checksum as zlib's, computed with carry-less
# multiplies where the CPU has them) for the container's sections: several times zlib 1.2's speed,
# which was 7 % of a container decode. Optional: without it zlib computes the checksums.
# --with-libdeflate makes its absence an error, --without-libdeflate does not look for it (package
# builds that declare their dependencies, e.g. Spack's, must not pick up a system copy).
AC_DEFUN([KVC_CHECK_LIBDEFLATE], [
  AC_ARG_WITH([libdeflate],
    [AS_HELP_STRING([--with-libdeflate], [checksum containers with libdeflate's CRC-32 (default: when found)])],
    [], [with_libdeflate=check])
  kvc_have_libdeflate=no
  AS_IF([test "$with_libdeflate" != no], [
    PKG_CHECK_MODULES([LIBDEFLATE], [libdeflate], [kvc_have_libdeflate=yes], [
      kvc_save_LIBS="$LIBS"
      AC_CHECK_HEADER([libdeflate.h],
                      [AC_SEARCH_LIBS([libdeflate_crc32], [deflate], [kvc_have_libdeflate=yes; LIBDEFLATE_LIBS="-ldeflate"])])
      LIBS="$kvc_save_LIBS"
    ])
  ])
  AS_IF([test "$with_libdeflate" = yes && test "$kvc_have_libdeflate" != yes],
        [AC_MSG_ERROR([--with-libdeflate: libdeflate not found (Debian: apt-get install libdeflate-dev)])])
  # kvcore.pc's static link: the package when pkg-config knew it, else the library itself.
  KVC_PC_DEFLATE_REQUIRES=
  KVC_PC_DEFLATE_LIBS=
  AS_IF([test "$kvc_have_libdeflate" = yes],
        [AC_DEFINE([KVC_HAVE_LIBDEFLATE], [1], [Define to 1 to checksum containers with libdeflate's CRC-32.])
         AS_IF([test "$LIBDEFLATE_LIBS" = "-ldeflate"], [KVC_PC_DEFLATE_LIBS=-ldeflate], [KVC_PC_DEFLATE_REQUIRES=libdeflate])],
        [LIBDEFLATE_CFLAGS=; LIBDEFLATE_LIBS=])
  AC_SUBST([LIBDEFLATE_CFLAGS])
  AC_SUBST([LIBDEFLATE_LIBS])
  AC_SUBST([KVC_PC_DEFLATE_REQUIRES])
  AC_SUBST([KVC_PC_DEFLATE_LIBS])
  AS_CASE([$with_libdeflate],
    [no], [KVC_SUMMARY_ADD([libdeflate (CRC-32)], [no (--without-libdeflate): zlib's])],
    [AS_IF([test "$kvc_have_libdeflate" = yes], [KVC_SUMMARY_ADD([libdeflate (CRC-32)], [yes ($LIBDEFLATE_LIBS)])],
           [KVC_SUMMARY_ADD([libdeflate (CRC-32)], [no (not found): zlib's])])])
])
