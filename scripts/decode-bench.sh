#!/usr/bin/env bash
# Decoding speed and beam gain on a test set for every run of an experiment: greedy and
# beam 5 through `s2s translate`, timed, scored with `s2s score`.
#   scripts/decode-bench.sh runs/multi30k-cpu SRC REF [--device cpu]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1; src=$2; ref=$3; shift 3
bin=${S2S_BIN:-target/release/s2s}
[ -x "$bin" ] || { cargo build --release -p s2s; bin=target/release/s2s; }
n=$(wc -l < "$src")
echo "| model | greedy sent/s | greedy BLEU | beam-5 sent/s | beam-5 BLEU | beam gain |"
echo "|---|---|---|---|---|---|"
for run in "$dir"/*/; do
  run=${run%/}; [ -f "$run/checkpoints/best.json" ] || continue
  row="| $(basename "$run")"
  bleus=()
  for beam in 1 5; do
    out=$(mktemp)
    start=$(date +%s.%N)
    "$bin" translate --model "$run" --beam "$beam" --batch-size 64 "$@" < "$src" > "$out" 2>/dev/null
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    bleu=$("$bin" score --hyp "$out" --ref "$ref" --metrics bleu --format json --width 2 \
      | python3 -c 'import json, sys; print("%.2f" % json.load(sys.stdin)["score"])')
    bleus+=("$bleu")
    row="$row | $(echo "scale=1; $n / $secs" | bc) | $bleu"
    rm -f "$out"
  done
  echo "$row | $(python3 -c "print('%+.2f' % (${bleus[1]} - ${bleus[0]}))") |"
done
