#!/usr/bin/env bash
# A probe's printed figures written into docs/benchmarks.md by the run that measured them.
#   scripts/doc-run.sh JOB --doc LABEL -- COMMAND [ARGS...]
# Runs COMMAND (its standard error passes through) and writes what it printed on standard
# output into the block keyed "JOB, LABEL" (scripts/doc-block.py), headed by the date, machine
# LABEL, the commit and the command: a markdown table as it is, anything else as a text block.
# For the probes that print their figures themselves, e.g.
#   scripts/doc-run.sh scoring --doc "Zen 3 EPYC VM" -- cargo run -q --release -p s2s-eval --example score_speed
#   scripts/doc-run.sh launches --doc lavapipe -- target/release/s2s bench --device wgpu --launch-probe
# (bench-vs-torch.sh, decode-bench.sh and experiment-doc.sh write their own blocks).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/measured.sh
job=${1:?usage: scripts/doc-run.sh JOB --doc LABEL -- COMMAND}
[ "${2:-}" = --doc ] && [ "${4:-}" = -- ] || { echo "usage: scripts/doc-run.sh JOB --doc LABEL -- COMMAND" >&2; exit 2; }
label=$3; shift 4
commit=$(measured_commit)
out=$(mktemp); trap 'rm -f "$out"' EXIT
"$@" | tee "$out"
if grep -q . "$out" && ! grep -v '^|' "$out" | grep -q .; then
  body=$(cat "$out")
else
  body=$(printf '```text\n%s\n```' "$(cat "$out")")
fi
header="$(date -u +%F) · $label · commit $commit · \`$(typed "$@")\`"
echo "$body" | scripts/doc-block.py "$job, $label" "$header"
