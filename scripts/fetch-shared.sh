#!/usr/bin/env bash
# Fetch the test data that is never copied into this repository into DIR (default ../shared),
# from the public sources, then point the tests at it: `S2S_SHARED=DIR cargo test --release --workspace`.
#   scripts/fetch-shared.sh [DIR]
# - datasets/multi30k/: Multi30k task 1, raw (scripts/fetch-multi30k.sh; the multi30k/dataset repository)
# - datasets/anki-eng-fra/eng-fra.tsv: the Tatoeba English–French pairs of manythings.org/anki
#   (today's release is larger than the 2017 one the tests were written on: they check lower bounds)
# - fixtures/bleu/: WMT22 general-task en→de outputs (Online-B, Online-W, PROMT) and reference A from
#   the wmt-conference/wmt22-news-systems repository, a few hand-made edge cases, and expected.jsonl:
#   the scores sacreBLEU 2.6.0 gives them (pip install sacrebleu==2.6.0; it runs here).
# Needs curl, gunzip, unzip and python3. Terms: Multi30k non-commercial research and education (cite
# Elliott et al., 2016); Tatoeba CC-BY 2.0; WMT22 outputs as published by the WMT organisers.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:-$here/../../shared}"
mkdir -p "$dir/datasets" "$dir/fixtures/bleu"
dir="$(cd "$dir" && pwd)"

"$here/fetch-multi30k.sh" "$dir/datasets/multi30k"

anki="$dir/datasets/anki-eng-fra"
mkdir -p "$anki"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
echo "fetching $anki/eng-fra.tsv"
curl -fsSL -A "Mozilla/5.0 (s2s fetch-shared)" -o "$tmp/fra-eng.zip" https://www.manythings.org/anki/fra-eng.zip
unzip -q -o "$tmp/fra-eng.zip" -d "$tmp"
cut -f1,2 "$tmp/fra.txt" > "$anki/eng-fra.tsv.tmp" && mv "$anki/eng-fra.tsv.tmp" "$anki/eng-fra.tsv"
[ -f "$tmp/_about.txt" ] && cp "$tmp/_about.txt" "$anki/ABOUT.txt"

bleu="$dir/fixtures/bleu"
wmt="https://raw.githubusercontent.com/wmt-conference/wmt22-news-systems/main/txt"
for sys in Online-B Online-W PROMT; do
  echo "fetching $bleu/wmt22.en-de.$sys.de"
  curl -fsSL "$wmt/system-outputs/generaltest2022.en-de.hyp.$sys.de" > "$bleu/wmt22.en-de.$sys.de"
done
curl -fsSL "$wmt/references/generaltest2022.en-de.ref.A.de" > "$bleu/wmt22.en-de.ref.de"

# Edge cases: empty lines, no 4-gram match, identical, Unicode punctuation and a no-break space,
# very short hypotheses.
printf 'the cat sat\n\non the mat\n' > "$bleu/edge.empty-lines.hyp"
printf 'the cat sat down\n\non the red mat\n' > "$bleu/edge.empty-lines.ref"
printf 'a b c d e f\n' > "$bleu/edge.identical.hyp"; cp "$bleu/edge.identical.hyp" "$bleu/edge.identical.ref"
printf 'one two three\nfour five six seven\n' > "$bleu/edge.no-4gram.hyp"
printf 'one two four\nfour six five seven\n' > "$bleu/edge.no-4gram.ref"
printf '„Ja“ – sagte er…\u00a0(gestern)!\n' > "$bleu/edge.punct-unicode.hyp"
printf '„Ja“, sagte er … (gestern)!\n' > "$bleu/edge.punct-unicode.ref"
printf 'the\ncat\n' > "$bleu/edge.short-hyp.hyp"
printf 'the cat is on the mat\nthe cat sat on the mat today\n' > "$bleu/edge.short-hyp.ref"

python3 - "$bleu" <<'PY'
import json, os, sys
import sacrebleu
assert sacrebleu.__version__ == "2.6.0", f"expected.jsonl needs sacreBLEU 2.6.0, found {sacrebleu.__version__}"
d = sys.argv[1]
def lines(name):
    text = open(os.path.join(d, name), encoding="utf-8").read()
    return [] if not text else text.rstrip("\n").split("\n")
cases = [(f"wmt22.en-de.{s}", f"wmt22.en-de.{s}.de", ["wmt22.en-de.ref.de"]) for s in ("Online-B", "Online-W", "PROMT")]
cases += [(f"edge.{e}", f"edge.{e}.hyp", [f"edge.{e}.ref"]) for e in ("empty-lines", "identical", "no-4gram", "punct-unicode", "short-hyp")]
with open(os.path.join(d, "expected.jsonl"), "w", encoding="utf-8") as out:
    for name, hyp, refs in cases:
        h, r = lines(hyp), [lines(x) for x in refs]
        b, c = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
        bs, cs = b.corpus_score(h, r), c.corpus_score(h, r)
        out.write(json.dumps({"name": name, "hyp": hyp, "refs": refs, "bleu": bs.score, "counts": bs.counts,
            "totals": bs.totals, "precisions": bs.precisions, "bp": bs.bp, "sys_len": bs.sys_len, "ref_len": bs.ref_len,
            "bleu_signature": str(b.get_signature()), "chrf": cs.score, "chrf_signature": str(c.get_signature())}) + "\n")
print(f"wrote {len(cases)} cases to {d}/expected.jsonl")
PY
echo "done: S2S_SHARED=$dir cargo test --release --workspace"
