#!/bin/sh
# The main job on the built-in demo model: install dependencies, build, generate the demo
# checkpoint (random weights, the real 129,280-token vocabulary and DeepSeek's tokenizer),
# describe it, and generate text from a chat prompt. The weights are random, so the text
# is noise: the point is the whole path (tokenizer -> chat template -> engine -> sampler).
set -e
cd "$(dirname "$0")/.."
sh scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)"

TOKENIZER=${DSV4_TOKENIZER:-../shared/tokenizer/tokenizer.json}
if [ ! -f out/demo/model.safetensors ]; then
    if [ -f "$TOKENIZER" ]; then
        ./build/dsv4 gen-model --preset demo --seed 1 --out out/demo --tokenizer "$TOKENIZER"
    else
        ./build/dsv4 gen-model --preset demo --seed 1 --out out/demo
    fi
fi
./build/dsv4 info --model out/demo
if [ -f out/demo/tokenizer.json ]; then
    ./build/dsv4 generate --model out/demo --chat --prompt "Write a haiku about the sea." -n 48 --seed 7
else
    echo "no tokenizer.json (set DSV4_TOKENIZER): running token ids instead" >&2
    ./build/dsv4 run --model out/demo --tokens 0,100,2000,30000,129279 --prefill 3 --mtp --dump out/demo-run
    echo "dump written to out/demo-run"
fi
