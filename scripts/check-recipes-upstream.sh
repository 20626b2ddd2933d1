#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The Spack and EasyBuild recipes (contrib/) checked by the real tools, offline (docs/PACKAGING.md
# has the versions and the output of a full run). Each step prints PASS, FAIL or SKIP (with the
# reason); the last line is "N passed, N failed, N skipped"; exit status 1 when a step failed.
#
#   SPACK_ROOT=/path/to/spack SPACK_PACKAGES=/path/to/spack-packages \
#   CLINGO_PYTHONPATH=/path/to/clingo/python EB_SOURCES=/path/to/easybuild \
#   scripts/check-recipes-upstream.sh [BUILDDIR]
#
# SPACK_ROOT       a Spack checkout (1.x); SPACK_PACKAGES a spack-packages checkout (its builtin repo)
# CLINGO_PYTHONPATH where clingo's Python module is (Spack's concretizer; not bootstrapped offline)
# SPACK_PYTHON     the interpreter for Spack (default /usr/bin/python3)
# EB_SOURCES       a folder with easybuild-framework, easybuild-easyblocks, easybuild-easyconfigs
# BUILDDIR         a configured build tree of this source (default: .) for `make dist`
# KVC_UPSTREAM_WORK a folder for Spack's install tree and stages (default: a temporary one, removed)
# COMPILER_WRAPPER_TARBALL  Spack 1.x builds every package through its compiler-wrapper package,
#                  whose source is a download (compiler-wrapper-1.1.0.tar.gz from
#                  github.com/spack/compiler-wrapper/releases): give it here for an offline install
# The Spack install builds kvcore +python ~libdeflate from the `make dist` tarball against Debian's
# packages (externals: gcc, gmake, pkgconf, hwloc, sleef, zlib, python, py-numpy, and /usr as the
# python-venv that `extends("python")` brings: a venv of its own would not see Debian's numpy;
# ~libdeflate because this Spack cannot take Debian's libdeflate as an external), with --test=root,
# then runs its stand-alone tests (`spack test run`) and imports kvcore after `spack load`.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-.}" && pwd)
pass=0 fail=0 skip=0
PASS() { pass=$((pass + 1)); echo "PASS: $*"; }
FAIL() { fail=$((fail + 1)); echo "FAIL: $*"; }
SKIP() { skip=$((skip + 1)); echo "SKIP: $*"; }
# step NAME CMD...: run CMD, its output indented under the step's name.
step() {
    name=$1
    shift
    echo "== $name: $*"
    if "$@" >"$work/step.log" 2>&1; then sed 's/^/   /' "$work/step.log"; PASS "$name"
    else sed 's/^/   /' "$work/step.log"; FAIL "$name"; fi
}
if [ -n "${KVC_UPSTREAM_WORK:-}" ]; then
    work=$KVC_UPSTREAM_WORK
    mkdir -p "$work"
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/kvc-upstream.XXXXXX") || exit 99
    trap 'rm -rf "$work"' EXIT
fi
version=$(sed -n 's/^version=//p' "$src/VERSION")

# ---------------------------------------------------------------- the release tarball
tarball=
echo "== make dist in $build"
if [ -f "$build/Makefile" ] && make -s -C "$build" dist >"$work/dist.log" 2>&1 && [ -f "$build/kvcore-$version.tar.gz" ]; then
    tarball="$build/kvcore-$version.tar.gz"
    PASS "make dist: kvcore-$version.tar.gz, sha256 $(sha256sum "$tarball" | cut -d' ' -f1)"
    # Reproducible: a second `make dist` gives the same bytes.
    cp "$tarball" "$work/first.tar.gz"
    if make -s -C "$build" dist >>"$work/dist.log" 2>&1 && cmp -s "$tarball" "$work/first.tar.gz"; then
        PASS "make dist is reproducible (two runs, same sha256)"
    else
        FAIL "make dist is reproducible (two runs, same sha256)"
    fi
    if [ -n "$(tar -tzf "$tarball" | grep -E '^kvcore-[^/]*/contrib/(spack|easybuild)/')" ]; then
        FAIL "the tarball does not ship the recipes that record its checksum"
    else
        PASS "the tarball does not ship the recipes that record its checksum"
    fi
    step "recorded sha256 = this tree's tarball" sh -c "cd '$src' && sh scripts/recipe-checksums.sh check '$tarball'"
else
    tail -20 "$work/dist.log" 2>/dev/null
    SKIP "make dist: no configured build tree at $build (run configure there, or give BUILDDIR)"
fi

# ---------------------------------------------------------------- Spack
spack_ok=
if [ -z "${SPACK_ROOT:-}" ] || ! [ -x "$SPACK_ROOT/bin/spack" ]; then
    SKIP "spack: SPACK_ROOT is not set to a Spack checkout"
