#!/bin/sh
# `dsv4 info --config` on the released DeepSeek-V4-Flash config.json, no weights: sizes as
# published (spec/model.md: 284.33 B main + 6.61 B MTP parameters; 159,609,485,896 bytes in
# 69,187 tensors), a memory verdict, and the cores this process may use (taskset).
BIN=$1 CONFIG=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
"$BIN" info --config "$CONFIG" --json > /tmp/dsv4_info_$$.json || fail "info --config --json exit"
python3 - /tmp/dsv4_info_$$.json <<'PY' || fail "info --config --json figures"
import json, sys
j = json.load(open(sys.argv[1]))
b, p, m = j["bytes"], j["params"], j["memory"]
assert b["tensor_bytes"] == 159609485896, b["tensor_bytes"]
assert b["tensors"] == 69187, b["tensors"]
assert round(p["main"] / 1e9, 2) == 284.33 and round(p["mtp"] / 1e9, 2) == 6.61, p
assert m["weights_bytes"] == b["tensor_bytes"]
assert m["need_bytes"] == m["weights_bytes"] + m["cache_bytes"] + m["scratch_bytes"], m
assert m["cache_bytes"] > 0 and m["scratch_bytes"] > 0, m
assert m["fits"] == (m["need_bytes"] + m["headroom_bytes"] <= m["ram_bytes"]), m
assert m["cores"] >= 1
PY
rm -f /tmp/dsv4_info_$$.json
out=$("$BIN" info --config "$CONFIG" --max-context 65536 --max-seqs 2) || fail "info --config exit"
echo "$out" | grep -q "^verdict: \(fits\|needs [0-9.]* GB more\)" || fail "no verdict: $out"
echo "$out" | grep -q "cache [0-9.]* GB for 65536 tokens x 2 sequences + scratch [0-9.]* GB = " || fail "cache line: $out"
taskset -c 0 "$BIN" info --config "$CONFIG" | grep -q "1 core available" || fail "taskset -c 0: not 1 core"
"$BIN" info 2>/dev/null; [ $? -eq 2 ] || fail "info without --model/--config exit"
"$BIN" info --config "$CONFIG" --model x 2>/dev/null; [ $? -eq 2 ] || fail "info --config --model exit"
"$BIN" info --config /nonexistent.json 2>/dev/null; [ $? -eq 1 ] || fail "missing config exit"
echo "cli_info: reached the end; every check above exits 1 on failure"
