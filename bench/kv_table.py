#!/usr/bin/env python3
"""Medians of kv_rounds.sh lines: decode tokens/s at the extended context per binary, KV
format, batch and context, with the runs' count, range and load average at start.
   python3 bench/kv_table.py OUT.jsonl..."""
import json
import statistics
import sys
from collections import defaultdict

runs = defaultdict(list)
for path in sys.argv[1:]:
    for line in open(path):
        d = json.loads(line)
        c = d["contexts"][-1]
        key = (d.get("bin", "?"), c["batch"], c["context"], d["kv_dtype"])
        runs[key].append((c["decode_tokens_per_s"], d["machine"]["loadavg_start"], c["decode_cache_bytes_per_step"]))

print("| binary | batch | context | kv | runs | decode tok/s median | range | cache MB/step | load at start |")
print("|---|---|---|---|---|---|---|---|---|")
for key in sorted(runs):
    v = runs[key]
    tps = [x[0] for x in v]
    print("| %s | %d | %d | %s | %d | %.1f | %.1f-%.1f | %.2f | %s |" % (
        key[0], key[1], key[2], key[3], len(v), statistics.median(tps), min(tps), max(tps), v[0][2] / 1e6,
        " ".join("%.2f" % x[1] for x in v)))
# bf16 / f32 per binary, batch, context
print()
print("| binary | batch | context | bf16 / f32 (medians) |")
print("|---|---|---|---|")
for key in sorted(runs):
    if key[3] != "bf16":
        continue
    f = (key[0], key[1], key[2], "f32")
    if f in runs:
        print("| %s | %d | %d | %.3f |" % (key[0], key[1], key[2],
              statistics.median(x[0] for x in runs[key]) / statistics.median(x[0] for x in runs[f])))
