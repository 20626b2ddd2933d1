#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The bash completion (contrib/bash-completion/kvcore) against the program (TAP): every command of
# `kvcore --help` and every option on the option lines of each `kvcore COMMAND --help` is offered,
# nothing else is (a new option without completion, or a stale one, fails); option values are the
# ones the help names; file names are filtered by the kind each command reads; bench offers its
# suites. The completion function is called as bash calls it (COMP_WORDS, COMP_CWORD, COMP_LINE).
# Needs bash and bash-completion (Debian: apt-get install bash-completion): skipped without them.
set -u
b="${KVC_TEST_BUILDDIR:-.}"
s="${KVC_TEST_SRCDIR:-.}"
b=$(cd "$b" && pwd)
s=$(cd "$s" && pwd)
bc=${KVC_BASH_COMPLETION:-}
if [ -z "$bc" ]; then
    for d in "$(pkg-config --variable=datadir bash-completion 2>/dev/null)" /usr/share /usr/local/share; do
        [ -n "$d" ] && [ -f "$d/bash-completion/bash_completion" ] && { bc="$d/bash-completion/bash_completion"; break; }
    done
fi
if ! command -v bash >/dev/null 2>&1 || [ -z "$bc" ]; then
    echo "1..0 # SKIP bash or bash-completion not found (Debian: apt-get install bash-completion)"
    exit 0
fi
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"

kvcore="$b/kvcore"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-comp.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
# bash-completion's functions need these; loaded as an interactive shell loads them.
shopt -s extglob progcomp
# shellcheck disable=SC1090
. "$bc"
# shellcheck disable=SC1091
. "$s/contrib/bash-completion/kvcore"

