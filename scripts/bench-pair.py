#!/usr/bin/env python3
"""Two builds of s2s, paired: runs `A bench ARGS --json` and `B bench ARGS --json` in turn N
times (A B A B ...), then prints each figure's median for both and the median and range of the
per-pair ratios A/B. Pairing keeps the ratio meaningful while a shared VM drifts.

usage: scripts/bench-pair.py N BIN_A BIN_B -- BENCH_ARGS...
e.g.   scripts/bench-pair.py 4 target/release/s2s /tmp/s2s-old -- --device cpu --models transformer --steps 8
"""
import json
import statistics as st
import subprocess
import sys


def main():
    if len(sys.argv) < 5 or sys.argv[4] != "--":
        sys.exit(__doc__)
    n, a, b, args = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[5:]
    figures = ["train_tokens_per_s", "decode_sentences_per_s", "beam5_sentences_per_s"]
    runs = {a: [], b: []}
    for _ in range(n):
        for binary in (a, b):
            out = subprocess.run([binary, "bench", *args, "--json"], capture_output=True, text=True, check=True).stdout
            runs[binary].append([json.loads(line) for line in out.splitlines() if line.startswith("{")])
    print("| model | figure | A median | B median | A/B median (range) |")
    print("|---|---|---|---|---|")
    for i, model in enumerate(r["model"] for r in runs[a][0]):
        for f in figures:
            va, vb = [r[i][f] for r in runs[a]], [r[i][f] for r in runs[b]]
            if max(va) == 0:
                continue
            ratios = [x / y for x, y in zip(va, vb)]
            print(f"| {model} | {f} | {st.median(va):.1f} | {st.median(vb):.1f} | "
                  f"{st.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
