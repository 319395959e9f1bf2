//! Corpus BLEU (Papineni et al., 2002) exactly as sacreBLEU 2.x computes it
//! (`sacrebleu/metrics/bleu.py`).
//!
//! Per segment: optionally lowercase (`str.lower()`), strip trailing whitespace
//! (`str.rstrip()`), tokenise, split on whitespace, count 1..=4-grams. Hypothesis
//! n-gram counts are clipped by the maximum count of that n-gram in any one reference;
//! the effective reference length is the reference length closest to the hypothesis
//! length (ties go to the shorter). The statistics are summed over the corpus and
//! turned into a score with the chosen smoothing.

use std::fmt;
use std::ops::{Add, AddAssign};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::VERSION;
use crate::error::EvalError;
use crate::ngram::{Interner, NgramTrie, par_chunks};
use crate::tokenize::{Tokenizer, py_rstrip};

/// The highest n-gram order BLEU counts (sacreBLEU's `MAX_NGRAM_ORDER`).
pub const MAX_NGRAM_ORDER: usize = 4;

/// BLEU smoothing (Chen & Cherry, 2014), as sacreBLEU's `--smooth-method`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "method", content = "value")]
pub enum Smoothing {
    /// `none`: no smoothing; a zero precision makes BLEU 0.
    None,
    /// `floor`: a zero count is replaced by the given value (sacreBLEU's default 0.1).
    Floor(f64),
    /// `add-k`: the given value is added to counts and totals for n > 1 (default 1).
    AddK(f64),
    /// `exp`: NIST geometric sequence smoothing (mteval-v13a); sacreBLEU's default.
    #[default]
    Exp,
}

impl Smoothing {
    /// `floor` with sacreBLEU's default value 0.1.
    pub const FLOOR_DEFAULT: Smoothing = Smoothing::Floor(0.1);
    /// `add-k` with sacreBLEU's default value 1.
    pub const ADD_K_DEFAULT: Smoothing = Smoothing::AddK(1.0);

    /// The signature form: `exp`, `none`, `floor[0.10]`, `add-k[1.00]`.
    pub fn signature(self) -> String {
        match self {
            Smoothing::None => "none".to_owned(),
            Smoothing::Exp => "exp".to_owned(),
            Smoothing::Floor(v) => format!("floor[{v:.2}]"),
            Smoothing::AddK(v) => format!("add-k[{v:.2}]"),
        }
    }
}

impl fmt::Display for Smoothing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.signature())
    }
}

impl FromStr for Smoothing {
    type Err = EvalError;

    /// Parses `none`, `exp`, `floor`, `add-k` (default values) or `floor:0.2`, `add-k:0.5`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, value) = match s.split_once(':') {
            Some((n, v)) => {
                let v: f64 = v
                    .parse()
                    .map_err(|_| EvalError::InvalidOption(format!("bad smoothing value in {s:?}")))?;
                (n, Some(v))
            }
            None => (s, None),
        };
        match (name, value) {
            ("none", None) => Ok(Smoothing::None),
            ("exp", None) => Ok(Smoothing::Exp),
            ("floor", v) => Ok(Smoothing::Floor(v.unwrap_or(0.1))),
            ("add-k", v) => Ok(Smoothing::AddK(v.unwrap_or(1.0))),
            _ => Err(EvalError::InvalidOption(format!(
                "unknown smoothing {s:?} (expected none, exp, floor[:V] or add-k[:V])"
            ))),
        }
    }
}

/// BLEU options; the default is sacreBLEU's default (13a, mixed case, `exp`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BleuConfig {
    /// The tokeniser (`tok:` in the signature).
    pub tokenize: Tokenizer,
    /// Lowercase hypotheses and references first (`case:lc`).
    pub lowercase: bool,
    /// The smoothing method (`smooth:`).
    pub smoothing: Smoothing,
    /// Stop at the highest n-gram order with a non-zero total (`eff:yes`); meant for
    /// sentence-level BLEU.
    pub effective_order: bool,
}

