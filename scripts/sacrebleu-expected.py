#!/usr/bin/env python3
"""Expected values for s2s-eval's TER and paired significance tests, from sacreBLEU 2.6.0.

Writes crates/s2s-eval/tests/fixtures/ter.jsonl.
Needs `pip install sacrebleu==2.6.0 numpy` (the fixtures were made with numpy 2.4.6; numpy 1.x
gives different bootstrap numbers, see significance.rs). Reads the WMT22 outputs in
shared/fixtures/bleu (beside the repository, or $S2S_SHARED/fixtures/bleu) in place; only
the numbers are written. Run from the repository root:

    python3 scripts/sacrebleu-expected.py
"""
import json
import os
import random
import subprocess
import sys

import numpy as np
import sacrebleu
from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.significance import PairedTest

assert sacrebleu.__version__ == "2.6.0", sacrebleu.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("S2S_SHARED", os.path.join(ROOT, "..", "shared"))
DATA = os.path.join(SHARED, "fixtures", "bleu")
OUT = os.path.join(ROOT, "crates", "s2s-eval", "tests", "fixtures")


def f(x):
    """A float as the shortest string that reads back to it (tests parse it exactly)."""
    return repr(float(x))


def read(name):
    """One segment per line, as sacreBLEU's command line reads them."""
    with open(os.path.join(DATA, name), encoding="utf-8", newline="\n") as f:
        return [line.rstrip() for line in f]


def system(spec):
    """A system: `Online-B` (a WMT22 file) or `mix:A,B,k` (line i from B when i % k == 0,
    else from A), so that tests can compare systems closer than the real ones."""
    if spec.startswith("mix:"):
        a, b, k = spec[4:].split(",")
        a, b, k = system(a), system(b), int(k)
        return [y if i % k == 0 else x for i, (x, y) in enumerate(zip(a, b))]
    return read(f"wmt22.en-de.{spec}.de")


TER_OPTIONS = [
    {},
    {"normalized": True},
    {"no_punct": True},
    {"case_sensitive": True},
    {"normalized": True, "no_punct": True, "asian_support": True, "case_sensitive": True},
]

TOKENIZER_INPUTS = [
    "Hello, World! It's John's car.",
    "The price is 3.5 USD, or 1,000.00 EUR; 5-6 items - roughly.",
    "&quot;Quoted&quot; &amp; &lt;tagged&gt; text's",
    "a..b,,c .5 5. x.y {braces} [brackets] back\\slash ~tilde| @at #hash $ % ^ * + = < > / ?",
    "Ein Straßenbahn-Fahrer sagte: „Nein!“ (sic) – 2022-05-03.",
    "ÄÖÜ İstanbul ΣΟΦΟΣ Σ",
    "我爱北京天安门。这是一个测试！",
    "ひらがな カタカナ ㇰㇱ 漢字かな交じり、全角，句読点．？：；！＂（）",
    "㈱ ㍻ 豈 ︰ ⺀ ㇀ 〈〉「」【】〔〕 ｡｢｣､･",
    "  leading and trailing spaces \t tab ",
    "",
    "it's",
    "'s",
]


def ter_cases():
    cases = []
    # tokens[n]: the options are the bits of n (1 normalized, 2 no_punct, 4 asian_support,
    # 8 case_sensitive).
    for text in TOKENIZER_INPUTS:
        tokens = []
        for n in range(16):
            opts = {"normalized": bool(n & 1), "no_punct": bool(n & 2), "asian_support": bool(n & 4),
                    "case_sensitive": bool(n & 8)}
            tokens.append(TER(**opts).tokenizer(text.rstrip()))
        cases.append({"kind": "tokenize", "text": text, "tokens": tokens})

    # Random sentence pairs over a tiny vocabulary: many shifts, ties between shifts and
    # alignments, empty sides, several references.
    rnd = random.Random(20240611)
    vocab = ["a", "b", "c", "d", "e", "f", "g"]

    def sent(lo, hi):
        return " ".join(rnd.choice(vocab) for _ in range(rnd.randint(lo, hi)))

    pairs = []
    for _ in range(400):
        pairs.append((sent(0, 14), [sent(0, 14)]))
    for _ in range(60):
        pairs.append((sent(1, 12), [sent(1, 12) for _ in range(rnd.randint(2, 3))]))
    for _ in range(20):
        # Long segments: shift distance and candidate limits.
        pairs.append((sent(40, 130), [sent(40, 130)]))
    for _ in range(10):
        # Very different lengths: the widened beam.
        pairs.append((sent(1, 2), [sent(100, 160)]))
        pairs.append((sent(100, 160), [sent(1, 3)]))
    # A reference that is a shuffled copy of the hypothesis (shifts only).
    for _ in range(30):
        words = sent(5, 40).split()
        shuffled = words[:]
        rnd.shuffle(shuffled)
        pairs.append((" ".join(words), [" ".join(shuffled)]))
    for hyp, refs in pairs:
        s = TER().sentence_score(hyp, refs)
        cases.append({"kind": "segment", "hyp": hyp, "refs": refs, "edits": s.num_edits,
                      "ref_length": f(s.ref_length)})

    # Corpus TER on the WMT22 outputs.
    ref = read("wmt22.en-de.ref.de")
    for name in ["Online-B", "PROMT", "Online-W"]:
        hyps = system(name)
        for opts in TER_OPTIONS:
            metric = TER(**opts)
            stats = metric._extract_corpus_statistics(hyps, [ref])
            score = metric._aggregate_and_compute(stats)
            cases.append({
                "kind": "corpus", "hyp": name, "refs": ["ref"], "options": opts,
                "score": f(score.score), "num_edits": score.num_edits, "ref_length": f(score.ref_length),
                # Catches per-segment differences that cancel out in the total.
                "edits_checksum": sum((i + 1) * s[0] for i, s in enumerate(stats)),
                "signature": str(metric.get_signature()),
            })
    # Two references.
    hyps, refs = system("Online-B"), [ref, system("PROMT")]
    for opts in [{}, {"normalized": True}]:
        metric = TER(**opts)
        stats = metric._extract_corpus_statistics(hyps, refs)
        score = metric._aggregate_and_compute(stats)
        cases.append({
            "kind": "corpus", "hyp": "Online-B", "refs": ["ref", "PROMT"], "options": opts,
            "score": f(score.score), "num_edits": score.num_edits, "ref_length": f(score.ref_length),
            "edits_checksum": sum((i + 1) * s[0] for i, s in enumerate(stats)),
            "signature": str(metric.get_signature()),
        })
    return cases


def write_jsonl(name, rows):
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    what = sys.argv[1:] or ["ter"]
    if "ter" in what:
        write_jsonl("ter.jsonl", ter_cases())
