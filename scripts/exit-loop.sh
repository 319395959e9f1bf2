#!/usr/bin/env bash
# Runs one `s2s translate` after another for SECONDS and counts the runs that did not exit 0:
# a check for faults that show once in hundreds of processes (one did, in the teardown at
# exit; docs/reliability.md). Short inputs make more processes, and more exits, a minute.
#
#   scripts/exit-loop.sh SECONDS MODEL_DIR SRC [translate options…]
#
# Prints `runs N, failed M` and, for each failure, its exit status and the last line of its
# stderr; exits 1 if any run failed. S2S_BIN names the binary (default target/release/s2s).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n 2,9p "$0" >&2; exit 2; }
seconds=$1; model=$2; src=$3; shift 3
bin=${S2S_BIN:-target/release/s2s}
[ -x "$bin" ] || cargo build --release -p s2s >&2 || exit 2
err=$(mktemp); trap 'rm -f "$err"' EXIT
runs=0; failed=0
end=$(( $(date +%s) + seconds ))
while [ "$(date +%s)" -lt "$end" ]; do
  "$bin" translate --model "$model" "$@" < "$src" > /dev/null 2> "$err"
  rc=$?; runs=$((runs + 1))
  if [ $rc -ne 0 ]; then
    failed=$((failed + 1))
    echo "run $runs: exit $rc: $(tail -n 1 "$err")"
  fi
done
echo "runs $runs, failed $failed"
[ $failed -eq 0 ]
