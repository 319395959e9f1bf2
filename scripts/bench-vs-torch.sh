#!/usr/bin/env bash
# Side-by-side throughput: `s2s bench --json` and ../shared/bench/torch_ref.py on the same
# machine, then the ratio per model (ours / PyTorch).
#   scripts/bench-vs-torch.sh [--device cpu|wgpu] [--steps N] [--models lstm,transformer] [--rounds R] [--ct2]
#                             [--shapes FILE] [--capture] [--isa avx2|avx512] [--busy] [--doc LABEL]
#                             [--precision f32|mixed]
# Each round runs every model once with ours, then once with PyTorch, model by model, so the
# two meet the same machine state; with R > 1 the table shows the median of each figure and
# the range of the per-round ratios (shared VMs drift 10-30 % between runs).
# PyTorch runs on the CPU with 2 threads unless TORCH_DEVICE=cuda.
# --ct2 also runs ../shared/bench/ct2_ref.py (the same Transformer in CTranslate2, the decoding
# anchor) in every round at float32 and at int8 (its users' deployment precision on a CPU), and
# ours again with `--quantize int8` (decoding only), and prints our f32 Transformer's greedy and
# beam-5 ratios to its float32, and our int8's to its int8.
# --shapes FILE: other shapes in models.json's format (experiments/bench/multi30k-4k.json, …) for
# both sides: PyTorch's references run from a temporary copy whose models.json is FILE.
# --precision P runs both sides at precision P: ours with `s2s bench --precision P`, PyTorch
# through scripts/torch_precision.py (torch_ref.py's models and protocol; f32 with TF32 off on
# matmul and cuDNN, mixed under torch.autocast(float16) with a GradScaler), so that mixed meets
# mixed and f32 meets f32. Without it PyTorch runs torch_ref.py as it is.
# --capture also runs ours with `--capture on` (the training step and the greedy and beam steps
# replayed from captured graphs, GPU only) in every round and prints its table too.
# --isa avx2 caps every side's CPU instruction set, to see on an AVX-512 machine what an AVX2
# laptop or VM runs: ours through S2S_CPU_ISA, PyTorch through ATEN_CPU_CAPABILITY and
# ONEDNN_MAX_CPU_ISA, CTranslate2 through CT2_FORCE_CPU_ISA (and MKL_ENABLE_INSTRUCTIONS).
# burn's own products (gemm) pick AVX-512 at run time in a build with burn's `x86-v4` feature
# (the default `avx512` feature), which no variable caps: on an AVX-512 machine, unless S2S_BIN
# names a binary, the script builds one without it (`--no-default-features`, kept as
# target/release/s2s-avx2; the first time it recompiles burn's CPU crates) and runs that.
# --busy also runs both sides again in every round with a competing process spinning on CPU 0
# (`taskset -c 0`, stopped after each run), as on a laptop or VM whose other work takes a core
# away now and then, and prints what share of its quiet throughput each side keeps.
# --doc LABEL also writes the tables into docs/benchmarks.md, in place of the block this script
# wrote there before for the same device, machine LABEL (e.g. "Zen 3 EPYC VM") and ISA cap,
# headed by the date, the peers' versions, the commit and this command (a new block goes at the
# end of the file): the docs' tables are the script's output, regenerated, never pasted.
# --from DIR prints (and with --doc writes) the tables of a run kept with KEEP_JSON=DIR, running
# nothing (give the options that shape the tables: --device, --ct2, --busy, --isa), e.g. a
# GPU run's, from what `gpu-session.sh` brought back: `--device wgpu --from OUT/bench-spirv`.
# S2S_BIN_BASE=PATH also runs a second build of ours in every round, just before the first,
# and prints its table too: before/after comparisons of a change in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/measured.sh
args=$(typed "$@")
device=cpu; precision=; steps=20; models=lstm,bahdanau,luong,transformer; rounds=1; ct2=0; shapes=; capture=0; isa=; busy=0; doc=; from=
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2;;
    --steps) steps=$2; shift 2;;
    --models) models=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    --ct2) ct2=1; shift;;
    --shapes) shapes=$(realpath "$2"); shift 2;;
    --capture) capture=1; shift;;
    --isa) isa=$2; shift 2;;
    --busy) busy=1; shift;;
    --doc) doc=$2; shift 2;;
    --from) from=$(realpath "$2"); shift 2;;
    --precision) precision=$2; shift 2;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
