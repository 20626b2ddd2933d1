# SPDX-License-Identifier: BSD-3-Clause
# KVC_CHECK_CRITERION: Criterion is only needed for `make check`; without it the tests are not built
# and `make check` says so and fails (never a silent pass).
AC_DEFUN([KVC_CHECK_CRITERION], [
  PKG_CHECK_MODULES([CRITERION], [criterion], [kvc_have_criterion=yes], [kvc_have_criterion=no])
  AM_CONDITIONAL([KVC_HAVE_CRITERION], [test "$kvc_have_criterion" = yes])
  KVC_SUMMARY_ADD([Criterion (make check)], [$kvc_have_criterion])
])
