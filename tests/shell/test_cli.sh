#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The kvcore program as a user runs it, TAP on stdout: encode / decode / inspect (text and --json)
# on the real K/V of tests/data, exit statuses for bad usage and for a corrupt container, the demo
# (the README's main job) passing its own verification, and the command-line conventions: --help,
# --version, -q/-v on every command, outputs never overwritten without -f and never an input,
# '-' for standard input/output, file types by magic bytes, several inputs to a directory, the head
# split kept through a round trip, and a failed write leaving an existing output unchanged.
set -u
kvcore="$(cd "${KVC_TEST_BUILDDIR:-.}" && pwd)/kvcore"
data="${KVC_TEST_DATA:-tests/data}/kvdata"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-cli.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); fail=1; echo "not ok $n - $1"; [ -s "$tmp/err" ] && sed 's/^/# /' "$tmp/err"; }
check() { desc=$1; shift; if "$@" >"$tmp/out" 2>"$tmp/err"; then ok "$desc"; else not_ok "$desc"; fi; }
status_is() { want=$1; desc=$2; shift 2; "$@" >"$tmp/out" 2>"$tmp/err"; got=$?; if [ "$got" -eq "$want" ]; then ok "$desc"; else echo "# exit $got, want $want" >>"$tmp/err"; not_ok "$desc"; fi; }
has() { grep -q -- "$1" "$tmp/out"; }

check "encode K V pair" "$kvcore" encode "$data/story_prompt_K.npy" "$data/story_prompt_V.npy" -o "$tmp/a.kvc" -q
(cd "$tmp" && cp "$data/story_prompt_K.npy" k.npy && cp "$data/story_prompt_V.npy" v.npy &&
    "$kvcore" encode k.npy v.npy) >"$tmp/out" 2>"$tmp/err"
if [ $? -ne 0 ] && grep -q "if k.npy and v.npy are a K and a V file, encode them into one container: kvcore encode k.npy v.npy -o X.kvc" "$tmp/err"; then
    ok "a K/V pair without -o: the error says to give -o X.kvc"; else not_ok "a K/V pair without -o: the error says to give -o X.kvc"; fi
status_is 0 "encode --json" "$kvcore" encode "$data/story_prompt_K.npy" "$data/story_prompt_V.npy" -o "$tmp/b.kvc" --json
if has '"output_bytes"' && has '"ratio"' && has '"layers": 5' && has '"tokens": 512'; then ok "encode --json fields"; else not_ok "encode --json fields"; fi
if cmp -s "$tmp/a.kvc" "$tmp/b.kvc"; then ok "encoding is deterministic"; else not_ok "encoding is deterministic"; fi
status_is 0 "decode --json" "$kvcore" decode "$tmp/a.kvc" -o "$tmp/a.npy" --json
if has '"output_bytes": 327680' && has '"heads": 4' && has '"head_size": 8' && [ -s "$tmp/a.npy" ]; then ok "decode --json fields and output"; else not_ok "decode --json fields and output"; fi
status_is 0 "inspect --json" "$kvcore" inspect "$tmp/a.kvc" --json
if has '"lmcache_layout"' && has '"cdf_bins": 32'; then ok "inspect --json fields"; else not_ok "inspect --json fields"; fi
status_is 2 "encode without an input is a usage error" "$kvcore" encode -o "$tmp/none.kvc"
head -c 1000 "$tmp/a.kvc" >"$tmp/cut.kvc"
status_is 1 "decoding a truncated container fails" "$kvcore" decode "$tmp/cut.kvc" -o "$tmp/cut.npy"
if grep -q "corrupt" "$tmp/err" && [ ! -e "$tmp/cut.npy" ]; then ok "truncated: says corrupt, writes nothing"; else not_ok "truncated: says corrupt, writes nothing"; fi
status_is 0 "demo passes its verification" "$kvcore" demo
if has "^  3 CacheGen encode  *[0-9.]* ms  *[0-9.]* [KMG]*i*B/s$" && ! has "GB/s"; then ok "demo: stage rates in human units (no 0.00 GB/s)"; else not_ok "demo: stage rates in human units (no 0.00 GB/s)"; fi
if has "^stages (each timed once; .kvcore bench. measures speed):"; then ok "demo: its stage times are said to be one-shot"; else not_ok "demo: its stage times are said to be one-shot"; fi
status_is 0 "bench --case runs" "$kvcore" bench memory --quick --case split_copy_align_4KiB
# rows: "  NAME  VALUE UNIT  BASELINE  RATIOx MEDIANx THREADS" under the suite's header
rows=$(grep -cE '^  [^ ].* [0-9.e+-]+x +([0-9.e+-]+x|-) +[0-9]+$' "$tmp/out")
if [ "$rows" -eq 1 ] && has '^  split_copy_align_4KiB  *[0-9.e+]*  *GB/s '; then ok "bench --case reports only the matching case"; else not_ok "bench --case reports only the matching case"; fi
if awk 'length > 79 { bad = 1; print "# " length ": " $0 } END { exit bad }' "$tmp/out" >"$tmp/err"; then ok "bench: every line fits 79 columns"; else not_ok "bench: every line fits 79 columns"; fi
if has '^memory: 1 case, [0-9.]* s, ratio [0-9.]*x$'; then ok "bench: a one-line summary per suite"; else not_ok "bench: a one-line summary per suite"; fi
if ! grep -q "$(printf '\r')" "$tmp/err"; then ok "bench on a pipe: no progress"; else not_ok "bench on a pipe: no progress"; fi
# coder mixes speeds (Msym/s) with a size (bit/sym vs entropy): a range and mean for each unit, not one over both
status_is 0 "bench coder --quick" "$kvcore" bench coder --quick
if has '^coder: [0-9]* cases, [0-9.]* s$' && has '^  ratios (Msym/s) [0-9.]*x-[0-9.]*x, geometric mean [0-9.]*x$' &&
   has '^  ratio (bit/sym) [0-9.]*x$'; then ok "bench: the summary keeps units apart"; else not_ok "bench: the summary keeps units apart"; fi
status_is 0 "bench --progress -q" "$kvcore" bench memory --quick --case split_copy_align_4KiB --progress -q
if grep -q "bench memory: 1 case done in [0-9]* s, measuring the next" "$tmp/err" && ! has '^memory: '; then ok "bench --progress: a line between cases on stderr; -q: no summary"; else not_ok "bench --progress: a line between cases on stderr; -q: no summary"; fi

# ---------------------------------------------------------------- conventions
K="$data/story_prompt_K.npy"
V="$data/story_prompt_V.npy"
errs="$tmp/all-errors"
: >"$errs"
# Also collects stderr, to check below that no message names a C API.
status_is_e() { status_is "$@"; cat "$tmp/err" >>"$errs"; }
err_has() { grep -q -- "$1" "$tmp/err"; }
same_bytes() { cmp -s "$1" "$2"; }

status_is 0 "kvcore -V" "$kvcore" -V
if grep -q "^kvcore [0-9]" "$tmp/out"; then ok "-V prints the version"; else not_ok "-V prints the version"; fi
status_is 0 "kvcore --version" "$kvcore" --version
for cmd in info demo encode decode inspect bench; do
    status_is 0 "$cmd -h" "$kvcore" $cmd -h
    if has "exit status: 0 success, 1 data or I/O error" && has "^usage: kvcore $cmd"; then ok "$cmd -h: usage and exit statuses"; else not_ok "$cmd -h: usage and exit statuses"; fi
    status_is 0 "$cmd --version" "$kvcore" $cmd --version
    status_is_e 2 "$cmd: an unknown option is a usage error" "$kvcore" $cmd --no-such-option
done
status_is 0 "info -q" "$kvcore" info -q
if [ "$(wc -l <"$tmp/out")" -eq 1 ]; then ok "info -q: one line"; else not_ok "info -q: one line"; fi
# info's text: one column for the environment table; each figure of the LLC said once; no
# directory listed twice where a module was looked for
status_is 0 "info" "$kvcore" info
if [ "$(sed -n '/^environment:/,$p' "$tmp/out" | awk '/^  [A-Z_]+ +=/ { print index($0, " = ") }' | sort -u | wc -l)" -eq 1 ]; then
    ok "info: the environment table's '=' in one column"; else not_ok "info: the environment table's '=' in one column"; fi
