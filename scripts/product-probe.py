#!/usr/bin/env python3
"""PyTorch's matrix product at the shapes `s2s bench --product-probe` timed, and both side by side.

  scripts/product-probe.py time OURS.jsonl [--device cuda] [--reps 20] > torch.jsonl
      times torch.matmul at every (m, k, n) of OURS.jsonl (the output of
      `s2s bench --product-probe --json`) in f32 with tf32 off, tf32, f16 and bf16 (the last
      three on CUDA only), one JSON line each, the f32 product's error beside each other one.
  scripts/product-probe.py table LABEL=FILE [LABEL=FILE ...]
      a markdown table: one row a shape, one column a file's element type, in TFLOP/s
      (a split product's blocks of rows in brackets).

Each shape is timed as `reps` products back to back after two untimed ones, between two syncs:
the same protocol as the Rust probe (crates/s2s-kernels/src/gemm/probe.rs).
"""
import argparse
import json
import sys
import time


def shapes_of(path):
    seen, out = set(), []
    for line in open(path):
        d = json.loads(line)
        key = (d["name"], d["m"], d["k"], d["n"])
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def time_products(args):
    import torch

    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    kinds = [("f32", torch.float32, False)]
    if dev.type == "cuda":
        kinds += [("tf32", torch.float32, True), ("f16", torch.float16, False), ("bf16", torch.bfloat16, False)]
    torch.manual_seed(0)
    for name, m, k, n in shapes_of(args.ours):
        a = torch.rand(m, k, device=dev) * 2 - 1
        b = torch.rand(k, n, device=dev) * 2 - 1
        torch.backends.cuda.matmul.allow_tf32 = False
        full = a @ b
        for label, dtype, tf32 in kinds:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            x, w = a.to(dtype), b.to(dtype)
            y = x @ w
            y = x @ w
            sync()
            t = time.perf_counter()
            for _ in range(args.reps):
                y = x @ w
            sync()
            ms = 1e3 * (time.perf_counter() - t) / args.reps
            err = None
            if label != "f32":
                err = float((y.float() - full).abs().max() / full.abs().max())
            flop = 2.0 * m * k * n
            print(json.dumps({"name": name, "m": m, "k": k, "n": n, "dtype": label, "ms": ms,
                              "tflops": flop / (ms * 1e9), "rel_err": err,
                              "device": f"torch {torch.__version__} on {args.device}"}), flush=True)


def table(args):
    cols, rows = [], {}
    for spec in args.files:
        label, _, path = spec.partition("=")
        best = {}
        for line in open(path):
            d = json.loads(line)
            key = (d["name"], d["m"], d["k"], d["n"])
            if d.get("kernel"):
                # A table kernel's rate (crates/s2s-kernels/src/gemm/table.rs): the best per
                # shape and type, in a column of its own, named.
                col = f"{label} {d['dtype']} best table kernel"
                if col not in cols:
                    cols.append(col)
                if d["tflops"] > best.get((key, col), -1.0):
                    best[(key, col)] = d["tflops"]
                    rows.setdefault(key, {})[col] = f"{d['tflops']:.2f} ({d['kernel']})"
                continue
            col = f"{label} {d['dtype']}"
            if col not in cols:
                cols.append(col)
            blocks = f" ({d['blocks']})" if d.get("blocks", 1) not in (None, 1) else ""
            rows.setdefault(key, {})[col] = f"{d['tflops']:.2f}{blocks}"
    print("| product | m × k × n | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for (name, m, k, n), r in rows.items():
        cells = [r.get(c, "–") for c in cols]
        print(f"| {name} | {m} × {k} × {n} | " + " | ".join(cells) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("time")
    t.add_argument("ours")
    t.add_argument("--device", default="cuda")
    t.add_argument("--reps", type=int, default=20)
    s = sub.add_parser("table")
    s.add_argument("files", nargs="+", metavar="LABEL=FILE")
    args = p.parse_args()
    if args.cmd == "time":
        time_products(args)
    else:
        table(args)


if __name__ == "__main__":
    sys.exit(main())
