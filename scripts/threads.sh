#!/usr/bin/env bash
# Training throughput on one thread and on two, ours (`s2s bench`) beside PyTorch
# (torch_ref.py), on the reference shapes: what each side gains from the second core.
#   scripts/threads.sh [--steps N] [--models lstm,transformer]
# Prints a markdown table (scripts/doc-run.sh writes it into docs/benchmarks.md). Each thread
# count runs ours, then PyTorch, model by model, so the two meet the same machine state.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=8; models=lstm,transformer
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2;;
    --models) models=$2; shift 2;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
done
shared=${S2S_SHARED:-../shared}
bin=${S2S_BIN:-target/release/s2s}
[ -x "$bin" ] || { cargo build --release -p s2s; bin=target/release/s2s; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for threads in 1 2; do
  for m in ${models//,/ }; do
    RAYON_NUM_THREADS=$threads "$bin" bench --device cpu --models "$m" --steps "$steps" --no-decode --json \
      2> /dev/null | sed "s/^{/{\"threads\":$threads,\"side\":\"ours\",/" >> "$tmp/all.jsonl"
    python3 "$shared/bench/torch_ref.py" --device cpu --threads "$threads" --steps "$steps" --models "$m" \
      2> /dev/null | grep '^{' | sed 's/^{/{"side":"torch",/' >> "$tmp/all.jsonl"
  done
done
python3 - "$tmp/all.jsonl" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
tok = {(r["side"], r["model"], r["threads"]): r["train_tokens_per_s"] for r in rows}
print("| model | 1 thread: ours / PyTorch tok/s | ratio | 2 threads: ours / PyTorch | ratio "
      "| gain from the 2nd thread, ours | PyTorch |")
print("|---|---|---|---|---|---|---|")
for m in dict.fromkeys(r["model"] for r in rows):
    o1, t1, o2, t2 = (tok[(s, m, n)] for n in (1, 2) for s in ("ours", "torch"))
    print(f"| {m} | {o1:.0f} / {t1:.0f} | {o1 / t1:.2f}× | {o2:.0f} / {t2:.0f} | {o2 / t2:.2f}× "
          f"| {o2 / o1:.2f}× | {t2 / t1:.2f}× |")
EOF