if has "last-level cache .* (from [a-zA-Z]*[;)]" && ! has "(sysfs; sysfs"; then ok "info: the LLC's source once"; else not_ok "info: the LLC's source once"; fi
if ! grep -o "looked for [^ ]* in [^)]*" "$tmp/out" | sed 's/.* in //' | awk -F: '{ for (i = 1; i <= NF; i++) if (seen[NR, $i]++) d = 1 } END { exit !d }'; then
    ok "info: no module directory searched twice"; else not_ok "info: no module directory searched twice"; fi
status_is 0 "demo -q -v" "$kvcore" demo -q -v
if [ "$(grep -c . "$tmp/out")" -eq 1 ] && has "^verify:"; then ok "demo -q: only the verification line"; else not_ok "demo -q: only the verification line"; fi
status_is_e 2 "an option's missing value is a usage error" "$kvcore" decode "$tmp/a.kvc" -o
if err_has "needs a value"; then ok "missing value: says so"; else not_ok "missing value: says so"; fi

# decode reports like encode; -q silences both
status_is 0 "decode prints a summary" "$kvcore" decode "$tmp/a.kvc" -o "$tmp/s.npy"
if has "4 heads x 8"; then ok "decode summary names the heads"; else not_ok "decode summary names the heads"; fi
status_is 0 "decode -q" "$kvcore" decode -q "$tmp/a.kvc" -o "$tmp/q.npy"
if [ ! -s "$tmp/out" ]; then ok "decode -q prints nothing"; else not_ok "decode -q prints nothing"; fi
status_is 0 "encode -v" "$kvcore" encode -v "$K" "$V" -o "$tmp/v.kvc"

# an existing output is refused without -f, replaced with it
cp "$tmp/a.npy" "$tmp/keep.npy"
printf 'precious' >"$tmp/exists.kvc"
status_is_e 1 "encode refuses an existing output" "$kvcore" encode "$K" "$V" -o "$tmp/exists.kvc"
if err_has "already exists (use -f" && [ "$(cat "$tmp/exists.kvc")" = precious ]; then ok "existing output untouched, -f suggested"; else not_ok "existing output untouched, -f suggested"; fi
status_is 0 "encode -f replaces it" "$kvcore" encode -f "$K" "$V" -o "$tmp/exists.kvc"
if same_bytes "$tmp/exists.kvc" "$tmp/a.kvc"; then ok "-f: replaced with the container"; else not_ok "-f: replaced with the container"; fi
printf 'precious' >"$tmp/exists.npy"
status_is_e 1 "decode refuses an existing output" "$kvcore" decode "$tmp/a.kvc" -o "$tmp/exists.npy"
status_is 0 "decode --force replaces it" "$kvcore" decode --force "$tmp/a.kvc" -o "$tmp/exists.npy"

# input and output the same file (also through another name), even with -f
status_is_e 1 "encode X -o X -f is refused" "$kvcore" encode -f "$tmp/keep.npy" -o "$tmp/keep.npy"
ln -s "$tmp/keep.npy" "$tmp/alias.npy"
status_is_e 1 "the same file through a link is refused" "$kvcore" encode -f "$tmp/alias.npy" -o "$tmp/keep.npy"
if err_has "is also an input" && same_bytes "$tmp/keep.npy" "$tmp/a.npy"; then ok "same file: says so, input intact"; else not_ok "same file: says so, input intact"; fi
cp "$tmp/a.kvc" "$tmp/self.kvc"
status_is_e 1 "decode X -o X -f is refused" "$kvcore" decode -f --format npy "$tmp/self.kvc" -o "$tmp/self.kvc"

# '-': standard input and output, both ways; no file named '-'
(cd "$tmp" && "$kvcore" decode - -o - <"$tmp/a.kvc" | "$kvcore" encode - -o - >"$tmp/piped.kvc") 2>"$tmp/err"
if same_bytes "$tmp/piped.kvc" "$tmp/a.kvc" && [ ! -e "$tmp/-" ]; then ok "stdin/stdout round trip"; else not_ok "stdin/stdout round trip"; fi
"$kvcore" decode -q "$tmp/a.kvc" -o - --format safetensors 2>"$tmp/err" | "$kvcore" encode -q - -o "$tmp/st.kvc" 2>>"$tmp/err"
if same_bytes "$tmp/st.kvc" "$tmp/a.kvc"; then ok "safetensors through a pipe"; else not_ok "safetensors through a pipe"; fi
"$kvcore" inspect - <"$tmp/a.kvc" >"$tmp/out" 2>"$tmp/err"
if has "kvcore container v1"; then ok "inspect reads standard input"; else not_ok "inspect reads standard input"; fi
status_is_e 2 "--json with -o - is a usage error" "$kvcore" decode "$tmp/a.kvc" -o - --json

# types by magic bytes, in the user's terms
printf 'just some text, not a tensor\n' >"$tmp/notes.npy"
status_is_e 1 "encode of a text file fails" "$kvcore" encode "$tmp/notes.npy" -o "$tmp/notes.kvc"
if err_has "notes.npy is not an .npy or .safetensors file"; then ok "text file: not an .npy or .safetensors file"; else not_ok "text file: not an .npy or .safetensors file"; fi
status_is_e 1 "decode of a text file fails" "$kvcore" decode "$tmp/notes.npy" -o "$tmp/notes2.npy"
if err_has "is not a kvcore container"; then ok "text file: not a kvcore container"; else not_ok "text file: not a kvcore container"; fi
status_is_e 1 "decode of an .npy says use encode" "$kvcore" decode "$K" -o "$tmp/k2.npy"
if err_has "use kvcore encode"; then ok "an .npy given to decode: use kvcore encode"; else not_ok "an .npy given to decode: use kvcore encode"; fi
status_is_e 2 "decode to an unknown extension without --format" "$kvcore" decode "$tmp/a.kvc" -o "$tmp/out.bin"
status_is_e 2 "--split to .npy is a usage error" "$kvcore" decode "$tmp/a.kvc" -o "$tmp/split.npy" --split
status_is 0 "--split to .safetensors" "$kvcore" decode -q "$tmp/a.kvc" -o "$tmp/split.safetensors" --split
status_is 0 "the split file encodes back to the same container" "$kvcore" encode -q "$tmp/split.safetensors" -o "$tmp/split.kvc"
if same_bytes "$tmp/split.kvc" "$tmp/a.kvc"; then ok "split round trip"; else not_ok "split round trip"; fi

# the head split survives a fused .npy round trip without repeating --heads
status_is 0 "decode writes [2, NL, T, NH, HS]" "$kvcore" decode -q "$tmp/a.kvc" -o "$tmp/h.npy"
if head -c 128 "$tmp/h.npy" | grep -q "'shape': (2, 5, 512, 4, 8)"; then ok "the .npy has the head axes"; else not_ok "the .npy has the head axes"; fi
status_is 0 "re-encode without --heads" "$kvcore" encode -q "$tmp/h.npy" -o "$tmp/h.kvc"
if same_bytes "$tmp/h.kvc" "$tmp/a.kvc"; then ok "same container: the heads were kept"; else not_ok "same container: the heads were kept"; fi
status_is 0 "inspect --json of a fused round trip" "$kvcore" inspect --json "$tmp/h.kvc"
if has '"heads": 4' && has '"heads_known": true'; then ok "4 heads, known"; else not_ok "4 heads, known"; fi

# inspect --original takes what encode takes: a K/V pair too
status_is 0 "inspect --original K --original V" "$kvcore" inspect "$tmp/a.kvc" --original "$K" --original "$V"
if has "max|err|"; then ok "error columns against the pair"; else not_ok "error columns against the pair"; fi
status_is 0 "inspect --original fused file" "$kvcore" inspect "$tmp/a.kvc" --original "$tmp/h.npy"

# options that do not apply, and the environment
status_is_e 2 "demo --tokens without --synthetic" "$kvcore" demo --tokens 100
KVCORE_NUM_THREADS=abc "$kvcore" info -q >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 2 ] && err_has "KVCORE_NUM_THREADS='abc'"; then ok "a bad KVCORE_NUM_THREADS is reported"; else not_ok "a bad KVCORE_NUM_THREADS is reported"; fi
cat "$tmp/err" >>"$errs"

