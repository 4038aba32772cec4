#!/bin/sh
# bench/serve_bench.sh — `dsv4 serve` under load against the raw batched forward.
#
#   bench/serve_bench.sh [BUILD_DIR]        (default: build)
#
# 1. generates the Flash-proportioned FP8 bench model (bench/configs/flash_quarter.json,
#    0.94 GB) unless $MODEL already holds one;
# 2. `dsv4 bench --batches 1,16` on it (bench/results/serve_raw.json): the engine's own
#    batched greedy decode, no HTTP, no scheduler;
# 3. starts `dsv4 serve` on it and runs bench/serve_load.js at concurrency 1..32
#    (bench/results/serve_load.jsonl, one JSON line per level), then the workload of
#    level SERIAL served one request at a time (a line with serial: true), then SIGTERM;
# 4. bench/results/serve_load.png (gnuplot): generated, decode and steady decode tokens/s
#    against concurrency, with the raw batch-1 and batch-16 decode rates as lines; TTFT and
#    ITL percentiles.
#
# Environment: MODEL (default /tmp/dsv4-bench-serve/flash_quarter), THREADS (default: all cores),
# PROMPT (prompt tokens, default 128), GEN (tokens per request, default 32), LEVELS
# (1,2,4,8,16,32), REQS (requests per level; default: serve_load.js's 2c, at least 8),
# SERIAL (default 16; 0 = none), PORT (default 18123), SERVE_ARGS (more serve options),
# RAW=0 (keep serve_raw.json, skip the raw bench), APPEND=1 (add to serve_load.jsonl
# instead of replacing it), SKIP_RUN=1 (only replot). Splitting a sweep over several
# exclusive holds: `LEVELS=1,2,4,8 SERIAL=0 ...`, then `RAW=0 APPEND=1 LEVELS=16,32 ...`.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
bin=$build/dsv4
model=${MODEL:-/tmp/dsv4-bench-serve/flash_quarter}
out=$here/results
prompt=${PROMPT:-128}
gen=${GEN:-32}
levels=${LEVELS:-1,2,4,8,16,32}
port=${PORT:-18123}
serial=${SERIAL:-16}
threads=${THREADS:+--threads $THREADS}
tok=$root/../shared/tokenizer/tokenizer.json
mkdir -p "$out"

if [ "${SKIP_RUN:-0}" != 1 ]; then
  [ -x "$bin" ] || { echo "serve_bench.sh: no $bin (build first)" >&2; exit 1; }
  [ -f "$tok" ] || { echo "serve_bench.sh: no tokenizer at $tok" >&2; exit 1; }
  if [ ! -f "$model/model.safetensors" ]; then
    "$bin" gen-model --config "$here/configs/flash_quarter.json" --dtype fp8 --out "$model"
  fi
  if [ "${RAW:-1}" != 0 ]; then
    echo "serve_bench.sh: raw batched decode, prompt $prompt, $gen steps" >&2
    # shellcheck disable=SC2086
    "$bin" bench --model "$model" --prompt-len "$prompt" --gen "$gen" --batch 16 --batches 1,16 \
      --reps 2 $threads --json > "$out/serve_raw.json"
  fi
  # shellcheck disable=SC2086
  "$bin" serve --model "$model" --tokenizer "$tok" --port "$port" --max-seqs 32 \
    --max-context 1024 --step-tokens 512 $threads ${SERVE_ARGS:-} 2> "$out/serve_server.log" &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.2
  done
  [ "${APPEND:-0}" = 1 ] || : > "$out/serve_load.jsonl"
  node "$here/serve_load.js" --url "http://127.0.0.1:$port" --levels "$levels" \
    --prompt-len "$prompt" --gen "$gen" --vocab 8192 ${REQS:+--requests-per-level $REQS} \
    --serial "$serial" --server-pid "$pid" >> "$out/serve_load.jsonl"
  kill -TERM $pid
  wait $pid
  trap - EXIT
fi

# one row per level (by concurrency; a level measured twice: its last line): concurrency
# gen_tok_s decode_tok_s ttft_p50 itl_p50 itl_p99 steady_decode (every wave's, else the first
# wave's) ttft_p99
node -e '
const fs = require("fs");
const rows = new Map();
for (const l of fs.readFileSync(process.argv[1], "utf8").trim().split("\n")) {
  const j = JSON.parse(l);
  if (j.serial) continue;
  rows.set(j.concurrency, [j.concurrency, j.gen_tok_s, j.decode_tok_s, j.ttft_p50_ms, j.itl_p50_ms,
    j.itl_p99_ms, j.steady_decode_all_tok_s ?? j.steady_decode_tok_s ?? "NaN", j.ttft_p99_ms].join(" "));
}
console.log([...rows.keys()].sort((a, b) => a - b).map((c) => rows.get(c)).join("\n"));
' "$out/serve_load.jsonl" > "$out/serve_load.dat"
# the one-at-a-time run (generated tokens / wall), 0 without one
serial_tps=$(node -e '
const ls = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const s = ls.filter((j) => j.serial).pop();
console.log(s ? s.gen_tok_s : 0);' "$out/serve_load.jsonl")
raw() { node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const d = (r.batches || []).find((x) => x.batch === Number(process.argv[2]));
console.log(d ? d.decode_tokens_per_s.toFixed(1) : 0);' "$out/serve_raw.json" "$1"; }
raw1=$(raw 1)
raw16=$(raw 16)
echo "serve_bench.sh: raw decode batch 1: $raw1 tok/s, batch 16: $raw16 tok/s" >&2

if ! command -v gnuplot >/dev/null 2>&1; then
  echo "serve_bench.sh: installing gnuplot-nox" >&2
  apt-get install -y -q gnuplot-nox >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q gnuplot-nox >/dev/null; }
fi
gnuplot <<GP
set terminal pngcairo size 1000,640 font ",10" noenhanced
set output "$out/serve_load.png"
set multiplot layout 1,2 title "dsv4 serve, flash_quarter FP8, prompt $prompt, $gen tokens per request"
set logscale x 2
set xlabel "concurrent requests"
set ylabel "tokens/s"
set yrange [0:*]
set key below vertical maxrows 6
plot "$out/serve_load.dat" using 1:2 with linespoints title "server: generated / wall", \
     "$out/serve_load.dat" using 1:3 with linespoints title "server: decode rate", \
     "$out/serve_load.dat" using 1:7 with linespoints title "server: steady decode (no prefill)", \
     $raw16 with lines dt 2 title "dsv4 bench --batch 16", \
     $raw1 with lines dt 3 title "dsv4 bench --batch 1", \
     $serial_tps with lines dt 4 title "server, one request at a time: generated / wall"
set ylabel "ms"
set yrange [*:*]
set logscale y
set key below vertical maxrows 6
plot "$out/serve_load.dat" using 1:4 with linespoints title "TTFT p50", \
     "$out/serve_load.dat" using 1:8 with linespoints title "TTFT p99", \
     "$out/serve_load.dat" using 1:5 with linespoints title "ITL p50", \
     "$out/serve_load.dat" using 1:6 with linespoints title "ITL p99"
unset multiplot
GP
echo "serve_bench.sh: wrote $out/serve_load.jsonl, serve_raw.json, serve_load.png" >&2
