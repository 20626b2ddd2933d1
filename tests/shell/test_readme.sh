#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The README's commands as a newcomer pastes them, in the order the README gives them, in a fresh
# copy of this checkout at ~/kvcore with HOME a temporary directory (TAP): the main command, the
# Python set-up and quick start (run from ~, beside the clone), the virtual-environment install,
# the cluster install to ~/opt/kvcore with its installcheck, the C compile line for every installed
# example (each then run), and the installed kvcore with no LD_LIBRARY_PATH.
#
# Two departures from a fresh machine, both outside the blocks' text: a config.site builds without
# the GPU modules (they are a third of the build and compile-checked by the suite itself) and
# installs to ~/opt/kvcore (the cluster block's prefix) instead of /usr/local; and the cluster
# block runs without its `make check` (this test is part of that check).
set -u
src=$(cd "${srcdir:-.}" && pwd)
py=${KVC_PYTHON:-python3}
if [ "$(git -C "$src" rev-parse --show-toplevel 2>/dev/null)" != "$src" ]; then
    echo "1..0 # SKIP $src is not a git checkout (a release tarball): the README's commands start from a clone"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-readme.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
export HOME="$tmp/home"
clone=$HOME/kvcore
prefix=$HOME/opt/kvcore
mkdir -p "$clone" "$tmp/bin"
# The tracked and the new (not ignored) files of the working tree, as a clone of it would have them.
(cd "$src" && git ls-files -co --exclude-standard | while IFS= read -r f; do [ -e "$f" ] && printf '%s\n' "$f"; done |
    tar -cf - -T -) | tar -xf - -C "$clone" || exit 99
printf 'prefix=%s\nwith_cuda=no\nwith_hip=no\n' "$prefix" >"$tmp/config.site"
# A newcomer's shell: no make of ours around it, no library or package paths of the build tree.
unset MAKEFLAGS MFLAGS MAKELEVEL LD_LIBRARY_PATH PKG_CONFIG_PATH PYTHONPATH KVCORE_LIBRARY KVCORE_MODULE_PATH \
    KVCORE_BACKEND KVCORE_LMCACHE
export CONFIG_SITE="$tmp/config.site" PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1

readme() { awk -v m="<!-- $1 -->" '$0 == m {f = 1; next} f && /^```/ {if (b) exit; b = 1; next} f && b {print}' "$clone/README.md"; }
n=0
fail=0
broken=
# step DESCRIPTION DIRECTORY SCRIPT-FILE [CHECK-REGEX]: runs the script with bash -e there; a later
# step needs the earlier ones, so after a failure the rest are reported as not run.
step() {
    n=$((n + 1))
    if [ -n "$broken" ]; then echo "not ok $n - $1 (not run: $broken failed)"; fail=1; return; fi
    if ! [ -s "$3" ]; then echo "not ok $n - $1 (README.md has no such block)"; fail=1; broken=$1; return; fi
    if (cd "$2" && bash -e "$3") >"$tmp/log" 2>&1 && { [ -z "${4:-}" ] || grep -Eq "$4" "$tmp/log"; }; then
        echo "ok $n - $1"
    else
        echo "not ok $n - $1"; fail=1; broken=$1
        sed 's/^/# /' "$3"; echo "# ---- its output (the end):"; tail -n 40 "$tmp/log" | sed 's/^/# /'
    fi
}
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
echo "1..7"

readme main-command >"$tmp/main.sh"
step "main command: installs, builds and runs the demo" "$clone" "$tmp/main.sh" "^verify: transfers byte-exact yes"

readme python-setup >"$tmp/setup.sh"
step "Python set-up: build with python3 and install" "$clone" "$tmp/setup.sh"

# The quick start from ~ (where the clone ~/kvcore must not shadow the package), the prefix's
# packages on PYTHONPATH as the README says for a prefix outside the system's.
readme python-example >"$tmp/example.py"
site=$(ls -d "$prefix"/lib/python3*/*-packages 2>/dev/null | head -n 1)
printf 'PYTHONPATH=%s %s %s\n' "$site" "$py" "$tmp/example.py" >"$tmp/example.sh"
[ -s "$tmp/example.py" ] || : >"$tmp/example.sh"
step "Python quick start from ~ (beside the clone)" "$HOME" "$tmp/example.sh" "bytes, max error"

if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import venv, numpy' 2>/dev/null; then
    readme python-install | sed "s|/tmp/kvenv|$tmp/kvenv|g" >"$tmp/venv.sh"
    step "python-install: a virtual environment from the source tree" "$clone" "$tmp/venv.sh" "^[0-9]+\.[0-9]+\.[0-9]+ /"
else
    skip "python-install: a virtual environment from the source tree" "the block names /usr/bin/python3, which has no venv or numpy here"
fi

# The cluster block: its optional [--with-...] arguments left out, and its make check (see above).
readme cluster-install | sed -e 's/ \[[^]]*\]//g' -e 's/make check && //' >"$tmp/cluster.sh"
step "cluster install to ~/opt/kvcore and its installcheck" "$clone" "$tmp/cluster.sh"
if [ -z "$broken" ] && grep -q "FAIL" "$tmp/log"; then
    echo "# the installcheck reported:"; grep "FAIL" "$tmp/log" | sed 's/^/# /'; fail=1
fi

# The compile line for each installed example, then each run (codec_file writes the file it names).
readme compile >"$tmp/compile.sh"
: >"$tmp/examples.sh"
if [ -s "$tmp/compile.sh" ]; then
    for c in "$prefix"/share/doc/kvcore/examples/*.c; do
        name=$(basename "$c" .c)
        sed -e "s|prog\.c|$c|" -e "s|-o prog\$|-o $tmp/bin/$name|" "$tmp/compile.sh" >>"$tmp/examples.sh"
        case $name in codec_file) echo "$tmp/bin/$name $tmp/example.kvc" ;; *) echo "$tmp/bin/$name" ;; esac >>"$tmp/examples.sh"
    done
fi
step "the compile line builds every installed example; each runs" "$HOME" "$tmp/examples.sh"

printf 'export PATH=%s/bin:$PATH\nkvcore --version\nkvcore demo -q\n' "$prefix" >"$tmp/installed.sh"
step "the installed kvcore starts with no LD_LIBRARY_PATH" "$HOME" "$tmp/installed.sh" "^verify: transfers byte-exact yes"
exit $fail