n=0
fail=0
result() { # result DESC PROBLEM
    n=$((n + 1))
    if [ -z "$2" ]; then echo "ok $n - $1"; else echo "not ok $n - $1"; echo "# $2"; fail=1; fi
}
# complete WORD... : what the completion offers for the command line "WORD..." with the cursor at
# the end of the last word (sorted, one a line).
complete_line() {
    COMP_WORDS=("$@")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    # the line as typed: "--opt=" is three words to bash ("--opt" "=" ""), without spaces between
    local w last=
    COMP_LINE=
    for w in "$@"; do
        if [ -z "$COMP_LINE" ] && [ -z "$last" ]; then COMP_LINE=$w
        elif [ "$w" = "=" ] || [ "$last" = "=" ]; then COMP_LINE="$COMP_LINE$w"
        else COMP_LINE="$COMP_LINE $w"; fi
        last=$w
    done
    COMP_POINT=${#COMP_LINE}
    COMPREPLY=()
    local prev=
    ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
    _kvcore "${COMP_WORDS[0]}" "${COMP_WORDS[COMP_CWORD]}" "$prev" 2>"$tmp/err"
    [ -s "$tmp/err" ] && sed 's/^/# stderr: /' "$tmp/err"
    printf '%s\n' "${COMPREPLY[@]}" | sed '/^$/d' | sort -u
}
# differ EXPECTED OFFERED: "missing: ... extra: ..." or nothing.
differ() {
    local miss extra
    miss=$(comm -23 <(printf '%s\n' $1 | sort -u) <(printf '%s\n' $2 | sort -u) | tr '\n' ' ')
    extra=$(comm -13 <(printf '%s\n' $1 | sort -u) <(printf '%s\n' $2 | sort -u) | tr '\n' ' ')
    miss=$(echo $miss) extra=$(echo $extra)
    [ -n "$miss$extra" ] && echo "missing: ${miss:-none}; offered but not expected: ${extra:-none}"
}

commands=$("$kvcore" --help | awk '/^commands:/ {f = 1; next} f && !NF {exit} f {print $1}')
[ -n "$commands" ] || result "kvcore --help lists the commands" "none found"
result "kvcore <TAB> offers every command of kvcore --help ($(echo $commands))" \
    "$(differ "$commands -h --help -V --version" "$(complete_line "$kvcore" "")")"

# A command's options: every -x / --xyz on the lines of its --help that start with an option
# (descriptions may name other commands' options, e.g. encode's "kvcore inspect --lmcache-config").
help_options() {
    "$kvcore" "$1" --help | grep -E '^[[:space:]]+-' |
        grep -oE -e '--[a-z][a-z0-9-]*' -e '(^|[ ,])-[a-zA-Z]([ ,]|$)' | tr -d ' ,' | sort -u
}
for c in $commands; do
    opts=$(help_options "$c")
    result "kvcore $c -<TAB> offers exactly the options of kvcore $c --help ($(echo $opts))" \
        "$(differ "$opts" "$(complete_line "$kvcore" "$c" -)")"
done

# Values where the help enumerates them.
levels=$("$kvcore" encode --help | sed -n 's/.*--level N .*profile, 0-\([0-9]*\).*/\1/p')
result "encode --level <TAB> offers 0-$levels (from --help)" \
    "$(differ "$(seq 0 "${levels:-0}")" "$(complete_line "$kvcore" encode --level "")")"
result "encode --key-scaling <TAB> offers token channel" \
    "$(differ "token channel" "$(complete_line "$kvcore" encode --key-scaling "")")"
result "encode --coder <TAB> offers ac rans" \
    "$(differ "ac rans" "$(complete_line "$kvcore" encode --coder "")")"
result "encode --bins-k=<TAB> offers the even counts 4-64" \
    "$(differ "$(seq 4 2 64)" "$(complete_line "$kvcore" encode --bins-k = "")")"
"$kvcore" decode --help | grep -q -- '--format F *npy or safetensors' || result "decode --help names npy or safetensors" "changed"
result "decode --format s<TAB> offers safetensors" "$(differ safetensors "$(complete_line "$kvcore" decode --format s)")"
suites=$("$kvcore" bench --list | awk 'NF {print $1}')
result "bench <TAB> offers every suite of bench --list and all" \
    "$(differ "$suites all" "$(complete_line "$kvcore" bench --quick "")")"
result "an option's numeric value offers nothing (encode --heads <TAB>)" "$(complete_line "$kvcore" encode --heads "")"

# File names: the kinds each command reads, and directories.
mkdir "$tmp/d" "$tmp/d/sub"
: >"$tmp/d/a.npy"; : >"$tmp/d/b.safetensors"; : >"$tmp/d/c.kvc"; : >"$tmp/d/e.kvcs"; : >"$tmp/d/f.txt"; : >"$tmp/d/g.svg"
cd "$tmp/d" || exit 99
result "encode <TAB> offers .npy, .safetensors and directories" \
    "$(differ "a.npy b.safetensors sub" "$(complete_line "$kvcore" encode "")")"
result "decode <TAB> offers .kvc, .kvcs and directories" \
    "$(differ "c.kvc e.kvcs sub" "$(complete_line "$kvcore" decode "")")"
result "inspect <TAB> offers .kvc, .kvcs and directories" \
    "$(differ "c.kvc e.kvcs sub" "$(complete_line "$kvcore" inspect -q "")")"
result "inspect --original <TAB> offers .npy, .safetensors and directories" \
    "$(differ "a.npy b.safetensors sub" "$(complete_line "$kvcore" inspect --original "")")"
result "decode -o <TAB> offers .npy, .safetensors and directories" \
    "$(differ "a.npy b.safetensors sub" "$(complete_line "$kvcore" decode c.kvc -o "")")"
result "encode --output <TAB> offers .kvc, .kvcs and directories" \
    "$(differ "c.kvc e.kvcs sub" "$(complete_line "$kvcore" encode a.npy --output "")")"
result "inspect --svg <TAB> offers .svg and directories" \
    "$(differ "g.svg sub" "$(complete_line "$kvcore" inspect c.kvc --svg "")")"
echo "1..$n"
exit $fail
