# SPDX-License-Identifier: BSD-3-Clause
# KVC_CHECK_SANITIZERS: --enable-sanitizers builds everything with ASan + UBSan (aborting on UB).
AC_DEFUN([KVC_CHECK_SANITIZERS], [
  AC_ARG_ENABLE([sanitizers],
    [AS_HELP_STRING([--enable-sanitizers], [build with AddressSanitizer and UndefinedBehaviorSanitizer])],
    [], [enable_sanitizers=no])
  KVC_SAN_FLAGS=
  AS_IF([test "$enable_sanitizers" = yes], [
    KVC_SAN_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    kvc_save_CFLAGS="$CFLAGS"; CFLAGS="$CFLAGS $KVC_SAN_FLAGS"
    kvc_save_LDFLAGS="$LDFLAGS"; LDFLAGS="$LDFLAGS $KVC_SAN_FLAGS"
    AC_LINK_IFELSE([AC_LANG_PROGRAM([], [])], [],
                   [AC_MSG_ERROR([$CC cannot build with $KVC_SAN_FLAGS])])
    CFLAGS="$kvc_save_CFLAGS"; LDFLAGS="$kvc_save_LDFLAGS"
  ])
  AC_SUBST([KVC_SAN_FLAGS])
  AM_CONDITIONAL([KVC_SANITIZERS], [test "$enable_sanitizers" = yes])
  KVC_SUMMARY_ADD([sanitizers], [$enable_sanitizers])
])