# GPU modules: in a build tree libtool puts them beside libkvcore in .libs/, where they are found;
# a missing one is reported with where it was sought and advice that fits how kvcore was configured.
bdir="$(cd "${KVC_TEST_BUILDDIR:-.}" && pwd)"
if [ -x "$bdir/.libs/kvcore" ] && [ -f "$bdir/.libs/libkvcore.so.0" ] && [ -f "$bdir/tests/modules/.libs/gpu_emu.so" ]; then
    mkdir -p "$tmp/bt/.libs"
    cp "$bdir/.libs/libkvcore.so.0" "$tmp/bt/.libs/"
    cp "$bdir/tests/modules/.libs/gpu_emu.so" "$tmp/bt/.libs/kvcore_cuda.so"
    status_is 0 "a module in a build tree's .libs is found" env -u KVCORE_MODULE_PATH LD_LIBRARY_PATH="$tmp/bt/.libs" KVCORE_BACKEND=cuda "$bdir/.libs/kvcore" info
    if has "cuda  *SELECTED.*loaded, 1 device" && has "from $tmp/bt/.libs/kvcore_cuda.so"; then ok "build tree: .libs/kvcore_cuda.so loaded"; else not_ok "build tree: .libs/kvcore_cuda.so loaded"; fi
    status_is 0 "a missing module: info" env -u KVCORE_MODULE_PATH LD_LIBRARY_PATH="$tmp/bt/.libs" "$bdir/.libs/kvcore" info
    if has "hip .*module not found (looked for kvcore_hip.so in $tmp/bt/.libs/kvcore:$tmp/bt/.libs:" && ! has "from $tmp/bt/.libs/kvcore/kvcore_hip.so"; then ok "missing module: the directories searched, no bogus 'from'"; else not_ok "missing module: the directories searched, no bogus 'from'"; fi
    if "$kvcore" info | grep -q "hip_module=yes"; then advice="configured with it: run make"; else advice="configured without it: configure with --with-hip"; fi
    status_is_e 1 "a forced missing module fails" env -u KVCORE_MODULE_PATH LD_LIBRARY_PATH="$tmp/bt/.libs" KVCORE_BACKEND=hip "$bdir/.libs/kvcore" demo -q
    if err_has "$advice"; then ok "forced missing module: advice fits the build ($advice)"; else not_ok "forced missing module: advice fits the build ($advice)"; fi
else
    n=$((n + 1)); echo "ok $n - modules in a build tree # SKIP not a libtool build tree with the emulated module"
fi

# several inputs, one directory
cp "$tmp/h.npy" "$tmp/one.npy"
cp "$tmp/h.npy" "$tmp/two.npy"
status_is 0 "encode a b -o DIR/" "$kvcore" encode "$tmp/one.npy" "$tmp/two.npy" -o "$tmp/many/"
if same_bytes "$tmp/many/one.kvc" "$tmp/a.kvc" && same_bytes "$tmp/many/two.kvc" "$tmp/a.kvc" && has "2 files encoded, 0 failed"; then ok "each input encoded into DIR"; else not_ok "each input encoded into DIR"; fi
status_is 0 "decode DIR/*.kvc -o DIR2/" "$kvcore" decode "$tmp/many/one.kvc" "$tmp/many/two.kvc" -o "$tmp/many2/"
if same_bytes "$tmp/many2/one.npy" "$tmp/h.npy" && same_bytes "$tmp/many2/two.npy" "$tmp/h.npy"; then ok "each container decoded into DIR2"; else not_ok "each container decoded into DIR2"; fi
status_is_e 1 "a second run refuses the existing outputs" "$kvcore" encode "$tmp/one.npy" "$tmp/two.npy" -o "$tmp/many/"
status_is_e 2 "three inputs to one file is a usage error" "$kvcore" encode "$K" "$V" "$K" -o "$tmp/three.kvc"

# zstd's conventions: -o is optional (kv.npy -> kv.kvc beside it; .kvcs with --chunk-tokens;
# x.kvc -> x.npy), standard input goes to standard output, -c / --stdout writes standard output.
mkdir "$tmp/z"
cp "$tmp/h.npy" "$tmp/z/kv.npy"
status_is 0 "encode kv.npy (no -o)" "$kvcore" encode -q "$tmp/z/kv.npy"
if same_bytes "$tmp/z/kv.kvc" "$tmp/a.kvc"; then ok "no -o: kv.npy -> kv.kvc beside it"; else not_ok "no -o: kv.npy -> kv.kvc beside it"; fi
status_is 0 "encode --chunk-tokens kv.npy (no -o)" "$kvcore" encode -q --chunk-tokens 200 "$tmp/z/kv.npy"
"$kvcore" encode -q --chunk-tokens 200 "$tmp/h.npy" -o "$tmp/z/ref.kvcs"
if same_bytes "$tmp/z/kv.kvcs" "$tmp/z/ref.kvcs"; then ok "no -o with --chunk-tokens: kv.kvcs"; else not_ok "no -o with --chunk-tokens: kv.kvcs"; fi
mv "$tmp/z/kv.npy" "$tmp/z/orig.npy"
status_is 0 "decode kv.kvc (no -o)" "$kvcore" decode -q "$tmp/z/kv.kvc"
if same_bytes "$tmp/z/kv.npy" "$tmp/h.npy"; then ok "no -o: kv.kvc -> kv.npy beside it"; else not_ok "no -o: kv.kvc -> kv.npy beside it"; fi
status_is_e 1 "decode kv.kvc again: kv.npy exists" "$kvcore" decode -q "$tmp/z/kv.kvc"
if err_has "kv.npy already exists (use -f"; then ok "no -o: an existing output is refused as with -o"; else not_ok "no -o: an existing output is refused as with -o"; fi
status_is 0 "decode --split (no -o) writes .safetensors" "$kvcore" decode -q --split "$tmp/z/kv.kvc"
if [ -s "$tmp/z/kv.safetensors" ]; then ok "no -o --split: kv.safetensors"; else not_ok "no -o --split: kv.safetensors"; fi
status_is 0 "decode -c" "$kvcore" decode -c "$tmp/z/kv.kvc"
if same_bytes "$tmp/out" "$tmp/h.npy"; then ok "-c: the .npy on standard output"; else not_ok "-c: the .npy on standard output"; fi
status_is 0 "encode --stdout" "$kvcore" encode --stdout -q "$tmp/h.npy"
if same_bytes "$tmp/out" "$tmp/a.kvc"; then ok "--stdout: the container on standard output"; else not_ok "--stdout: the container on standard output"; fi
status_is 0 "encode - (no -o) writes standard output" sh -c '"$1" encode -q - <"$2"' sh "$kvcore" "$tmp/h.npy"
if same_bytes "$tmp/out" "$tmp/a.kvc"; then ok "stdin without -o: standard output"; else not_ok "stdin without -o: standard output"; fi
status_is_e 2 "-c with -o FILE is a usage error" "$kvcore" encode -c "$tmp/h.npy" -o "$tmp/z/c.kvc"
status_is_e 2 "several inputs with - and no -o is a usage error" "$kvcore" encode "$tmp/h.npy" - 
# A batch where one output exists: that file is skipped with a message, the rest done, exit 1.
mkdir "$tmp/batch"
for f in b1 b2 b3; do cp "$tmp/h.npy" "$tmp/batch/$f.npy"; done
printf 'precious' >"$tmp/batch/b2.kvc"
status_is_e 1 "a batch with one existing output exits 1" "$kvcore" encode "$tmp/batch/b1.npy" "$tmp/batch/b2.npy" "$tmp/batch/b3.npy"
if err_has "b2.kvc already exists (use -f" && same_bytes "$tmp/batch/b1.kvc" "$tmp/a.kvc" && same_bytes "$tmp/batch/b3.kvc" "$tmp/a.kvc" &&
   [ "$(cat "$tmp/batch/b2.kvc")" = precious ] && has "2 files encoded, 0 failed, 1 skipped"; then ok "batch: b2 skipped and kept, b1 and b3 written, summary"; else not_ok "batch: b2 skipped and kept, b1 and b3 written, summary"; fi
rm "$tmp/batch/b1.npy" "$tmp/batch/b3.npy"
printf 'precious' >"$tmp/batch/b1.npy"
status_is_e 1 "a decode batch with one existing output exits 1" "$kvcore" decode "$tmp/batch/b1.kvc" "$tmp/batch/b3.kvc" -o "$tmp/batch/"
if err_has "b1.npy already exists" && same_bytes "$tmp/batch/b3.npy" "$tmp/h.npy" && [ "$(cat "$tmp/batch/b1.npy")" = precious ] &&
   has "1 files decoded, 0 failed, 1 skipped"; then ok "decode batch: b1 skipped and kept, b3 written, summary"; else not_ok "decode batch: b1 skipped and kept, b3 written, summary"; fi