/// Sufficient statistics of BLEU for one segment or, summed, for a corpus.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BleuStats {
    /// Hypothesis length in tokens.
    pub sys_len: u64,
    /// Effective reference length in tokens.
    pub ref_len: u64,
    /// Clipped n-gram matches, orders 1..=4.
    pub counts: [u64; MAX_NGRAM_ORDER],
    /// Hypothesis n-grams, orders 1..=4.
    pub totals: [u64; MAX_NGRAM_ORDER],
}

impl AddAssign<&BleuStats> for BleuStats {
    fn add_assign(&mut self, o: &BleuStats) {
        self.sys_len += o.sys_len;
        self.ref_len += o.ref_len;
        for n in 0..MAX_NGRAM_ORDER {
            self.counts[n] += o.counts[n];
            self.totals[n] += o.totals[n];
        }
    }
}

impl Add for BleuStats {
    type Output = BleuStats;

    fn add(mut self, o: BleuStats) -> BleuStats {
        self += &o;
        self
    }
}

impl<'a> std::iter::Sum<&'a BleuStats> for BleuStats {
    fn sum<I: Iterator<Item = &'a BleuStats>>(iter: I) -> BleuStats {
        iter.fold(BleuStats::default(), |mut acc, s| {
            acc += s;
            acc
        })
    }
}

/// A BLEU score with the same fields as sacreBLEU's `BLEUScore`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BleuScore {
    /// BLEU in 0..=100.
    pub score: f64,
    /// Clipped n-gram matches, orders 1..=4 (before any add-k smoothing; sacreBLEU
    /// reports the add-k-incremented values here).
    pub counts: [u64; MAX_NGRAM_ORDER],
    /// Hypothesis n-grams, orders 1..=4 (before any add-k smoothing).
    pub totals: [u64; MAX_NGRAM_ORDER],
    /// Smoothed n-gram precisions in percent.
    pub precisions: [f64; MAX_NGRAM_ORDER],
    /// Brevity penalty.
    pub bp: f64,
    /// `sys_len / ref_len`, 0 when `ref_len` is 0.
    pub ratio: f64,
    /// Hypothesis length in tokens.
    pub sys_len: u64,
    /// Effective reference length in tokens.
    pub ref_len: u64,
    /// The sacreBLEU-style signature, e.g.
    /// `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0+s2s-0.1.0`.
    pub signature: String,
}

impl BleuScore {
    /// sacreBLEU's verbose part:
    /// `66.9/44.1/31.6/23.3 (BP = 1.000 ratio = 1.005 hyp_len = 39114 ref_len = 38914)`.
    pub fn verbose(&self) -> String {
        let prec: Vec<String> = self.precisions.iter().map(|p| format!("{p:.1}")).collect();
        format!(
            "{} (BP = {:.3} ratio = {:.3} hyp_len = {} ref_len = {})",
            prec.join("/"),
            self.bp,
            self.ratio,
            self.sys_len,
            self.ref_len
        )
    }
}

/// sacreBLEU's `my_log`: `log(0)` is floored to -9999999999.
fn my_log(x: f64) -> f64 {
    if x == 0.0 { -9_999_999_999.0 } else { x.ln() }
}

impl BleuConfig {
    /// The signature for `nrefs` reference streams, e.g.
    /// `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0+s2s-0.1.0`.
    pub fn signature(&self, nrefs: usize) -> String {
        format!(
            "nrefs:{nrefs}|case:{}|eff:{}|tok:{}|smooth:{}|version:{VERSION}",
            if self.lowercase { "lc" } else { "mixed" },
            if self.effective_order { "yes" } else { "no" },
            self.tokenize.name(),
            self.smoothing.signature(),
        )
    }

    /// Turns (summed) statistics into a score: sacreBLEU's `BLEU.compute_bleu`.
    pub fn score_stats(&self, stats: &BleuStats, nrefs: usize) -> BleuScore {
        let BleuStats { sys_len, ref_len, counts, totals } = *stats;
        let (score, precisions, bp) = self.compute(stats);
        let ratio = if ref_len > 0 { sys_len as f64 / ref_len as f64 } else { 0.0 };
        BleuScore {
            score,
            counts,
            totals,
            precisions,
            bp,
            ratio,
            sys_len,
            ref_len,
            signature: self.signature(nrefs),
        }
    }

