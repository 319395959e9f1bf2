#!/usr/bin/env bash
# GPU time a training step, per model and per kernel, from cubecl's profiling log: where a
# step's device time goes once its host time is small (replayed steps). Runs on any wgpu
# adapter (lavapipe too; its times are the CPU's).
#   scripts/gpu-kernel-time.sh [--models lstm,transformer] [--shapes FILE] [--top N]
# Runs `s2s bench --device wgpu --shapes FILE --no-decode` with 1 and with 3 timed steps in a
# directory whose cubecl.toml times every kernel (profiling level "basic": each kernel is
# waited for, so the step runs slower than usual; the sum is the kernels' own time); a step's
# time per kernel = (sum over 3 − sum over 1) / 2. Prints per model the kernels' total ms a
# step and the N kernels (default 8) that take most of it.
set -euo pipefail
cd "$(dirname "$0")/.."
models=lstm,bahdanau,luong,transformer; shapes=experiments/bench/multi30k-4k.json; top=8
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift 2;;
    --shapes) shapes=$2; shift 2;;
    --top) top=$2; shift 2;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
done
bin=${S2S_BIN:-target/release/s2s}
[ -x "$bin" ] || { cargo build --release -p s2s; bin=target/release/s2s; }
bin=$(realpath "$bin"); shapes=$(realpath "$shapes")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '[profiling.logger]\nlevel = "basic"\nfile = "%s/kernels.log"\nappend = true\n' "$dir" > "$dir/cubecl.toml"
# A log line: `| 41.508µs   | PrngKernel | NormalFamily_54973037`; µs per kernel name (hash dropped).
sum_by_kernel() {
  awk -F'|' 'NF >= 3 {
    t = $2; gsub(/ /, "", t); us = t + 0
    if (t ~ /ms$/) us *= 1000; else if (t ~ /ns$/) us /= 1000; else if (t ~ /[0-9]s$/) us *= 1e6
    name = ""; for (i = 3; i <= NF; i++) name = name (i > 3 ? " |" : "") $i
    gsub(/^ +| +$/, "", name); sub(/_[0-9a-f]{8}$/, "", name)
    s[name] += us
  } END { for (k in s) printf "%.3f\t%s\n", s[k], k }' "$1"
}
for m in ${models//,/ }; do
  for steps in 1 3; do
    rm -f "$dir/kernels.log"
    (cd "$dir" && "$bin" bench --device wgpu --shapes "$shapes" --steps "$steps" --models "$m" --no-decode > /dev/null 2>&1) \
      || { echo "| $m | bench failed |"; continue 2; }
    sum_by_kernel "$dir/kernels.log" > "$dir/k$steps"
  done
  awk -F'\t' 'FNR == NR { one[$2] = $1; next } { d = ($1 - one[$2]) / 2; if (d > 0) printf "%.3f\t%s\n", d, $2 }' \
    "$dir/k1" "$dir/k3" | sort -rn > "$dir/step"
  total=$(awk -F'\t' '{s += $1} END {printf "%.2f", s / 1000}' "$dir/step")
  echo "$m: kernels' time a training step ${total} ms; the ${top} longest (ms a step, share):"
  # burn's matmul names list their type parameters: the first and the last are kept.
  awk -F'\t' -v t="$total" -v n="$top" 'NR <= n {
    k = split($2, p, / *\| */); name = k > 3 ? p[1] " … " p[k] : $2
    printf "  %8.3f  %4.1f %%  %s\n", $1 / 1000, $1 / 10 / t, name }' "$dir/step"
done
