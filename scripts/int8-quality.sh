#!/usr/bin/env bash
# f32 against int8 decoding (`--quantize int8`) of every run of an experiment, on its test split:
# sacreBLEU's BLEU and chrF side by side, and how many test sentences' outputs changed.
#   scripts/int8-quality.sh RUNS_DIR [--beam K] [--bin target/release/s2s]
# RUNS_DIR is an experiment's output (runs/quickstart) or one run directory; each run is
# decoded from its best checkpoint with the experiment's default search (beam 5, α 0.6) on
# the CPU, the test split in RUN/data/test.{src,tgt} (the built-in pair) or --src/--ref.
# Prints a markdown table (scripts/doc-run.sh int8-quality --doc LABEL -- scripts/int8-quality.sh …
# writes it into docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:?usage: scripts/int8-quality.sh RUNS_DIR [--beam K] [--bin PATH] [--src F --ref F]}; shift
beam=5; bin=target/release/s2s; src=; ref=
while [ $# -gt 0 ]; do
  case "$1" in
    --beam) beam=$2; shift 2;;
    --bin) bin=$2; shift 2;;
    --src) src=$2; shift 2;;
    --ref) ref=$2; shift 2;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ -f "$runs/run.json" ]; then list=("$runs"); else list=(); for d in "$runs"/*/; do [ -f "$d/run.json" ] && list+=("${d%/}"); done; fi
echo "| model | BLEU f32 | BLEU int8 | Δ | chrF f32 | chrF int8 | outputs changed |"
echo "|---|---|---|---|---|---|---|"
for run in "${list[@]}"; do
  name=$(basename "$run")
  s=${src:-$run/data/test.src}; r=${ref:-$run/data/test.tgt}
  for q in none int8; do
    "$bin" translate --model "$run" --device cpu --beam "$beam" --quantize "$q" < "$s" > "$tmp/$name.$q" 2> "$tmp/$name.$q.err" \
      || { cat "$tmp/$name.$q.err" >&2; exit 1; }
  done
  python3 - "$r" "$tmp/$name.none" "$tmp/$name.int8" "$name" <<'PY'
import sys, sacrebleu
ref, f, q, name = sys.argv[1:]
refs = [open(ref, encoding="utf-8").read().splitlines()]
hf = open(f, encoding="utf-8").read().splitlines()
hq = open(q, encoding="utf-8").read().splitlines()
bf, bq = sacrebleu.corpus_bleu(hf, refs).score, sacrebleu.corpus_bleu(hq, refs).score
cf, cq = sacrebleu.corpus_chrf(hf, refs).score, sacrebleu.corpus_chrf(hq, refs).score
changed = sum(a != b for a, b in zip(hf, hq))
print(f"| {name} | {bf:.2f} | {bq:.2f} | {bq - bf:+.2f} | {cf:.2f} | {cq:.2f} | {changed} of {len(hf)} |")
PY
done
