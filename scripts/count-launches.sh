#!/usr/bin/env bash
# Kernel launches a wgpu training step, per model, from cubecl's kernel log: the number that
# bounds a GPU step when each launch costs ~28 µs of host time (docs/benchmarks.md). Needs
# no GPU: lavapipe (mesa-vulkan-drivers) runs the same launches.
#   scripts/count-launches.sh [--models lstm,transformer] [--shapes FILE] [--by-kernel N]
# Runs `s2s bench --device wgpu --shapes FILE` with 1 and with 3 timed steps in a directory
# whose cubecl.toml logs every kernel run; launches a step = (lines of 3 − lines of 1) / 2.
# The default shapes are experiments/bench/launch-bound.json (the bench's layers and batch
# shape, narrow). --by-kernel N also lists the N kernels launched most a step.
set -euo pipefail
cd "$(dirname "$0")/.."
models=lstm,bahdanau,luong,transformer; shapes=experiments/bench/launch-bound.json; top=0
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift 2;;
    --shapes) shapes=$2; shift 2;;
    --by-kernel) top=$2; shift 2;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
done
bin=${S2S_BIN:-target/release/s2s}
[ -x "$bin" ] || { cargo build --release -p s2s; bin=target/release/s2s; }
bin=$(realpath "$bin"); shapes=$(realpath "$shapes")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '[profiling.logger]\nlevel = "minimal"\nfile = "%s/kernels.log"\nappend = true\n' "$dir" > "$dir/cubecl.toml"
echo "| model | launches a training step |"
echo "|---|---|"
for m in ${models//,/ }; do
  for steps in 1 3; do
    rm -f "$dir/kernels.log"
    (cd "$dir" && "$bin" bench --device wgpu --shapes "$shapes" --steps "$steps" --models "$m" > /dev/null 2>&1)
    # One line a kernel run: its name without the hash suffix.
    sed -e 's/^Executing //' -e 's/_[0-9a-f]\{8\}$//' "$dir/kernels.log" | cut -c1-60 | sort | uniq -c > "$dir/k$steps"
  done
  n1=$(awk '{s += $1} END {print s}' "$dir/k1"); n3=$(awk '{s += $1} END {print s}' "$dir/k3")
  echo "| $m | $(( (n3 - n1) / 2 )) |"
  if [ "$top" -gt 0 ]; then
    awk 'FNR == NR { c = $1; $1 = ""; one[substr($0, 2)] = c; next }
         { c = $1; $1 = ""; k = substr($0, 2); printf "%8.1f  %s\n", (c - one[k]) / 2, k }' \
      "$dir/k1" "$dir/k3" | sort -rn | head -n "$top" | sed 's/^/    /'
  fi
done
