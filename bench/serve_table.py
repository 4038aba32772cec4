#!/usr/bin/env python3
"""serve_table.py — the Markdown table of bench/serve_bench.sh's results (BENCHMARKS.md).

    python3 bench/serve_table.py [bench/results/serve_load.jsonl] [bench/results/serve_raw.json]

One row per concurrency level (a level measured twice: its last line), then the one-at-a-time
run. Steady decode is the window in which the first c requests all decode and no prefill
runs (serve_load.js); "x raw" divides it by `dsv4 bench`'s decode rate at batch c where that
batch was measured (1 and 16). The forward share is the server's dsv4_forward
seconds over the level's wall time (/metrics)."""
import json
import sys


def main():
    load = sys.argv[1] if len(sys.argv) > 1 else "bench/results/serve_load.jsonl"
    raw_path = sys.argv[2] if len(sys.argv) > 2 else "bench/results/serve_raw.json"
    with open(raw_path) as f:
        raw = {b["batch"]: b["decode_tokens_per_s"] for b in json.load(f).get("batches", [])}
    levels, serial = {}, None
    with open(load) as f:
        for line in f:
            if line.strip():
                j = json.loads(line)
                if j.get("serial"):
                    serial = j
                else:
                    levels[j["concurrency"]] = j
    print("| c | requests | generated / wall | decode | steady decode | server | x raw | TTFT p50 / p99 | "
          "ITL p50 / p99 | decode rows / step | forward / wall | CPU client / server | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def row(name, j):
        b = j["concurrency"]
        steady = j.get("steady_decode_all_tok_s") or j.get("steady_decode_tok_s")
        srv = j.get("server_steady_decode_tok_s")
        best = srv or steady
        ratio = f"{best / raw[b]:.2f}" if best and b in raw and not j.get("serial") else "-"
        cpu = "-"
        if j.get("client_cpu_s") is not None and j.get("server_cpu_s") is not None:
            cpu = f"{1e3 * j['client_cpu_s'] / j['gen_tokens']:.2f} / {1e3 * j['server_cpu_s'] / j['gen_tokens']:.2f} ms"
        fwd = j.get("server_forward_s")
        share = f"{fwd / j['wall_s']:.2f}" if fwd is not None else "-"
        print(f"| {name} | {j['requests']} | {j['gen_tok_s']:.1f} tok/s | {j['decode_tok_s']:.1f} | "
              f"{steady if steady is not None else '-'} | {srv if srv is not None else '-'} | {ratio} | "
              f"{j['ttft_p50_ms'] / 1000:.2f} / {j['ttft_p99_ms'] / 1000:.2f} s | "
              f"{j['itl_p50_ms']:.0f} / {j['itl_p99_ms']:.0f} ms | {j['server_decode_rows_per_step']} | "
              f"{share} | {cpu} | {j.get('loadavg_1m', '-')} |")

    for c in sorted(levels):
        row(str(c), levels[c])
    if serial:
        row(f"1 at a time ({serial['requests']} requests)", serial)
    print()
    print("raw `dsv4 bench` decode: " + ", ".join(f"batch {b}: {v:.1f} tok/s" for b, v in sorted(raw.items())))


if __name__ == "__main__":
    main()
