#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tar for `make dist` (Makefile.am exports TAR): when creating, the same tree gives the same bytes
# whatever the checkout's times, owners, umask and directory order (docs/PACKAGING.md, "Checksums").
# automake calls it old-style ("chof - DIR", "xf -"): the first word becomes a dashed option cluster.
set -eu
first=$1
shift
case $first in -*) ;; *) first=-$first ;; esac
case $first in
    -*c*) exec tar --sort=name --mtime="@${SOURCE_DATE_EPOCH:-1767225600}" --owner=0 --group=0 \
        --numeric-owner --mode=a+rX,go-w "$first" "$@" ;;
    *) exec tar "$first" "$@" ;;
esac
