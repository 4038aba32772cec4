#!/bin/sh
# Edges of the command line (issue 14, item 8), each a behaviour a user can meet:
# "bos_token_id": null prepends nothing, an empty --tokens is a usage error, --dump-choices
# is refused under --parallel, a quantization_config the loader does not implement is
# refused at open, a NUL byte in a prompt is either a token (plain) or an error (--chat,
# chat lines), generate says when it stopped at a full context, output files are whole or
# absent, and W8A8 engine creation shows progress (issue 15). Exit statuses are
# checked exactly, so under the sanitizer build a leak (LeakSanitizer's exit 23) fails too.
# A fourth argument "quick" (the sanitizer build) leaves out the sections that only repeat
# model runs (BOS, W8A8 progress, full context) and keeps those on error and output paths.
BIN=$1 MODEL=$2 TMP=$3 QUICK=${4:-}
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$TMP" && mkdir -p "$TMP" || fail "mkdir $TMP"
passed=0
ok() { passed=$((passed + 1)); }
# status of "$@" with stderr kept in $TMP/err
st() { "$@" > "$TMP/out" 2> "$TMP/err"; echo $?; }
prompt_tokens() { sed -n 's/.*prompt: \([0-9]*\) tokens.*/\1/p' "$TMP/err"; }

# a model directory that differs from MODEL in its config.json only (sed expression $2)
variant() {
    mkdir -p "$TMP/$1" && ln -sf "$(cd "$MODEL" && pwd)"/model.safetensors "$(cd "$MODEL" && pwd)"/tokenizer.json "$TMP/$1/" &&
        sed "$2" "$MODEL/config.json" > "$TMP/$1/config.json" || fail "variant $1"
    cmp -s "$MODEL/config.json" "$TMP/$1/config.json" && fail "variant $1: '$2' changed nothing"
}

# "bos_token_id": null: the prompt is its own tokens, no BOS (and no -1) in front
if [ "$QUICK" != quick ]; then
n_text=$(printf 'Hello there' | "$BIN" tokenize --tokenizer "$MODEL" | wc -w)
[ "$(st "$BIN" generate --model "$MODEL" -p "Hello there" -n 0)" = 0 ] || fail "generate -n 0: $(cat "$TMP/err")"
[ "$(prompt_tokens)" = $((n_text + 1)) ] || fail "with BOS: $(prompt_tokens) prompt tokens, text has $n_text"
variant nobos 's/"bos_token_id":[^,]*,/"bos_token_id": null,/'
[ "$(st "$BIN" generate --model "$TMP/nobos" -p "Hello there" -n 0)" = 0 ] || fail "bos null: $(cat "$TMP/err")"
[ "$(prompt_tokens)" = "$n_text" ] || fail "bos null: $(prompt_tokens) prompt tokens, text has $n_text"
[ "$(st "$BIN" generate --model "$TMP/nobos" -p "Hello there" -n 2 --temperature 0)" = 0 ] ||
    fail "bos null generate: $(cat "$TMP/err")"
ok
fi

# run --tokens '': a usage error (status 2), nothing leaked
[ "$(st "$BIN" run --model "$MODEL" --tokens '' --dump "$TMP/d")" = 2 ] || fail "--tokens '': $(cat "$TMP/err")"
grep -q "needs a non-empty value" "$TMP/err" || fail "--tokens '' message: $(cat "$TMP/err")"
[ ! -e "$TMP/d" ] || fail "--tokens '' wrote a dump"
ok

# --dump-choices under --parallel: refused before any rank starts
[ "$(st "$BIN" run --model "$MODEL" --tokens 1,2 --dump "$TMP/d" --dump-choices --parallel ep)" = 2 ] ||
    fail "--dump-choices --parallel: $(cat "$TMP/err")"
grep -q -- "--dump-choices is for a single process" "$TMP/err" || fail "--dump-choices message: $(cat "$TMP/err")"
ok

# a quantization_config the loader does not implement: refused at open, naming the field
q='"quantization_config": {"quant_method": "fp8", "fmt": "e5m2", "scale_fmt": "ue8m0", "weight_block_size": [128, 128], "activation_scheme": "dynamic"},'
variant e5m2 "s/\"bos_token_id\"/$q \"bos_token_id\"/"
[ "$(st "$BIN" generate --model "$TMP/e5m2" -p x -n 1)" = 1 ] || fail "e5m2 accepted: $(cat "$TMP/err")"
grep -q 'quantization_config.fmt = "e5m2" is not supported' "$TMP/err" || fail "e5m2 message: $(cat "$TMP/err")"
ok