done
case "$isa" in
  '') ;;
  avx2|avx512)
    upper=$(echo "$isa" | tr a-z A-Z)
    export S2S_CPU_ISA=$isa ATEN_CPU_CAPABILITY=$isa ONEDNN_MAX_CPU_ISA=$upper CT2_FORCE_CPU_ISA=$upper
    [ "$isa" = avx2 ] && export MKL_ENABLE_INSTRUCTIONS=AVX2
    if [ "$isa" = avx2 ] && [ -z "${S2S_BIN:-}" ] && [ -z "$from" ] && grep -q avx512f /proc/cpuinfo; then
      echo "building s2s without gemm's AVX-512 kernels (target/release/s2s-avx2)" >&2
      cargo build --release -p s2s --no-default-features >&2
      cp target/release/s2s target/release/s2s-avx2
      cargo build --release -p s2s >&2   # the default binary back in place
      export S2S_BIN=target/release/s2s-avx2
    fi;;
  *) echo "--isa takes avx2 or avx512" >&2; exit 2;;
esac
shared=${S2S_SHARED:-../shared}
bin=${S2S_BIN:-target/release/s2s}
[ -x "$bin" ] || [ -n "$from" ] || { cargo build --release -p s2s; bin=target/release/s2s; }
# KEEP_JSON=DIR keeps the raw JSON lines there as they are produced (ours.jsonl, torch.jsonl,
# ours-captured.jsonl, ct2.jsonl) and PyTorch's stderr (torch.stderr), so that a run cut short
# keeps what it measured (base.jsonl too, with S2S_BIN_BASE). DEADLINE=S skips the runs that
# would start after S seconds of this script (bash's $SECONDS), cuts the one under way there,
# and prints the table of what was measured. RUN_TIMEOUT=S cuts any one run after S seconds (a
# build that hangs on a driver loses that run, not the rest).
tmp=$(mktemp -d); refs=$(mktemp -d)
trap 'rm -rf "$tmp" "$refs"' EXIT
keep=${from:-${KEEP_JSON:-$tmp}}; mkdir -p "$keep"
ours=$keep/ours.jsonl; theirs=$keep/torch.jsonl; replayed=$keep/ours-captured.jsonl; anchor=$keep/ct2.jsonl
anchor8=$keep/ct2-int8.jsonl; ours8=$keep/ours-int8.jsonl
based=$keep/base.jsonl; errs=$keep/torch.stderr
ours_busy=$keep/ours-busy.jsonl; theirs_busy=$keep/torch-busy.jsonl
if [ -z "$from" ]; then
  : > "$ours"; : > "$theirs"; : > "$replayed"; : > "$anchor"; : > "$based"; : > "$ours_busy"; : > "$theirs_busy"
  : > "$anchor8"; : > "$ours8"
  # When, at what commit, how many rounds and by what command this run measured: --from and
  # --doc read it back.
  echo "$(date -u +%F) $(measured_commit) $rounds $args" > "$keep/measured"
  # The peers' versions, as this machine has them.
  versions=$(python3 -c 'import torch; print(f"PyTorch {torch.__version__}", end="")' 2>/dev/null || echo "PyTorch ?")
  [ "$ct2" = 1 ] && versions+=$(python3 -c 'import ctranslate2; print(f" and CTranslate2 {ctranslate2.__version__}", end="")' 2>/dev/null)
  echo "$versions" > "$keep/versions"
else
  rounds=0   # tables only
fi
# A process spinning on CPU 0 while "$@" runs.
with_busy_core() {
  taskset -c 0 sh -c 'while :; do :; done' &
  local spinner=$!
  "$@"; local rc=$?
  kill "$spinner" 2> /dev/null; wait "$spinner" 2> /dev/null || true
  return $rc
}
late() { [ -n "${DEADLINE:-}" ] && [ "$SECONDS" -ge "$DEADLINE" ]; }
# Each run is cut at the deadline too (what it printed before stays).
bounded() {
  local left=${RUN_TIMEOUT:-}
  if [ -n "${DEADLINE:-}" ]; then
    local until=$((DEADLINE - SECONDS)); [ "$until" -gt 0 ] || until=1
    [ -n "$left" ] && [ "$left" -lt "$until" ] || left=$until
  fi
  if [ -n "$left" ]; then timeout "$left" "$@"; else "$@"; fi
}
cp "$shared/bench/"*.py "$shared/bench/models.json" "$refs/"
# PyTorch's side, and ours's precision flag (none: each side's default, f32).
torch_run=(python3 "$refs/torch_ref.py"); ours_precision=()
if [ -n "$precision" ]; then
  case "$precision" in f32|mixed) ;; *) echo "--precision takes f32 or mixed" >&2; exit 2;; esac
  torch_run=(python3 scripts/torch_precision.py --precision "$precision" --refs "$refs")
  ours_precision=(--precision "$precision")
