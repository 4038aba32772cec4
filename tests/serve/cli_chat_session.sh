#!/bin/sh
# dsv4 chat --session FILE (issue 11), greedy, MTP on (the model's default): run 1 leaves the
# transcript FILE and the cache FILE.kv at the last aligned length (a multiple of 128 for
# this model) its prefill crossed; run 2 restores it and prefills only the rest, with the
# answer of a cold run over the same transcript (a session without FILE.kv). A FILE.kv with
# a flipped byte is refused with a warning and recomputed, same answer.
# (Not compared with one uninterrupted run: the transcript is text, and re-encoding the
# random model's answers need not give the ids it sampled — as with /save and /load.)
BIN=$1 MODEL=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
checks=0
ok() { checks=$((checks + 1)); }  # one more check passed (fail exits)
dir=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$dir"' EXIT
chat() { "$BIN" chat --model "$MODEL" -n 6 --temperature 0 "$@"; }
long=$(i=0; while [ $i -lt 40 ]; do printf 'the amber fjord and the cedar grove %d, ' $i; i=$((i + 1)); done)
turn2="What comes next?"

printf '%s\n' "$long" | chat --session "$dir/s.json" >"$dir/out1" 2>"$dir/err1" || fail "run 1: $(cat "$dir/err1")"; ok
[ -s "$dir/s.json" ] && [ -s "$dir/s.json.kv" ] || fail "run 1 left no transcript or no cache"; ok
cp "$dir/s.json" "$dir/cold.json"
printf '%s\n' "$turn2" | chat --session "$dir/cold.json" >"$dir/out_cold" 2>"$dir/err_cold" || fail "cold run 2"; ok
printf '%s\n' "$turn2" | chat --session "$dir/s.json" >"$dir/out2" 2>"$dir/err2" || fail "run 2: $(cat "$dir/err2")"; ok
grep -q '^\[resumed [0-9]* tokens from ' "$dir/err2" || fail "run 2 did not restore the cache: $(cat "$dir/err2")"; ok
[ -s "$dir/out2" ] && cmp -s "$dir/out2" "$dir/out_cold" || fail "the resumed conversation answered differently"; ok
n=$(sed -n 's/^\[resumed \([0-9]*\) tokens.*/\1/p' "$dir/err2")
[ "$n" -ge 128 ] && [ $((n % 128)) -eq 0 ] || fail "resumed $n tokens: not a positive multiple of 128"; ok
# the turn prefilled only what follows the snapshot: the cold run's tokens minus n
p2=$(sed -n 's/^\[\([0-9]*\) prompt tokens.*/\1/p' "$dir/err2")
pc=$(sed -n 's/^\[\([0-9]*\) prompt tokens.*/\1/p' "$dir/err_cold")
[ -n "$p2" ] && [ "$p2" -eq $((pc - n)) ] || fail "run 2 prefilled $p2 tokens, the cold one $pc, resumed $n"; ok

# a corrupted cache: refused, recomputed, same answer
printf '%s\n' "$long" | chat --session "$dir/t.json" >/dev/null 2>&1 || fail "run 3"
pos=$(($(wc -c <"$dir/t.json.kv") / 2))
b=$(od -An -tu1 -j "$pos" -N1 "$dir/t.json.kv" | tr -d ' ')
printf "\\$(printf %o $(((b + 1) % 256)))" | dd of="$dir/t.json.kv" bs=1 seek="$pos" conv=notrunc 2>/dev/null
printf '%s\n' "$turn2" | chat --session "$dir/t.json" >"$dir/out4" 2>"$dir/err4" || fail "run 4: $(cat "$dir/err4")"; ok
grep -q "CRC" "$dir/err4" || fail "no warning for the corrupted cache: $(cat "$dir/err4")"; ok
cmp -s "$dir/out4" "$dir/out_cold" || fail "a corrupted cache changed the answer"; ok
printf "cli_chat_session: %d checks passed, 0 failed\n" "$checks"