# inputs that are not regular files: no hang, a clear message
mkfifo "$tmp/fifo"
status_is_e 1 "decode of a FIFO without a writer does not block" timeout 20 "$kvcore" decode "$tmp/fifo" -o "$tmp/f.npy"
if err_has "FIFO"; then ok "FIFO: says so"; else not_ok "FIFO: says so"; fi
status_is_e 1 "encode of a FIFO without a writer does not block" timeout 20 "$kvcore" encode "$tmp/fifo" -o "$tmp/f.kvc"
status_is_e 1 "decode of a directory" "$kvcore" decode "$tmp/many" -o "$tmp/d.npy"
if err_has "is a directory"; then ok "directory: says so"; else not_ok "directory: says so"; fi
status_is_e 1 "decode /dev/zero ends" timeout 20 "$kvcore" decode /dev/zero -o "$tmp/z.npy"
status_is_e 1 "decode - < /dev/zero ends" timeout 20 sh -c '"$1" decode - -o "$2" </dev/zero' sh "$kvcore" "$tmp/z.npy"
{ head -c 48 "$tmp/a.kvc"; cat /dev/zero; } 2>/dev/null | timeout 20 "$kvcore" decode - -o "$tmp/z.npy" >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 1 ] && [ ! -e "$tmp/z.npy" ]; then ok "a valid header then zeros: read only what the header declares"; else not_ok "a valid header then zeros: read only what the header declares"; fi

# a write that fails part-way (file size limit, as a full disk) leaves the existing output intact
cp "$tmp/keep.npy" "$tmp/victim.npy"
(trap '' XFSZ; ulimit -f 64; exec "$kvcore" decode -f "$tmp/a.kvc" -o "$tmp/victim.npy") >"$tmp/out" 2>"$tmp/err"
st=$?
if [ $st -eq 1 ] && same_bytes "$tmp/victim.npy" "$tmp/keep.npy" && [ -z "$(ls "$tmp" | grep 'victim.npy.tmp')" ]; then ok "failed decode: old file intact, no temporary"; else echo "# exit $st" >>"$tmp/err"; not_ok "failed decode: old file intact, no temporary"; fi

# Streams (encode --chunk-tokens): containers back to back, decoded chunk by chunk into an .npy.
"$kvcore" decode "$tmp/a.kvc" -o "$tmp/kv5.npy" -q
check "encode --chunk-tokens 200: a stream of 3 containers" "$kvcore" encode --chunk-tokens 200 "$tmp/kv5.npy" -o "$tmp/s.kvcs" --json
if has '"chunks": 3' && has '"tokens": 512'; then ok "stream: 3 chunks of a 512-token cache"; else not_ok "stream: 3 chunks of a 512-token cache"; fi
check "encode --chunk-tokens 512 (one chunk)" "$kvcore" encode --chunk-tokens 512 "$tmp/kv5.npy" -o "$tmp/s1.kvcs" -q
check "plain encode of the same file" "$kvcore" encode "$tmp/kv5.npy" -o "$tmp/p1.kvc" -q
if same_bytes "$tmp/s1.kvcs" "$tmp/p1.kvc"; then ok "a one-chunk stream is the plain container"; else not_ok "a one-chunk stream is the plain container"; fi
check "decode a stream" "$kvcore" decode "$tmp/s.kvcs" -o "$tmp/sdec.npy" -q
# Per-token scales: the chunking changes the CDFs, not the decoded values.
if same_bytes "$tmp/sdec.npy" "$tmp/kv5.npy"; then ok "stream decodes to the plain decode, byte for byte"; else not_ok "stream decodes to the plain decode, byte for byte"; fi
check "re-encode the decoded stream" "$kvcore" encode --chunk-tokens 200 "$tmp/sdec.npy" -o "$tmp/s2.kvcs" -q
if same_bytes "$tmp/s.kvcs" "$tmp/s2.kvcs"; then ok "stream re-encode is byte-identical"; else not_ok "stream re-encode is byte-identical"; fi
sz=$(wc -c <"$tmp/s.kvcs")
head -c $((sz - 5)) "$tmp/s.kvcs" >"$tmp/cut.kvcs"
status_is_e 1 "a truncated stream fails" "$kvcore" decode "$tmp/cut.kvcs" -o "$tmp/cut.npy"
if err_has "corrupt" && [ ! -e "$tmp/cut.npy" ]; then ok "truncated stream: says corrupt, writes nothing"; else not_ok "truncated stream: says corrupt, writes nothing"; fi
cp "$tmp/s.kvcs" "$tmp/bad.kvcs"
printf '\377' | dd of="$tmp/bad.kvcs" bs=1 seek=$((sz - 100)) conv=notrunc 2>/dev/null
status_is_e 1 "a damaged stream fails" "$kvcore" decode "$tmp/bad.kvcs" -o "$tmp/bad.npy"
if err_has "corrupt" && [ ! -e "$tmp/bad.npy" ]; then ok "damaged stream: says corrupt, writes nothing"; else not_ok "damaged stream: says corrupt, writes nothing"; fi
# A stream through standard input, a pipe or a FIFO is told from a container by its bytes and read
# whole: every chunk decoded, none silently dropped.
status_is 0 "decode - < stream (a redirect)" sh -c '"$1" decode -q - -o "$2" <"$3"' sh "$kvcore" "$tmp/sin.npy" "$tmp/s.kvcs"
if same_bytes "$tmp/sin.npy" "$tmp/kv5.npy"; then ok "stream from a redirect: all 512 tokens"; else not_ok "stream from a redirect: all 512 tokens"; fi
status_is 0 "cat stream | decode -" sh -c 'cat "$3" | "$1" decode -q - -o "$2"' sh "$kvcore" "$tmp/spipe.npy" "$tmp/s.kvcs"
if same_bytes "$tmp/spipe.npy" "$tmp/kv5.npy"; then ok "stream from a pipe: all 512 tokens"; else not_ok "stream from a pipe: all 512 tokens"; fi
mkfifo "$tmp/sfifo"
(cat "$tmp/s.kvcs" >"$tmp/sfifo" &)
status_is 0 "decode FIFO holding a stream" timeout 20 "$kvcore" decode -q "$tmp/sfifo" -o "$tmp/sfifo.npy"
if same_bytes "$tmp/sfifo.npy" "$tmp/kv5.npy"; then ok "stream from a FIFO: all 512 tokens"; else not_ok "stream from a FIFO: all 512 tokens"; fi
{ cat "$tmp/s.kvcs"; printf 'junk'; } >"$tmp/sjunk.kvcs"
status_is_e 1 "a stream with trailing junk on standard input fails" sh -c '"$1" decode - -o "$2" <"$3"' sh "$kvcore" "$tmp/sj.npy" "$tmp/sjunk.kvcs"
if err_has "corrupt" && [ ! -e "$tmp/sj.npy" ]; then ok "stream + junk on stdin: corrupt, nothing written"; else not_ok "stream + junk on stdin: corrupt, nothing written"; fi
# A single container with trailing junk: refused as a file and through standard input alike.
{ cat "$tmp/a.kvc"; printf 'trailing junk'; } >"$tmp/junk.kvc"
status_is_e 1 "a container with trailing junk (file) fails" "$kvcore" decode "$tmp/junk.kvc" -o "$tmp/j1.npy"
if err_has "corrupt.*13 bytes that are not a whole container (trailing data" && [ ! -e "$tmp/j1.npy" ]; then ok "junk (file): corrupt, nothing written"; else not_ok "junk (file): corrupt, nothing written"; fi
status_is_e 1 "a container with trailing junk (standard input) fails" sh -c '"$1" decode - -o "$2" <"$3"' sh "$kvcore" "$tmp/j2.npy" "$tmp/junk.kvc"
if err_has "corrupt.*13 bytes that are not a whole container (trailing data" && [ ! -e "$tmp/j2.npy" ]; then ok "junk (stdin): corrupt, nothing written"; else not_ok "junk (stdin): corrupt, nothing written"; fi
status_is_e 1 "a container with trailing junk through a pipe fails" sh -c 'cat "$3" | "$1" decode - -o "$2"' sh "$kvcore" "$tmp/j3.npy" "$tmp/junk.kvc"
status_is_e 1 "inspect of a container with trailing junk (standard input) fails" sh -c '"$1" inspect - <"$2"' sh "$kvcore" "$tmp/junk.kvc"
if err_has "corrupt"; then ok "inspect junk (stdin): corrupt"; else not_ok "inspect junk (stdin): corrupt"; fi
# inspect reads streams: a row per chunk and the totals, from a file and from standard input.
status_is 0 "inspect a stream" "$kvcore" inspect "$tmp/s.kvcs"
if has "kvcore stream of 3 containers" && has "^2  *400-511 " && has "^total  *512  *$sz  *327680 "; then ok "inspect stream: 3 chunk rows and the totals"; else not_ok "inspect stream: 3 chunk rows and the totals"; fi
status_is 0 "inspect - < stream" sh -c '"$1" inspect - --json <"$2"' sh "$kvcore" "$tmp/s.kvcs"
if has '"chunks": 3' && has '"tokens": 512' && has '"first_token": 400' && has "\"stream\": $sz"; then ok "inspect --json of a stream from stdin"; else not_ok "inspect --json of a stream from stdin"; fi
status_is_e 2 "inspect --original of a stream is a usage error" "$kvcore" inspect "$tmp/s.kvcs" --original "$tmp/kv5.npy"
if err_has "is a stream"; then ok "inspect --original of a stream: says why"; else not_ok "inspect --original of a stream: says why"; fi
status_is_e 1 "inspect of a stream with trailing junk fails" "$kvcore" inspect "$tmp/sjunk.kvcs"
if err_has "corrupt.*4 bytes that are not a whole container"; then ok "inspect stream + junk: names the 4 bytes"; else not_ok "inspect stream + junk: names the 4 bytes"; fi
status_is_e 1 "a stream does not decode to safetensors" "$kvcore" decode "$tmp/s.kvcs" -o "$tmp/s.safetensors"
status_is_e 2 "--chunk-tokens with a K/V pair is a usage error" "$kvcore" encode --chunk-tokens 200 "$K" "$V" -o "$tmp/x.kvcs"
status_is_e 2 "--chunk-tokens 0 is a usage error" "$kvcore" encode --chunk-tokens 0 "$tmp/kv5.npy" -o "$tmp/x.kvcs"
# Concatenated streams are a stream: 64 copies make a 32768-token, 20 MiB cache.
for i in $(seq 64); do cat "$tmp/s.kvcs"; done >"$tmp/big.kvcs"
check "decode a 64-stream concatenation" "$kvcore" decode "$tmp/big.kvcs" -o "$tmp/big.npy" -q
if [ "$(wc -c <"$tmp/big.npy")" -eq $((2 * 5 * 32768 * 32 * 2 + 128)) ]; then ok "concatenation: 32768 tokens"; else not_ok "concatenation: 32768 tokens"; fi
# Memory: under a 64 MiB address-space limit the stream codes the 20 MiB cache both ways, while
# the one-container path (which holds the whole tensor and its coding buffers) cannot.
if [ "$("${KVC_TEST_BUILDDIR:-.}/tests/harness/limits_helper" config 2>/dev/null)" = "sanitizers=yes" ]; then
    n=$((n + 1)); echo "ok $n - stream memory bound # SKIP sanitizer build (ASan needs its shadow address space)"