# NUL bytes: a plain prompt keeps every byte (BOS + the tokens of the whole file); --chat
# and a chat line refuse it with a message instead of cutting the text short
printf 'Hello\000there' > "$TMP/nul.txt"
n_nul=$("$BIN" tokenize --tokenizer "$MODEL" < "$TMP/nul.txt" | wc -w)
[ "$n_nul" -gt "$(printf 'Hello' | "$BIN" tokenize --tokenizer "$MODEL" | wc -w)" ] || fail "tokenize stopped at the NUL"
[ "$(st "$BIN" generate --model "$MODEL" --prompt-file "$TMP/nul.txt" -n 0)" = 0 ] || fail "NUL prompt: $(cat "$TMP/err")"
[ "$(prompt_tokens)" = $((n_nul + 1)) ] || fail "NUL prompt: $(prompt_tokens) prompt tokens, the file has $n_nul"
[ "$(st "$BIN" generate --model "$MODEL" --prompt-file "$TMP/nul.txt" --chat -n 1)" = 2 ] ||
    fail "--chat NUL prompt: $(cat "$TMP/err")"
grep -q "the prompt holds a NUL byte (byte 6)" "$TMP/err" || fail "--chat NUL message: $(cat "$TMP/err")"
printf 'First\nab\000cd\nSecond\n' > "$TMP/chat.in"
[ "$(st "$BIN" chat --model "$MODEL" -n 2 --temperature 0 --no-warmup < "$TMP/chat.in")" = 0 ] ||
    fail "chat with a NUL line: $(cat "$TMP/err")"
grep -q "that line holds a NUL byte (byte 3); it was not sent" "$TMP/err" || fail "chat NUL message: $(cat "$TMP/err")"
[ "$(grep -c '^\[[0-9]* prompt tokens' "$TMP/err")" = 2 ] || fail "chat: not 2 answered turns: $(cat "$TMP/err")"
ok

# generate that fills the context says so (and still exits 0 with its stats)
if [ "$QUICK" != quick ]; then
[ "$(st "$BIN" generate --model "$MODEL" -p "Hello there" -c 16 -n -1 --temperature 0)" = 0 ] ||
    fail "full context: $(cat "$TMP/err")"
grep -q "stopped: the context is full (--max-context 16)" "$TMP/err" || fail "full context message: $(cat "$TMP/err")"
grep -q "generated: 1[0-9] tokens" "$TMP/err" || fail "full context count: $(cat "$TMP/err")"
ok
fi

# output files appear whole or not at all: gen-model's directory holds exactly its three
# files (no temporary left), and a chat /save that cannot be written says why and keeps
# the session going
[ "$(ls "$MODEL" | tr '\n' ' ')" = "config.json model.safetensors tokenizer.json " ] ||
    fail "gen-model left: $(ls "$MODEL")"
printf 'First\n/save %s\n/save %s\nSecond\n' "$TMP/no/such/dir/c.json" "$TMP/c.json" > "$TMP/chat.in"
[ "$(st "$BIN" chat --model "$MODEL" -n 2 --temperature 0 --no-warmup < "$TMP/chat.in")" = 0 ] ||
    fail "chat /save: $(cat "$TMP/err")"
grep -q "cannot save the conversation: $TMP/no/such/dir/c.json: cannot create a temporary file next to it: No such file or directory" \
    "$TMP/err" || fail "chat /save message: $(cat "$TMP/err")"
grep -q "saved 2 messages to $TMP/c.json" "$TMP/err" && [ "$(ls "$TMP" | grep -c 'c\.json')" = 1 ] ||
    fail "chat /save: $(cat "$TMP/err"); $(ls "$TMP")"
ok

# inputs read whole are bounded (issue 14 item 7): an endless stdin is refused at the limit
# with a message, not read until memory runs out; an input that cannot be read exits 1 in
# every command, malformed content 2
if [ "$QUICK" != quick ]; then
yes | "$BIN" generate --model "$MODEL" --prompt-file - -n 1 > /dev/null 2> "$TMP/err"
[ $? -eq 1 ] && grep -q "standard input is larger than the 64 MB this input may hold" "$TMP/err" ||
    fail "endless prompt: $(cat "$TMP/err")"
yes 1 | "$BIN" run --model "$MODEL" --tokens-file - --dump "$TMP/d" > /dev/null 2> "$TMP/err"
[ $? -eq 1 ] && grep -q "standard input is larger than the 256 MB this input may hold" "$TMP/err" ||
    fail "endless tokens: $(cat "$TMP/err")"
ok
fi

