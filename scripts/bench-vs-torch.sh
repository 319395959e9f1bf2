#!/usr/bin/env bash
# Side-by-side throughput: `s2s bench --json` and ../shared/bench/torch_ref.py on the same
# machine, one after the other, then the ratio per model (ours / PyTorch).
#   scripts/bench-vs-torch.sh [--device cpu|wgpu] [--steps N] [--models lstm,transformer]
# PyTorch runs on the CPU with 2 threads unless TORCH_DEVICE=cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
device=cpu; steps=20; models=lstm,bahdanau,luong,transformer
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2;;
    --steps) steps=$2; shift 2;;
    --models) models=$2; shift 2;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
done
shared=${S2S_SHARED:-../shared}
bin=${S2S_BIN:-target/release/s2s}
[ -x "$bin" ] || { cargo build --release -p s2s; bin=target/release/s2s; }
ours=$(mktemp); theirs=$(mktemp)
"$bin" bench --device "$device" --steps "$steps" --models "$models" --json > "$ours"
python3 "$shared/bench/torch_ref.py" --device "${TORCH_DEVICE:-cpu}" --threads "${TORCH_THREADS:-2}" \
  --steps "$steps" --models "$models" 2>/dev/null > "$theirs"
python3 - "$ours" "$theirs" <<'PY'
import json, sys
ours = {d["model"]: d for d in map(json.loads, open(sys.argv[1]))}
torch = {d["model"]: d for d in map(json.loads, open(sys.argv[2]))}
print("| model | params (ours / torch) | train tok/s ours | torch | ratio | greedy sent/s ours | torch | ratio | beam-5 sent/s ours |")
print("|---|---|---|---|---|---|---|---|---|")
for m, o in ours.items():
    t = torch.get(m, {})
    tt, td = t.get("train_tokens_per_s", 0), t.get("decode_sentences_per_s", 0)
    r = lambda a, b: f"{a / b:.2f}×" if b else "-"
    print(f"| {m} | {o['params']:,} / {t.get('params', 0):,} | {o['train_tokens_per_s']:.0f} | {tt:.0f} | {r(o['train_tokens_per_s'], tt)} "
          f"| {o['decode_sentences_per_s']:.1f} | {td:.1f} | {r(o['decode_sentences_per_s'], td)} | {o['beam5_sentences_per_s']:.1f} |")
PY
rm -f "$ours" "$theirs"