elif [ "${KVCORE_BACKEND:-cpu}" != cpu ]; then
    n=$((n + 1)); echo "ok $n - stream memory bound # SKIP backend ${KVCORE_BACKEND}: a device backend maps its own memory (the emulated one a 2 GiB arena)"
else
    (ulimit -v 65536; exec "$kvcore" encode --chunk-tokens 256 "$tmp/big.npy" -o "$tmp/big2.kvcs" -q) >"$tmp/out" 2>"$tmp/err"
    r1=$?
    (ulimit -v 65536; exec "$kvcore" decode "$tmp/big2.kvcs" -o "$tmp/big2.npy" -q) >"$tmp/out" 2>>"$tmp/err"
    r2=$?
    (ulimit -v 65536; exec "$kvcore" encode "$tmp/big.npy" -o "$tmp/big1.kvc" -q) >"$tmp/out" 2>/dev/null
    r3=$?
    if [ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ $r3 -ne 0 ] && same_bytes "$tmp/big.npy" "$tmp/big2.npy"; then ok "stream memory bound: 20 MiB coded both ways under a 64 MiB limit that the one-container path exceeds"; else echo "# exits $r1 $r2 $r3" >>"$tmp/err"; not_ok "stream memory bound"; fi
fi
# no message names a C function, a parameter struct or a status constant
if grep -n 'kvc_[a-z]\|params->\|KVC_ERR' "$errs" >"$tmp/err"; then not_ok "messages are in the user's terms"; else ok "messages are in the user's terms"; fi

# Quality options (encode --level / --bins-k / --bins-v / --key-scaling).
check "encode --level 2" "$kvcore" encode "$K" "$V" -o "$tmp/l2.kvc" -q --level 2
"$kvcore" inspect "$tmp/l2.kvc" --json >"$tmp/out" 2>"$tmp/err"
if has '"cdf_bins": 46' && has '"lmcache_readable": true' && [ ! -s "$tmp/err" ] &&
   [ "$(wc -c <"$tmp/l2.kvc")" -lt "$(wc -c <"$tmp/a.kvc")" ]; then ok "level 2: 46 bins, LMCache-readable, smaller than the default"; else not_ok "level 2: 46 bins, LMCache-readable, smaller than the default"; fi
check "encode --key-scaling channel" "$kvcore" encode "$K" "$V" -o "$tmp/pc.kvc" -q --key-scaling channel
if grep -q "warning: .* not readable by LMCache (.*per channel" "$tmp/err"; then ok "per-channel keys: warning on encode"; else not_ok "per-channel keys: warning on encode"; fi
"$kvcore" inspect "$tmp/pc.kvc" --json >"$tmp/out" 2>"$tmp/err"
if has '"format_version_minor": 1' && has '"key_scaling": "channel"' && has '"lmcache_readable": false'; then ok "per-channel keys: format 1.1, not LMCache-readable"; else not_ok "per-channel keys: format 1.1, not LMCache-readable"; fi
check "encode per-layer --bins-k list" "$kvcore" encode "$K" "$V" -o "$tmp/pl.kvc" -q --bins-k 40,32,16,16,16 --bins-v 8
"$kvcore" inspect "$tmp/pl.kvc" --json | tr -d ' \n' >"$tmp/out"
if has '"plane":"K","layer":0,"bins":40' && has '"plane":"K","layer":1,"bins":32' && has '"plane":"K","layer":4,"bins":16' &&
   has '"plane":"V","layer":2,"bins":8'; then ok "per-layer bins reach the container"; else not_ok "per-layer bins reach the container"; fi
status_is 2 "a bins list of the wrong length is a usage error" "$kvcore" encode "$K" "$V" -o "$tmp/x.kvc" --bins-k 32,32
status_is 2 "an unknown level is a usage error" "$kvcore" encode "$K" "$V" -o "$tmp/x.kvc" --level 9

# Rate target (encode --bits) and the LMCache settings a container needs (inspect --lmcache-config).
check "encode --bits 3.5" "$kvcore" encode "$K" "$V" -o "$tmp/b35.kvc" -q --bits 3.5
bits=$(awk -v b="$(wc -c <"$tmp/b35.kvc")" 'BEGIN { printf "%.4f", 8 * b / (2 * 5 * 512 * 32) }')
if awk -v x="$bits" 'BEGIN { exit !(x <= 3.5 && x > 3.0) }'; then ok "--bits 3.5: $bits bits per element"; else not_ok "--bits 3.5: $bits bits per element"; fi
status_is 0 "inspect --lmcache-config (default bins)" "$kvcore" inspect "$tmp/a.kvc" --lmcache-config
if has "key bins:   QuantizationSpec(start_layer=0, end_layer=5, bins=32)" && has "own default for 5 layers"; then ok "--lmcache-config: the default needs no settings"; else not_ok "--lmcache-config: the default needs no settings"; fi
status_is 0 "inspect --lmcache-config (rate target)" "$kvcore" inspect "$tmp/b35.kvc" --lmcache-config --original "$K" --original "$V"
if has "CacheGenConfig(nlayers=5, kspecs=\[QuantizationSpec(start_layer=0" && has "its default for 5 layers differs" &&
   has "level 3: .* vs level 0"; then ok "--lmcache-config: the config LMCache needs, and every level's size"; else not_ok "--lmcache-config: the config LMCache needs, and every level's size"; fi