    /// The score alone (no signature), for resampling.
    pub(crate) fn score_value(&self, stats: &BleuStats) -> f64 {
        self.compute(stats).0
    }

    /// (score, precisions, brevity penalty) of summed statistics.
    fn compute(&self, stats: &BleuStats) -> (f64, [f64; MAX_NGRAM_ORDER], f64) {
        let BleuStats { sys_len, ref_len, counts, totals } = *stats;
        let mut bp = 1.0;
        if sys_len < ref_len {
            bp = if sys_len > 0 { (1.0 - ref_len as f64 / sys_len as f64).exp() } else { 0.0 };
        }
        let mut precisions = [0.0; MAX_NGRAM_ORDER];

        // Early stop if there are no matches at all (sacreBLEU #141).
        if counts.iter().all(|&c| c == 0) {
            return (0.0, precisions, bp);
        }

        let mut correct = counts.map(|c| c as f64);
        let mut total = totals.map(|t| t as f64);
        let mut smooth_mteval = 1.0;
        let mut eff_order = MAX_NGRAM_ORDER;
        for n in 0..MAX_NGRAM_ORDER {
            if let Smoothing::AddK(k) = self.smoothing
                && n > 0
            {
                correct[n] += k;
                total[n] += k;
            }
            if total[n] == 0.0 {
                break;
            }
            if self.effective_order {
                eff_order = n + 1;
            }
            if correct[n] == 0.0 {
                match self.smoothing {
                    Smoothing::Exp => {
                        smooth_mteval *= 2.0;
                        precisions[n] = 100.0 / (smooth_mteval * total[n]);
                    }
                    Smoothing::Floor(v) => precisions[n] = 100.0 * v / total[n],
                    Smoothing::None | Smoothing::AddK(_) => {}
                }
            } else {
                precisions[n] = 100.0 * correct[n] / total[n];
            }
        }

        let log_sum = precisions[..eff_order].iter().fold(0.0, |acc, &p| acc + my_log(p));
        let score = bp * (log_sum / eff_order as f64).exp();
        (score, precisions, bp)
    }

    /// Per-segment statistics, one entry per hypothesis.
    ///
    /// `refs` holds one stream per reference, each as long as `hyps`. An empty
    /// reference string counts as a reference of length 0, as in sacreBLEU.
    pub fn segment_stats<H, R, S>(&self, hyps: &[H], refs: &[R]) -> Result<Vec<BleuStats>, EvalError>
    where
        H: AsRef<str> + Sync,
        R: AsRef<[S]> + Sync,
        S: AsRef<str> + Sync,
    {
        par_segments(hyps, refs, |w: &mut BleuWorker, hyp, refs| w.segment(self, hyp, refs))
    }

    /// Corpus BLEU of `hyps` against the reference streams `refs`
    /// (sacreBLEU's `BLEU(...).corpus_score(hyps, refs)`).
    pub fn corpus_score<H, R, S>(&self, hyps: &[H], refs: &[R]) -> Result<BleuScore, EvalError>
    where
        H: AsRef<str> + Sync,
        R: AsRef<[S]> + Sync,
        S: AsRef<str> + Sync,
    {
        let stats: BleuStats = self.segment_stats(hyps, refs)?.iter().sum();
        Ok(self.score_stats(&stats, refs.len()))
    }

    /// BLEU of one sentence against its references (sacreBLEU's `sentence_score`;
    /// as there, set `effective_order` for meaningful sentence-level scores).
    pub fn sentence_score<S: AsRef<str>>(&self, hyp: &str, refs: &[S]) -> Result<BleuScore, EvalError> {
        if refs.is_empty() {
            return Err(EvalError::NoReferences);
        }
        let refs: Vec<&str> = refs.iter().map(|r| r.as_ref()).collect();
        let stats = BleuWorker::default().segment(self, hyp, &refs);
        Ok(self.score_stats(&stats, refs.len()))
    }
}

