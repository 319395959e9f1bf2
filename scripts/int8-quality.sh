#!/usr/bin/env bash
# f32 against int8 decoding (`--quantize int8`) of every run of an experiment, on its test split:
# sacreBLEU's BLEU and chrF side by side, how many test sentences' outputs changed, and the same
# from an int8 checkpoint (`s2s quantize RUN --to int8`, written into each run) with its size.
#   scripts/int8-quality.sh RUNS_DIR... [--beam K] [--bin target/release/s2s]
# Each RUNS_DIR is an experiment's output (runs/quickstart) or one run directory; each run is
# decoded from its best checkpoint with the experiment's default search (beam 5, α 0.6) on
# the CPU, the test split in RUN/data/test.{src,tgt} (the built-in pair), else the one its
# run.json names, or --src/--ref.
# Prints a markdown table (scripts/doc-run.sh int8-quality --doc LABEL -- scripts/int8-quality.sh …
# writes it into docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: scripts/int8-quality.sh RUNS_DIR... [--beam K] [--bin PATH] [--src F --ref F]" >&2; exit 2; }
beam=5; bin=target/release/s2s; src=; ref=; list=()
while [ $# -gt 0 ]; do
  case "$1" in
    --beam) beam=$2; shift 2;;
    --bin) bin=$2; shift 2;;
    --src) src=$2; shift 2;;
    --ref) ref=$2; shift 2;;
    -*) echo "unknown option $1" >&2; exit 2;;
    *) if [ -f "$1/run.json" ]; then list+=("$1"); else for d in "$1"/*/; do [ -f "$d/run.json" ] && list+=("${d%/}"); done; fi; shift;;
  esac
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "| model | BLEU f32 | BLEU int8 | Δ | chrF f32 | chrF int8 | outputs changed | int8 checkpoint: BLEU, bytes of f32 |"
echo "|---|---|---|---|---|---|---|---|"
for run in "${list[@]}"; do
  name="$(basename "$(dirname "$run")")/$(basename "$run")"; key=${name//\//-}
  s=${src:-$run/data/test.src}; r=${ref:-$run/data/test.tgt}
  if [ -z "$src" ] && [ ! -f "$s" ]; then
    # A corpus of files: the test split run.json names (relative paths from the project root).
    s=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["data"]["test"]["src"])' "$run/run.json")
    r=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["data"]["test"]["tgt"])' "$run/run.json")
  fi
  for q in none int8; do
    "$bin" translate --model "$run" --device cpu --beam "$beam" --quantize "$q" < "$s" > "$tmp/$key.$q" 2> "$tmp/$key.$q.err" \
      || { cat "$tmp/$key.$q.err" >&2; exit 1; }
  done
  "$bin" quantize "$run" --to int8 > /dev/null 2> "$tmp/$key.q.err" || { cat "$tmp/$key.q.err" >&2; exit 1; }
  "$bin" translate --model "$run" --checkpoint int8 --device cpu --beam "$beam" < "$s" > "$tmp/$key.ckpt" 2> "$tmp/$key.ckpt.err" \
    || { cat "$tmp/$key.ckpt.err" >&2; exit 1; }
  python3 - "$r" "$tmp/$key.none" "$tmp/$key.int8" "$name" "$tmp/$key.ckpt" "$run/checkpoints/int8/quantized.json" <<'PY'
import json, sys, sacrebleu
ref, f, q, name, ck, rec = sys.argv[1:]
refs = [open(ref, encoding="utf-8").read().splitlines()]
hf = open(f, encoding="utf-8").read().splitlines()
hq = open(q, encoding="utf-8").read().splitlines()
bf, bq = sacrebleu.corpus_bleu(hf, refs, force=True).score, sacrebleu.corpus_bleu(hq, refs, force=True).score
cf, cq = sacrebleu.corpus_chrf(hf, refs).score, sacrebleu.corpus_chrf(hq, refs).score
changed = sum(a != b for a, b in zip(hf, hq))
hc = open(ck, encoding="utf-8").read().splitlines()
bc = sacrebleu.corpus_bleu(hc, refs, force=True).score
r = json.load(open(rec))
size = 100 * r["int8_bytes"] / r["f32_bytes"]
print(f"| {name} | {bf:.2f} | {bq:.2f} | {bq - bf:+.2f} | {cf:.2f} | {cq:.2f} | {changed} of {len(hf)} | {bc:.2f}, {size:.0f} % |")
PY
done