status_is 0 "inspect --lmcache-config (per-channel keys)" "$kvcore" inspect "$tmp/pc.kvc" --lmcache-config
if has "LMCache cannot read it: .*per channel"; then ok "--lmcache-config: says why LMCache cannot read it"; else not_ok "--lmcache-config: says why LMCache cannot read it"; fi
# A 32-layer cache (the real layers repeated): LMCache's default differs by layer there.
if "${KVC_PYTHON:-python3}" -c "import numpy" 2>/dev/null; then
    "${KVC_PYTHON:-python3}" -c "import numpy as np, sys; [np.save(sys.argv[i + 3], np.load(sys.argv[i + 1])[[l % 5 for l in range(32)]]) for i in (0, 1)]" \
        "$K" "$V" "$tmp/k32.npy" "$tmp/v32.npy"
    "$kvcore" encode "$tmp/k32.npy" "$tmp/v32.npy" -o "$tmp/l0_32.kvc" -q
    check "inspect --lmcache-config, 32 layers" "$kvcore" inspect "$tmp/l0_32.kvc" --lmcache-config --original "$tmp/k32.npy" --original "$tmp/v32.npy"
    if has "key bins:   QuantizationSpec(start_layer=0, end_layer=10, bins=32), QuantizationSpec(start_layer=10, end_layer=32, bins=16)" &&
       has "value bins: QuantizationSpec(start_layer=0, end_layer=2, bins=32), QuantizationSpec(start_layer=2, end_layer=32, bins=16)" &&
       has "own default for 32 layers" && has "level 1: .*(-[0-9.]* % vs level 0)"; then ok "32 layers: level 0 is LMCache's 32/16 default, level 1 is smaller"; else not_ok "32 layers: level 0 is LMCache's 32/16 default, level 1 is smaller"; fi
else
    n=$((n + 1)); echo "ok $n - 32-layer --lmcache-config # SKIP numpy is not importable by ${KVC_PYTHON:-python3}"
fi
status_is 2 "--bits 0 is a usage error" "$kvcore" encode "$K" "$V" -o "$tmp/x.kvc" --bits 0
if err_has "bits per element, a number in (0, 64\]"; then ok "--bits 0: says what it expects"; else not_ok "--bits 0: says what it expects"; fi
status_is 2 "--bits with --level is a usage error" "$kvcore" encode "$K" "$V" -o "$tmp/x.kvc" --bits 3 --level 1
status_is 1 "--bits below what the chunk codes to fails" "$kvcore" encode "$K" "$V" -o "$tmp/x.kvc" --bits 0.5
if err_has "0.5 bits per element is below what this chunk codes to" && [ ! -e "$tmp/x.kvc" ]; then ok "--bits 0.5: says so, writes nothing"; else not_ok "--bits 0.5: says so, writes nothing"; fi

