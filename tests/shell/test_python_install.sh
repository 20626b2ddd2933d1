#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# README.md's Python install commands, run as written in fresh virtual environments, offline (pip
# --no-index: nothing can be downloaded): the package builds without setuptools, finds the library
# just built through pkg-config (the build tree's kvcore-uninstalled.pc; KVCORE_LIBRARY unset) and
# round-trips a chunk from outside the source tree. TAP; skips saying why when the interpreter has
# no venv module (Debian: python3-venv).
set -u
py="${KVC_PYTHON:-python3}"
build="${KVC_TEST_BUILDDIR:-.}"
src="${KVC_TEST_SRCDIR:-.}"
if [ "$py" = ":" ] || ! command -v "$py" >/dev/null 2>&1; then
    echo "1..0 # SKIP no Python 3 interpreter (configure found none)"
    exit 0
fi
if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "1..0 # SKIP $py has no venv/ensurepip (Debian: apt-get install python3-venv)"
    exit 0
fi
if ! command -v pkg-config >/dev/null 2>&1; then
    echo "1..0 # SKIP no pkg-config (Debian: apt-get install pkg-config)"
    exit 0
fi
. "$src/tests/harness/python_sanitizers.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-pyinst.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
echo "1..5"
[ -n "$sanitized" ] && echo "$sanitized"
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
fail() { n=$((n + 1)); echo "not ok $n - $1"; sed 's/^/# /' "$tmp/log"; }

# The README block, with its venv moved into this test's directory and the interpreter configure chose.
awk '/<!-- python-install -->/ { grab = 1; next } grab && /^```sh/ { on = 1; next } on && /^```/ { exit } on' \
    "$src/README.md" | sed -e "s|/tmp/kvenv|$tmp/kvenv|g" -e "s|^/usr/bin/python3 |$py |" >"$tmp/install.sh"
if [ "$(grep -c . "$tmp/install.sh")" -ne 4 ]; then
    : >"$tmp/log"
    fail "README.md has a <!-- python-install --> block of 4 commands"
    exit 0
fi
# Only the build tree's library may be found: no KVCORE_LIBRARY, pkg-config pointed at the build tree.
clean_env="env -u KVCORE_LIBRARY -u PYTHONPATH PKG_CONFIG_PATH=$build PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1"
if (cd "$src" && $clean_env sh -ex "$tmp/install.sh") >"$tmp/log" 2>&1 &&
    lib=$(tail -1 "$tmp/log" | awk '{ print $2 }') && [ "$(cd "$(dirname "$lib")" && pwd -P)" = "$(cd "$build/.libs" && pwd -P)" ]; then
    ok "README's commands install the package offline; it loads the build tree's library via pkg-config ($lib)"
else
    fail "README's commands install the package offline and it loads $build/.libs/libkvcore.so"
fi

# The installed package (not ./python) works from elsewhere: version, py.typed, a round trip.
cat >"$tmp/use.py" <<'EOF'
import os, sys
import numpy as np, kvcore
assert not kvcore.__file__.startswith(sys.argv[1]), kvcore.__file__
assert os.path.isfile(os.path.join(os.path.dirname(kvcore.__file__), "py.typed"))
kv = np.random.default_rng(0).standard_normal((2, 2, 64, 2, 8)).astype(np.float16)
out = kvcore.decompress(kvcore.compress(kv))
assert out.shape == kv.shape and out.dtype == kv.dtype, (out.shape, out.dtype)
print("version", kvcore.__version__)
EOF
want=$(sed -n 's/^version=//p' "$src/VERSION")
if (cd "$tmp" && $clean_env "$tmp/kvenv/bin/python" use.py "$(cd "$src" && pwd -P)/python") >"$tmp/log" 2>&1 &&
    grep -qx "version $want" "$tmp/log" && "$tmp/kvenv/bin/pip" show kvcore 2>/dev/null | grep -qx "Version: $want"; then
    ok "the installed package (version $want, py.typed) compresses and decompresses outside the source tree"
else
    fail "the installed package (version $want) works outside the source tree"
fi

# No setuptools needed: a venv without system packages, setuptools removed, still builds it offline
# (numpy then is missing at run time, as it is from any offline venv without --system-site-packages).
if $py -m venv "$tmp/bare" >"$tmp/log" 2>&1 && $clean_env "$tmp/bare/bin/pip" uninstall -q -y setuptools >>"$tmp/log" 2>&1 &&
    ! "$tmp/bare/bin/python" -c 'import setuptools' 2>/dev/null &&
    (cd "$src" && $clean_env "$tmp/bare/bin/pip" install -q --no-index --no-deps ./python) >>"$tmp/log" 2>&1 &&
    "$tmp/bare/bin/pip" show kvcore >>"$tmp/log" 2>&1; then
    ok "pip install --no-index ./python needs no setuptools (venv without it)"
else
    fail "pip install --no-index ./python needs no setuptools (venv without it)"
fi
if (cd "$tmp" && $clean_env "$tmp/bare/bin/python" -c 'import kvcore') >"$tmp/log" 2>&1; then
    fail "without numpy the import fails saying so"
elif grep -q "No module named 'numpy'" "$tmp/log"; then
    ok "without numpy (a venv without --system-site-packages, offline) the import says numpy is missing"
else
    fail "without numpy the import fails saying numpy is missing"
fi

# With no library to record (pkg-config finds none, no in-tree build beside the copy of ./python,
# none on the system's path) the build stops and says what to do, instead of a package that
# fails at import.
mkdir -p "$tmp/lone" && cp "$src/VERSION" "$tmp/lone/" && cp -R "$src/python" "$tmp/lone/python" && rm -f "$tmp/lone/python/kvcore/_config.py"
if "$py" -c 'import ctypes.util, sys; sys.exit(ctypes.util.find_library("kvcore") is None)'; then
    n=$((n + 1)); echo "ok $n # SKIP a libkvcore is on the system's library path: the package would load it"
elif (cd "$tmp" && env -u KVCORE_LIBRARY PKG_CONFIG_PATH="$tmp/none" PKG_CONFIG_LIBDIR="$tmp/none" PIP_NO_INDEX=1 \
        PIP_DISABLE_PIP_VERSION_CHECK=1 "$tmp/kvenv/bin/pip" install --no-deps "$tmp/lone/python") >"$tmp/log" 2>&1; then
    fail "pip install ./python with no libkvcore to record stops"
elif grep -q "no libkvcore to record" "$tmp/log"; then
    ok "pip install ./python with no libkvcore to record stops and says how to point it at one"
else
    fail "pip install ./python with no libkvcore to record stops saying why"
fi
