#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# configure's summary (repeated at the end of config.log) shows real directories: no "${prefix}" or
# "${exec_prefix}" left for the reader to expand, and the modules directory is the one the library
# searches (the KVCORE_MODULE_PATH default of `kvcore info`). TAP.
set -u
b="${KVC_TEST_BUILDDIR:-.}"
echo "1..3"
moddir=$(sed -n 's/^  modules directory *//p' "$b/config.log" | tail -1)
prefix=$(sed -n 's/^  install prefix *//p' "$b/config.log" | tail -1)
if [ -n "$moddir" ] && [ -n "$prefix" ]; then echo "ok 1 - config.log holds the summary"; else echo "not ok 1 - config.log holds the summary"; fi
case "$prefix$moddir" in
    *'$'*|'') echo "not ok 2 - directories are expanded"; echo "# install prefix '$prefix', modules directory '$moddir'" ;;
    *) echo "ok 2 - directories are expanded ($moddir)" ;;
esac
default=$("$b/kvcore" info | sed -n 's/^  KVCORE_MODULE_PATH *= *[^ ]* *(default \([^)]*\)).*/\1/p')
if [ "$default" = "$moddir" ]; then echo "ok 3 - modules directory is the library's default module path"
else echo "not ok 3 - modules directory is the library's default module path"; echo "# summary '$moddir', kvcore info '$default'"; fi
