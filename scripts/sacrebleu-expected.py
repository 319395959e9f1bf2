#!/usr/bin/env python3
"""Expected values for s2s-eval's TER and paired significance tests, from sacreBLEU 2.6.0.

Writes crates/s2s-eval/tests/fixtures/{ter,significance,cli}.jsonl.
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


# Tiny hand-made corpus for the corners of the resampled arithmetic: empty lines (chrF's
# epsilon branch makes Python floats, so some resampled chrF arrays are float64), empty
# references (TER's 1.0 branch), zero n-gram matches (BLEU smoothing).
TINY_REFS = [["the cat sat on the mat", "", "a b c d", "hello world", "x", "it is raining today", ""]]
TINY_SYSTEMS = [
    ["the cat sat on a mat", "", "a b c e", "hello there world", "y", "it rains today", "z"],
    ["a cat sat on the mat", "oops", "d c b a", "", "x", "today it is raining", ""],
    ["the cat sat on the mat", "", "a b", "hello world", "", "it is raining", "w w"],
]


def make_metric(m, refs):
    m = dict(m)
    name = m.pop("metric")
    cls = {"bleu": BLEU, "chrf": CHRF, "ter": TER}[name]
    return cls(**m, references=refs)


def run_paired(case):
    """sacreBLEU's PairedTest as its command line runs it; every number as a string."""
    if case.get("seed") is None:
        os.environ.pop("SACREBLEU_SEED", None)
    else:
        os.environ["SACREBLEU_SEED"] = str(case["seed"])
    if "data" in case:
        systems, refs = case["data"]["systems"], case["data"]["refs"]
    else:
        systems = [system(s) for s in case["systems"]]
        refs = [system(r) for r in case["refs"]]
    named = [(f"s{i}", hyps) for i, hyps in enumerate(systems)]
    metrics = {}
    for m in case["metrics"]:
        metric = make_metric(m, refs)
        metrics[m["metric"].upper()] = metric
    ps = PairedTest(named, metrics, references=None, test_type=case["test"], n_samples=case["samples"])
    sigs, scores = ps()
    opt = lambda x: None if x is None else f(x)
    columns = []
    for name, sig in sigs.items():
        columns.append({
            "name": name,
            "signature": str(sig),
            "results": [{"score": f(r.score), "p_value": opt(r.p_value), "mean": opt(r.mean), "ci": opt(r.ci)}
                        for r in scores[name]],
        })
    os.environ.pop("SACREBLEU_SEED", None)
    return dict(case, columns=columns)


DEFAULT3 = [{"metric": "bleu"}, {"metric": "chrf"}, {"metric": "ter"}]
WMT3 = ["Online-B", "PROMT", "Online-W"]

