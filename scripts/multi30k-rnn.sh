#!/usr/bin/env bash
# Train the three RNN models of experiments/multi30k/ one after the other on CPU (issue 4's
# measured runs). Needs ../shared/datasets/multi30k (or scripts/fetch-multi30k.sh). Usage:
#   scripts/multi30k-rnn.sh [MODEL ...]      (default: lstm bahdanau luong)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${S2S_BIN:-target/release/s2s}
[ -x "$bin" ] || { cargo build --release -p s2s; bin=target/release/s2s; }
for m in "${@:-lstm bahdanau luong}"; do
  for model in $m; do
    "$bin" train --config "experiments/multi30k/$model.toml" --run "runs/multi30k-$model" --device cpu --quiet
  done
done
