#!/bin/sh
# The generate and chat command lines: greedy output is reproducible, chat prefills only the
# new turn, bad flags exit 2, a missing model exits 1.
BIN=$1 MODEL=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
checks=0
ok() { checks=$((checks + 1)); }  # one more check passed (fail exits)
a=$("$BIN" generate --model "$MODEL" --prompt "Hello" -n 12 --temperature 0 2>/dev/null) || fail "generate"; ok
b=$("$BIN" generate --model "$MODEL" --prompt "Hello" -n 12 --temperature 0 2>/dev/null) || fail "generate again"; ok
[ -n "$a" ] && [ "$a" = "$b" ] || fail "greedy output not reproducible"; ok
"$BIN" generate --model "$MODEL" --chat --think --prompt "Hi" -n 4 2>&1 | grep -q "prompt: [0-9]* tokens" \
    || fail "generate prints no token counts"; ok
stats=$(printf 'First question here\nSecond\n' | "$BIN" chat --model "$MODEL" -n 6 --temperature 0 2>&1 >/dev/null) \
    || fail "chat"; ok
p1=$(echo "$stats" | sed -n 's/^\[\([0-9]*\) prompt tokens.*/\1/p' | sed -n 1p)
p2=$(echo "$stats" | sed -n 's/^\[\([0-9]*\) prompt tokens.*/\1/p' | sed -n 2p)
[ -n "$p1" ] && [ -n "$p2" ] || fail "chat printed no per-turn counts: $stats"; ok
# turn 2 feeds the end of turn 1 and the new user turn, not the whole conversation again
[ "$p2" -lt $((p1 + 6)) ] || fail "chat turn 2 prefilled $p2 tokens (turn 1: $p1): cache not reused"; ok
"$BIN" generate --model "$MODEL" --prompt x --bogus 2>/dev/null; [ $? -eq 2 ] || fail "bad flag exit"; ok
"$BIN" generate --model /nonexistent --prompt x 2>/dev/null; [ $? -eq 1 ] || fail "missing model exit"; ok
printf "cli_generate_chat: %d checks passed, 0 failed\n" "$checks"
