# SPDX-License-Identifier: BSD-3-Clause
# KVC_CHECK_VISIBILITY: -fvisibility=hidden goes into KVC_VISIBILITY_CFLAGS (used in AM_CFLAGS),
# never into the user's CFLAGS, so a site's CFLAGS=-O3 -march=... cannot drop it.
AC_DEFUN([KVC_CHECK_VISIBILITY], [
  AC_MSG_CHECKING([whether $CC supports -fvisibility=hidden])
  kvc_save_CFLAGS="$CFLAGS"
  CFLAGS="$CFLAGS -fvisibility=hidden -Werror"
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[__attribute__((visibility("default"))) int f(void);]], [[]])],
    [KVC_VISIBILITY_CFLAGS="-fvisibility=hidden"; AC_MSG_RESULT([yes])],
    [KVC_VISIBILITY_CFLAGS=""; AC_MSG_RESULT([no])])
  CFLAGS="$kvc_save_CFLAGS"
  AC_SUBST([KVC_VISIBILITY_CFLAGS])
])
