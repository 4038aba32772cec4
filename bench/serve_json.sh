#!/bin/sh
# bench/serve_json.sh — the served decode rate with structured output against without.
#
#   bench/serve_json.sh [BUILD_DIR] > OUT.jsonl     (run it under /work/bin/xrun or alone)
#
# Starts `dsv4 serve` on $MODEL (default /tmp/dsv4-bench/flash_quarter, the real tokenizer)
# and runs bench/serve_load.js at concurrency $LEVELS (1,4) for three request kinds, in
# alternated rounds ($ROUNDS, default 2) on the same server: none (free text),
# json_string (an array of strings: the mask mostly inside strings) and json_enum (an array
# of enum words: the mask between tokens, every step). The arrays have minItems 100000, so
# no value completes and every request runs its --gen tokens, like the free ones (EOS is
# banned there). One JSON line per run: serve_load.js's, with "kind" and "round" added.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
model=${MODEL:-/tmp/dsv4-bench/flash_quarter}
port=${PORT:-18137}
levels=${LEVELS:-1,4}
rounds=${ROUNDS:-2}
gen=${GEN:-48}
tok=$root/../shared/tokenizer/tokenizer.json
"$build/dsv4" serve --model "$model" --tokenizer "$tok" --port "$port" --max-seqs 8 --max-context 1024 \
    ${THREADS:+--threads $THREADS} 2>/tmp/serve_json.$$.log &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
until grep -q "ready on" /tmp/serve_json.$$.log 2>/dev/null; do
    kill -0 $pid 2>/dev/null || { cat /tmp/serve_json.$$.log >&2; exit 1; }
    sleep 0.2
done
str='{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"array","items":{"type":"string"},"minItems":100000}}}'
enum='{"type":"json_schema","json_schema":{"name":"e","schema":{"type":"array","items":{"enum":["alpha","beta","gamma","delta"]},"minItems":100000}}}'
r=1
while [ $r -le "$rounds" ]; do
    for kind in none json_string json_enum; do
        case $kind in none) rf='' ;; json_string) rf=$str ;; json_enum) rf=$enum ;; esac
        node "$here/serve_load.js" --url "http://127.0.0.1:$port" --levels "$levels" --gen "$gen" \
            --prompt-len 64 --vocab 100000 --server-pid $pid ${rf:+--response-format "$rf"} |
            sed "s/^{/{\"kind\":\"$kind\",\"round\":$r,/"
    done
    r=$((r + 1))
done
kill -TERM $pid
wait $pid || true
rm -f /tmp/serve_json.$$.log