elif [ -z "${SPACK_PACKAGES:-}" ] || ! [ -d "$SPACK_PACKAGES/repos/spack_repo/builtin" ]; then
    SKIP "spack: SPACK_PACKAGES is not set to a spack-packages checkout (Spack would clone it)"
else
    spack_ok=1
fi
if [ -n "$spack_ok" ]; then
    cfg="$work/spack-user"
    mkdir -p "$cfg"
    # Spack's user scope is ours alone; the system scope is empty.
    mkdir -p "$work/spack-system"
    export SPACK_USER_CONFIG_PATH="$cfg" SPACK_SYSTEM_CONFIG_PATH="$work/spack-system" SPACK_USER_CACHE_PATH="$work/spack-cache"
    export SPACK_PYTHON="${SPACK_PYTHON:-/usr/bin/python3}"
    [ -n "${CLINGO_PYTHONPATH:-}" ] && export PYTHONPATH="$CLINGO_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}"
    spack() { "$SPACK_ROOT/bin/spack" "$@"; }
    cat >"$cfg/repos.yaml" <<EOF
repos::
  kvcore: $src/contrib/spack/spack_repo/kvcore
  builtin: $SPACK_PACKAGES/repos/spack_repo/builtin
EOF
    cat >"$cfg/config.yaml" <<EOF
config:
  install_tree:
    root: $work/spack-opt
  build_stage: [$work/spack-stage]
  test_stage: $work/spack-test
  source_cache: $work/spack-sources
  build_jobs: 2
EOF
    # Offline: no binary caches or source downloads; the concretizer's clingo comes from PYTHONPATH.
    cat >"$cfg/bootstrap.yaml" <<EOF
bootstrap:
  enable: false
EOF
    # Debian's packages as externals (scripts/install-deps.sh installs them).
    dv() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null | sed 's/^[0-9]*://; s/[-+~].*//; s/\.dfsg.*//'; }
    cat >"$cfg/packages.yaml" <<EOF
packages:
  gmake: {buildable: false, externals: [{spec: gmake@$(dv make), prefix: /usr}]}
  pkgconf: {buildable: false, externals: [{spec: pkgconf@$(dv pkgconf), prefix: /usr}]}
  hwloc: {buildable: false, externals: [{spec: hwloc@$(dv libhwloc-dev)+pci, prefix: /usr}]}
  sleef: {buildable: false, externals: [{spec: sleef@$(dv libsleef-dev), prefix: /usr}]}
  zlib: {buildable: false, externals: [{spec: zlib@$(dv zlib1g-dev), prefix: /usr}]}
  python: {buildable: false, externals: [{spec: python@$(dv python3.11), prefix: /usr}]}
  py-numpy: {buildable: false, externals: [{spec: py-numpy@$(dv python3-numpy), prefix: /usr}]}
  python-venv: {buildable: false, externals: [{spec: python-venv@1.0, prefix: /usr}]}
