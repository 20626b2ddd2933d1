# SPDX-License-Identifier: BSD-3-Clause
# KVC_REQUIRE_PKG(VAR, MODULE, WITH-NAME, HEADER, FUNC, LIB, HELP)
# Required dependency: pkg-config first, then a plain header + library check; a clear error if absent.
# Sets VAR_CFLAGS / VAR_LIBS (AC_SUBST) and keeps CPPFLAGS/LIBS unchanged.
AC_DEFUN([KVC_REQUIRE_PKG], [
  PKG_CHECK_MODULES([$1], [$2], [kvc_found_$1=yes], [
    kvc_save_LIBS="$LIBS"
    kvc_found_$1=no
    AC_CHECK_HEADER([$4], [AC_SEARCH_LIBS([$5], [$6], [kvc_found_$1=yes; $1_LIBS="-l$6"])])
    LIBS="$kvc_save_LIBS"
  ])
  AS_IF([test "$kvc_found_$1" != yes],
        [AC_MSG_ERROR([$3 not found: $7])])
  AC_SUBST([$1_CFLAGS])
  AC_SUBST([$1_LIBS])
])
