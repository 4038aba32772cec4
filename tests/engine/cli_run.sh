#!/bin/sh
# `dsv4 run` contract: several sequences from --tokens-file run batched (shared decode steps,
# shorter ones dropping out) and each seqK dump is byte-identical to running that sequence
# alone; bad input exits 1-2 with a message; --fidelity none/official (P3); --pin-threads.
BIN=$1 MODEL=$2 OUT=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
checks=0
ok() { checks=$((checks + 1)); }  # one more check passed (fail exits)
rm -rf "$OUT" && mkdir -p "$OUT" || fail "mkdir $OUT"; ok
seq_ids() { awk -v n="$1" -v s="$2" 'BEGIN { x = s; for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648;
                                   printf("%s%d", i ? "," : "", int(x / 65536) % 512) } }'; }
A=$(seq_ids 30 1) B=$(seq_ids 45 2) C=$(seq_ids 140 3)
printf '%s\n%s\n\n%s\n' "$A" "$(echo "$B" | tr ',' ' ')" "$C" > "$OUT/tokens.txt"
"$BIN" run --model "$MODEL" --tokens-file "$OUT/tokens.txt" --prefill 20 --chunk 9 --mtp --dump "$OUT/batch" \
    || fail "batched run"; ok
i=0
for t in "$A" "$B" "$C"; do
    "$BIN" run --model "$MODEL" --tokens "$t" --prefill 20 --chunk 9 --mtp --dump "$OUT/alone$i" || fail "run $i"; ok
    for f in prefill_logits prefill_hidden decode_logits decode_hidden mtp_logits; do
        cmp -s "$OUT/alone$i/$f.bin" "$OUT/batch/seq$i/$f.bin" || fail "seq$i $f differs between batched and alone"; ok
    done
    i=$((i + 1))
done
expect() { # status pattern args...
    want=$1 pat=$2; shift 2
    msg=$("$BIN" run "$@" 2>&1 >/dev/null); got=$?
    [ "$got" -eq "$want" ] || fail "run $*: exit $got, want $want"; ok
    echo "$msg" | grep -q "$pat" || fail "run $*: message '$msg' lacks '$pat'"; ok
}
expect 2 "unknown option" --model "$MODEL" --tokens 1,2 --dump "$OUT/x" --frobnicate
expect 2 "vocab size" --model "$MODEL" --tokens 1,512 --dump "$OUT/x"
expect 2 "exceeds" --model "$MODEL" --tokens 1,2,3 --prefill 4 --dump "$OUT/x"
expect 1 "config.json" --model "$OUT/nonexistent" --tokens 1,2 --dump "$OUT/x"
expect 2 "need --model" --tokens 1,2
expect 2 "bad token id" --model "$MODEL" --tokens 1,x2 --dump "$OUT/x"
# fidelity mode P3: "none" is the exact path byte for byte, "official" changes the logits;
# a bad setting or one combined with --w8a8 is refused
T=$(seq_ids 40 4)
"$BIN" run --model "$MODEL" --tokens "$T" --prefill 30 --dump "$OUT/p0" || fail "P0 run"; ok
"$BIN" run --model "$MODEL" --tokens "$T" --prefill 30 --fidelity none --dump "$OUT/none" || fail "fidelity none run"; ok
"$BIN" run --model "$MODEL" --tokens "$T" --prefill 30 --fidelity official --dump "$OUT/p3" || fail "fidelity official run"; ok
cmp -s "$OUT/p0/prefill_logits.bin" "$OUT/none/prefill_logits.bin" || fail "--fidelity none differs from P0"; ok
cmp -s "$OUT/p0/decode_logits.bin" "$OUT/p3/decode_logits.bin" && fail "--fidelity official gives P0's logits"; ok
# --pin-threads places the workers, never changes a result (3 threads: one wraps on 2 cores)
"$BIN" run --model "$MODEL" --tokens "$T" --prefill 30 --threads 3 --pin-threads --dump "$OUT/pin" || fail "pinned run"; ok
for f in prefill_logits decode_logits; do
    cmp -s "$OUT/p0/$f.bin" "$OUT/pin/$f.bin" || fail "--pin-threads changes $f"; ok
done
expect 2 "unknown item 'F7'" --model "$MODEL" --tokens 1,2 --dump "$OUT/x" --fidelity F7
expect 1 "w8a8" --model "$MODEL" --tokens 1,2 --dump "$OUT/x" --fidelity F1 --w8a8
# buffers grow with what is used, not with the square of the sequence count (issue 14 item
# 7): 3,000 one-token sequences ran in ~4 s and ~0.6 GB, and must fit a 3 GB address space;
# sizing one buffer by sequences x sequences x D (4.6 GB at D = 128) cannot
awk 'BEGIN { for (i = 0; i < 3000; i++) print (i * 7) % 512 }' > "$OUT/many.txt"
(ulimit -v 3000000 && "$BIN" run --model "$MODEL" --tokens-file "$OUT/many.txt" --dump "$OUT/many") 2> "$OUT/many.err" ||
    fail "3,000 one-token sequences in 3 GB: $(tail -n 3 "$OUT/many.err")"
[ "$(ls "$OUT/many" | wc -l)" = 3000 ] || fail "3,000 sequences: $(ls "$OUT/many" | wc -l) dumps"; ok
rm -rf "$OUT/many"
printf "cli_run: %d checks passed, 0 failed\n" "$checks"