# Messages in the user's terms: the flag, the file, the suite.
"$kvcore" decode -q "$tmp/a.kvc" -o "$tmp/w.safetensors"
status_is_e 2 "--chunk-tokens of a .safetensors is a usage error" "$kvcore" encode "$tmp/w.safetensors" --chunk-tokens 10 -o "$tmp/w.kvcs"
if err_has "chunk-tokens reads an .npy file.*w.safetensors is a .safetensors file" && [ ! -e "$tmp/w.kvcs" ]; then ok "--chunk-tokens safetensors: says which file type it takes"; else not_ok "--chunk-tokens safetensors: says which file type it takes"; fi
# A T = 0 .npy, [2, 5, 0, 32] f16: numpy's own header bytes.
hdr="{'descr': '<f2', 'fortran_order': False, 'shape': (2, 5, 0, 32), }"
{ printf '\223NUMPY\001\000v\000%s' "$hdr"; printf '%*s\n' $((117 - ${#hdr})) ''; } >"$tmp/t0.npy"
for ct in "" "--chunk-tokens 10"; do
    # shellcheck disable=SC2086
    status_is_e 1 "encode of 0 tokens ${ct:-(one container)} fails" "$kvcore" encode "$tmp/t0.npy" $ct -o "$tmp/t0.kvc"
    if err_has "t0.npy holds 5 layers x 0 tokens x 32 channels: nothing to encode" && [ ! -e "$tmp/t0.kvc" ]; then ok "0 tokens ${ct:-(one container)}: says so"; else not_ok "0 tokens ${ct:-(one container)}: says so"; fi
done
for b in 5 66 2 "32,7"; do
    status_is_e 2 "--bins-k $b is a usage error" "$kvcore" encode "$K" "$V" -o "$tmp/x.kvc" --bins-k "$b"
    if err_has "^kvcore encode: --bins-k $b: .* bins: a bin count is even, from 4 to 64" && [ ! -e "$tmp/x.kvc" ]; then ok "--bins-k $b: in the flag's terms"; else not_ok "--bins-k $b: in the flag's terms"; fi
done
status_is_e 2 "bench of an unknown suite" "$kvcore" bench foo
if err_has "no suite named 'foo'; the suites are: .*codec"; then ok "bench foo: names foo and the suites"; else not_ok "bench foo: names foo and the suites"; fi
status_is_e 2 "bench of a known and an unknown suite runs nothing" "$kvcore" bench memory fooo --quick
if err_has "no suite named 'fooo'" && [ ! -s "$tmp/out" ]; then ok "bench memory fooo: refused before running"; else not_ok "bench memory fooo: refused before running"; fi
if grep -n 'kvc_[a-z]\|params->\|KVC_ERR\|bins\[' "$errs" >"$tmp/err"; then not_ok "messages are in the user's terms (2)"; else ok "messages are in the user's terms (2)"; fi

# Progress: a live line on a terminal (file, bytes done / total, %, rate), never on a pipe unless
# --progress; summaries in human units, no GB/s, no internal layout names.
for i in 1 2 3 4 5 6 7 8; do cat "$tmp/s.kvcs"; done >"$tmp/p8.kvcs"
status_is 0 "decode on a pipe: no progress" "$kvcore" decode "$tmp/p8.kvcs" -o "$tmp/p8a.npy"
if ! grep -q "$(printf '\r')" "$tmp/err" && has "p8a.npy: 5 layers x 4096 tokens x 32 channels (f16) from a stream, .* KiB => 2.50 MiB ([0-9.]*x) in [0-9.]* s, [0-9.]* [KMG]*i*B/s$" && ! has "GB/s\|KV_2LTD"; then ok "pipe: no progress; summary in human units"; else not_ok "pipe: no progress; summary in human units"; fi
status_is 0 "decode --progress on a pipe" "$kvcore" decode --progress "$tmp/p8.kvcs" -o "$tmp/p8b.npy"
if grep -q "p8.kvcs: .* / 2.50 MiB  *[0-9]*%, .*/s" "$tmp/err"; then ok "--progress forces the line on a pipe"; else not_ok "--progress forces the line on a pipe"; fi
if command -v script >/dev/null 2>&1; then
    script -qc "\"$kvcore\" decode \"$tmp/p8.kvcs\" -o \"$tmp/p8c.npy\"" /dev/null >"$tmp/out" 2>&1
    if grep -q "p8.kvcs: .* / 2.50 MiB  *[0-9]*%, .*/s" "$tmp/out"; then ok "terminal: the progress line by default"; else not_ok "terminal: the progress line by default"; fi
    script -qc "\"$kvcore\" decode --no-progress \"$tmp/p8.kvcs\" -o \"$tmp/p8d.npy\"" /dev/null >"$tmp/out" 2>&1
    if ! grep -q "MiB  *[0-9]*%" "$tmp/out" && has "p8d.npy: "; then ok "terminal: --no-progress"; else not_ok "terminal: --no-progress"; fi
else
    n=$((n + 1)); echo "ok $n - progress on a terminal # SKIP no script(1) to make a terminal"
fi
# The rANS coder (encode --coder rans, format 1.4): the same symbols as ac, so the same decode.
check "encode --coder rans" "$kvcore" encode "$K" "$V" -o "$tmp/r.kvc" -q --coder rans
if [ ! -s "$tmp/err" ]; then ok "--coder rans: no LMCache warning (asked for by name)"; else not_ok "--coder rans: no LMCache warning (asked for by name)"; fi
"$kvcore" inspect "$tmp/r.kvc" --json >"$tmp/out" 2>"$tmp/err"
if has '"coder": "rans"' && has '"format_version_minor": 4' && has '"lmcache_readable": false'; then ok "rans: inspect says coder rans, format 1.4, not LMCache-readable"; else not_ok "rans: inspect says coder rans, format 1.4, not LMCache-readable"; fi
"$kvcore" inspect "$tmp/a.kvc" --json >"$tmp/out" 2>"$tmp/err"
if has '"coder": "ac"'; then ok "the default coder is ac"; else not_ok "the default coder is ac"; fi
"$kvcore" inspect "$tmp/r.kvc" >"$tmp/out" 2>"$tmp/err"
if has "kvcore container v1.4, .*, coder rans"; then ok "inspect names the coder"; else not_ok "inspect names the coder"; fi
# The pre-release rANS layouts of formats 1.2 (flag bit 3 alone) and 1.3 (bits 3 and 4) are refused
# as a version this kvcore does not read: r.kvc's header rewritten as theirs.
if "${KVC_PYTHON:-python3}" -c "import zlib" 2>/dev/null; then
    for m in 2 3; do
        "${KVC_PYTHON:-python3}" -c "import sys, zlib; b = bytearray(open(sys.argv[1], 'rb').read()); m = int(sys.argv[3]); b[10] = m; b[12:16] = (8 if m == 2 else 24).to_bytes(4, 'little'); b[44:48] = zlib.crc32(bytes(b[:44])).to_bytes(4, 'little'); open(sys.argv[2], 'wb').write(b)" \
            "$tmp/r.kvc" "$tmp/v1$m.kvc" "$m"
        status_is 1 "inspect refuses a format 1.$m rANS container" "$kvcore" inspect "$tmp/v1$m.kvc"
        if err_has "pre-release rANS layout"; then ok "inspect says format 1.$m's rANS layout is not read"; else not_ok "inspect says format 1.$m's rANS layout is not read"; fi
        status_is 1 "decode refuses a format 1.$m rANS container" "$kvcore" decode "$tmp/v1$m.kvc" -o "$tmp/v1$m.npy" -q
        if [ ! -e "$tmp/v1$m.npy" ]; then ok "no output from a format 1.$m rANS container"; else not_ok "no output from a format 1.$m rANS container"; fi
    done
else
    for m in 2 3; do n=$((n + 1)); echo "ok $n - refusing a format 1.$m rANS container # SKIP ${KVC_PYTHON:-python3} cannot import zlib to rewrite a header"; done
fi
check "decode a rans container" "$kvcore" decode "$tmp/r.kvc" -o "$tmp/r.npy" -q
if same_bytes "$tmp/r.npy" "$tmp/kv5.npy"; then ok "rans decodes to the ac decode, byte for byte"; else not_ok "rans decodes to the ac decode, byte for byte"; fi
check "encode --coder ac (explicit)" "$kvcore" encode "$K" "$V" -o "$tmp/ac.kvc" -q --coder ac
if same_bytes "$tmp/ac.kvc" "$tmp/a.kvc"; then ok "--coder ac is the default container"; else not_ok "--coder ac is the default container"; fi
check "encode --chunk-tokens 200 --coder rans" "$kvcore" encode --chunk-tokens 200 --coder rans "$tmp/kv5.npy" -o "$tmp/rs.kvcs" -q
check "decode a rans stream" "$kvcore" decode "$tmp/rs.kvcs" -o "$tmp/rsdec.npy" -q
if same_bytes "$tmp/rsdec.npy" "$tmp/sdec.npy"; then ok "rans stream decodes as the ac stream"; else not_ok "rans stream decodes as the ac stream"; fi
"$kvcore" inspect "$tmp/rs.kvcs" >"$tmp/out" 2>"$tmp/err"
if has "kvcore stream of 3 containers v1.4, .*, coder rans"; then ok "stream inspect names the coder"; else not_ok "stream inspect names the coder"; fi
check "encode --level 2 --coder rans" "$kvcore" encode "$K" "$V" -o "$tmp/rl2.kvc" -q --level 2 --coder rans
"$kvcore" decode "$tmp/l2.kvc" -o "$tmp/l2.npy" -q
"$kvcore" decode "$tmp/rl2.kvc" -o "$tmp/rl2.npy" -q
if same_bytes "$tmp/l2.npy" "$tmp/rl2.npy"; then ok "level 2: rans decodes as ac"; else not_ok "level 2: rans decodes as ac"; fi
status_is 0 "inspect --lmcache-config (rans)" "$kvcore" inspect "$tmp/r.kvc" --lmcache-config
if has "LMCache cannot read it: .*rANS"; then ok "--lmcache-config: rANS is not LMCache-readable"; else not_ok "--lmcache-config: rANS is not LMCache-readable"; fi
status_is 2 "an unknown --coder is a usage error" "$kvcore" encode "$K" "$V" -o "$tmp/x.kvc" --coder zstd
if err_has "expected ac or rans"; then ok "--coder: says which coders exist"; else not_ok "--coder: says which coders exist"; fi


# Starting a context must not run hwloc's costly I/O components: "pci" parses pci.ids (40 s under
# ASan, 600 KB leaked per load) and "opencl" starts an OpenCL runtime (GPU drivers included) in the
# caller's process. PCI bus ids and classes come from sysfs. Seen through the files they open.
if ! command -v strace >/dev/null 2>&1; then
    n=$((n + 1)); echo "ok $n - context start reads neither pci.ids nor OpenCL's vendors # SKIP no strace"
elif ! strace -f -qq -e trace=open,openat -o "$tmp/trace" "$kvcore" info >/dev/null 2>&1; then
    n=$((n + 1)); echo "ok $n - context start reads neither pci.ids nor OpenCL's vendors # SKIP strace cannot trace here"
elif grep -E 'pci\.ids|/OpenCL/vendors' "$tmp/trace" >"$tmp/err"; then
    not_ok "context start reads neither pci.ids nor OpenCL's vendors"
else
    ok "context start reads neither pci.ids nor OpenCL's vendors"
fi

# One container (not a stream): the library's decode reports each coded window (kvc_codec_decode_ex).
status_is 0 "decode --progress of one container" "$kvcore" decode --progress "$tmp/a.kvc" -o "$tmp/pc.npy"
if grep -q "a.kvc: .* / 320 KiB  *[0-9]*%, .*/s" "$tmp/err" && same_bytes "$tmp/pc.npy" "$tmp/a.npy"; then ok "one container: the progress line, the same output"; else not_ok "one container: the progress line, the same output"; fi
status_is 0 "decode of one container on a pipe" "$kvcore" decode "$tmp/a.kvc" -o "$tmp/pd.npy"
if ! grep -q "$(printf '\r')" "$tmp/err"; then ok "one container on a pipe: no progress"; else not_ok "one container on a pipe: no progress"; fi
status_is 0 "encode summary" "$kvcore" encode "$K" "$V" -o "$tmp/hu.kvc"
if has "hu.kvc: 5 layers x 512 tokens x 32 channels (4 heads x 8, f16), 320 KiB => [0-9.]* KiB ([0-9.]*x) in [0-9.]* s, " && ! has "GB/s"; then ok "encode summary in human units"; else not_ok "encode summary in human units"; fi

# Pictures: inspect and demo draw bits/symbol and error per layer as a bar chart (on a terminal, or
# with --chart; Unicode blocks in a UTF-8 locale, '#' otherwise; as wide as $COLUMNS) and as an SVG.
py=${KVC_PYTHON:-python3}
if "$py" -c "import xml.etree.ElementTree" 2>/dev/null; then
    cat >"$tmp/chart.py" <<'PYEOF'
# chart.py ROWS COLUMNS utf8|ascii NCOLS [PANELS] < chart: the bars are proportional to the numbers
# printed; PANELS charts of ROWS rows one below the other (each checked on its own).
import re, sys
rows, cols, mode, ncols = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
panels = int(sys.argv[5]) if len(sys.argv) > 5 else 1
blocks = "\u258f\u258e\u258d\u258c\u258b\u258a\u2589\u2588"
bar = "([#%s]*) +([0-9]+\\.[0-9]+)" % blocks
line_re = re.compile(r"^(K|V|latent) +([0-9]+) %s(?:   %s)?$" % (bar, bar))
def units(b):
    return sum(8 if c == "\u2588" else blocks.index(c) + 1 if c in blocks else 1 for c in b)
found, problems = [], []
for line in sys.stdin.read().splitlines():
    m = line_re.match(line)
    if not m:
        continue
    found.append(m)
    if len(line) > cols:
        problems.append("line of %d characters > COLUMNS %d: %r" % (len(line), cols, line))
    if (mode == "utf8") != (not any(c == "#" for c in line)):
        problems.append("%s bars expected: %r" % (mode, line))
if len(found) != rows * panels:
    problems.append("%d chart rows, want %d" % (len(found), rows * panels))
for p, k in [(p, k) for p in range(panels) for k in range(ncols)]:
    got = [(units(m.group(3 + 2 * k) or ""), float(m.group(4 + 2 * k))) for m in found[p * rows:(p + 1) * rows] if m.group(4 + 2 * k)]
    if len(got) != rows:
        problems.append("column %d: %d values, want %d" % (k, len(got), rows))
        continue
    full, vmax = max(u for u, _ in got), max(v for _, v in got)
    for u, v in got:
        # one unit (an eighth of a character, or a character in ASCII) of rounding, and the printed digits
        if abs(u / full - v / vmax) > 1.0 / full + 1e-3:
            problems.append("column %d: bar %d/%d units for %g of %g" % (k, u, full, v, vmax))
print("; ".join(problems))
sys.exit(1 if problems else 0)
PYEOF
    cat >"$tmp/svg.py" <<'PYEOF'
# svg.py FILE BARS PANELS: parses as XML; each panel has one bar per (plane, layer), heights
# proportional to the values, and labelled axes.
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
bars, panels = int(sys.argv[2]), int(sys.argv[3])
problems = []
if root.tag != ns + "svg":
    problems.append("root is %s" % root.tag)
got = root.findall(ns + "g")
if len(got) != panels:
    problems.append("%d panels, want %d" % (len(got), panels))
for g in got:
    rects = [r for r in g.findall(ns + "rect") if r.get("class") == "bar"]
    if len(rects) != bars or len({(r.get("data-plane"), r.get("data-layer")) for r in rects}) != bars:
        problems.append("%s: %d bars, want one per layer and plane (%d)" % (g.get("data-metric"), len(rects), bars))
        continue
    vals = [(float(r.get("height")), float(r.get("data-value"))) for r in rects]
    hmax, vmax = max(h for h, _ in vals), max(v for _, v in vals)
    if any(abs(h / hmax - v / vmax) > 1e-3 for h, v in vals):
        problems.append("%s: heights not proportional to the values" % g.get("data-metric"))
    labels = [t.text for t in g.findall(ns + "text") if t.get("class") == "axis-label"]
    if "layer" not in labels or len(labels) != 2:
        problems.append("%s: axis labels %s" % (g.get("data-metric"), labels))
print("; ".join(problems))
sys.exit(1 if problems else 0)
PYEOF
    chart_ok() { # chart_ok DESC ROWS COLUMNS MODE NCOLS [PANELS] (the chart in $tmp/out)
        if "$py" "$tmp/chart.py" "$2" "$3" "$4" "$5" "${6:-1}" <"$tmp/out" >"$tmp/err" 2>&1; then ok "$1"; else not_ok "$1"; fi
    }
    svg_ok() { if "$py" "$tmp/svg.py" "$2" "$3" "$4" >"$tmp/err" 2>&1; then ok "$1"; else not_ok "$1"; fi; }
    "$kvcore" encode "$K" "$V" -o "$tmp/pic.kvc" -q
    if [ "$(LC_ALL=C.UTF-8 locale charmap 2>/dev/null)" = UTF-8 ]; then
        status_is 0 "inspect --original --chart" env LC_ALL=C.UTF-8 COLUMNS=100 "$kvcore" inspect "$tmp/pic.kvc" --original "$K" --original "$V" --chart
        chart_ok "UTF-8 chart: 10 layer rows, bars proportional to bits/symbol and error, within 100 columns" 10 100 utf8 2
        status_is 0 "demo --chart" env LC_ALL=C.UTF-8 COLUMNS=60 "$kvcore" demo --chart
        chart_ok "demo chart: proportional, within 60 columns" 10 60 utf8 2
        status_is 0 "demo --chart on 40 columns" env LC_ALL=C.UTF-8 COLUMNS=40 "$kvcore" demo --chart
        chart_ok "demo chart on 40 columns: the error panel below the bits, within 40 columns" 10 40 utf8 1 2
    else
        n=$((n + 1)); echo "ok $n - UTF-8 chart # SKIP no C.UTF-8 locale"
    fi
    status_is 0 "inspect --chart in the C locale" env LC_ALL=C COLUMNS=72 "$kvcore" inspect "$tmp/pic.kvc" --chart
    chart_ok "ASCII chart without --original: bits/symbol only, proportional, within 72 columns" 10 72 ascii 1
    status_is 0 "inspect on a pipe" "$kvcore" inspect "$tmp/pic.kvc"
    if ! grep -q '#\|bits/symbol  ' "$tmp/out" && has "^V      4"; then ok "a pipe gets the table, no chart"; else not_ok "a pipe gets the table, no chart"; fi
    if command -v script >/dev/null 2>&1; then
        COLUMNS=80 LC_ALL=C script -qc "\"$kvcore\" inspect \"$tmp/pic.kvc\"" /dev/null >"$tmp/out" 2>&1
        tr -d '\r' <"$tmp/out" >"$tmp/out2" && mv "$tmp/out2" "$tmp/out"
        chart_ok "a terminal gets the chart by default" 10 80 ascii 1
        COLUMNS=80 script -qc "\"$kvcore\" inspect --no-chart \"$tmp/pic.kvc\"" /dev/null >"$tmp/out" 2>&1
        if ! grep -q 'bits/symbol  ' "$tmp/out" && grep -q "^V      4" "$tmp/out"; then ok "terminal: --no-chart"; else not_ok "terminal: --no-chart"; fi
    else
        n=$((n + 1)); echo "ok $n - chart on a terminal # SKIP no script(1) to make a terminal"
    fi
    status_is 0 "inspect --original --svg" "$kvcore" inspect "$tmp/pic.kvc" --original "$K" --original "$V" --svg "$tmp/pic.svg"
    svg_ok "inspect SVG: valid XML, one bar per layer and plane in each panel, labelled axes" "$tmp/pic.svg" 10 2
    status_is 0 "inspect --svg -" "$kvcore" inspect "$tmp/pic.kvc" --svg -
    cp "$tmp/out" "$tmp/stdout.svg"
    svg_ok "inspect --svg -: the SVG alone on standard output (no --original: one panel)" "$tmp/stdout.svg" 10 1
    status_is 0 "demo --svg" "$kvcore" demo -q --svg "$tmp/demo.svg"
    svg_ok "demo SVG: bits/symbol and error, one bar per layer and plane" "$tmp/demo.svg" 10 2
    cp "$tmp/pic.svg" "$tmp/keep.svg"
    status_is_e 1 "inspect --svg of an existing file without -f" "$kvcore" inspect "$tmp/pic.kvc" --svg "$tmp/pic.svg"
    if err_has "pic.svg already exists (use -f to overwrite)" && same_bytes "$tmp/pic.svg" "$tmp/keep.svg"; then ok "existing --svg: kept, says -f"; else not_ok "existing --svg: kept, says -f"; fi
    status_is 0 "inspect --svg -f replaces it" "$kvcore" inspect "$tmp/pic.kvc" --svg "$tmp/pic.svg" -f
    for c in inspect demo; do
        a=; [ $c = inspect ] && a="$tmp/pic.kvc"
        status_is_e 1 "$c --svg into a missing directory" "$kvcore" $c $a --svg "$tmp/no/such/dir/x.svg"
        if err_has "^kvcore $c: cannot write --svg $tmp/no/such/dir/x.svg: No such file or directory" && [ ! -s "$tmp/out" ]; then ok "$c: a bad --svg path is refused before any work, in the flag's terms"; else not_ok "$c: a bad --svg path is refused before any work, in the flag's terms"; fi
    done
    status_is_e 2 "inspect --chart --json is a usage error" "$kvcore" inspect "$tmp/pic.kvc" --chart --json
    status_is 0 "inspect --chart --svg of a stream" env LC_ALL=C COLUMNS=80 "$kvcore" inspect "$tmp/s.kvcs" --chart --svg "$tmp/s.svg"
    chart_ok "stream: the chart of bits/symbol per layer over the chunks, proportional" 10 80 ascii 1
    svg_ok "stream SVG: one bar per layer and plane" "$tmp/s.svg" 10 1
    status_is_e 2 "demo --svg - is a usage error" "$kvcore" demo --svg -
else
    n=$((n + 1)); echo "ok $n - charts # SKIP $py cannot import xml.etree"
fi

echo "1..$n"
exit $fail
