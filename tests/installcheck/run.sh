#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# `make installcheck`: use the installed kvcore as a user would, from its install directories only
# (never the build tree): a C program built with pkg-config and one built with CMake's
# find_package(kvcore), both run without LD_LIBRARY_PATH (rpath); the installed tool; the man
# pages found with `man -M`; the installed documentation; the installed examples built the same
# way; the easyconfigs' sanity_check_paths. Directories come from the Makefile
# (installcheck-local). Any failure: exit 1.
set -u
: "${prefix:?}" "${bindir:?}" "${libdir:?}" "${includedir:?}" "${mandir:?}" "${docdir:?}" "${srcdir:?}"
CC=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-installcheck.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "installcheck: ok - $1"; }
not_ok() { echo "installcheck: FAIL - $1" >&2; [ -s "$tmp/err" ] && sed 's/^/    /' "$tmp/err" >&2; fail=1; }
# check DESC CMD...: CMD must succeed (its output goes to $tmp/out, $tmp/err).
check() { d=$1; shift; if "$@" >"$tmp/out" 2>"$tmp/err"; then ok "$d"; else not_ok "$d"; fi; }
# Installed programs must not lean on the build tree: no module path, no library path.
unset KVCORE_MODULE_PATH LD_LIBRARY_PATH

# ---- pkg-config
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
check "pkg-config finds kvcore $(pkg-config --modversion kvcore 2>/dev/null)" pkg-config --exists --print-errors kvcore
cflags=$(pkg-config --cflags kvcore) libs=$(pkg-config --libs kvcore)
# shellcheck disable=SC2086
check "pkg-config: consumer builds" $CC $cflags -o "$tmp/consumer-pc" "$srcdir/tests/installcheck/consumer.c" $libs \
    -Wl,-rpath,"$libdir"
check "pkg-config: consumer runs (rpath, no LD_LIBRARY_PATH)" "$tmp/consumer-pc"

# ---- CMake
if command -v cmake >/dev/null 2>&1; then
    want=$(pkg-config --modversion kvcore | sed 's/^\([0-9]*\.[0-9]*\).*/\1/')
    cm() { # cm BUILD-DIR VERSION: configure and build the consumer project
        cmake -S "$srcdir/tests/installcheck" -B "$1" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$CC" \
            -DKVC_WANT_VERSION="$2" && cmake --build "$1"
    }
    check "cmake: find_package(kvcore $want) and kvcore::kvcore build the consumer" cm "$tmp/cm" "$want"
    check "cmake: consumer runs (build rpath)" "$tmp/cm/consumer"
    if cm "$tmp/cm-99" 99.0 >"$tmp/out" 2>"$tmp/err"; then
        not_ok "cmake: find_package(kvcore 99.0) is refused"
    elif grep -q "kvcoreConfig.cmake, version: " "$tmp/err"; then
        ok "cmake: find_package(kvcore 99.0) is refused by the version file"
    else
        not_ok "cmake: find_package(kvcore 99.0) fails for the wrong reason"
    fi
else
    echo "installcheck: SKIP - cmake not found (Debian: apt-get install cmake)"
fi

# ---- the command-line tool, the man pages, the documentation
check "kvcore --version" "$bindir/kvcore" --version
check "kvcore demo (installed binary, embedded data)" "$bindir/kvcore" demo
# The tool's run path names the library's directory whatever the prefix (libtool records none for
# a directory the dynamic linker searches, /usr/local/lib, whose cache lacks a new library).
if command -v readelf >/dev/null 2>&1; then
    check "kvcore's run path names $libdir" sh -c "readelf -d '$bindir/kvcore' | grep -E 'R(UN)?PATH' | grep -qF '$libdir'"
fi
"$bindir/kvcore" info >"$tmp/out" 2>&1
if grep -o "looked for [^ ]* in [^)]*" "$tmp/out" | sed 's/.* in //' | awk -F: '{ for (i = 1; i <= NF; i++) if (seen[NR, $i]++) d = 1 } END { exit !d }'; then
    not_ok "installed kvcore info: a module directory listed twice"
else
    ok "installed kvcore info: each module directory listed once"
fi
for page in kvcore libkvcore; do
    if command -v man >/dev/null 2>&1; then
        check "man -M $mandir $page" sh -c "MANPAGER=cat PAGER=cat man -M '$mandir' $page | grep -q ."
    else
        check "$page man page installed" sh -c "ls '$mandir'/man?/$page.* >/dev/null"
    fi
done
# the bash completion (none with configure --without-bash-completion-dir: bashcompletiondir empty)
if [ -n "${bashcompletiondir:-}" ]; then
    check "bash completion installed as $bashcompletiondir/kvcore, defines the kvcore completion" \
        bash -c ". '$bashcompletiondir/kvcore' && complete -p kvcore"
fi
for f in LICENSE NOTICE NEWS README.md docs/ARCHITECTURE.md docs/ERRORS.md; do
    check "installed $docdir/$f" test -s "$docdir/$f"
done

# ---- the installed examples, built with pkg-config from the installed copy
for src in "$docdir"/examples/*.c; do
    [ -e "$src" ] || { not_ok "examples installed in $docdir/examples"; break; }
    name=$(basename "$src" .c)
    # shellcheck disable=SC2086
    check "example $name builds from $docdir/examples" $CC -std=c11 $cflags -o "$tmp/$name" "$src" $libs -lm \
        -Wl,-rpath,"$libdir"
done

# ---- the easyconfigs' sanity_check_paths (relative to the prefix: only for the default layout)
if [ "$libdir" = "$prefix/lib" ] && [ "$docdir" = "$prefix/share/doc/kvcore" ] && [ "$mandir" = "$prefix/share/man" ] \
   && command -v python3 >/dev/null 2>&1; then
    for eb in "$srcdir"/contrib/easybuild/kvcore-*.eb; do
        [ -e "$eb" ] || continue  # a release tarball has no recipes
        case $eb in *-CUDA-*) [ -e "$libdir/kvcore/kvcore_cuda.so" ] || continue ;; esac
        missing=$(python3 "$srcdir/tests/lint/check_recipes.py" --eb-paths "$eb" | while read -r kind path; do
            if [ "$kind" = f ]; then [ -f "$prefix/$path" ] || echo "$path"; else [ -d "$prefix/$path" ] || echo "$path/"; fi
        done)
        echo "$missing" >"$tmp/err"
        if [ -z "$missing" ]; then ok "$(basename "$eb"): sanity_check_paths installed"; else not_ok "$(basename "$eb"): sanity_check_paths missing"; fi
    done
fi

exit $fail
