# SPDX-License-Identifier: BSD-3-Clause
# KVC_CHECK_SLEEF: SLEEF vector math for the SIMD backend (RoPE tables and rotation).
AC_DEFUN([KVC_CHECK_SLEEF], [
  KVC_REQUIRE_PKG([SLEEF], [sleef], [SLEEF], [sleef.h], [Sleef_sinf_u10], [sleef],
                  [install it (Debian: apt-get install libsleef-dev)])
  KVC_SUMMARY_ADD([SLEEF], [yes ($SLEEF_LIBS)])
])
