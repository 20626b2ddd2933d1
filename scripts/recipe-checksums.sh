#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The sha256 of the release tarball in the Spack and EasyBuild recipes (contrib/), which are not in
# the tarball themselves, so recording it does not change it (docs/PACKAGING.md, "Checksums").
#   scripts/recipe-checksums.sh check  kvcore-X.Y.Z.tar.gz   exit 1 unless every recipe records its sha256
#   scripts/recipe-checksums.sh update kvcore-X.Y.Z.tar.gz   write its sha256 into every recipe
# Run from the source tree (or set KVC_RECIPES_DIR to a copy of contrib/).
set -eu
usage() { echo "usage: scripts/recipe-checksums.sh check|update kvcore-VERSION.tar.gz" >&2; exit 2; }
[ $# -eq 2 ] || usage
mode=$1 tarball=$2
case $mode in check|update) ;; *) usage ;; esac
[ -f "$tarball" ] || { echo "recipe-checksums: $tarball: no such file" >&2; exit 2; }
dir=${KVC_RECIPES_DIR:-contrib}
version=$(basename "$tarball" .tar.gz)
version=${version#kvcore-}
sum=$(sha256sum "$tarball" | cut -d' ' -f1)
pkg="$dir/spack/spack_repo/kvcore/packages/kvcore/package.py"
ebs=$(ls "$dir"/easybuild/kvcore-"$version"-*.eb 2>/dev/null) || true
[ -f "$pkg" ] && [ -n "$ebs" ] || { echo "recipe-checksums: no recipes for $version under $dir" >&2; exit 2; }

# recorded FILE: the sha256 a recipe records for this version.
recorded() {
    case $1 in
        *.py) sed -n "s/^ *version(\"$version\", sha256=\"\([0-9a-f]*\)\").*/\1/p" "$1" ;;
        *.eb) sed -n "s/^checksums = \['\([0-9a-f]*\)'\]$/\1/p" "$1" ;;
    esac
}

fail=0
for f in $pkg $ebs; do
    old=$(recorded "$f")
    [ -n "$old" ] || { echo "recipe-checksums: $f records no sha256 for $version" >&2; fail=1; continue; }
    if [ "$mode" = update ]; then
        case $f in
            *.py) sed -i "s/^\( *version(\"$version\", sha256=\"\)[0-9a-f]*\"/\1$sum\"/" "$f" ;;
            *.eb) sed -i "s/^checksums = \['[0-9a-f]*'\]$/checksums = ['$sum']/" "$f" ;;
        esac
        [ "$(recorded "$f")" = "$sum" ] || { echo "recipe-checksums: could not update $f" >&2; fail=1; }
    elif [ "$old" != "$sum" ]; then
        echo "recipe-checksums: $f records $old, $(basename "$tarball") is $sum" >&2
        fail=1
    fi
done
[ $fail = 0 ] && echo "recipe-checksums: $mode: $(basename "$tarball") sha256 $sum in $pkg $ebs" | tr '\n' ' ' && echo
exit $fail
