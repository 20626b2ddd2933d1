# SPDX-License-Identifier: BSD-3-Clause
# KVC_CHECK_OPENMP: AC_OPENMP, on by default (--disable-openmp turns it off).
AC_DEFUN([KVC_CHECK_OPENMP], [
  AC_LANG_PUSH([C])
  AC_OPENMP
  AC_LANG_POP([C])
  AC_SUBST([OPENMP_CFLAGS])
  AS_IF([test -n "$OPENMP_CFLAGS"],
        [AC_DEFINE([KVC_HAVE_OPENMP], [1], [Define to 1 when built with OpenMP])
         KVC_SUMMARY_ADD([OpenMP], [yes ($OPENMP_CFLAGS)])],
        [KVC_SUMMARY_ADD([OpenMP], [no (single-threaded CPU backend)])])
])
