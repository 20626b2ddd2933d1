#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The dependency rules of docs/ARCHITECTURE.md ("Who may include whom"), checked on the #include
# lines of the source tree. Prints TAP: one test per folder, and one for the installed program's
# file list. Run by `make check`; `sh tests/lint/check_deps.sh [SRCDIR]` by hand.
#
# Each quoted include is resolved as the compiler would find it (the including file's folder, then
# src/ for "common/...", src/core, src/backends/gpu), and classified by the folder it lands in;
# angle includes are the public API (<kvcore/...>), a GPU vendor's headers, or the system.
top=${1:-${KVC_TEST_SRCDIR:-$(dirname "$0")/../..}}
top=$(cd "$top" && pwd) || exit 1 # normalised: the resolved include paths are compared with it
cd "$top" || exit 1

# classify FILE INCLUDE-LINE -> prints the layer the include belongs to
classify() {
    file=$1
    line=$2
    dir=$(dirname "$file")
    case $line in
    *'#include <'*)
        name=${line#*<}
        name=${name%%>*}
        case $name in
        kvcore.h | kvcore/*) echo public ;;
        cuda*.h | cuda/* | hip/* | cub/* | thrust/* | cooperative_groups*) echo vendor ;;
        *) echo system ;;
        esac
        return ;;
    esac
    name=${line#*\"}
    name=${name%%\"*}
    if [ "$name" = config.h ]; then echo build; return; fi
    if [ "$name" = gpu_runtime.h ]; then echo vendor-runtime; return; fi
    for cand in "$dir/$name" "src/$name" "src/core/$name" "src/backends/gpu/$name"; do
        if [ -f "$cand" ]; then
            path=$(cd "$(dirname "$cand")" && pwd)/$(basename "$cand")
            path=${path#"$top"/}
            case $path in
            src/common/*) echo common ;;
            src/backends/simd/cpu_codec.h) echo cpu-codec ;;
            src/core/*) echo core ;;
            src/io/*) echo io ;;
            src/cli/*) echo cli ;;
            src/backends/simd/*) echo simd ;;
            src/backends/gpu/*) echo gpu ;;
            src/backends/cuda/*) echo cuda ;;
            src/backends/hip/*) echo hip ;;
            bench/*) echo bench ;;
            tests/*) echo tests ;;
            include/*) echo public ;;
            *) echo "other:$path" ;;
            esac
            return
        fi
    done
    echo "unresolved:$name"
}

n=0
# report DESCRIPTION: test n's TAP line, "not ok" with what $tmp holds when it is not empty
report() {
    if [ -s "$tmp" ]; then
        echo "not ok $n - $1"
        cat "$tmp"
    else
        echo "ok $n - $1"
    fi
}

# words MAKEFILE-VARIABLE-REGEX: the words of the Makefile.am variables whose names match (noinst_*
# aside), one a line
words() {
    awk -v re="^($1) *[+]?= *" '$0 ~ re && $0 !~ /^noinst_/ { on = 1 } on { print; if ($0 !~ /\\$/) on = 0 }' Makefile.am | tr ' \t\\' '\n\n\n'
}

# check FOLDER "ALLOWED LAYERS" DESCRIPTION
check() {
    folder=$1
    allowed=$2
    what=$3
    n=$((n + 1))
    bad=""
    for f in $(ls "$folder"/*.c "$folder"/*.h "$folder"/*.cu 2>/dev/null); do
        grep -n '^[[:space:]]*#[[:space:]]*include' "$f" | while IFS= read -r l; do
            layer=$(classify "$f" "$l")
            case " $allowed " in
            *" $layer "*) ;;
            *) echo "#   $f:${l%%:*}: ${l#*:} ($layer)" ;;
            esac
        done
    done >"$tmp"
    report "$what"
}

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT INT TERM

echo "1..12"
check src/common "common system" "src/common includes only itself and the C library"
check src/core "core common public system build cpu-codec" "src/core includes no src/io, src/cli, vendor or backend header but the codec's private CPU interface"
check src/io "io core common public system build" "src/io builds on src/core and src/common only"
check src/backends/simd "simd cpu-codec common public system build" "the CPU backend sees the core only through the backend ABI and the codec's private interface"
check src/backends/gpu "gpu common public system vendor-runtime" "src/backends/gpu includes no vendor header and no core header"
check src/backends/cuda "cuda gpu common public system vendor" "src/backends/cuda stands on src/backends/gpu only"
check src/backends/hip "hip gpu common public system vendor" "src/backends/hip stands on src/backends/gpu only"
check src/cli "cli bench common public system build" "the CLI uses the public API (and src/common), not the library's insides"
check bench "bench cli common public system build" "bench/ links no test code and no library insides"
check include/kvcore "public system" "public headers include only public and system headers"

# The user headers (all but backend.h) never pull in the backend ABI, and the installed program
# lists no file from tests/.
n=$((n + 1))
{
    grep -ln '#include <kvcore/backend.h>' include/kvcore.h include/kvcore/*.h | grep -v '^include/kvcore/backend.h$' |
        sed 's/^/#   includes the backend ABI: /'
    words kvcore_SOURCES | grep '^tests/' | sed 's/^/#   kvcore_SOURCES lists test code: /'
} >"$tmp"
report "user headers stay off the backend ABI; the kvcore program links no test code"

# The codec's private interface to the CPU backend (src/backends/simd/cpu_codec.h) is included by
# src/core/codec.c and the CPU backend alone (the folder rules above keep it from the GPU modules,
# the CLI and the public headers), and is not installed.
n=$((n + 1))
{
    for f in $(ls src/*/*.c src/*/*.h src/*/*/*.c src/*/*/*.h src/*/*/*.cu include/*.h include/kvcore/*.h bench/*.c tests/*.c tests/*.h 2>/dev/null); do
        case $f in src/core/codec.c | src/backends/simd/*) continue ;; esac
        grep -n '^[[:space:]]*#[[:space:]]*include' "$f" | while IFS= read -r l; do
            if [ "$(classify "$f" "$l")" = cpu-codec ]; then echo "#   $f:${l%%:*}: ${l#*:} (only src/core/codec.c and the CPU backend)"; fi
        done
    done
    words '[a-z_]*_HEADERS' | grep 'cpu_codec\.h' | sed 's/^/#   an installed header: /'
} >"$tmp"
report "the codec's private CPU interface is codec.c's and the CPU backend's alone, not installed"
exit 0
