#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The module files of contrib/modulefiles, loaded as a site would (root set to the prefix) against a
# temporary `make install DESTDIR=...` of this build, with Debian's Lmod and Environment Modules:
# `kvcore --version`, `man kvcore` and `import kvcore` must work after `module load kvcore`, on a
# site without an hwloc module, and an hwloc module is loaded where there is one. TAP.
# Debian's lmod and environment-modules conflict: the one not installed is looked for in
# KVC_ENVMODULES_ROOT / KVC_LMOD_ROOT (a `dpkg-deb -x` of its package; scripts/install-deps.sh
# unpacks environment-modules in /opt/kvcore-deps/environment-modules).
set -u
src="${KVC_TEST_SRCDIR:-.}"
build="${KVC_TEST_BUILDDIR:-.}"
py="${KVC_PYTHON:-:}"
version=$(sed -n 's/^version=//p' "$src/VERSION")
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); fail=1; echo "not ok $n - $1"; sed 's/^/# /' "$tmp/err"; }
skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-modules.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

lmod=
for d in "${KVC_LMOD_ROOT:-}" ""; do
    [ -x "$d/usr/share/lmod/lmod/libexec/lmod" ] && { lmod="$d/usr/share/lmod/lmod/libexec/lmod"; break; }
done
envmod=
for d in "${KVC_ENVMODULES_ROOT:-}" "" /opt/kvcore-deps/environment-modules; do
    [ -f "$d/usr/lib/x86_64-linux-gnu/modulecmd.tcl" ] && { envmod="$d/usr/lib/x86_64-linux-gnu/modulecmd.tcl"; break; }
    [ -f "$d/usr/lib/modulecmd.tcl" ] && { envmod="$d/usr/lib/modulecmd.tcl"; break; }
done
command -v tclsh >/dev/null 2>&1 || envmod=
if [ -z "$lmod" ] && [ -z "$envmod" ]; then
    echo "1..0 # SKIP neither Lmod nor Environment Modules found (Debian: apt-get install lmod; scripts/install-deps.sh)"
    exit 0
fi
for f in "kvcore/$version.lua" "kvcore/$version"; do
    [ -f "$src/contrib/modulefiles/$f" ] || { echo "Bail out! contrib/modulefiles/$f missing (VERSION is $version)"; exit 1; }
done

# A private install of this build. prefix comes from configure (KVC_PREFIX from make check).
prefix="${KVC_PREFIX:-/usr/local}"
root="$tmp/inst$prefix"
if ! ${MAKE:-make} -s -C "$build" install DESTDIR="$tmp/inst" >"$tmp/install.log" 2>&1; then
    echo "Bail out! make install DESTDIR=$tmp/inst failed: $(tail -3 "$tmp/install.log")"
    exit 1
fi

# The module trees: the shipped files with the site's one edit (root), and a tree with a stand-in
# hwloc module that records its loading.
mkdir -p "$tmp/lua/kvcore" "$tmp/tcl/kvcore" "$tmp/hw-lua/hwloc" "$tmp/hw-tcl/hwloc"
sed "s|^local root = .*|local root = \"$root\"|" "$src/contrib/modulefiles/kvcore/$version.lua" >"$tmp/lua/kvcore/$version.lua"
sed "s|^set root .*|set root $root|" "$src/contrib/modulefiles/kvcore/$version" >"$tmp/tcl/kvcore/$version"
echo 'setenv("KVC_TEST_HWLOC_MODULE", "loaded")' >"$tmp/hw-lua/hwloc/2.lua"
printf '#%%Module1.0\nsetenv KVC_TEST_HWLOC_MODULE loaded\n' >"$tmp/hw-tcl/hwloc/2"

# A library built with --enable-sanitizers needs the ASan/UBSan runtimes loaded before it in Python
# (as in tests/shell/test_python.sh); LD_PRELOAD is otherwise left as it was.
san=${LD_PRELOAD:-}
case "${KVC_SAN_FLAGS:-}" in
*address*)
    cc="${KVC_CC:-cc}"
    san="$($cc -print-file-name=libasan.so) $($cc -print-file-name=libubsan.so)${san:+ $san}" ;;
esac

