#!/bin/sh
# The dsv4 command line as a user meets it: --version, every command's --help against the
# parser's own option table, both value forms, '-' for stdin, strict numbers, -n 0, and
# defaults that are what the help says (a run with the shown value equals one without).
BIN=$1 MODEL=$2 TMP=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$TMP" && mkdir -p "$TMP" || fail "mkdir $TMP"

v=$("$BIN" --version) || fail "--version exit"
echo "$v" | grep -q '^dsv4 ' || fail "--version prints '$v'"

# every option of the table is on the help page, with its default
for cmd in info gen-model run tokenize detokenize generate chat bench serve; do
    "$BIN" $cmd --help > "$TMP/help" || fail "$cmd --help exit"
    "$BIN" $cmd --list-options > "$TMP/table" || fail "$cmd --list-options exit"
    [ -s "$TMP/table" ] || fail "$cmd: empty option table"
    # the help text joined into one line per option (continuations start with spaces)
    awk '/^  -/ { if (l) print l; l = $0; next } /^   / { sub(/^ +/, " "); l = l $0; next } END { print l }' \
        "$TMP/help" > "$TMP/rows"
    while IFS="$(printf '\t')" read -r opt def; do
        row=$(grep -e "$opt[ ,]" -e "$opt\$" "$TMP/rows" | head -1)
        [ -n "$row" ] || fail "$cmd --help does not list $opt"
        if [ -n "$def" ]; then
            echo "$row" | grep -qF "(default: $def)" || fail "$cmd --help: $opt does not show its default '$def': $row"
        fi
    done < "$TMP/table"
    awk -v c="$cmd" 'length($0) > 80 { print c ": help line over 80 columns: " $0; bad = 1 } END { exit bad }' \
        "$TMP/help" || fail "$cmd --help too wide"
done

# bad usage: status 2 with a short usage, and a hint for a near miss
"$BIN" generate --modle "$MODEL" -p x 2> "$TMP/err"; [ $? -eq 2 ] || fail "misspelled option exit"
grep -q "did you mean --model" "$TMP/err" || fail "no did-you-mean: $(cat "$TMP/err")"
[ "$(wc -l < "$TMP/err")" -le 4 ] || fail "a misspelled option prints the whole help"
for bad in "-n nan" "-n 2.7" "--threads 0x10" "--seed nan" "--top-k nan" "--temperature inf" "-n -5"; do
    # shellcheck disable=SC2086
    "$BIN" generate --model "$MODEL" -p x $bad 2>/dev/null; [ $? -eq 2 ] || fail "generate $bad accepted"
done
for bad in "--threads nan" "--prefill 2.5" "--chunk -1"; do
    # shellcheck disable=SC2086
    "$BIN" run --model "$MODEL" --tokens 1 --dump "$TMP/d" $bad 2>/dev/null; [ $? -eq 2 ] || fail "run $bad accepted"
done
"$BIN" info --model "$MODEL" --max-context 1e3 2>/dev/null; [ $? -eq 2 ] || fail "info --max-context 1e3 accepted"
"$BIN" frobnicate 2>/dev/null; [ $? -eq 2 ] || fail "unknown command exit"
# --weights-memory on every command that creates an engine, and its old name --fp4-layout
# (hidden from --help): an unknown value is refused, naming the accepted ones
for cmd in "generate -p x" chat "run --tokens 1 --dump $TMP/d" bench serve; do
    for opt in weights-memory fp4-layout; do
        # shellcheck disable=SC2086
        "$BIN" $cmd --model "$MODEL" --$opt wide 2> "$TMP/err"; [ $? -eq 2 ] || fail "$cmd --$opt wide accepted"
        grep -q "must be auto, mapped, copy, lanes or shuffle" "$TMP/err" || fail "$cmd --$opt wide: $(cat "$TMP/err")"
    done
    # shellcheck disable=SC2086
    "$BIN" $cmd --help > "$TMP/help" 2>&1
    grep -q -- "--weights-memory auto|mapped|copy|lanes" "$TMP/help" || fail "$cmd --help lacks --weights-memory"
    if grep -Eq "^ +--fp4-layout" "$TMP/help"; then fail "$cmd --help lists the old name as an option"; fi
done
# both names and both spellings of mapped reach the engine: run's dump is the same bits
"$BIN" run --model "$MODEL" --tokens 1,2,3 --dump "$TMP/wm" --weights-memory mapped 2>/dev/null || fail "--weights-memory mapped"
"$BIN" run --model "$MODEL" --tokens 1,2,3 --dump "$TMP/fl" --fp4-layout natural 2>/dev/null || fail "--fp4-layout natural"
diff -r "$TMP/wm" "$TMP/fl" >/dev/null || fail "--weights-memory mapped and --fp4-layout natural differ"
# serve refuses context parallelism outside a DP group with its reason (a step mixes decodes
# and prefill chunks), and --cp without data-parallel attention
for p in cp cp+ep; do
    "$BIN" serve --model "$MODEL" --parallel $p 2> "$TMP/err"; [ $? -eq 2 ] || fail "serve --parallel $p accepted"
    grep -q "context parallelism.*--parallel ep" "$TMP/err" || fail "serve --parallel $p: $(cat "$TMP/err")"
done
"$BIN" serve --model "$MODEL" --cp on 2> "$TMP/err"; [ $? -eq 2 ] || fail "serve --cp on accepted without --parallel"
grep -q -- "--cp needs --parallel ep with --attention dp" "$TMP/err" || fail "serve --cp on: $(cat "$TMP/err")"

