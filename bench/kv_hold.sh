#!/bin/sh
# One decode measurement at a KV storage format, for BENCHMARKS.md's KV section:
#   sh bench/kv_hold.sh KV BATCH CONTEXT OUT.json     (KV = f32 | bf16 | fp8)
# MODEL (default /tmp/dsv4-bench/flash_quarter, made by `dsv4 gen-model --config
# bench/configs/flash_quarter.json --dtype fp8 --out M`), BIN (default build/dsv4).
set -e
[ $# -eq 4 ] || { echo "usage: sh bench/kv_hold.sh f32|bf16|fp8 BATCH CONTEXT OUT.json" >&2; exit 2; }
MODEL=${MODEL:-/tmp/dsv4-bench/flash_quarter}
BIN=${BIN:-build/dsv4}
echo "load at start: $(uptime)" >&2
exec "$BIN" bench --model "$MODEL" --kv-dtype "$1" --batch "$2" --prompt-len 512 --contexts "$3" \
    --gen 16 --reps 1 --probe-mb 256 --json > "$4"
