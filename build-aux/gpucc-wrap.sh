#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Run nvcc or hipcc under libtool's compile mode. libtool adds host-compiler flags (-fPIC, -DPIC)
# that nvcc only accepts through -Xcompiler; hipcc (clang) takes them directly.
# Usage: gpucc-wrap.sh COMPILER [ARGS...]
cc=$1; shift
case "$(basename "$cc")" in
nvcc*)
    for a in "$@"; do
        shift
        case $a in
        -fPIC|-fpic|-fvisibility=*|-pthread) set -- "$@" -Xcompiler "$a" ;;
        *) set -- "$@" "$a" ;;
        esac
    done ;;
esac
exec "$cc" "$@"