PAIRED_CASES = [
    {"name": "bs-defaults", "test": "bs", "samples": 1000, "seed": None, "systems": WMT3, "refs": ["ref"],
     "metrics": DEFAULT3},
    {"name": "ar-defaults", "test": "ar", "samples": 10000, "seed": None, "systems": WMT3, "refs": ["ref"],
     "metrics": [{"metric": "ter"}, {"metric": "chrf"}, {"metric": "bleu"}]},
    # Systems close to the baseline, so p-values fall anywhere.
    {"name": "bs-close-systems", "test": "bs", "samples": 300, "seed": 7,
     "systems": ["Online-B", "mix:Online-B,Online-W,3", "mix:Online-B,PROMT,10"], "refs": ["ref"],
     "metrics": DEFAULT3},
    {"name": "ar-close-systems", "test": "ar", "samples": 3000, "seed": 2024,
     "systems": ["Online-W", "mix:Online-W,Online-B,4", "mix:Online-W,PROMT,9"], "refs": ["ref"],
     "metrics": [{"metric": "chrf"}, {"metric": "bleu"}, {"metric": "ter"}]},
    {"name": "bs-options", "test": "bs", "samples": 500, "seed": 99,
     "systems": ["PROMT", "mix:PROMT,Online-W,2"], "refs": ["ref"],
     "metrics": [{"metric": "bleu", "lowercase": True, "tokenize": "intl"},
                 {"metric": "chrf", "word_order": 2},
                 {"metric": "ter", "normalized": True, "case_sensitive": True}]},
    {"name": "bs-two-refs", "test": "bs", "samples": 200, "seed": 5,
     "systems": ["Online-B", "Online-W", "mix:Online-B,Online-W,5"], "refs": ["ref", "PROMT"],
     "metrics": DEFAULT3},
    {"name": "ar-two-refs", "test": "ar", "samples": 2000, "seed": 5,
     "systems": ["Online-B", "Online-W", "mix:Online-B,Online-W,5"], "refs": ["ref", "PROMT"],
     "metrics": [{"metric": "bleu"}, {"metric": "chrf"}]},
]
TINY_METRICS = [
    {"metric": "bleu"},
    {"metric": "bleu", "smooth_method": "floor"},
    {"metric": "bleu", "smooth_method": "add-k", "smooth_value": 0.5},
    {"metric": "bleu", "smooth_method": "none"},
    {"metric": "chrf"},
    {"metric": "chrf", "eps_smoothing": True},
    {"metric": "ter"},
]
for test, samples in [("bs", 400), ("ar", 500)]:
    for i, m in enumerate(TINY_METRICS):
        PAIRED_CASES.append({"name": f"{test}-tiny-{i}", "test": test, "samples": samples, "seed": 12345 + i,
                             "data": {"systems": TINY_SYSTEMS, "refs": TINY_REFS}, "metrics": [m]})


def cli(args, env=None):
    """The sacrebleu command line's output, run in the fixture folder (so systems are named
    by their file names) without colours."""
    e = dict(os.environ, NO_COLOR="1")
    e.pop("SACREBLEU_SEED", None)
    e.update(env or {})
    out = subprocess.run(["sacrebleu", *args], cwd=DATA, env=e, capture_output=True, text=True, check=True)
    return {"kind": "cli", "args": args, "env": env or {}, "stdout": out.stdout}


def files(*names):
    return [f"wmt22.en-de.{n}.de" for n in names]


CLI_CASES = [
    files("ref") + ["-i", *files("Online-B", "PROMT", "Online-W"), "-m", "bleu", "chrf", "ter", "--paired-bs",
                    "-f", "text"],
    files("ref") + ["-i", *files("Online-B", "PROMT"), "-m", "ter", "chrf", "bleu", "--paired-ar", "-f", "text"],
    files("ref") + ["-i", *files("Online-W", "Online-B"), "-m", "chrf", "--paired-bs", "--paired-bs-n", "100",
                    "-w", "2", "-f", "text"],
    files("ref") + ["-i", *files("Online-B", "PROMT", "Online-W"), "-m", "bleu", "chrf", "ter", "-f", "text"],
    files("ref") + ["-i", *files("Online-B", "PROMT"), "-m", "bleu", "chrf", "ter", "-f", "json"],
    files("ref") + ["-i", *files("Online-B"), "-m", "ter", "-f", "text"],
    files("ref") + ["-i", *files("Online-B"), "-m", "ter", "bleu", "-f", "json", "-w", "2"],
    files("ref", "PROMT") + ["-i", *files("Online-W"), "-m", "ter", "--ter-normalized", "--ter-no-punct",
                             "--ter-case-sensitive", "--ter-asian-support", "-f", "text"],
]


def write_jsonl(name, rows):
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    what = sys.argv[1:] or ["ter", "significance"]
    if "ter" in what:
        write_jsonl("ter.jsonl", ter_cases())
    if "significance" in what:
        write_jsonl("significance.jsonl", [run_paired(c) for c in PAIRED_CASES])
        write_jsonl("cli.jsonl", [cli(a) for a in CLI_CASES] + [
            cli(CLI_CASES[2], env={"SACREBLEU_SEED": "42"})])
