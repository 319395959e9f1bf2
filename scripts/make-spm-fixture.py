#!/usr/bin/env python3
"""Makes the SentencePiece fixture of crates/s2s-data/tests/fixtures/spm/.

Trains a small Unigram model (256 pieces, the most this pair allows; the default nmt_nfkc normaliser, no <pad>) with
the `sentencepiece` package on the built-in pair's training split (source and target text
together), then writes the lines the Rust test segments and what SentencePiece makes of them:

  pair.model    the model (a ModelProto, as `spm_train` writes it)
  lines.txt     the first 250 lines of at most 120 characters (to keep the fixture small) of
                each side of the test and validation splits, then lines that
                exercise the normaliser (spaces, NFKC, unknown characters, specials as text)
  pieces.txt    per line, `encode(line, out_type=str)` joined by spaces (what `spm_encode`
                prints); an unknown piece is its surface text, as SentencePiece prints it, so
                the ids follow: a piece's id, or <unk>'s for a text the vocabulary lacks

Usage: scripts/make-spm-fixture.py [--data DIR]   (DIR: `s2s data synth --out DIR`; without
it the script runs `target/release/s2s data synth` into a temporary directory).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates", "s2s-data", "tests", "fixtures", "spm")

# Lines the test split lacks: whitespace runs, tabs and no-break spaces, full-width and other
# compatibility characters (NFKC), characters the model never saw, text spelled like specials.
EXTRA = [
    "  the   dog\tsings  ",
    "the\u00a0dog\u3000sings",
    "\uff34\uff48\uff45 \uff44\uff4f\uff47 \uff53\uff49\uff4e\uff47\uff53 \uff01",
    "\ufb01ne \u2460 \u00bd caf\u00e9 cafe\u0301",
    "\u6f22\u5b57 and \u0416\u0416 \U0001f600\U0001f600 dogs",
    "<s> the </s> <unk> <pad> dog",
    "THE DOG SINGS .",
    "",
    " ",
    "\u2581 dog \u2581\u2581",
    "a" * 40,
    "la ravin balet , le hrosk ridet ; 12345 67.5 % ?",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", help="a directory written by `s2s data synth --out DIR`")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            data = os.path.join(tmp, "pair")
            s2s = os.path.join(ROOT, "target", "release", "s2s")
            subprocess.run([s2s, "data", "synth", "--out", data], check=True)
        text = os.path.join(tmp, "train.txt")
        with open(text, "w", encoding="utf-8") as out:
            for side in ("src", "tgt"):
                with open(os.path.join(data, f"train.{side}"), encoding="utf-8") as f:
                    out.write(f.read())
        os.makedirs(OUT, exist_ok=True)
        spm.SentencePieceTrainer.train(
            input=text,
            model_prefix=os.path.join(OUT, "pair"),
            vocab_size=256,
            model_type="unigram",
            num_threads=1,
            minloglevel=2,
        )
        os.remove(os.path.join(OUT, "pair.vocab"))
        lines = []
        for split in ("test", "valid"):
            for side in ("src", "tgt"):
                with open(os.path.join(data, f"{split}.{side}"), encoding="utf-8") as f:
                    lines += [l for l in f.read().split("\n") if l and len(l) <= 120][:250]
    lines += EXTRA
    sp = spm.SentencePieceProcessor(model_file=os.path.join(OUT, "pair.model"))
    for line in lines:
        assert "\n" not in line and "\r" not in line
    with open(os.path.join(OUT, "lines.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(line + "\n" for line in lines))
    with open(os.path.join(OUT, "pieces.txt"), "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            pieces = sp.encode(line, out_type=str)
            assert all(" " not in p for p in pieces), pieces
            f.write(" ".join(pieces) + "\n")
            ids = sp.encode(line, out_type=int)
            assert ids == [sp.piece_to_id(p) for p in pieces], (line, pieces, ids)

if __name__ == "__main__":
    main()
