#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Releases: each is recorded once, in RELEASES (version, commit, sha256 of that commit's
# `make dist` tarball, date), and the recipes in contrib/ carry the newest one's sha256
# (docs/PACKAGING.md, "Releases").
#   scripts/release.sh cut X.Y.Z   on a clean main whose VERSION is X.Y.Z and whose NEWS starts
#                                  with "kvcore X.Y.Z (unreleased)": dates the NEWS entry (the
#                                  release commit, tagged vX.Y.Z), rebuilds that commit's tarball
#                                  in a scratch copy, records it in RELEASES and the recipes (a
#                                  second commit). Nothing is pushed.
#   scripts/release.sh check       every release in RELEASES rebuilt from its commit gives the
#                                  recorded sha256, and the recipes record the newest; without a
#                                  recorded release (or without git history) it says so and
#                                  exits 77 (a skip).
# KVC_RELEASE_CONFIGURE: configure's arguments for the scratch build (default: no GPU modules;
# the tarball does not depend on them).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
releases=$src/RELEASES
cfg=${KVC_RELEASE_CONFIGURE:---without-cuda --without-hip}
usage() { echo "usage: scripts/release.sh cut X.Y.Z | check" >&2; exit 2; }
die() { echo "release: $*" >&2; exit 1; }

# tarball COMMIT DIR: make dist of COMMIT's tree, built in DIR; prints the tarball's path.
tarball() {
    mkdir -p "$2/tree"
    git -C "$src" archive --format=tar "$1" | tar -xf - -C "$2/tree"
    (cd "$2/tree" && autoreconf -fi && ./configure -q $cfg && make -s dist) >"$2/build.log" 2>&1 ||
        { tail -n 30 "$2/build.log" >&2; die "make dist of $1 failed (log above)"; }
    v=$(sed -n 's/^version=//p' "$2/tree/VERSION")
    [ -f "$2/tree/kvcore-$v.tar.gz" ] || die "make dist of $1 made no kvcore-$v.tar.gz"
    echo "$2/tree/kvcore-$v.tar.gz"
}

# The release lines of RELEASES: "VERSION COMMIT SHA256 DATE" (comments start with #).
entries() { [ -f "$releases" ] && grep -v '^#' "$releases" | grep . || true; }

do_check() {
    cd "$src"
    [ -n "$(entries)" ] || { echo "release check: RELEASES records no release yet"; exit 77; }
    git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || { echo "release check: $src has no git history to rebuild from"; exit 77; }
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-release.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    fail=0 newest=
    entries >"$tmp/entries"
    while read -r v commit sum date; do
        git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null || { echo "not ok: $v: commit $commit is not in this repository"; fail=1; continue; }
        t=$(tarball "$commit" "$tmp/$v")
        got=$(sha256sum "$t" | cut -d' ' -f1)
        if [ "$got" = "$sum" ]; then echo "ok: $v ($date, commit $commit): make dist gives the recorded sha256 $sum"
        else echo "not ok: $v (commit $commit): make dist gives $got, RELEASES records $sum"; fail=1; fi
        newest=$t
    done <"$tmp/entries"
    if [ -n "$newest" ]; then
        if sh "$src/scripts/recipe-checksums.sh" check "$newest" >"$tmp/recipes" 2>&1; then echo "ok: the recipes record $(basename "$newest")'s sha256"
        else sed 's/^/# /' "$tmp/recipes"; echo "not ok: the recipes do not record $(basename "$newest")'s sha256"; fail=1; fi
    fi
    exit $fail
}

do_cut() {
    v=$1
    echo "$v" | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+$' || die "$v: a release number is MAJOR.MINOR.PATCH"
    cd "$src"
    [ "$(git rev-parse --abbrev-ref HEAD)" = main ] || die "not on main"
    [ -z "$(git status --porcelain --untracked-files=no)" ] || die "the tree has uncommitted changes"
    [ "$(sed -n 's/^version=//p' VERSION)" = "$v" ] || die "VERSION says $(sed -n 's/^version=//p' VERSION), not $v"
    entries | awk -v v="$v" '$1 == v {found = 1} END {exit !found}' && die "$v is already recorded in RELEASES"
    head=$(grep -m 1 '^kvcore [0-9]' NEWS || true)
    [ "$head" = "kvcore $v (unreleased)" ] || die "NEWS starts with \"$head\", not \"kvcore $v (unreleased)\""
    date=$(date -u +%Y-%m-%d)
    sed -i "s/^kvcore $v (unreleased)\$/kvcore $v ($date)/" NEWS
    git commit -q -m "kvcore $v" -m "The release commit: NEWS dated $date. Its make dist tarball is recorded in RELEASES by the next commit." NEWS
    commit=$(git rev-parse HEAD)
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-release.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    t=$(tarball "$commit" "$tmp")
    sum=$(sha256sum "$t" | cut -d' ' -f1)
    [ -f RELEASES ] || printf '# kvcore releases: VERSION COMMIT SHA256-OF-MAKE-DIST DATE, one a line, written by\n# scripts/release.sh cut and never edited; scripts/release.sh check rebuilds each.\n' >RELEASES
    echo "$v $commit $sum $date" >>RELEASES
    sh scripts/recipe-checksums.sh update "$t"
    git add RELEASES contrib
    git commit -q -m "Record release $v" -m "kvcore-$v.tar.gz, made by make dist from $commit (tag v$v), sha256 $sum, is recorded in RELEASES and in the Spack and EasyBuild recipes."
    git tag -a "v$v" -m "kvcore $v" "$commit"
    echo "release: kvcore $v is $commit (tag v$v), kvcore-$v.tar.gz sha256 $sum; push main and the tag"
}

[ $# -ge 1 ] || usage
case $1 in
    check) [ $# -eq 1 ] || usage; do_check ;;
    cut) [ $# -eq 2 ] || usage; do_cut "$2" ;;
    *) usage ;;
esac
