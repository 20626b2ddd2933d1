#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Every source and build file of kvcore's own carries "SPDX-License-Identifier: BSD-3-Clause"
# (scripts/add-spdx.sh adds it and says which files it covers). TAP.
set -u
s="${KVC_TEST_SRCDIR:-.}"
echo "1..1"
if out=$(sh "$s/scripts/add-spdx.sh" --check 2>&1); then
    echo "ok 1 - $out"
else
    echo "not ok 1 - every source file has an SPDX identifier"
    echo "$out" | sed 's/^/# /'
fi
