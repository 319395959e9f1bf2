#!/usr/bin/env python3
"""The reference for `s2s data prepare`'s speed: the same work in Hugging Face `tokenizers`
from Python (`pip install tokenizers`), as a fairseq or OpenNMT user would script it.

    scripts/prepare-ref.py SRC TGT [--vocab 8000] [--threads 2]

Learns a joint BPE of `--vocab` merges-and-symbols on both sides (NFC, Metaspace `▁`, the
pipeline `s2s` uses), then encodes every pair with `encode_batch` in chunks of 16,384 pairs
(Rust threads inside `tokenizers`, RAYON_NUM_THREADS), counting the ids (nothing is
written). Prints one JSON line: seconds for the tokenizer and for
encoding, pairs per second overall and in the encoding pass, and peak RSS (ru_maxrss).
"""

import argparse
import json
import os
import resource
import sys
import time


def lines(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield " ".join(line.split())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("tgt")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    os.environ["RAYON_NUM_THREADS"] = str(a.threads)
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=a.vocab, special_tokens=["<pad>", "<unk>", "<s>", "</s>"], show_progress=False
    )

    def both():
        yield from lines(a.src)
        yield from lines(a.tgt)

    t0 = time.perf_counter()
    tok.train_from_iterator(both(), trainer=trainer)
    t1 = time.perf_counter()
    pairs = 0
    ids = 0
    chunk = 16384
    with open(a.src, encoding="utf-8") as fs, open(a.tgt, encoding="utf-8") as ft:
        while True:
            s = [" ".join(l.split()) for _, l in zip(range(chunk), fs)]
            t = [" ".join(l.split()) for _, l in zip(range(len(s)), ft)]
            if not s:
                break
            for e in tok.encode_batch(s) + tok.encode_batch(t):
                ids += len(e.ids)
            pairs += len(s)
    t2 = time.perf_counter()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "tool": "tokenizers " + __import__("tokenizers").__version__,
                "pairs": pairs,
                "ids": ids,
                "tokenizer_s": round(t1 - t0, 2),
                "encode_s": round(t2 - t1, 2),
                "pairs_per_s": round(pairs / (t2 - t0)),
                "encode_pairs_per_s": round(pairs / (t2 - t1)),
                "peak_rss_mb": round(rss_mb),
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
