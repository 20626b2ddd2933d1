# SPDX-License-Identifier: BSD-3-Clause
# KVC_SUMMARY_ADD(ITEM, VALUE) records one line; KVC_SUMMARY prints the table at the end of configure
# and appends it to config.log.
AC_DEFUN([KVC_SUMMARY_ADD], [
  kvc_summary_lines="${kvc_summary_lines}
m4_format([  %-24s], [$1])$2"
])

# KVC_EXPAND_DIR(VAR, VALUE): VAR = VALUE with ${prefix}, ${exec_prefix}, ${libdir} ... expanded
# as make will expand them (an unset prefix is the default one), for a summary a reader can use.
AC_DEFUN([KVC_EXPAND_DIR], [
  kvc_save_prefix=$prefix
  kvc_save_exec_prefix=$exec_prefix
  test "x$prefix" = xNONE && prefix=$ac_default_prefix
  test "x$exec_prefix" = xNONE && exec_prefix=$prefix
  $1=$2
  while :; do
    AS_CASE([$$1], [*'${'*], [eval "$1=\"$$1\""], [break])
  done
  prefix=$kvc_save_prefix
  exec_prefix=$kvc_save_exec_prefix
])

AC_DEFUN([KVC_SUMMARY], [
  KVC_EXPAND_DIR([kvc_prefix_x], ['${prefix}'])
  KVC_EXPAND_DIR([kvc_moddir_x], ['${libdir}/${PACKAGE}'])
  kvc_summary="
kvcore $PACKAGE_VERSION configuration summary
--------------------------------------------------------------${kvc_summary_lines}
  install prefix          $kvc_prefix_x
  modules directory       $kvc_moddir_x
--------------------------------------------------------------"
  AS_ECHO(["$kvc_summary"])
  AS_ECHO(["$kvc_summary"]) >&AS_MESSAGE_LOG_FD
])