EOF
    step "spack: version and repositories" sh -c "'$SPACK_ROOT/bin/spack' --version && '$SPACK_ROOT/bin/spack' repo list && \
echo spack-packages \$(git -C '$SPACK_PACKAGES' log -1 --format='%H %cs' 2>/dev/null || echo '(not a git checkout)')"
    step "spack: compiler find (Debian gcc)" spack compiler find
    step "spack audit packages kvcore" spack audit packages kvcore
    # The style check of the spack-packages given: ruff where its pyproject.toml configures ruff
    # (current spack-packages), else black, isort and flake8 with its settings. Paths are absolute,
    # so the result does not depend on the working directory.
    pkg="$src/contrib/spack/spack_repo/kvcore/packages/kvcore/package.py"
    if grep -q '^\[tool\.ruff' "$SPACK_PACKAGES/pyproject.toml" 2>/dev/null; then
        if command -v ruff >/dev/null; then
            step "style: ruff check (spack-packages' config)" \
                ruff check --no-fix --config "$SPACK_PACKAGES/pyproject.toml" "$pkg"
            step "style: ruff format (spack-packages' config)" \
                ruff format --check --diff --config "$SPACK_PACKAGES/pyproject.toml" "$pkg"
        else
            SKIP "style: this spack-packages lints with ruff (its pyproject.toml) and ruff is not installed (pip install ruff)"
        fi
    elif command -v black >/dev/null && command -v isort >/dev/null && command -v flake8 >/dev/null; then
        step "style: black (spack-packages' config, 99 columns)" \
            black --check --diff --config "$SPACK_PACKAGES/pyproject.toml" "$pkg"
        step "style: isort (spack-packages' config)" \
            isort --check-only --diff --settings-path "$SPACK_PACKAGES/pyproject.toml" "$pkg"
        # The settings of spack-packages' .flake8 (its output-format plugin lives in Spack's CI tree).
        step "style: flake8 (spack-packages' .flake8 settings)" \
            flake8 --isolated --max-line-length=99 --extend-ignore=E731,E203 \
            --per-file-ignores="$pkg:F403,F405,F821" "$pkg"
    else
        SKIP "style: black, isort or flake8 not found (Debian: apt-get install black isort flake8)"
    fi
    step "spack spec kvcore (CPU)" spack spec -I kvcore
    step "spack spec kvcore ~libdeflate" spack spec -I kvcore ~libdeflate
    cw=${COMPILER_WRAPPER_TARBALL:-}
    if [ -n "$tarball" ] && [ -z "$cw" ]; then
        SKIP "spack install: COMPILER_WRAPPER_TARBALL is not set (Spack's compiler-wrapper source; offline it cannot be downloaded)"
    elif [ -n "$tarball" ]; then
        # The tarball through a local mirror, so that Spack checks it against the recorded sha256.
        sum=$(sha256sum "$tarball" | cut -d' ' -f1)
        mkdir -p "$work/mirror/_source-cache/archive/$(echo "$sum" | cut -c1-2)"
        cp "$tarball" "$work/mirror/_source-cache/archive/$(echo "$sum" | cut -c1-2)/$sum.tar.gz"
        cwsum=$(sha256sum "$cw" | cut -d' ' -f1)
        mkdir -p "$work/mirror/_source-cache/archive/$(echo "$cwsum" | cut -c1-2)"
        cp "$cw" "$work/mirror/_source-cache/archive/$(echo "$cwsum" | cut -c1-2)/$cwsum.tar.gz"
        cat >"$cfg/mirrors.yaml" <<EOF
mirrors:
  local: file://$work/mirror
EOF
        f0=$fail
        step "spack install --test=root kvcore +python ~libdeflate (make dist tarball, Debian externals)" \
            spack install --test=root --verbose kvcore +python ~libdeflate
        if [ "$fail" = "$f0" ]; then
            # `spack test run` exits 0 whatever the tests did: its results must say PASSED, no FAILED.
            step "spack test run kvcore (stand-alone tests)" sh -c "'$SPACK_ROOT/bin/spack' test run --alias kvc kvcore; \
'$SPACK_ROOT/bin/spack' test results -l kvc | tee '$work/results'; grep -q PASSED '$work/results' && \
! grep -q FAILED '$work/results'"
            prefix=$(spack location -i kvcore 2>/dev/null)
            step "installed kvcore: RPATH, demo, import" sh -c "readelf -d '$prefix/bin/kvcore' | grep -E 'R(UN)?PATH' && \
'$prefix/bin/kvcore' --version && '$prefix/bin/kvcore' demo | tail -3 && \
PYTHONPATH=\$(echo '$prefix'/lib/python3*/*-packages) /usr/bin/python3 -c 'import kvcore; print(kvcore.library_path)'"
            # What a user does: `spack load`, then the site's python, no PYTHONPATH of one's own
            # (Spack itself ran with clingo's on PYTHONPATH: the load script is made first).
            spack load --sh kvcore >"$work/load.sh" 2>"$work/load.err"
            step "spack load kvcore; /usr/bin/python3 -c 'import kvcore'" env -u PYTHONPATH sh -c \
                ". '$work/load.sh' && /usr/bin/python3 -c 'import kvcore; print(kvcore.__file__)'"
        else
            FAIL "spack test run kvcore: kvcore is not installed"
        fi
    else
        SKIP "spack install: no make dist tarball"
    fi
    step "spack spec kvcore +cuda cuda_arch=90" spack spec -I kvcore +cuda cuda_arch=90
    step "spack spec kvcore +rocm amdgpu_target=gfx942" spack spec -I kvcore +rocm amdgpu_target=gfx942
    # cuda_arch=none must be refused with the recipe's message.
    echo "== spack spec kvcore +cuda (no cuda_arch): must fail"
    if spack spec kvcore +cuda >"$work/step.log" 2>&1; then
        sed 's/^/   /' "$work/step.log"; FAIL "spack spec kvcore +cuda without cuda_arch is refused"
    elif grep -q 'needs at least one cuda_arch' "$work/step.log"; then
        grep 'cuda_arch' "$work/step.log" | sed 's/^/   /'; PASS "spack spec kvcore +cuda without cuda_arch is refused"
    else
        sed 's/^/   /' "$work/step.log"; FAIL "spack spec kvcore +cuda without cuda_arch is refused with the recipe's message"
    fi
    # Last, since it makes the installed kvcore an external of this configuration: `spack external
    # find` detects it by its program.
    if [ -n "${prefix:-}" ]; then
        step "spack external find kvcore (the installed one on PATH)" sh -c "PATH='$prefix/bin':\$PATH \
'$SPACK_ROOT/bin/spack' external find kvcore && '$SPACK_ROOT/bin/spack' config get packages | grep -A3 'kvcore:'"
    fi
