#!/usr/bin/env bash
# Side-by-side throughput: `s2s bench --json` and ../shared/bench/torch_ref.py on the same
# machine, then the ratio per model (ours / PyTorch).
#   scripts/bench-vs-torch.sh [--device cpu|wgpu] [--steps N] [--models lstm,transformer] [--rounds R] [--ct2]
# Each round runs every model once with ours, then once with PyTorch, model by model, so the
# two meet the same machine state; with R > 1 the table shows the median of each figure and
# the range of the per-round ratios (shared VMs drift 10-30 % between runs).
# PyTorch runs on the CPU with 2 threads unless TORCH_DEVICE=cuda.
# --ct2 also runs ../shared/bench/ct2_ref.py (the same Transformer in CTranslate2, the decoding
# anchor) in every round and prints our Transformer's greedy and beam-5 ratios to it.
# S2S_BIN_BASE=PATH also runs a second build of ours in every round, just before the first,
# and prints its table too: before/after comparisons of a change in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
device=cpu; steps=20; models=lstm,bahdanau,luong,transformer; rounds=1; ct2=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2;;
    --steps) steps=$2; shift 2;;
    --models) models=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    --ct2) ct2=1; shift;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
done
shared=${S2S_SHARED:-../shared}
bin=${S2S_BIN:-target/release/s2s}
[ -x "$bin" ] || { cargo build --release -p s2s; bin=target/release/s2s; }
ours=$(mktemp); theirs=$(mktemp); based=$(mktemp); anchor=$(mktemp)
trap 'rm -f "$ours" "$theirs" "$based" "$anchor"' EXIT
for _ in $(seq "$rounds"); do
  for m in ${models//,/ }; do
    if [ -n "${S2S_BIN_BASE:-}" ]; then
      "$S2S_BIN_BASE" bench --device "$device" --steps "$steps" --models "$m" --json >> "$based"
    fi
    "$bin" bench --device "$device" --steps "$steps" --models "$m" --json >> "$ours"
    python3 "$shared/bench/torch_ref.py" --device "${TORCH_DEVICE:-cpu}" --threads "${TORCH_THREADS:-2}" \
      --steps "$steps" --models "$m" 2>/dev/null >> "$theirs"
    if [ "$ct2" = 1 ] && [ "$m" = transformer ]; then
      python3 "$shared/bench/ct2_ref.py" --threads "${TORCH_THREADS:-2}" --rounds 1 2>/dev/null >> "$anchor"
    fi
  done
done
# KEEP_JSON=DIR keeps the raw JSON lines of both sides there (ours.jsonl, torch.jsonl).
if [ -n "${KEEP_JSON:-}" ]; then cp "$ours" "$KEEP_JSON/ours.jsonl"; cp "$theirs" "$KEEP_JSON/torch.jsonl"; fi
python3 - "$ours" "$theirs" "$based" "$anchor" <<'PY'
import json, statistics, sys
def load(path):
    runs = {}
    for d in map(json.loads, open(path)):
        runs.setdefault(d["model"], []).append(d)
    return runs
ours, torch, base = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
med = lambda runs, key: statistics.median(r.get(key, 0) for r in runs) if runs else 0
def ratio(o, t, key):
    a, b = med(o, key), med(t, key)
    if not b:
        return "-"
    per = [x.get(key, 0) / y[key] for x, y in zip(o, t) if y.get(key)]
    spread = f" ({min(per):.2f}–{max(per):.2f})" if len(per) > 1 else ""
    return f"{a / b:.2f}×{spread}"
def table(ours, title):
  if title:
    print(f"\n{title}\n")
  print("| model | params (ours / torch) | train tok/s ours | torch | ratio | greedy sent/s ours | torch | ratio | beam-5 sent/s ours |")
  print("|---|---|---|---|---|---|---|---|---|")
  for m, o in ours.items():
      t = torch.get(m, [])
      params_t = t[0].get("params", 0) if t else 0
      print(f"| {m} | {o[0]['params']:,} / {params_t:,} | {med(o, 'train_tokens_per_s'):.0f} | {med(t, 'train_tokens_per_s'):.0f} "
            f"| {ratio(o, t, 'train_tokens_per_s')} | {med(o, 'decode_sentences_per_s'):.1f} | {med(t, 'decode_sentences_per_s'):.1f} "
            f"| {ratio(o, t, 'decode_sentences_per_s')} | {med(o, 'beam5_sentences_per_s'):.1f} |")
table(ours, "")
if base:
  table(base, "The base build (S2S_BIN_BASE), same rounds:")
ct2 = load(sys.argv[4]).get("transformer", [])
if ct2:
  print(f"\nCTranslate2 ({ct2[0]['engine']}), the same Transformer, same rounds:\n")
  print("| build | greedy sent/s ours | CTranslate2 | ratio | beam-5 sent/s ours | CTranslate2 | ratio |")
  print("|---|---|---|---|---|---|---|")
  for label, runs in [("this", ours), ("base", base)]:
    o = runs.get("transformer", [])
    if o:
      print(f"| {label} | {med(o, 'decode_sentences_per_s'):.1f} | {med(ct2, 'decode_sentences_per_s'):.1f} | {ratio(o, ct2, 'decode_sentences_per_s')} "
            f"| {med(o, 'beam5_sentences_per_s'):.1f} | {med(ct2, 'beam5_sentences_per_s'):.1f} | {ratio(o, ct2, 'beam5_sentences_per_s')} |")
PY
