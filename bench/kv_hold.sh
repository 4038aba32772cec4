#!/bin/sh
# $1 = kv dtype, $2 = batch, $3 = context, $4 = out
echo "load at start: $(uptime)" >&2
exec build/dsv4 bench --model /tmp/dsv4-bench/flash_quarter --kv-dtype $1 --batch $2 --prompt-len 512 --contexts $3 --gen 16 --reps 1 --probe-mb 256 --json > $4