# --model=DIR and --model DIR; --prompt-file - reads stdin
g() { "$BIN" generate "$@" --temperature 0 -n 6 2>/dev/null; }
a=$(g --model "$MODEL" -p "Hello there") || fail "generate --model DIR"
b=$(g --model="$MODEL" --prompt="Hello there") || fail "generate --model=DIR"
c=$(printf 'Hello there' | g -m "$MODEL" --prompt-file -) || fail "generate --prompt-file -"
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] || fail "value forms differ: '$a' '$b' '$c'"

# -n 0: the prompt runs, nothing is generated
out=$("$BIN" generate --model "$MODEL" -p "Hello there" -n 0 2> "$TMP/err") || fail "-n 0 exit"
[ -z "$out" ] || fail "-n 0 printed '$out'"
grep -q "generated: 0 tokens" "$TMP/err" || fail "-n 0 stats: $(cat "$TMP/err")"
grep -q "prompt: [1-9][0-9]* tokens" "$TMP/err" || fail "-n 0 prefilled nothing: $(cat "$TMP/err")"
grep -q "load: [0-9.]* s" "$TMP/err" && grep -q "total: [0-9.]* s" "$TMP/err" || fail "no load/total time"
"$BIN" generate --model "$MODEL" -p "Hello" -n 3 2>&1 >/dev/null | grep -q "first token: [0-9.]* s" \
    || fail "no time to first token"

# logprobs name each token by its text, quoted, not by byte-level symbols
"$BIN" generate --model "$MODEL" -p "Hello there" -n 3 --temperature 0 --logprobs 2 2> "$TMP/err" >/dev/null \
    || fail "generate --logprobs"
[ "$(grep -c "^\[[0-9]* '.*' -\?[0-9.]*\] [0-9]* '.*' -\?[0-9.]* [0-9]* '.*' -\?[0-9.]*\$" "$TMP/err")" -eq 3 ] \
    || fail "logprobs lines: $(cat "$TMP/err")"
grep -q "Ġ" "$TMP/err" && fail "logprobs print byte-level symbols: $(cat "$TMP/err")"

# the defaults the help shows are the ones used: sampling with every default stated equals
# sampling with none (the sampler is seeded, so equal text means equal settings)
"$BIN" generate --list-options > "$TMP/table"
d() { awk -F '\t' -v o="$1" '$1 == o { print $2 }' "$TMP/table"; }
plain=$("$BIN" generate --model "$MODEL" -p "Once upon" 2>/dev/null) || fail "generate with defaults"
stated=$("$BIN" generate --model "$MODEL" -p "Once upon" --max-tokens "$(d --max-tokens)" \
    --temperature "$(d --temperature)" --top-k "$(d --top-k)" --top-p "$(d --top-p)" --min-p "$(d --min-p)" \
    --repeat-penalty "$(d --repeat-penalty)" --frequency-penalty "$(d --frequency-penalty)" \
    --presence-penalty "$(d --presence-penalty)" --seed "$(d --seed)" --max-context "$(d --max-context)" \
    --chunk "$(d --chunk)" 2>/dev/null) || fail "generate with the stated defaults"
[ -n "$plain" ] && [ "$plain" = "$stated" ] || fail "help's defaults are not the defaults"
[ "$(d --max-tokens)" = 256 ] && [ "$("$BIN" chat --list-options | awk -F '\t' '$1 == "--max-tokens" { print $2 }')" = 512 ] \
    || fail "generate/chat reply lengths"

# chat keeps the conversation: a line of invalid UTF-8 and a turn longer than the context
# are reported and skipped, the turns around them answered; /save and /load round-trip
long=$(awk 'BEGIN { for (i = 0; i < 300; i++) printf("word%d ", i) }')
printf 'First\n\377\376 bad\n%s\n/save %s\nSecond\n/reset\n/load %s\nThird\n' "$long" "$TMP/conv.json" "$TMP/conv.json" |
    "$BIN" chat --model "$MODEL" -n 4 --temperature 0 --max-context 200 --no-warmup > "$TMP/chat.out" 2> "$TMP/chat.err" \
    || fail "chat exit: $(cat "$TMP/chat.err")"
grep -q "not valid UTF-8" "$TMP/chat.err" || fail "chat: no invalid UTF-8 report"
grep -q "it was not sent" "$TMP/chat.err" || fail "chat: no report of the turn that does not fit"
[ "$(grep -c '^\[[0-9]* prompt tokens' "$TMP/chat.err")" -eq 3 ] || fail "chat: not 3 answered turns: $(cat "$TMP/chat.err")"
python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); assert [x["role"] for x in m] == ["user", "assistant"] and m[0]["content"] == "First", m' \
    "$TMP/conv.json" || fail "chat /save wrote $(cat "$TMP/conv.json")"
grep -q "loaded 2 messages" "$TMP/chat.err" || fail "chat /load"
# after /load the next turn runs the whole saved conversation: more prompt tokens than turn 1
p1=$(sed -n 's/^\[\([0-9]*\) prompt tokens.*/\1/p' "$TMP/chat.err" | sed -n 1p)
p3=$(sed -n 's/^\[\([0-9]*\) prompt tokens.*/\1/p' "$TMP/chat.err" | sed -n 3p)
[ "$p3" -gt "$p1" ] || fail "chat: turn after /load prefilled $p3 tokens (turn 1: $p1)"

# more threads than cores: a warning
taskset -c 0 "$BIN" generate --model "$MODEL" -p x -n 1 --threads 2 2>&1 >/dev/null | grep -q "warning: 2 threads on 1 available core" \
    || fail "no warning for 2 threads on 1 core"
echo "cli_behaviour: reached the end; every check above exits 1 on failure"
