# SPDX-License-Identifier: BSD-3-Clause
# KVC_VERSION_FROM_FILE: read libtool -version-info from $srcdir/VERSION.
AC_DEFUN([KVC_VERSION_FROM_FILE], [
  KVC_SO_VERSION=`sed -n 's/^libkvcore_so_version=//p' "$srcdir/VERSION"`
  AS_IF([test -z "$KVC_SO_VERSION"], [AC_MSG_ERROR([VERSION has no libkvcore_so_version line])])
  AC_SUBST([KVC_SO_VERSION])
  KVC_VERSION_MAJOR=`echo "$PACKAGE_VERSION" | cut -d. -f1`
  KVC_VERSION_MINOR=`echo "$PACKAGE_VERSION" | cut -d. -f2`
  KVC_VERSION_PATCH=`echo "$PACKAGE_VERSION" | cut -d. -f3`
  AC_SUBST([KVC_VERSION_MAJOR])
  AC_SUBST([KVC_VERSION_MINOR])
  AC_SUBST([KVC_VERSION_PATCH])
])