fi
ours_shapes=()
if [ -n "$shapes" ]; then cp "$shapes" "$refs/models.json"; ours_shapes=(--shapes "$shapes"); fi
for _ in $(seq "$rounds"); do
  for m in ${models//,/ }; do
    if late; then echo "DEADLINE reached: $m and what follows skipped" >&2; break 2; fi
    if [ -n "${S2S_BIN_BASE:-}" ]; then
      bounded "$S2S_BIN_BASE" bench --device "$device" --steps "$steps" --models "$m" "${ours_shapes[@]}" --json >> "$based" \
        || echo "s2s bench (base build) failed on $m" >&2
    fi
    bounded "$bin" bench --device "$device" --steps "$steps" --models "$m" "${ours_shapes[@]}" "${ours_precision[@]}" --json >> "$ours" \
      || echo "s2s bench failed on $m" >&2
    if [ "$capture" = 1 ]; then
      bounded "$bin" bench --device "$device" --steps "$steps" --models "$m" "${ours_shapes[@]}" --capture on --json \
        >> "$replayed" || echo "s2s bench --capture on failed on $m" >&2
    fi
    bounded "${torch_run[@]}" --device "${TORCH_DEVICE:-cpu}" --threads "${TORCH_THREADS:-2}" \
      --steps "$steps" --models "$m" 2>> "$errs" >> "$theirs" || echo "PyTorch (${torch_run[1]##*/}) failed on $m: see $errs" >&2
    if [ "$busy" = 1 ]; then
      with_busy_core bounded "$bin" bench --device "$device" --steps "$steps" --models "$m" "${ours_shapes[@]}" "${ours_precision[@]}" --json \
        >> "$ours_busy" || echo "s2s bench (busy core) failed on $m" >&2
      with_busy_core bounded "${torch_run[@]}" --device "${TORCH_DEVICE:-cpu}" --threads "${TORCH_THREADS:-2}" \
        --steps "$steps" --models "$m" 2>> "$errs" >> "$theirs_busy" || echo "PyTorch (${torch_run[1]##*/}, busy core) failed on $m" >&2
    fi
    if [ "$ct2" = 1 ] && [ "$m" = transformer ]; then
      bounded python3 "$refs/ct2_ref.py" --threads "${TORCH_THREADS:-2}" --rounds 1 2>> "$errs" >> "$anchor" || echo "ct2_ref.py failed: see $errs" >&2
      bounded "$bin" bench --device "$device" --models "$m" "${ours_shapes[@]}" --quantize int8 --no-train --json >> "$ours8" \
        || echo "s2s bench --quantize int8 failed on $m" >&2
      bounded python3 "$refs/ct2_ref.py" --threads "${TORCH_THREADS:-2}" --rounds 1 --compute-type int8 2>> "$errs" >> "$anchor8" \
        || echo "ct2_ref.py --compute-type int8 failed: see $errs" >&2
    fi
  done
done
python3 - "$ours" "$theirs" "$based" "$anchor" "$replayed" "$ours_busy" "$theirs_busy" "$anchor8" "$ours8" <<'PY' | tee "$tmp/tables.md"
import json, statistics, sys
def load(path):
    runs = {}
    try:
        lines = open(path).readlines()
    except FileNotFoundError:   # a run kept before this file existed (--from)
        lines = []
    for d in map(json.loads, lines):
        runs.setdefault(d["model"], []).append(d)
    return runs
ours, torch, base, replayed = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3]), load(sys.argv[5])
med = lambda runs, key: statistics.median(r.get(key, 0) for r in runs) if runs else 0
def ratio(o, t, key):
    a, b = med(o, key), med(t, key)
    if not b:
        return "-"
    per = [x.get(key, 0) / y[key] for x, y in zip(o, t) if y.get(key)]
    spread = f" ({min(per):.2f}–{max(per):.2f})" if len(per) > 1 else ""
    return f"{a / b:.2f}×{spread}"
