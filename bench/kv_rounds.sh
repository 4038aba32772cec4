#!/bin/sh
# Decode measurements at KV storage formats, one after another in the order given, each
# appended to OUT.jsonl as one line (dsv4 bench --json, tagged with the binary), for
# interleaved rounds inside one quiet hold (BENCHMARKS.md's KV section):
#   sh bench/kv_rounds.sh OUT.jsonl KV:BATCH:CONTEXT ...      (KV = f32 | bf16 | fp8)
# MODEL (default /tmp/dsv4-bench/flash_quarter), BIN (default build/dsv4), GEN (32).
# python3 bench/kv_table.py OUT.jsonl tabulates the medians.
set -e
[ $# -ge 2 ] || { echo "usage: sh bench/kv_rounds.sh OUT.jsonl KV:BATCH:CONTEXT ..." >&2; exit 2; }
MODEL=${MODEL:-/tmp/dsv4-bench/flash_quarter}
BIN=${BIN:-build/dsv4}
OUT=$1
shift
for spec in "$@"; do
    IFS=: read -r kv batch ctx <<SPEC
$spec
SPEC
    [ -n "$ctx" ] || { echo "kv_rounds.sh: bad spec '$spec' (KV:BATCH:CONTEXT)" >&2; exit 2; }
    echo "$(date -u +%T) $BIN $spec, load $(cut -d' ' -f1 /proc/loadavg)" >&2
    "$BIN" bench --model "$MODEL" --kv-dtype "$kv" --batch "$batch" --prompt-len 512 --contexts "$ctx" \
        --gen "${GEN:-32}" --reps 1 --probe-mb 256 --json |
        python3 -c 'import json, sys; d = json.load(sys.stdin); d["bin"] = sys.argv[1]; print(json.dumps(d))' "$BIN" >> "$OUT"
done
