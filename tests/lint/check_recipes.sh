#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The Spack and EasyBuild recipes (contrib/) against this tree's ./configure --help: every option
# they pass must exist, the Spack recipe's configure_args() is run for CPU, CUDA, ROCm and ~openmp
# specs, the easyconfigs' names, versions and fields are checked (tests/lint/check_recipes.py; TAP).
set -u
srcdir="${KVC_TEST_SRCDIR:-.}"
# The recipes record the release tarball's checksum, so the tarball does not ship them.
[ -d "$srcdir/contrib/spack" ] || { echo "1..0 # SKIP no contrib/spack: a release tarball (the recipes are in the repository)"; exit 0; }
py=$(command -v python3) || { echo "1..0 # SKIP python3 not found (Debian: apt-get install python3)"; exit 0; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-recipes.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
# configure lives in the source tree (release tarballs ship it; a git checkout after autoreconf).
"$srcdir/configure" --help >"$tmp/help" 2>&1 || { echo "Bail out! $srcdir/configure --help failed"; exit 1; }
exec "$py" "$srcdir/tests/lint/check_recipes.py" "$srcdir" "$tmp/help"