def table(ours, title, torch=torch):
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
  # Both builds train the same seeded model on the same batch: their last losses agree to
  # rounding when both compute the step right.
  print("\n| model | last training loss, this build | base | this / base (train tok/s) |\n|---|---|---|---|")
  for m, o in ours.items():
    b = base.get(m, [])
    loss = lambda runs: next((f"{r['train_loss']:.5f}" for r in runs if r.get("train_loss") is not None), "-")
    print(f"| {m} | {loss(o)} | {loss(b)} | {ratio(o, b, 'train_tokens_per_s')} |")
if replayed:
  table(replayed, "Ours with training and decoding steps replayed from captured graphs (--capture on), same rounds:")
  for m, r in replayed.items():
    why = next((x["decode_eager_because"] for x in r if x.get("decode_eager_because")), None)
    if why:
      print(f"\n{m}: decoding ran eagerly, its graphs failed: {why.splitlines()[0]}")
  host = lambda runs: statistics.median(r.get("train_host_ms") or 0 for r in runs) if runs else 0
  print("\n| model | host ms a training step, eager | replayed | eager / replayed |\n|---|---|---|---|")
  for m, r in replayed.items():
    e = ours.get(m, [])
    print(f"| {m} | {host(e):.2f} | {host(r):.2f} | {host(e) / host(r) if host(r) else 0:.2f}× |")
ours_busy, torch_busy = load(sys.argv[6]), load(sys.argv[7])
if ours_busy:
  # What share of its quiet throughput each side keeps beside the spinning process, and the
  # ratios of the busy runs.
  kept = lambda busy, quiet, key: f"{med(busy, key) / med(quiet, key):.2f}" if med(quiet, key) else "-"
  print("\nWith a competing process spinning on CPU 0, same rounds: the share of its quiet throughput each side kept\n")
  print("| model | training kept, ours | torch | ratio, busy | greedy kept, ours | torch | ratio, busy |\n|---|---|---|---|---|---|---|")
  for m, b in ours_busy.items():
    q, tb, tq = ours.get(m, []), torch_busy.get(m, []), torch.get(m, [])
    print(f"| {m} | {kept(b, q, 'train_tokens_per_s')} | {kept(tb, tq, 'train_tokens_per_s')} | {ratio(b, tb, 'train_tokens_per_s')} "
          f"| {kept(b, q, 'decode_sentences_per_s')} | {kept(tb, tq, 'decode_sentences_per_s')} | {ratio(b, tb, 'decode_sentences_per_s')} |")
def anchor_table(ct2, rows, title):
  print(f"\n{title}\n")
  print("| build | greedy sent/s ours | CTranslate2 | ratio | beam-5 sent/s ours | CTranslate2 | ratio |")
  print("|---|---|---|---|---|---|---|")
  for label, o in rows:
    if o:
      print(f"| {label} | {med(o, 'decode_sentences_per_s'):.1f} | {med(ct2, 'decode_sentences_per_s'):.1f} | {ratio(o, ct2, 'decode_sentences_per_s')} "
            f"| {med(o, 'beam5_sentences_per_s'):.1f} | {med(ct2, 'beam5_sentences_per_s'):.1f} | {ratio(o, ct2, 'beam5_sentences_per_s')} |")
ct2 = load(sys.argv[4]).get("transformer", [])
if ct2:
  anchor_table(ct2, [("this, f32", ours.get("transformer", [])), ("base, f32", base.get("transformer", []))],
               f"CTranslate2 ({ct2[0]['engine']}) at float32, the same Transformer, same rounds:")
ct2_8 = load(sys.argv[8]).get("transformer", [])
if ct2_8:
  anchor_table(ct2_8, [("this, int8", load(sys.argv[9]).get("transformer", []))],
               f"CTranslate2 ({ct2_8[0]['engine']}) at int8 against ours at int8 (`--quantize int8`), same rounds:")
PY
[ -n "$doc" ] || exit 0
# The block's key names what it measured; its header says when, on what, and how.
key="bench-vs-torch: $device, $doc${isa:+, capped to ${isa^^}}${precision:+, $precision precision}"
read -r day commit rounds ran < "$keep/measured"
versions=$(cat "$keep/versions" 2> /dev/null || echo "PyTorch ?")
sides="$device, ${TORCH_THREADS:-2} threads each side"
[ "$device" = wgpu ] && sides="ours on wgpu, PyTorch on ${TORCH_DEVICE:-cuda}"
header="$day · $doc · $sides · $versions · commit $commit · \`scripts/bench-vs-torch.sh $ran\` · medians of $rounds round(s), per-round ratio ranges in brackets"
scripts/doc-block.py "$key" "$header" < "$tmp/tables.md"