# run_loaded TOOL MODULEPATH CMD...: CMD in a shell where `module load kvcore` was evaluated.
run_loaded() {
    tool=$1 mp=$2
    shift 2
    env -u PYTHONPATH -u LOADEDMODULES -u _LMFILES_ -u LMOD_CMD MODULEPATH="$mp" MANPATH= sh -c '
        tool=$1 cmd=$2; shift 2
        case $tool in
            lmod) code=$("$cmd" sh load kvcore) || exit 3 ;;
            envmod) code=$(tclsh "$cmd" sh load kvcore) || exit 3 ;;
        esac
        eval "$code" || exit 3
        [ -n "${KVC_LOAD_ONLY:-}" ] && { env; exit 0; }
        "$@"' sh "$tool" "$([ "$tool" = lmod ] && echo "$lmod" || echo "$envmod")" "$@"
}

for tool in lmod envmod; do
    case $tool in
        lmod) name="Lmod"; ext=.lua; dir=lua; [ -n "$lmod" ] || { skip "Lmod not found (Debian: apt-get install lmod)"; continue; } ;;
        envmod) name="Environment Modules"; ext=; dir=tcl
            [ -n "$envmod" ] || { skip "Environment Modules not found (Debian: environment-modules; set KVC_ENVMODULES_ROOT)"; continue; } ;;
    esac
    mp="$tmp/$dir"
    # no hwloc module on this site: the load must succeed and say nothing
    if KVC_LOAD_ONLY=1 run_loaded $tool "$mp" >"$tmp/env" 2>"$tmp/err" && ! [ -s "$tmp/err" ] \
        && grep -q "^PATH=$root/bin:" "$tmp/env"; then
        ok "$name: module load kvcore without an hwloc module (kvcore/$version$ext)"
    else
        cat "$tmp/env" >>"$tmp/err"; not_ok "$name: module load kvcore without an hwloc module (kvcore/$version$ext)"
    fi
    if KVC_LOAD_ONLY=1 run_loaded $tool "$mp:$tmp/hw-$dir" >"$tmp/env" 2>"$tmp/err" \
        && grep -q '^KVC_TEST_HWLOC_MODULE=loaded$' "$tmp/env"; then
        ok "$name: module load kvcore loads the site's hwloc module"
    else
        cat "$tmp/env" >>"$tmp/err"; not_ok "$name: module load kvcore loads the site's hwloc module"
    fi
    if run_loaded $tool "$mp" kvcore --version >"$tmp/out" 2>"$tmp/err" && [ "$(cat "$tmp/out")" = "kvcore $version" ] \
        && run_loaded $tool "$mp" sh -c 'command -v kvcore' 2>/dev/null | grep -q "^$root/bin/kvcore$"; then
        ok "$name: kvcore --version runs the installed kvcore ($(cat "$tmp/out"))"
    else
        cat "$tmp/out" >>"$tmp/err"; not_ok "$name: kvcore --version runs the installed kvcore"
    fi
    if command -v man >/dev/null 2>&1; then
        if run_loaded $tool "$mp" man -w kvcore >"$tmp/out" 2>"$tmp/err" && grep -q "^$root/share/man/man1/kvcore.1" "$tmp/out" \
            && run_loaded $tool "$mp" env MANPAGER=cat man kvcore 2>>"$tmp/err" | grep -q 'kvcore'; then
            ok "$name: man kvcore shows the installed page ($(cat "$tmp/out"))"
        else
            cat "$tmp/out" >>"$tmp/err"; not_ok "$name: man kvcore shows the installed page"
        fi
    else
        skip "$name: man not found (Debian: man-db)"
    fi
    if [ "$py" = : ]; then
        skip "$name: import kvcore: the Python package is not installed (configure found no python3 or had --disable-python)"
    elif run_loaded $tool "$mp" env LD_PRELOAD="$san" ASAN_OPTIONS=detect_leaks=0 "$py" -c 'import kvcore; print(kvcore.__file__)' >"$tmp/out" 2>"$tmp/err" \
        && grep -q "^$root/lib/python3[^/]*/[a-z-]*-packages/kvcore/__init__.py$" "$tmp/out"; then
        ok "$name: $py -c 'import kvcore' imports the installed package"
    else
        cat "$tmp/out" >>"$tmp/err"; not_ok "$name: $py -c 'import kvcore' imports the installed package"
    fi
done
echo "1..$n"
exit $fail