fi

# ---------------------------------------------------------------- EasyBuild
ebs=
if [ -z "${EB_SOURCES:-}" ] || ! [ -d "$EB_SOURCES/easybuild-framework/easybuild" ]; then
    SKIP "easybuild: EB_SOURCES is not set to a folder with easybuild-framework, -easyblocks, -easyconfigs"
else
    ebs=$EB_SOURCES
fi
if [ -n "$ebs" ]; then
    export PYTHONPATH="$ebs/easybuild-framework:$ebs/easybuild-easyblocks:$ebs/easybuild-easyconfigs${PYTHONPATH:+:$PYTHONPATH}"
    export EASYBUILD_PREFIX="$work/easybuild" EASYBUILD_MODULES_TOOL=Lmod EASYBUILD_MODULE_SYNTAX=Lua
    [ -n "${LMOD_CMD:-}" ] || export LMOD_CMD=/usr/share/lmod/lmod/libexec/lmod
    [ "$(id -u)" = 0 ] && export EASYBUILD_ALLOW_USE_AS_ROOT_AND_ACCEPT_CONSEQUENCES=1
    eb() { "${SPACK_PYTHON:-/usr/bin/python3}" -m easybuild.main "$@"; }
    ecs="$src/contrib/easybuild"
    robot="--robot-paths=$ecs:$ebs/easybuild-easyconfigs/easybuild/easyconfigs"
    step "eb --version" eb --version
    step "eb --check-contrib" eb --check-contrib "$ecs"/*.eb
    if "${SPACK_PYTHON:-/usr/bin/python3}" -c 'import pycodestyle' 2>/dev/null; then
        step "eb --check-style" eb --check-style "$ecs"/*.eb
    else
        SKIP "eb --check-style: needs pycodestyle (Debian: apt-get install python3-pycodestyle)"
    fi
    step "eb --robot --dry-run (CPU)" eb "$robot" --robot --dry-run $(ls "$ecs/kvcore-$version-"*.eb | grep -v -- -CUDA-)
    step "eb --robot --dry-run --cuda-compute-capabilities=8.0,9.0 (CUDA)" \
        eb "$robot" --robot --dry-run --cuda-compute-capabilities=8.0,9.0 "$ecs/kvcore-$version-"*-CUDA-*.eb
    # The CUDA easyconfig's configure step, as EasyBuild renders it (extended dry run): with compute
    # capabilities the SM list reaches configure; without, the step stops with what to give.
    cuda_ec=$(ls "$ecs/kvcore-$version-"*-CUDA-*.eb)
    echo "== eb -x (CUDA, with and without compute capabilities)"
    eb "$robot" -x --cuda-compute-capabilities=8.0,9.0 "$cuda_ec" >"$work/x-cc.log" 2>&1
    eb "$robot" -x "$cuda_ec" >"$work/x-nocc.log" 2>&1
    cmd=$(grep -m1 'running shell command "case "80;90"' "$work/x-cc.log" | sed 's/^ *running shell command "//; s/"$//')
    grep -m1 -- '--with-cuda-arch="80;90"' "$work/x-cc.log" | sed 's/^/   /'
    if [ -n "$cmd" ] && printf '%s' "$cmd" | grep -q -- '--with-cuda-arch="80;90"'; then
        PASS "eb -x with --cuda-compute-capabilities=8.0,9.0: configure gets --with-cuda-arch=\"80;90\""
    else
        FAIL "eb -x with --cuda-compute-capabilities=8.0,9.0: configure gets --with-cuda-arch=\"80;90\""
    fi
    out=
    pre=$(grep -o 'case "[^"]*" in ""|00|\*cuda_cc\*) echo "[^"]*" >&2; exit 1;; esac' "$work/x-nocc.log" | head -1)
    echo "   $pre"
    if [ -n "$pre" ] && out=$(sh -c "$pre && echo configure-would-run" 2>&1); [ $? -ne 0 ] \
        && printf '%s' "$out" | grep -q 'no CUDA compute capabilities: run eb with --cuda-compute-capabilities'; then
        echo "   $out"
        PASS "eb without compute capabilities: the configure step stops with what to give"
    else
        echo "   ${out:-}"
        FAIL "eb without compute capabilities: the configure step stops with what to give"
    fi
fi

echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
