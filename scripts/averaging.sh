#!/usr/bin/env bash
# Checkpoint averaging and ensembles on the quickstart, as fairseq's average_checkpoints.py and
# Marian's --average / ensembles are used: each model's last 5 checkpoints averaged
# (`s2s average RUN --last 5`) against its best checkpoint, and the Luong model and the
# Transformer decoded as an ensemble (two `--model`s) against the Luong model alone, each pair
# decoded with beam 5 and α 0.6 on the quickstart's test set and scored with sacreBLEU's paired
# bootstrap (`s2s score --paired-bs`). Prints one markdown table.
#
#   scripts/averaging.sh [RUNS]
#
# RUNS: an experiment directory of experiments/quickstart.toml trained with `keep_last = 5`;
# without it the quickstart is trained so first (~7 minutes on 2 cores) into a temporary one.
# `scripts/doc-run.sh averaging --doc LABEL -- scripts/averaging.sh` writes the table into
# docs/benchmarks.md. S2S_BIN names the binary (default target/release/s2s, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${S2S_BIN:-target/release/s2s}
[ -x "$bin" ] || cargo build --release -p s2s >&2
runs=${1:-}
if [ -z "$runs" ]; then
  runs=$(mktemp -d)/quickstart
  sed 's/^\[train\]$/[train]\nkeep_last = 5/' experiments/quickstart.toml > "$runs.toml"
  "$bin" experiment run "$runs.toml" --out "$runs" --quiet >&2
fi
src=$runs/lstm/data/test.src
ref=$runs/lstm/data/test.tgt
[ -f "$src" ] && [ -f "$ref" ] || { echo "averaging.sh: $runs holds no quickstart test set ($src)" >&2; exit 1; }
out=$(mktemp -d)
decode() { "$bin" translate "$@" --beam 5 --alpha 0.6 < "$src"; }

# One row: NAME, the baseline's and the system's hypotheses: BLEU each (± 95 %), p.
row() {
  "$bin" score --ref "$ref" --hyp "$2" --hyp "$3" --paired-bs --format json | python3 -c '
import json, sys
base, sys_ = json.load(sys.stdin)
b, s = base["BLEU"], sys_["BLEU"]
(bs, bc), (ss, sc, p) = (b["score"], b["ci"]), (s["score"], s["ci"], s["p_value"])
print(f"| {sys.argv[1]} | {bs:.2f} (± {bc:.2f}) | {ss:.2f} (± {sc:.2f}) | {p:.3f} |")
' "$1"
}

echo "| model | baseline BLEU | BLEU | p |"
echo "|---|---|---|---|"
for m in lstm bahdanau luong transformer; do
  "$bin" average "$runs/$m" --last 5 >&2
  decode --model "$runs/$m" > "$out/$m.best"
  decode --model "$runs/$m" --checkpoint average-last-5 > "$out/$m.average"
  row "$m: last 5 averaged (baseline: best checkpoint)" "$out/$m.best" "$out/$m.average"
done
decode --model "$runs/luong" --model "$runs/transformer" > "$out/ensemble"
row "luong + transformer ensemble (baseline: luong)" "$out/luong.best" "$out/ensemble"
echo
echo "test set: $(wc -l < "$src") sentences; paired bootstrap: 1,000 resamples, seed 12345"
