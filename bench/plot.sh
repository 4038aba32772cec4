#!/bin/sh
# bench/plot.sh — the single-node CPU sweeps behind BENCHMARKS.md.
#
#   bench/plot.sh [BUILD_DIR]        (default: build)
#
# 1. generates the Flash-proportioned FP8 bench model (bench/configs/flash_quarter.json,
#    0.94 GB) unless $MODEL already holds one;
# 2. `dsv4 bench --json` over batch sizes (bench/results/batch.json) and over context
#    lengths (bench/results/context.json), each with its own bandwidth/FMA probes;
# 3. bench/results/decode.png (gnuplot; gnuplot-nox is installed with apt if missing):
#    decode tokens/s against batch size and against context length, each with the
#    bandwidth roofline of the weights the measured steps read;
# 4. bench/results/summary.md: the figures as a Markdown table.
#
# Environment: MODEL (model dir, default /tmp/dsv4-bench/flash_quarter), THREADS (default:
# all cores), REPS (default 3), GEN (decode steps, default 32), BATCHES (1,2,4,8,16),
# CONTEXTS (1024,...,65536), SKIP_RUN=1 (only replot existing results).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
bin=$build/dsv4
model=${MODEL:-/tmp/dsv4-bench/flash_quarter}
out=$here/results
reps=${REPS:-3}
gen=${GEN:-32}
batches=${BATCHES:-1,2,4,8,16}
contexts=${CONTEXTS:-1024,2048,4096,8192,16384,32768,65536}
threads=${THREADS:+--threads $THREADS}
mkdir -p "$out"

if [ "${SKIP_RUN:-0}" != 1 ]; then
  [ -x "$bin" ] || { echo "plot.sh: no $bin (build first: cmake --build $build)" >&2; exit 1; }
  if [ ! -f "$model/model.safetensors" ]; then
    "$bin" gen-model --config "$here/configs/flash_quarter.json" --dtype fp8 --out "$model"
  fi
  echo "plot.sh: batch sweep ($batches), prompt 512, $gen steps x $reps" >&2
  # shellcheck disable=SC2086
  "$bin" bench --model "$model" --prompt-len 512 --gen "$gen" --batch 1 --batches "$batches" \
    --reps "$reps" $threads --json > "$out/batch.json.tmp"
  mv "$out/batch.json.tmp" "$out/batch.json"
  echo "plot.sh: context sweep ($contexts), batch 1" >&2
  # shellcheck disable=SC2086
  "$bin" bench --model "$model" --prompt-len 512 --gen 16 --batch 1 --contexts "$contexts" \
    --reps 2 $threads --json > "$out/context.json.tmp"
  mv "$out/context.json.tmp" "$out/context.json"
fi

# which source the binary was built from: a git tree (commit, dirty or not) or an exported
# tree with a COMMIT file
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [ -n "$src" ] && git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  # dirty only for changes outside bench/results, which this script itself rewrites
  commit=$(git -C "$src" rev-parse --short HEAD)
  if [ -n "$(git -C "$src" status --porcelain -- . ':(exclude)bench/results' 2>/dev/null)" ]; then
    commit="$commit-dirty"
  fi
elif [ -n "$src" ] && [ -f "$src/COMMIT" ]; then
  commit="$(cat "$src/COMMIT") (clean export)"
else
  commit=unknown
fi

# data files and the summary table
/usr/bin/python3 - "$out" "$commit" <<'EOF'
import json, sys, os
out, commit = sys.argv[1], sys.argv[2]
b = json.load(open(os.path.join(out, "batch.json")))
c = json.load(open(os.path.join(out, "context.json")))
with open(os.path.join(out, "batch.dat"), "w") as f:
    f.write("# batch tokens_per_s roofline_tokens_per_s bytes_per_step experts_per_layer compute_roofline_tokens_per_s\n")
    for r in b["batches"]:
        f.write("%d %.3f %.3f %.0f %.2f %.3f\n" % (r["batch"], r["decode_tokens_per_s"],
                r["decode_roofline_tokens_per_s"], r["decode_bytes_per_step"], r["decode_experts_per_layer"],
                r["decode_compute_roofline_tokens_per_s"]))
with open(os.path.join(out, "context.dat"), "w") as f:
    f.write("# context tokens_per_s roofline_tokens_per_s(weights) roofline_with_cache\n")
    for r in c["contexts"]:
        bw = c["measured_bandwidth_gbs"] * 1e9
        f.write("%d %.3f %.3f %.3f\n" % (r["context"], r["decode_tokens_per_s"], r["decode_roofline_tokens_per_s"],
                r["batch"] * bw / (r["decode_bytes_per_step"] + r["decode_cache_bytes_per_step"])))
