#!/usr/bin/env bash
# Decoding speed and beam gain on a test set for every run of an experiment: greedy and
# beam 5 through `s2s translate`, timed, scored with `s2s score`.
#   scripts/decode-bench.sh runs/multi30k-cpu SRC REF [--doc LABEL] [--device cpu]
# --doc LABEL also writes the table into docs/benchmarks.md (scripts/doc-block.py), in place of
# this script's earlier block for the same experiment and machine LABEL; the other options go
# to `s2s translate`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/measured.sh
ran=$(typed "$@")
dir=$1; src=$2; ref=$3; shift 3
doc=
if [ "${1:-}" = --doc ]; then doc=$2; shift 2; fi
bin=${S2S_BIN:-target/release/s2s}
[ -x "$bin" ] || { cargo build --release -p s2s; bin=target/release/s2s; }
commit=$(measured_commit)
n=$(wc -l < "$src")
tables=$(mktemp); trap 'rm -f "$tables"' EXIT
{
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
} | tee "$tables"
[ -n "$doc" ] || exit 0
header="$(date -u +%F) · $doc · commit $commit · \`scripts/decode-bench.sh $ran\` · sacreBLEU defaults, batch 64"
scripts/doc-block.py "decode-bench: $(basename "$dir"), $doc" "$header" < "$tables"