/// Corpus BLEU with sacreBLEU's defaults (13a, mixed case, `exp` smoothing).
pub fn corpus_bleu<H, R, S>(hyps: &[H], refs: &[R]) -> Result<BleuScore, EvalError>
where
    H: AsRef<str> + Sync,
    R: AsRef<[S]> + Sync,
    S: AsRef<str> + Sync,
{
    BleuConfig::default().corpus_score(hyps, refs)
}

/// Checks the reference streams, then computes `segment(worker, hypothesis, references)` for
/// every segment (its line of each stream) on all threads — one `W` per chunk of segments —
/// in input order. BLEU and chrF both collect their per-segment statistics this way.
pub(crate) fn par_segments<H, R, S, W, T>(
    hyps: &[H],
    refs: &[R],
    segment: impl Fn(&mut W, &str, &[&str]) -> T + Sync,
) -> Result<Vec<T>, EvalError>
where
    H: AsRef<str> + Sync,
    R: AsRef<[S]> + Sync,
    S: AsRef<str> + Sync,
    W: Default,
    T: Send,
{
    check_streams(hyps.len(), refs)?;
    Ok(par_chunks(hyps.len(), |range| {
        let mut w = W::default();
        let mut ref_lines: Vec<&str> = Vec::with_capacity(refs.len());
        range
            .map(|i| {
                ref_lines.clear();
                ref_lines.extend(refs.iter().map(|r| r.as_ref()[i].as_ref()));
                segment(&mut w, hyps[i].as_ref(), &ref_lines)
            })
            .collect()
    }))
}

/// Checks there is at least one reference stream and that each is as long as the hypotheses.
pub(crate) fn check_streams<R: AsRef<[S]>, S>(hyps: usize, refs: &[R]) -> Result<(), EvalError> {
    if refs.is_empty() {
        return Err(EvalError::NoReferences);
    }
    for (index, r) in refs.iter().enumerate() {
        let len = r.as_ref().len();
        if len != hyps {
            return Err(EvalError::StreamLengthMismatch { hyps, index, refs: len });
        }
    }
    Ok(())
}

/// Reusable per-thread state for computing segment statistics.
#[derive(Default)]
struct BleuWorker {
    interner: Interner,
    trie: NgramTrie,
    hyp: Vec<u32>,
    refs: Vec<Vec<u32>>,
}

impl BleuWorker {
    /// Tokenises `line` (lowercase, rstrip, tokenise, split) and calls `f` on each token.
    fn tokens(cfg: &BleuConfig, line: &str, f: impl FnMut(&[u8])) {
        let lowered;
        let line = if cfg.lowercase {
            lowered = line.to_lowercase();
            lowered.as_str()
        } else {
            line
        };
        cfg.tokenize.for_each_token(py_rstrip(line), f);
    }

