#!/bin/sh
# greedy_vs_cli.sh GREEDY DSV4 MODEL TOKENIZER — the example's greedy text equals the CLI's.
GREEDY=$1 BIN=$2 MODEL=$3 TOK=$4
for prompt in "Hello, world" "Der Ozean ist tief. 海は深い。"; do
    a=$("$GREEDY" "$MODEL" "$TOK" "$prompt" 12) || { echo "FAIL: greedy exited $?" >&2; exit 1; }
    b=$("$BIN" generate --model "$MODEL" --tokenizer "$TOK" --prompt "$prompt" -n 12 --temperature 0 2>/dev/null) \
        || { echo "FAIL: dsv4 generate exited $?" >&2; exit 1; }
    [ -n "$a" ] && [ "$a" = "$b" ] || { printf 'FAIL: %s\n greedy: %s\n    cli: %s\n' "$prompt" "$a" "$b" >&2; exit 1; }
    printf '%s -> %s\n' "$prompt" "$a"
done
