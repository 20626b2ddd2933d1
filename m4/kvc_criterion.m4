# SPDX-License-Identifier: BSD-3-Clause
# KVC_CHECK_CRITERION: Criterion is only needed for `make check`; without it the tests are not built
# and `make check` says so and fails (never a silent pass). --without-criterion does not look for it
# (package builds that declare their dependencies, e.g. Spack's, must not pick up a system copy);
# --with-criterion makes its absence an error.
AC_DEFUN([KVC_CHECK_CRITERION], [
  AC_ARG_WITH([criterion],
    [AS_HELP_STRING([--without-criterion], [do not look for Criterion (the C test suite then cannot run)])],
    [], [with_criterion=check])
  kvc_have_criterion=no
  AS_CASE([$with_criterion],
    [no], [],
    [yes], [PKG_CHECK_MODULES([CRITERION], [criterion], [kvc_have_criterion=yes],
                              [AC_MSG_ERROR([--with-criterion: Criterion not found by pkg-config])])],
    [PKG_CHECK_MODULES([CRITERION], [criterion], [kvc_have_criterion=yes], [kvc_have_criterion=no])])
  AM_CONDITIONAL([KVC_HAVE_CRITERION], [test "$kvc_have_criterion" = yes])
  AS_IF([test "$with_criterion" = no], [KVC_SUMMARY_ADD([Criterion (make check)], [no (--without-criterion)])],
        [KVC_SUMMARY_ADD([Criterion (make check)], [$kvc_have_criterion])])
])
