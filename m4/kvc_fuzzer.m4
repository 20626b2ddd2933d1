# SPDX-License-Identifier: BSD-3-Clause
# KVC_CHECK_FUZZER: libFuzzer targets need clang with -fsanitize=fuzzer (`make fuzz`). Without it the
# corpus is still replayed under `make check` by a plain driver. --disable-fuzzers does not look for
# clang at all (package builds must not pick up an undeclared system compiler).
AC_DEFUN([KVC_CHECK_FUZZER], [
  AC_ARG_VAR([FUZZ_CC], [clang used for the libFuzzer targets (default: clang)])
  AC_ARG_ENABLE([fuzzers],
    [AS_HELP_STRING([--disable-fuzzers], [do not look for clang's libFuzzer (no `make fuzz` targets)])],
    [], [enable_fuzzers=check])
  AS_IF([test "$enable_fuzzers" != no && test -z "$FUZZ_CC"], [AC_PATH_PROGS([FUZZ_CC], [clang clang-14], [])])
  kvc_have_fuzzer=no
  AS_IF([test "$enable_fuzzers" != no && test -n "$FUZZ_CC"], [
    AC_MSG_CHECKING([whether $FUZZ_CC supports -fsanitize=fuzzer])
    echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n){(void)d;(void)n;return 0;}' > conftest_fuzz.c
    AS_IF([$FUZZ_CC -fsanitize=fuzzer conftest_fuzz.c -o conftest_fuzz >/dev/null 2>&1],
          [kvc_have_fuzzer=yes])
    rm -f conftest_fuzz.c conftest_fuzz
    AC_MSG_RESULT([$kvc_have_fuzzer])
  ])
  AS_IF([test "$enable_fuzzers" = yes && test "$kvc_have_fuzzer" = no],
        [AC_MSG_ERROR([--enable-fuzzers: no clang with -fsanitize=fuzzer (set FUZZ_CC)])])
  AM_CONDITIONAL([KVC_HAVE_FUZZER], [test "$kvc_have_fuzzer" = yes])
  AS_IF([test "$enable_fuzzers" = no], [KVC_SUMMARY_ADD([libFuzzer (make fuzz)], [no (--disable-fuzzers)])],
        [KVC_SUMMARY_ADD([libFuzzer (make fuzz)], [$kvc_have_fuzzer])])
])
