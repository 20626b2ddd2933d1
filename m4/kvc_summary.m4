# KVC_SUMMARY_ADD(ITEM, VALUE) records one line; KVC_SUMMARY prints the table at the end of configure.
AC_DEFUN([KVC_SUMMARY_ADD], [
  kvc_summary_lines="${kvc_summary_lines}
m4_format([  %-24s], [$1])$2"
])
AC_DEFUN([KVC_SUMMARY], [
  cat <<KVC_EOF

kvcore $PACKAGE_VERSION configuration summary
--------------------------------------------------------------${kvc_summary_lines}
  install prefix          $prefix
  modules directory       ${libdir}/${PACKAGE}
--------------------------------------------------------------
KVC_EOF
])
