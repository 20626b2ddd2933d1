#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# `make install`'s byte-compiler: automake's build-aux/py-compile, with its list of names printed
# once and readable (automake 1.16's prints them run together: "__init__.py_abi.py_array.py").
# Errors still reach stderr; its exit status is kept.
files=
skip=
for a in "$@"; do
    if [ -n "$skip" ]; then skip=; continue; fi
    case $a in
    --basedir | --destdir) skip=1 ;;
    -*) ;;
    *) files="$files $(basename "$a")" ;;
    esac
done
${SHELL:-sh} "$(dirname "$0")/../build-aux/py-compile" "$@" >/dev/null || exit $?
echo "byte-compiled (and optimised):$files"
