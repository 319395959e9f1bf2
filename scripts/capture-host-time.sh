#!/usr/bin/env bash
# Host time a training step, eager against replayed from a captured graph, per model, at the
# launch-bound shapes (experiments/bench/launch-bound.json), one run beside each other.
#   scripts/capture-host-time.sh [--models lstm,transformer] [--steps N] [--rounds R] [--shapes FILE] [--perf]
# Runs `s2s bench --device wgpu --no-decode --json` with `--capture off` and `on` in turn, R rounds,
# and prints the medians of train_host_ms (calling thread + cubecl's device-service threads) and
# its split. On lavapipe the device-service thread also runs lavapipe's execution of each dispatch
# (inline at submission); --perf samples that thread with perf and takes out the share spent in
# lavapipe (its JIT-compiled shaders, swrast_dri.so, LLVM): the "ours" columns. On a GPU the
# driver executes nothing on the host, and the plain figures are ours.
set -euo pipefail
cd "$(dirname "$0")/.."
models=lstm,bahdanau,luong,transformer; steps=30; rounds=2; shapes=experiments/bench/launch-bound.json; perf=0
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift 2;;
    --steps) steps=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    --shapes) shapes=$2; shift 2;;
    --perf) perf=1; shift;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
done
bin=${S2S_BIN:-target/release/s2s}
[ -x "$bin" ] || { cargo build --release -p s2s; bin=target/release/s2s; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$out}
for _ in $(seq "$rounds"); do
  for m in ${models//,/ }; do
    for c in off on; do
      run=("$bin" bench --device wgpu --shapes "$shapes" --models "$m" --steps "$steps" --capture "$c" --no-decode --json)
      if [ "$perf" = 1 ]; then
        perf record -q -F 1999 -o "$out/perf.data" -- "${run[@]}" 2>/dev/null | sed "s/^{/{\"capture\":\"$c\",/" >> "$out/runs.jsonl"
        # The device-service threads' samples by shared object: lavapipe's share of them.
        perf report -i "$out/perf.data" --no-children --sort comm,dso --stdio -g none 2>/dev/null \
          | awk -v m="$m" -v c="$c" '$2 ~ /^DS/ { s = $1; sub("%", "", s); dso = $3; for (i = 4; i <= NF; i++) dso = dso " " $i;
                 all += s; if (dso ~ /JIT|swrast|LLVM|lvp/) lvp += s }
               END { printf "{\"model\":\"%s\",\"capture\":\"%s\",\"lavapipe_share\":%f}\n", m, c, all ? lvp / all : 0 }' >> "$out/perf.jsonl"
      else
        "${run[@]}" 2>/dev/null | sed "s/^{/{\"capture\":\"$c\",/" >> "$out/runs.jsonl"
      fi
    done
  done
done
python3 - "$out/runs.jsonl" "$out/perf.jsonl" "$perf" <<'PY'
import json, os, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
shares = [json.loads(l) for l in open(sys.argv[2])] if os.path.exists(sys.argv[2]) else []
perf = sys.argv[3] == "1"
med = lambda xs: statistics.median(xs) if xs else 0.0
def fig(m, c):
    r = [x for x in runs if x["model"] == m and x["capture"] == c]
    host = med([x["train_host_ms"] for x in r])
    caller = med([x["train_host_split_ms"]["caller"] for x in r])
    ds = med([x["train_host_split_ms"]["device_service"] for x in r])
    share = med([s["lavapipe_share"] for s in shares if s["model"] == m and s["capture"] == c])
    return host, caller, ds, caller + ds * (1 - share), share
head = "| model | eager host ms (caller + device service) | replayed | eager / replayed |"
sep = "|---|---|---|---|"
if perf:
    head += " eager ours ms | replayed ours ms | eager / replayed, ours |"
    sep += "---|---|---|"
print(head); print(sep)
for m in dict.fromkeys(x["model"] for x in runs):
    e, r = fig(m, "off"), fig(m, "on")
    row = f"| {m} | {e[0]:.1f} ({e[1]:.1f} + {e[2]:.1f}) | {r[0]:.1f} ({r[1]:.1f} + {r[2]:.1f}) | {e[0] / r[0]:.2f}× |"
    if perf:
        row += f" {e[3]:.1f} | {r[3]:.1f} | {e[3] / r[3]:.2f}× |"
    print(row)
if perf:
    print("\nours = caller + device service × (1 − lavapipe's share of the device-service threads' perf samples)")
PY