rows = []
def row(*cells): rows.append("| " + " | ".join(str(x) for x in cells) + " |")
m = b["machine"]
l3 = "%d MiB" % (m["l3_bytes"] // 1048576) if (m.get("l3_bytes") or 0) > 0 else "unknown"
rows.append("Machine: %s, %d cores online, L3 %s; %d threads, kernels %s; load average %.1f -> %.1f (batch sweep), %.1f -> %.1f (context sweep)." % (
    m["cpu"], m["online_cores"], l3, b["threads"], b["simd"],
    m["loadavg_start"], m["loadavg_end"], c["machine"]["loadavg_start"], c["machine"]["loadavg_end"]))
rows.append("")
rows.append("Source: commit %s." % commit)
rows.append("")
rows.append("Probes (batch run): bandwidth %.1f GB/s, FMA peak %.1f GFLOP/s; (context run): %.1f GB/s, %.1f GFLOP/s." % (
    b["measured_bandwidth_gbs"], b["measured_peak_gflops"], c["measured_bandwidth_gbs"], c["measured_peak_gflops"]))
rows.append("")
rows.append("Prefill of %d tokens: %.1f tokens/s, %.1f GFLOP/s useful = %.0f%% of the FMA peak." % (
    b["prefill_tokens"], b["prefill_tokens_per_s"], b["prefill_gflops"], 100 * b["prefill_roofline_ratio"]))
rows.append("")
row("batch", "context", "tokens/s", "ms/step", "weights MB/step", "experts/layer (K/E expectation)", "of bandwidth roofline", "GFLOP/s", "of FMA peak", "of the tighter bound", "CPU use")
row(*["---"] * 11)
for r in b["batches"]:
    row(r["batch"], r["context"], "%.1f" % r["decode_tokens_per_s"], "%.1f" % r["decode_ms_per_step"],
        "%.1f" % (r["decode_bytes_per_step"] / 1e6), "%.1f (%.1f)" % (r["decode_experts_per_layer"], r["decode_experts_per_layer_expected"]),
        "%.0f%%" % (100 * r["decode_roofline_ratio"]), "%.1f" % r["decode_gflops"], "%.0f%%" % (100 * r["decode_compute_ratio"]),
        "%.0f%%" % (100 * r["decode_bound_ratio"]), "%.0f%%" % (100 * r["decode_cpu_utilization"]))
b1 = [r for r in b["batches"] if r["batch"] == 1]
b16 = [r for r in b["batches"] if r["batch"] == 16]
if b1 and b16:
    rows.append("")
    rows.append("Batch 16 / batch 1 decode: %.2fx (bandwidth bound on the same bytes: %.2fx; the tighter of the bandwidth and FMA bounds: %.2fx)." % (
        b16[0]["decode_tokens_per_s"] / b1[0]["decode_tokens_per_s"],
        16 * b1[0]["decode_bytes_per_step"] / b16[0]["decode_bytes_per_step"],
        b16[0]["decode_bound_tokens_per_s"] / b1[0]["decode_bound_tokens_per_s"]))
rows.append("")
row("context", "prefill tokens/s to here", "prefill GFLOP/s", "decode tokens/s", "weights MB/step", "cache MB/step (est.)", "of weight roofline", "of weight+cache roofline", "CPU use")
row(*["---"] * 9)
for r in c["contexts"]:
    row(r["context"], "%.1f" % r.get("prefill_tokens_per_s", 0), "%.1f" % r.get("prefill_gflops", 0),
        "%.1f" % r["decode_tokens_per_s"], "%.1f" % (r["decode_bytes_per_step"] / 1e6),
        "%.1f" % (r["decode_cache_bytes_per_step"] / 1e6), "%.0f%%" % (100 * r["decode_roofline_ratio"]),
        "%.0f%%" % (100 * r["decode_roofline_ratio_with_cache"]), "%.0f%%" % (100 * r["decode_cpu_utilization"]))
open(os.path.join(out, "summary.md"), "w").write("\n".join(rows) + "\n")
EOF

if ! command -v gnuplot >/dev/null 2>&1; then
  echo "plot.sh: installing gnuplot-nox" >&2
  if [ "$(id -u)" = 0 ]; then apt-get install -y -q gnuplot-nox >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q gnuplot-nox >/dev/null; }
  else sudo apt-get install -y -q gnuplot-nox >/dev/null; fi
fi
gnuplot <<EOF
set terminal pngcairo size 1200,480 font ",10" noenhanced
set output "$out/decode.png"
set multiplot layout 1,2 title "dsv4 decode, flash_quarter fp8 (0.94 GB), $(nproc) cores"
set grid
set key top left box opaque
set logscale x 2
set xrange [0.85:19]
set xlabel "batch size (prompt 512)"
set ylabel "decode tokens/s"
set yrange [0:*]
plot "$out/batch.dat" using 1:2 with linespoints lw 2 pt 7 title "measured", \
     "$out/batch.dat" using 1:3 with lines dt 2 title "bandwidth roofline (weights read)", \
     "$out/batch.dat" using 1:6 with lines dt 3 title "compute roofline (FMA peak)"
set xlabel "context length (batch 1)"
set xrange [800:84000]
set key center right box opaque
set xtics ("1K" 1024, "2K" 2048, "4K" 4096, "8K" 8192, "16K" 16384, "32K" 32768, "64K" 65536)
plot "$out/context.dat" using 1:2 with linespoints lw 2 pt 7 title "measured", \
     "$out/context.dat" using 1:3 with lines dt 2 title "roofline: weights", \
     "$out/context.dat" using 1:4 with lines dt 3 title "roofline: weights + cache reads"
unset multiplot
EOF
echo "plot.sh: wrote $out/batch.json $out/context.json $out/decode.png $out/summary.md" >&2
