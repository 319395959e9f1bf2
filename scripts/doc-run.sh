#!/usr/bin/env bash
# A probe's printed figures written into docs/benchmarks.md by the run that measured them.
#   scripts/doc-run.sh JOB --doc LABEL -- COMMAND [ARGS...]
# Runs COMMAND (its standard error passes through) and writes what it printed on standard
# output into the block keyed "JOB, LABEL" (scripts/doc-block.py), headed by the date, machine
# LABEL, the commit and the command: markdown tables as they are with every other line a
# paragraph, or, where it printed no table, all of it as a text block.
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
body=$(python3 - "$out" <<'EOF'
import sys
lines = [l.rstrip() for l in open(sys.argv[1]) if l.strip()]
if not any(l.startswith("|") for l in lines):
    print("```text\n" + "\n".join(lines) + "\n```")
else:
    # Tables as they are, every other line a paragraph of its own.
    out = []
    for l in lines:
        if out and not (l.startswith("|") and out[-1].startswith("|")):
            out.append("")
        out.append(l)
    print("\n".join(out))
EOF
)
header="$(date -u +%F) · $label · commit $commit · \`$(typed "$@")\`"
echo "$body" | scripts/doc-block.py "$job, $label" "$header"
