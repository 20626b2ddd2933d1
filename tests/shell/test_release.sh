#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# scripts/release.sh in a scratch clone of this checkout (TAP): its refusals, a release cut (the
# dated NEWS commit, the tag, RELEASES and the recipes in a second commit), the check that rebuilds
# the recorded tarball, and the check failing when RELEASES or a recipe no longer matches. The
# release this repository records is checked by .ci/run (`make check-release`).
set -u
src=$(cd "${KVC_TEST_SRCDIR:-.}" && pwd)
if [ "$(git -C "$src" rev-parse --show-toplevel 2>/dev/null)" != "$src" ]; then
    echo "1..0 # SKIP $src is not a git checkout (a release tarball): releases are cut from a clone"
    exit 0
fi
for t in autoreconf git; do
    command -v $t >/dev/null || { echo "1..0 # SKIP no $t: scripts/release.sh rebuilds the tarball with it"; exit 0; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-release.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
export GIT_AUTHOR_NAME=test GIT_AUTHOR_EMAIL=test@example.invalid GIT_COMMITTER_NAME=test \
    GIT_COMMITTER_EMAIL=test@example.invalid GIT_CONFIG_NOSYSTEM=1 HOME="$tmp"
unset MAKEFLAGS MFLAGS MAKELEVEL
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); fail=1; echo "not ok $n - $1"; sed 's/^/# /' "$tmp/out"; }
# expect DESC STATUS REGEX CMD...: CMD exits with STATUS and prints a line matching REGEX.
expect() {
    d=$1 want=$2 re=$3
    shift 3
    "$@" >"$tmp/out" 2>&1
    got=$?
    if [ "$got" -eq "$want" ] && grep -Eq "$re" "$tmp/out"; then ok "$d"; else echo "# exit $got" >>"$tmp/out"; not_ok "$d"; fi
}

# The clone: this checkout's committed tree plus its working copy of the two scripts, with the
# version of VERSION unreleased (NEWS "(unreleased)", no RELEASES line for it).
c=$tmp/clone
git clone -q "$src" "$c" 2>"$tmp/out" || { not_ok "git clone of the checkout"; exit 1; }
# Releases are cut from main; the checkout may be on another branch.
git -C "$c" checkout -q -B main
cp "$src/scripts/release.sh" "$src/scripts/recipe-checksums.sh" "$c/scripts/"
v=$(sed -n 's/^version=//p' "$c/VERSION")
# NEWS as at v's cut: entries of later, unreleased versions above v's removed.
awk -v v="$v" '$1 == "kvcore" && $3 == "(unreleased)" && $2 != v { skip = 1 } $1 == "kvcore" && $2 == v { skip = 0 } !skip' \
    "$c/NEWS" >"$tmp/news" && cp "$tmp/news" "$c/NEWS"
sed -i "0,/^kvcore $v .*/s//kvcore $v (unreleased)/" "$c/NEWS"
[ -f "$c/RELEASES" ] && sed -i "/^$v /d" "$c/RELEASES"
git -C "$c" tag -d "v$v" >/dev/null 2>&1 || true   # the clone has the real release's tag
git -C "$c" add -A && git -C "$c" commit -q -m "test: $v unreleased" || true
r="sh $c/scripts/release.sh"

expect "check with no release recorded is a skip (77) that says so" 77 "records no release yet" $r check
expect "cut refuses a number that is not MAJOR.MINOR.PATCH" 1 "a release number is MAJOR.MINOR.PATCH" $r cut 1.2
expect "cut refuses a number VERSION does not have" 1 "VERSION says $v, not 99.0.0" $r cut 99.0.0
echo >>"$c/README.md"
expect "cut refuses a tree with uncommitted changes" 1 "uncommitted changes" $r cut "$v"
git -C "$c" checkout -q README.md
expect "cut $v: the release commit, the tag, RELEASES and the recipes" 0 "^release: kvcore $v is [0-9a-f]{40} \(tag v$v\)" $r cut "$v"
rel=$(git -C "$c" rev-parse "v$v^{commit}" 2>/dev/null)
if [ -n "$rel" ] && [ "$(git -C "$c" rev-parse HEAD~1)" = "$rel" ] &&
   git -C "$c" show "$rel:NEWS" | grep -Eq "^kvcore $v \([0-9]{4}-[0-9]{2}-[0-9]{2}\)$" &&
   grep -Eq "^$v $rel [0-9a-f]{64} [0-9-]{10}$" "$c/RELEASES" &&
   [ -z "$(git -C "$c" diff --name-only "$rel" HEAD | grep -v -e '^RELEASES$' -e '^contrib/')" ]; then
    ok "the tag is the dated-NEWS commit; the next one changes only RELEASES and contrib/"
else git -C "$c" log --oneline -3 >"$tmp/out"; not_ok "the tag is the dated-NEWS commit; the next one changes only RELEASES and contrib/"; fi
expect "cut refuses a version already recorded" 1 "already recorded in RELEASES" $r cut "$v"
expect "check rebuilds the recorded tarball: same sha256, recipes record it" 0 "^ok: the recipes record kvcore-$v.tar.gz" $r check
sum=$(awk -v v="$v" '$1 == v {print $3}' "$c/RELEASES")
sed -i "s/$sum/$(echo "$sum" | tr 0-9a-f 1-9a-f0)/" "$c/RELEASES"
expect "check fails when RELEASES records another sha256" 1 "^not ok: $v .*RELEASES records" $r check
git -C "$c" checkout -q RELEASES
sed -i "s/$sum/$(echo "$sum" | tr 0-9a-f 1-9a-f0)/" "$c/contrib/spack/spack_repo/kvcore/packages/kvcore/package.py"
expect "check fails when a recipe records another sha256" 1 "^not ok: the recipes do not record" $r check
git -C "$c" checkout -q contrib
echo "0.0.1 0123456789012345678901234567890123456789 $sum 2026-01-01" >"$c/RELEASES"
expect "check fails on a release commit the repository does not have" 1 "^not ok: 0.0.1: commit .* is not in this repository" $r check
echo "1..$n"
exit $fail
