# SPDX-License-Identifier: BSD-3-Clause
# KVC_CHECK_PYTHON: the Python package python/kvcore (docs/PYTHON.md). `make install` installs it with
# automake's Python support; `make check` runs its pytest suite with the same interpreter. Unless
# PYTHON is set, the first python3 (on PATH, then /usr/bin/python3) that imports numpy and pytest
# is chosen, so that a pyenv shim without Debian's python3-numpy / python3-pytest does not shadow the
# system interpreter that has them; failing that, the first python3 found (its tests then fail and
# say what is missing). Without any python3 the package is not installed and its tests skip.
# --disable-python looks for no interpreter (a package build whose recipe declares no Python must not
# install into the system's); --enable-python makes a missing python3 an error.
AC_DEFUN([KVC_CHECK_PYTHON], [
  AC_ARG_VAR([PYTHON], [Python 3 interpreter for the kvcore package and its tests])
  AC_ARG_ENABLE([python],
    [AS_HELP_STRING([--disable-python], [do not build or install the Python package python/kvcore])],
    [], [enable_python=check])
  AS_IF([test "$enable_python" = no], [PYTHON=:])
  AS_IF([test -z "$PYTHON"], [
    kvc_python_first=
    for kvc_py in python3 /usr/bin/python3; do
      kvc_py_path=`command -v "$kvc_py" 2>/dev/null`
      test -n "$kvc_py_path" || continue
      test -n "$kvc_python_first" || kvc_python_first=$kvc_py_path
      AS_IF(["$kvc_py_path" -c 'import numpy, pytest' >/dev/null 2>&1], [PYTHON=$kvc_py_path; break])
    done
    AS_IF([test -z "$PYTHON"], [PYTHON=${kvc_python_first:-:}])
  ])
  AS_IF([test "$PYTHON" != :], [AM_PATH_PYTHON([3.7], [], [PYTHON=:])])
  AS_IF([test "$enable_python" = yes && test "$PYTHON" = :],
        [AC_MSG_ERROR([--enable-python: no python3 >= 3.7 found (set PYTHON)])])
  # Install where this interpreter looks when it has such a directory under the prefix (Debian's
  # python3 reads /usr/local/lib/python3.X/dist-packages, not the site-packages automake picks).
  AS_IF([test "$PYTHON" != :], [
    kvc_prefix=$prefix
    test "x$kvc_prefix" = xNONE && kvc_prefix=$ac_default_prefix
    kvc_pysite=`"$PYTHON" -c "import sys; v = sys.version_info; p = '$kvc_prefix/lib/python%d.%d/' % (v.major, v.minor); print(next((d for d in sys.path if d.startswith(p) and d.endswith(('site-packages', 'dist-packages'))), ''))" 2>/dev/null`
    AS_IF([test -n "$kvc_pysite"], [pythondir=`echo "$kvc_pysite" | sed 's|^'"$kvc_prefix"'|${prefix}|'`])
  ])
  AM_CONDITIONAL([KVC_HAVE_PYTHON], [test "$PYTHON" != :])
  AS_IF([test "$enable_python" = no], [KVC_SUMMARY_ADD([Python package], [no (--disable-python)])],
        [test "$PYTHON" = :], [KVC_SUMMARY_ADD([Python package], [no (no python3 >= 3.7)])], [
    kvc_py_mods=
    for kvc_m in numpy pytest torch; do
      AS_IF(["$PYTHON" -c "import $kvc_m" >/dev/null 2>&1], [kvc_py_mods="$kvc_py_mods $kvc_m"],
            [kvc_py_mods="$kvc_py_mods no-$kvc_m"])
    done
    KVC_SUMMARY_ADD([Python package], [yes ($PYTHON:$kvc_py_mods)])
  ])
])
