#!/bin/sh
# Expert-parallel decode benchmark: generates the bench model once, then runs bench_ep
# under mpirun for EP = 1, 2, 4 (one JSON line each). Usage:
#   bench/ep_decode.sh BUILD_DIR [SEQS] [STEPS] [THREADS_PER_RANK]
set -e
B=${1:?build dir}; SEQS=${2:-8}; STEPS=${3:-32}; T=${4:-1}
SRC=$(dirname "$0")
MODEL=${DSV4_BENCH_MODEL:-/tmp/dsv4_bench_ep_decode}
[ -f "$MODEL/model.safetensors" ] ||
  "$B/dsv4" gen-model --config "$SRC/configs/ep_decode.json" --seed 1 --dtype fp8 --out "$MODEL" >/dev/null
for ep in 1 2 4; do
  mpirun --allow-run-as-root --oversubscribe -np $ep "$B/bench/bench_ep" "$MODEL" \
    --seqs "$SEQS" --prefill 64 --steps "$STEPS" --threads "$T"
done
