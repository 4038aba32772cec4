#!/usr/bin/env python3
"""mtp_table.py — the Markdown table of `dsv4 bench --mtp on --json` lines (BENCHMARKS.md):
medians over the interleaved rounds, gains as the median of the rounds' paired ratios with
their smallest and largest.

    python3 bench/mtp_table.py bench/results/mtp_b1.jsonl bench/results/mtp_b8.jsonl
"""
import json
import sys


def rows(paths):
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


def main():
    print("| batch | drafts | p | acceptance | tokens/step | tokens/s | ms/step "
          "(MTP + draft head + forward + head) | MB/step | gain [min, max] | ideal | gain/ideal [min, max] | exact |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m in rows(sys.argv[1:]):
        mode = m["mode"]
        drafts = {"plain": "none (plain)", "mtp_natural": "the MTP block's", "mtp_forced": "forced"}[mode]
        p = "-" if m["p"] is None else "%.2f" % m["p"]
        phases = "%.2f (%.2f + %.2f + %.2f + %.2f)" % (m["ms_per_step"], m["ms_mtp_call"], m["ms_draft_head"],
                                                     m["ms_forward"], m["ms_head"])
        if mode == "plain":
            print("| %d | %s | - | - | 1 | %.1f | %s | %.1f | 1 | 1 | - | - |" %
                  (m["batch"], drafts, m["tokens_per_s"], phases, m["bytes_per_step"] / 1e6))
        else:
            print("| %d | %s | %s | %.3f | %.3f | %.1f | %s | %.1f | %.3f [%.3f, %.3f] | %.3f | **%.2f** [%.2f, %.2f] | %s |" %
                  (m["batch"], drafts, p, m["acceptance"], m["tokens_per_step"], m["tokens_per_s"], phases,
                   m["bytes_per_step"] / 1e6, m["gain"], m["gain_min"], m["gain_max"], m["ideal_gain"],
                   m["gain_over_ideal"], m["gain_over_ideal_min"], m["gain_over_ideal_max"],
                   "yes" if m["exact"] else "NO"))


if __name__ == "__main__":
    main()