    /// sacreBLEU's `_extract_reference_info` + `_compute_segment_statistics`.
    fn segment(&mut self, cfg: &BleuConfig, hyp: &str, refs: &[&str]) -> BleuStats {
        let BleuWorker { interner, trie, hyp: hyp_ids, refs: ref_ids } = self;
        interner.reset();
        if ref_ids.len() < refs.len() {
            ref_ids.resize_with(refs.len(), Vec::new);
        }
        let mut expected = 0;
        for (line, ids) in refs.iter().zip(ref_ids.iter_mut()) {
            ids.clear();
            Self::tokens(cfg, line, |t| ids.push(interner.id(t)));
            expected += ids.len() * MAX_NGRAM_ORDER;
        }
        // Hypothesis tokens absent from all references get `UNKNOWN`, which never matches.
        hyp_ids.clear();
        Self::tokens(cfg, hyp, |t| hyp_ids.push(interner.get(t)));

        trie.reset(expected);
        for (r, ids) in ref_ids[..refs.len()].iter().enumerate() {
            trie.insert_all_max(ids, MAX_NGRAM_ORDER, r as u32);
        }

        let hyp_len = hyp_ids.len() as u64;
        // Closest reference length; ties go to the shorter reference.
        let mut closest: Option<(u64, u64)> = None; // (diff, len)
        for ids in &ref_ids[..refs.len()] {
            let len = ids.len() as u64;
            let diff = hyp_len.abs_diff(len);
            closest = match closest {
                Some((d, l)) if d < diff || (d == diff && l <= len) => Some((d, l)),
                _ => Some((diff, len)),
            };
        }

        let mut stats =
            BleuStats { sys_len: hyp_len, ref_len: closest.map_or(0, |(_, l)| l), ..BleuStats::default() };
        for (n, total) in stats.totals.iter_mut().enumerate() {
            *total = hyp_len.saturating_sub(n as u64);
        }
        trie.match_all(hyp_ids, MAX_NGRAM_ORDER, |n| stats.counts[n] += 1);
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    // python -c "from sacrebleu.metrics import BLEU; s=BLEU().corpus_score(['a', 'x y'], [['a b', 'x y z w'], ['', 'x y']]); print(s, s.ref_len)"
    // -> BLEU = 0.00 100.0/100.0/0.0/0.0 (BP = 1.000 ratio = 1.500 hyp_len = 3 ref_len = 2) 2
    #[test]
    fn multi_reference_closest_length_and_empty_reference() {
        let hyps = ["a", "x y"];
        let refs = [vec!["a b", "x y z w"], vec!["", "x y"]];
        let s = corpus_bleu(&hyps, &refs).unwrap();
        assert_eq!(s.sys_len, 3);
        assert_eq!(s.ref_len, 2);
        assert_eq!(s.counts, [3, 1, 0, 0]);
        assert_eq!(s.totals, [3, 1, 0, 0]);
        assert_eq!(s.score, 0.0);
        assert!(s.signature.starts_with("nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:"));
        assert_eq!(s.verbose(), "100.0/100.0/0.0/0.0 (BP = 1.000 ratio = 1.500 hyp_len = 3 ref_len = 2)");
    }

    // python -c "from sacrebleu.metrics import BLEU; s=BLEU().corpus_score(['the the the cat sat on a mat today'], [['the cat sat on the mat'], ['a cat sat on a mat today']]); print(repr(s.score), s.counts, s.totals, s.ref_len)"
    // -> 75.06238537503395 [8, 6, 5, 4] [9, 8, 7, 6] 7
    #[test]
    fn multi_reference_clipping_uses_max_count() {
        let hyps = ["the the the cat sat on a mat today"];
        let refs = [vec!["the cat sat on the mat"], vec!["a cat sat on a mat today"]];
        let s = corpus_bleu(&hyps, &refs).unwrap();
        assert_eq!(s.counts, [8, 6, 5, 4]);
        assert_eq!(s.totals, [9, 8, 7, 6]);
        assert_eq!(s.ref_len, 7);
        assert!(close(s.score, 75.06238537503395), "{}", s.score);
    }

    // python -c "from sacrebleu.metrics import BLEU; s=BLEU(lowercase=True).corpus_score(['The CAT sat .'], [['the cat SAT.']]); print(repr(s.score), s.counts)"
    // -> 100.00000000000004 [4, 3, 2, 1]   (and [1, 0, 0, 0] without lowercase=True)
    #[test]
    fn lowercase() {
        let cfg = BleuConfig { lowercase: true, ..BleuConfig::default() };
        let s = cfg.corpus_score(&["The CAT sat ."], &[vec!["the cat SAT."]]).unwrap();
        assert_eq!(s.counts, [4, 3, 2, 1]);
        assert!(close(s.score, 100.00000000000004));
        assert!(s.signature.starts_with("nrefs:1|case:lc|"));
        let mixed = corpus_bleu(&["The CAT sat ."], &[vec!["the cat SAT."]]).unwrap();
        assert_eq!(mixed.counts, [1, 0, 0, 0]);
    }

    #[test]
    fn empty_corpus_scores_zero() {
        let hyps: [&str; 0] = [];
        let refs: [Vec<&str>; 1] = [vec![]];
        let s = corpus_bleu(&hyps, &refs).unwrap();
        assert_eq!(s.score, 0.0);
        assert_eq!(s.bp, 1.0);
        assert_eq!(s.ratio, 0.0);
        assert_eq!(s.verbose(), "0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 0.000 hyp_len = 0 ref_len = 0)");
        // python -c "from sacrebleu.metrics import BLEU; print(BLEU().corpus_score([''],[['']]))"
        // -> BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 0.000 hyp_len = 0 ref_len = 0)
        let s = corpus_bleu(&[""], &[vec![""]]).unwrap();
        assert_eq!((s.score, s.sys_len, s.ref_len), (0.0, 0, 0));
    }

    #[test]
    fn errors_instead_of_panics() {
        let refs: [Vec<&str>; 0] = [];
        assert!(matches!(corpus_bleu(&["a"], &refs), Err(EvalError::NoReferences)));
        assert!(matches!(
            corpus_bleu(&["a", "b"], &[vec!["a"]]),
            Err(EvalError::StreamLengthMismatch { hyps: 2, index: 0, refs: 1 })
        ));
    }

    // python -c "from sacrebleu.metrics import BLEU
    // for m in ['none','floor','add-k','exp']: b=BLEU(smooth_method=m); s=b.corpus_score(['a b c d e'], [['a b x d e']]); print(m, repr(s.score), s.precisions)"
    // none 0.0 [80.0, 50.0, 0.0, 0.0]
    // floor 16.06856837889303 [80.0, 50.0, 3.3333333333333335, 5.0]
    // add-k 44.72135954999579 [80.0, 60.0, 25.0, 33.333333333333336]
    // exp 30.213753973567677 [80.0, 50.0, 16.666666666666668, 12.5]
    #[test]
    fn smoothing_methods() {
        let hyps = ["a b c d e"];
        let refs = [vec!["a b x d e"]];
        let run =
            |smoothing| BleuConfig { smoothing, ..BleuConfig::default() }.corpus_score(&hyps, &refs).unwrap();
        let s = run(Smoothing::None);
        assert_eq!((s.score, s.precisions), (0.0, [80.0, 50.0, 0.0, 0.0]));
        assert!(s.signature.contains("|smooth:none|"));
        let s = run(Smoothing::FLOOR_DEFAULT);
        assert!(close(s.score, 16.06856837889303), "{}", s.score);
        assert_eq!(s.precisions, [80.0, 50.0, 3.3333333333333335, 5.0]);
        assert!(s.signature.contains("|smooth:floor[0.10]|"));
        let s = run(Smoothing::ADD_K_DEFAULT);
        assert!(close(s.score, 44.72135954999579), "{}", s.score);
        assert_eq!(s.precisions, [80.0, 60.0, 25.0, 33.333333333333336]);
        assert_eq!(s.counts, [4, 2, 0, 0], "counts are reported before add-k");
        assert!(s.signature.contains("|smooth:add-k[1.00]|"));
        let s = run(Smoothing::Exp);
        assert!(close(s.score, 30.213753973567677), "{}", s.score);
        assert_eq!(s.precisions, [80.0, 50.0, 16.666666666666668, 12.5]);
    }

    // python -c "from sacrebleu.metrics import BLEU; b=BLEU(effective_order=True); s=b.sentence_score('a b c', ['a b c d']); print(repr(s.score), b.get_signature())"
    // -> 71.65313105737896 nrefs:1|case:mixed|eff:yes|tok:13a|smooth:exp|version:2.6.0
    #[test]
    fn sentence_level_effective_order() {
        let cfg = BleuConfig { effective_order: true, ..BleuConfig::default() };
        let s = cfg.sentence_score("a b c", &["a b c d"]).unwrap();
        assert!(close(s.score, 71.65313105737896), "{}", s.score);
        assert!(s.signature.starts_with("nrefs:1|case:mixed|eff:yes|tok:13a|smooth:exp|version:"));
    }

    #[test]
    fn smoothing_parse() {
        assert_eq!("exp".parse::<Smoothing>().unwrap(), Smoothing::Exp);
        assert_eq!("floor".parse::<Smoothing>().unwrap(), Smoothing::Floor(0.1));
        assert_eq!("add-k:0.5".parse::<Smoothing>().unwrap(), Smoothing::AddK(0.5));
        assert!("bogus".parse::<Smoothing>().is_err());
        assert!("none:1".parse::<Smoothing>().is_err());
    }
}
