#!/usr/bin/env bash
# Train lstm, bahdanau and luong on the built-in pair (experiments/builtin/) one after the
# other and print test BLEU by source length from each run's test/scores.json.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${S2S_BIN:-target/release/s2s}
[ -x "$bin" ] || { cargo build --release -p s2s; bin=target/release/s2s; }
models=${*:-lstm bahdanau luong}
for m in $models; do
  "$bin" train --config "experiments/builtin/$m.toml" --run "runs/builtin-$m" --device cpu --quiet
done
for m in $models; do
  python3 - "runs/builtin-$m/test/scores.json" "$m" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(sys.argv[2], "BLEU %.2f" % s["bleu"], " ".join("%s:%.1f(%d)" % (b["bucket"], b["bleu"], b["sentences"]) for b in s["bleu_by_source_length"]))
PY
done