# engine creation with W8A8 shows its progress (issue 15): stderr is no terminal here, so a
# line per 10 %, rising, ending at 100 %; an exact run prints none
[ "$QUICK" = quick ] && { echo "$passed passed, 0 failed (quick)"; exit 0; }
[ "$(st "$BIN" generate --model "$MODEL" -p x -n 1 --w8a8)" = 0 ] || fail "--w8a8: $(cat "$TMP/err")"
grep "^preparing the INT8 weights: " "$TMP/err" | sed 's/^preparing the INT8 weights: \([0-9]*\)%.*/\1/' > "$TMP/pct"
[ "$(tail -n 1 "$TMP/pct")" = 100 ] && sort -n -c "$TMP/pct" && [ "$(wc -l < "$TMP/pct")" -ge 2 ] ||
    fail "W8A8 progress: $(cat "$TMP/err")"
[ "$(st "$BIN" generate --model "$MODEL" -p x -n 1)" = 0 ] && ! grep -q "INT8" "$TMP/err" || fail "exact run: $(cat "$TMP/err")"
ok

# --warmup reports its progress the same way and ends at 100 %; --mlock pins the weights or
# says why it cannot (the locked-memory limit), never fails silently
[ "$(st "$BIN" generate --model "$MODEL" -p x -n 1 --warmup)" = 0 ] &&
    grep -q "^warming up the weights: 100% ([0-9.]* / [0-9.]* GB, [0-9.]* GB/s)\$" "$TMP/err" ||
    fail "--warmup progress: $(cat "$TMP/err")"
s=$(st "$BIN" generate --model "$MODEL" -p x -n 1 --mlock)
[ "$s" = 0 ] || { [ "$s" = 1 ] && grep -q "cannot pin .* GB of weights in memory: " "$TMP/err"; } ||
    fail "--mlock: status $s: $(cat "$TMP/err")"
ok

# guided decoding: --regex / --choice constrain the reply (seeded, temperature 1); a bad regex,
# a bad choice list and two constraints are usage errors before the model loads
[ "$(st "$BIN" generate --model "$MODEL" -p "Today is" -n 24 --seed 3 --regex '[0-9]{2}:[0-9]{2}')" = 0 ] ||
    fail "--regex: $(cat "$TMP/err")"
grep -qx '[0-9][0-9]:[0-9][0-9]' "$TMP/out" || fail "--regex output: $(cat "$TMP/out")"
[ "$(st "$BIN" generate --model "$MODEL" -p "Answer" -n 24 --seed 5 --choice '["yes","no way","caf\u00e9"]')" = 0 ] ||
    fail "--choice: $(cat "$TMP/err")"
grep -qx 'yes\|no way\|café' "$TMP/out" || fail "--choice output: $(cat "$TMP/out")"
[ "$(st "$BIN" generate --model "$MODEL" -p x -n 1 --regex '(?=a)')" = 2 ] && grep -q "lookahead" "$TMP/err" ||
    fail "--regex refused: $(cat "$TMP/err")"
[ "$(st "$BIN" generate --model "$MODEL" -p x -n 1 --choice '["a",1]')" = 2 ] || fail "--choice refused: $(cat "$TMP/err")"
[ "$(st "$BIN" generate --model "$MODEL" -p x -n 1 --json --regex a)" = 2 ] || fail "--json --regex: $(cat "$TMP/err")"
# --grammar FILE (GBNF, recursive): the reply is a sentence; an undefined rule is refused
printf 'root ::= "<" root ">" | "(" [0-9] ("," [0-9]){0,2} ")"\n' > "$TMP/g.gbnf"
[ "$(st "$BIN" generate --model "$MODEL" -p "Nest" -n 24 --seed 3 --grammar "$TMP/g.gbnf")" = 0 ] ||
    fail "--grammar: $(cat "$TMP/err")"
grep -qx '\(<*\)([0-9]\(,[0-9]\)\{0,2\})\(>*\)' "$TMP/out" || fail "--grammar output: $(cat "$TMP/out")"
printf 'root ::= x\n' > "$TMP/bad.gbnf"
[ "$(st "$BIN" generate --model "$MODEL" -p x -n 1 --grammar "$TMP/bad.gbnf")" = 2 ] &&
    grep -q "line 1, column 10: undefined rule 'x'" "$TMP/err" || fail "--grammar refused: $(cat "$TMP/err")"
[ "$(st "$BIN" generate --model "$MODEL" -p x -n 1 --regex a --grammar "$TMP/g.gbnf")" = 2 ] ||
    fail "--regex --grammar: $(cat "$TMP/err")"
ok

echo "$passed passed, 0 failed"
