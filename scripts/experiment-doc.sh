#!/usr/bin/env bash
# An experiment's results table in docs/benchmarks.md, written by the run that measured it.
#   scripts/experiment-doc.sh FILE --doc LABEL [options of `s2s experiment run`]
#   scripts/experiment-doc.sh --from RUNS_DIR --doc LABEL
# The first form runs `s2s experiment run FILE` (with the options given, e.g. `--device cpu`),
# records the date, the commit, the minutes it took and this command in RUNS_DIR/measured, then
# writes the table (an interrupted run writes none: the same command resumes it, and its minutes
# add up over the sittings); `--from` writes the table of a run the first form made, running nothing.
# One row per run (results.json and each run's metrics.csv): parameters, steps trained (and
# the epoch, from 1, they ended in), training minutes, test BLEU with its 95 % interval, p
# against the experiment's baseline (paired bootstrap), chrF, test perplexity, and BLEU by
# source length. The block (scripts/doc-block.py) is keyed by the experiment's name and
# machine LABEL: a new run on the same machine replaces it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/measured.sh
args=$(typed "$@")
file=; from=; doc=
if [ "${1:-}" = --from ]; then from=$2; shift 2; else file=${1:?usage: see the header}; shift; fi
[ "${1:-}" = --doc ] || { echo "experiment-doc.sh: --doc LABEL comes next (the machine's name)" >&2; exit 2; }
doc=$2; shift 2
bin=${S2S_BIN:-target/release/s2s}
if [ -z "$from" ]; then
  [ -x "$bin" ] || { cargo build --release -p s2s; bin=target/release/s2s; }
  name=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$file" | head -1)
  from=runs/$name
  only=
  for ((i = 1; i <= $#; i++)); do
    j=$((i + 1))
    [ "${!i}" = --out ] && from=${!j}
    [ "${!i}" = --only ] && only=${!j}
  done
  commit=$(measured_commit)
  # A run interrupted (SIGINT/SIGTERM: each model checkpoints and stops) is resumed by the same
  # command; the seconds of its earlier sittings, and the commit of the first, are kept in
  # $from/seconds-so-far (the table then names both commits, FIRST..LAST, where they differ).
  before=0; first=$commit
  [ -f "$from/seconds-so-far" ] && read -r before first < "$from/seconds-so-far"
  [ "$first" = "$commit" ] || commit=$first..$commit
  start=$SECONDS
  "$bin" experiment run "$file" "$@"
  seconds=$((before + SECONDS - start))
  # Every run asked for finished: the test of `s2s_train::experiment::finished` (results.json
  # also lists runs that stopped part-way, with no test scores).
  if ! python3 - "$from" "$only" <<'EOF'
import json, sys
from pathlib import Path
root, only = Path(sys.argv[1]), sys.argv[2]
def done(d):
    try:
        return (d / "test/scores.json").exists() and json.loads((d / "run.json").read_text())["status"] == "finished"
    except (OSError, ValueError, KeyError):
        return False
entries = json.loads((root / "experiment.json").read_text())["entries"]
sys.exit(0 if all(done(root / e["dir"]) for e in entries if not only or only in (e["model"], e["name"])) else 1)
EOF
  then
    echo "$seconds ${commit%%..*}" > "$from/seconds-so-far"
    echo "experiment-doc.sh: not every run finished ($((seconds / 60)) min so far): rerun the same command to resume; no table written" >&2
    exit 1
  fi
  rm -f "$from/seconds-so-far"
  echo "$(date -u +%F) $commit $(((seconds + 30) / 60)) $args" > "$from/measured"
fi
[ -f "$from/measured" ] || {
  echo "experiment-doc.sh: $from/measured is missing: the table needs the date and commit of a run made by this script" >&2
  exit 1
}
read -r date commit minutes ran < "$from/measured"
tables=$(mktemp); trap 'rm -f "$tables"' EXIT
# The table goes to $tables; the experiment's name and the header's facts come back on stdout.
facts=$(python3 - "$from" "$tables" <<'EOF'
import csv, json, sys
from pathlib import Path

runs_dir = Path(sys.argv[1])
results = json.loads((runs_dir / "results.json").read_text())
runs = results["runs"]
baseline = next((m["model"] for m in results["models"] if m.get("baseline")), None)
buckets = [b for b, _, _ in runs[0]["by_length"]] if runs else []
# Length buckets no run has a test sentence in are left out.
buckets = [b for b in buckets if any(n for r in runs for name, n, _ in r["by_length"] if name == b)]

def last_row(run):
    path = runs_dir / run["entry"]["dir"] / "metrics.csv"
    rows = list(csv.DictReader(path.open())) if path.exists() else []
    return rows[-1] if rows else {}

def num(v, fmt):
    return fmt.format(v) if v is not None else "–"

out = open(sys.argv[2], "w")
head = ["model", "params", "steps (epoch)", "train min", "test BLEU (± 95 %)",
        f"p vs {baseline}" if baseline else "p", "chrF", "test ppl"] + [f"{b} words" for b in buckets]
print("| " + " | ".join(head) + " |", file=out)
print("|" + "---|" * len(head), file=out)
for r in runs:
    last = last_row(r)
    by = {name: (n, bleu) for name, n, bleu in r["by_length"]}
    bleu = num(r["bleu"], "{:.2f}")
    if r.get("bleu_ci") is not None:
        bleu += f" (± {r['bleu_ci']:.2f})"
    cells = [r["entry"]["name"], f"{r['params'] / 1e6:.2f}M",
             f"{last['step']} ({int(last['epoch']) + 1})" if last else "–", f"{r['train_seconds'] / 60:.1f}",
             bleu, num(r.get("p_vs_baseline"), "{:.3f}"), num(r["chrf"], "{:.2f}"), num(r["ppl"], "{:.2f}")]
    cells += [num(by[b][1], "{:.1f}") if b in by and by[b][0] else "–" for b in buckets]
    print("| " + " | ".join(cells) + " |", file=out)
first = runs[0] if runs else {}
sizes = " / ".join(str(n) for b in buckets for name, n, _ in first.get("by_length", []) if name == b)
print(results["experiment"])
print(f"{first.get('device', '?')} · test decoding {first.get('decoding', '?')}, sacreBLEU defaults"
      f" · test sentences by source length: {sizes}")
EOF
)
title=$(head -1 <<< "$facts"); info=$(tail -1 <<< "$facts")
cat "$tables"
header="$date · $doc · $info · commit $commit · \`scripts/experiment-doc.sh $ran\` · $minutes min in all"
scripts/doc-block.py "experiment: $title, $doc" "$header" < "$tables"
