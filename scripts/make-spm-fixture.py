#!/usr/bin/env python3
"""Makes the SentencePiece fixtures of crates/s2s-data/tests/fixtures/spm/.

Trains small Unigram and BPE models with the `sentencepiece` package on the built-in pair's
training split (source and target text together), then writes the lines the Rust test
segments and what SentencePiece makes of them:

  pair.model          256 pieces (the most this pair allows), spm_train's defaults otherwise:
                      the nmt_nfkc normaliser, <unk> <s> </s> at 0-2, no <pad>
  pair-lines.txt      the first 250 lines of at most 120 characters (to keep the fixture
                      small) of each side of the test and validation splits, then lines that
                      exercise the normaliser (spaces, NFKC, unknown characters, specials as
                      text): 1,013 lines
  pair-pieces.txt     per line, `encode(line, out_type=str)` joined by spaces (what
                      `spm_encode` prints); an unknown piece is its surface text, as
                      SentencePiece prints it, so the ids follow: a piece's id, or <unk>'s for
                      a text the vocabulary lacks
  extras.model        byte fallback, user-defined and control symbols, <pad> at 3, the
                      identity normaliser (no character map: a 6 KB file)
  extras-lines.txt, extras-pieces.txt   the same for 114 lines
  bpe.model           a BPE model of 300 pieces, the identity normaliser (the character map is
                      the Unigram fixture's), so unknown characters stay unknown; bpe-pieces.txt
                      segments the lines of pair-lines.txt
  bpe-extras.model    BPE with byte fallback, user-defined and control symbols, <pad> at 3;
                      bpe-extras-pieces.txt segments the lines of extras-lines.txt

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
    # Half-width kana with a sound mark: one rule for the pair, another for the first alone.
    "\uff76\uff9e dog \uff8a\uff9f",
]


def write(name, model_args, text, lines, model_type="unigram", lines_of=None):
    """Trains OUT/NAME.model on `text` and writes NAME-lines.txt (or reuses LINES_OF-lines.txt)
    and NAME-pieces.txt."""
    prefix = os.path.join(OUT, name)
    # The input by its bare name (the model records it), so that the same data give the same file.
    os.chdir(os.path.dirname(text))
    spm.SentencePieceTrainer.train(
        input=os.path.basename(text), model_prefix=prefix, model_type=model_type, num_threads=1, minloglevel=2, **model_args
    )
    os.remove(prefix + ".vocab")
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    for line in lines:
        assert "\n" not in line and "\r" not in line
    if lines_of is None:
        with open(prefix + "-lines.txt", "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(line + "\n" for line in lines))
    else:
        with open(os.path.join(OUT, lines_of + "-lines.txt"), encoding="utf-8") as f:
            assert f.read() == "".join(line + "\n" for line in lines), lines_of
    with open(prefix + "-pieces.txt", "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            pieces = sp.encode(line, out_type=str)
            assert all(" " not in p for p in pieces), pieces
            f.write(" ".join(pieces) + "\n")
            ids = sp.encode(line, out_type=int)
            assert ids == [sp.piece_to_id(p) for p in pieces], (line, pieces, ids)
    print(f"wrote {prefix}.model and {len(lines)} lines", file=sys.stderr)


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
        lines = []
        for split in ("test", "valid"):
            for side in ("src", "tgt"):
                with open(os.path.join(data, f"{split}.{side}"), encoding="utf-8") as f:
                    lines += [l for l in f.read().split("\n") if l and len(l) <= 120][:250]
        os.makedirs(OUT, exist_ok=True)
        # 256 pieces: the most this pair's small vocabulary allows.
        write("pair", {"vocab_size": 256}, text, lines + EXTRA)
        extras = {
            "vocab_size": 400,
            "hard_vocab_limit": False,
            "byte_fallback": True,
            "user_defined_symbols": ["<sep>", "dogs", "queen"],
            "control_symbols": ["<mask>"],
            "pad_id": 3,
            "normalization_rule_name": "identity",
        }
        extra_lines = lines[:100] + EXTRA + ["the dogs sing <sep> queens <mask> dogsdogs queenqueen"]
        write("extras", extras, text, extra_lines)
        bpe = {"vocab_size": 300, "hard_vocab_limit": False, "normalization_rule_name": "identity"}
        write("bpe", bpe, text, lines + EXTRA, model_type="bpe", lines_of="pair")
        write("bpe-extras", extras, text, extra_lines, model_type="bpe", lines_of="extras")


if __name__ == "__main__":
    main()
