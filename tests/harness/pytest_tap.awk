# SPDX-License-Identifier: BSD-3-Clause
# pytest's -rA summary lines -> TAP: "PASSED file::test", "FAILED file::test - msg",
# "SKIPPED [n] file:line: reason"; rc is pytest's exit status (a failure it did not list fails too).
# pytest runs in a temporary directory (its caches stay out of the build tree), so its test ids
# are relative to that: they are printed relative to root (the source tree) instead.
function id(s) {
    if (s ~ /^(\.\.\/)+/) { sub(/^(\.\.\/)+/, "/", s); if (index(s, root "/") == 1) s = substr(s, length(root) + 2) }
    return s
}
/^PASSED /  { n++; line[n] = "ok " n " - " id($2) }
/^XFAIL /   { n++; line[n] = "ok " n " - " id($2) " # TODO expected failure" }
/^(FAILED|ERROR|XPASS) / { n++; bad = 1; r = $0; sub(/^[A-Z]+ [^ ]+/, $1 " " id($2), r); line[n] = "not ok " n " - " r }
/^SKIPPED / { n++; r = $0; sub(/^SKIPPED \[[0-9]+\] /, "", r); if (r ~ /^\.\./) r = id(r); line[n] = "ok " n " # SKIP " r }
END {
    if (rc != 0 && !bad) { n++; line[n] = "not ok " n " - pytest exited with status " rc }
    if (n == 0) { n = 1; line[1] = "not ok 1 - pytest ran no test" }
    print "1.." n
    for (i = 1; i <= n; i++) print line[i]
}
