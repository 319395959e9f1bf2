//! Corpus chrF (Popović, 2015) and chrF++ (Popović, 2017) exactly as sacreBLEU 2.x
//! computes them (`sacrebleu/metrics/chrf.py`).
//!
//! Per segment: optionally lowercase; unless `whitespace` is set, drop all whitespace
//! (`''.join(line.split())`); count character n-grams of orders 1..=`char_order`
//! (code points, not bytes) and, for chrF++, word n-grams of orders 1..=`word_order`
//! over words with a leading or trailing ASCII punctuation mark split off. For each
//! order the statistics are `[hypothesis n-grams, reference n-grams, matches]`, where
//! hypothesis n-grams count as 0 when the reference has none of that order. With
//! several references the one with the best sentence-level F-score wins (first on
//! ties). Statistics are summed over the corpus; the score is the F-beta of the
//! precision and recall averaged over the orders that have both hypothesis and
//! reference n-grams (sacreBLEU's default "effective order" averaging, `eff:yes`), or
//! with `eps_smoothing` the average of per-order F-scores (`eff:no`).

use serde::{Deserialize, Serialize};

use crate::VERSION;
use crate::bleu::par_segments;
use crate::error::EvalError;
use crate::ngram::{Interner, NgramTrie};
use crate::tokenize::{ASCII_PY_WS, is_py_whitespace, py_split};

/// Highest supported character n-gram order (six 21-bit code points fill a `u128`).
pub const MAX_CHAR_ORDER: usize = 6;
/// Highest supported word n-gram order.
pub const MAX_WORD_ORDER: usize = 4;

/// chrF options; the default is sacreBLEU's chrF2 (char order 6, word order 0, beta 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChrfConfig {
    /// Character n-gram order, 0..=6 (`nc:`).
    pub char_order: usize,
    /// Word n-gram order, 0..=4 (`nw:`); 2 gives chrF++.
    pub word_order: usize,
    /// Weight of recall relative to precision.
    pub beta: u32,
    /// Lowercase hypotheses and references first (`case:lc`).
    pub lowercase: bool,
    /// Keep whitespace in character n-grams (`space:yes`).
    pub whitespace: bool,
    /// chrF++.py-style epsilon smoothing instead of effective-order averaging (`eff:no`).
    pub eps_smoothing: bool,
}

impl Default for ChrfConfig {
    fn default() -> Self {
        ChrfConfig {
            char_order: 6,
            word_order: 0,
            beta: 2,
            lowercase: false,
            whitespace: false,
            eps_smoothing: false,
        }
    }
}

/// Sufficient statistics of chrF for one segment or, summed, for a corpus.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChrfStats {
    /// `[hypothesis n-grams, reference n-grams, matches]` per order: character orders
    /// 1..=`char_order`, then word orders 1..=`word_order`.
    pub orders: Vec<[u64; 3]>,
}

impl ChrfStats {
    /// Adds `other` order by order (extending with zeros if `other` has more orders).
    pub fn add(&mut self, other: &ChrfStats) {
        if self.orders.len() < other.orders.len() {
            self.orders.resize(other.orders.len(), [0; 3]);
        }
        for (a, b) in self.orders.iter_mut().zip(&other.orders) {
            for k in 0..3 {
                a[k] += b[k];
            }
        }
    }
}

/// A chrF score, like sacreBLEU's `CHRFScore`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChrfScore {
    /// chrF in 0..=100.
    pub score: f64,
    /// `chrF{beta}` followed by one `+` per word order, e.g. `chrF2` or `chrF2++`.
    pub name: String,
    /// Character n-gram order.
    pub char_order: usize,
    /// Word n-gram order.
    pub word_order: usize,
    /// Recall weight.
    pub beta: u32,
    /// The sacreBLEU-style signature, e.g.
    /// `nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0+s2s-0.1.0`.
    pub signature: String,
}

/// ASCII punctuation (`string.punctuation`), for chrF++'s word splitting.
fn is_ascii_punct(c: char) -> bool {
    c.is_ascii_punctuation()
}

impl ChrfConfig {
    fn validate(&self) -> Result<(), EvalError> {
        if self.char_order > MAX_CHAR_ORDER {
            return Err(EvalError::InvalidOption(format!(
                "chrF character order {} is above {MAX_CHAR_ORDER}",
                self.char_order
            )));
        }
        if self.word_order > MAX_WORD_ORDER {
            return Err(EvalError::InvalidOption(format!(
                "chrF word order {} is above {MAX_WORD_ORDER}",
                self.word_order
            )));
        }
        if self.char_order + self.word_order == 0 {
            return Err(EvalError::InvalidOption("chrF needs a character or word order".into()));
        }
        Ok(())
    }

    /// The metric name: `chrF2`, `chrF2++`, ...
    pub fn name(&self) -> String {
        format!("chrF{}{}", self.beta, "+".repeat(self.word_order))
    }

    /// The signature for `nrefs` reference streams, e.g.
    /// `nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0+s2s-0.1.0`.
    pub fn signature(&self, nrefs: usize) -> String {
        format!(
            "nrefs:{nrefs}|case:{}|eff:{}|nc:{}|nw:{}|space:{}|version:{VERSION}",
            if self.lowercase { "lc" } else { "mixed" },
            if self.eps_smoothing { "no" } else { "yes" },
            self.char_order,
            self.word_order,
            if self.whitespace { "yes" } else { "no" },
        )
    }

    /// The F-score of (summed) statistics: sacreBLEU's `CHRF._compute_f_score`.
    pub fn f_score(&self, stats: &ChrfStats) -> f64 {
        self.f_score_orders(&stats.orders)
    }

    /// [`ChrfConfig::f_score`] of `[hyp, ref, match]` per order.
    pub(crate) fn f_score_orders(&self, orders: &[[u64; 3]]) -> f64 {
        const EPS: f64 = 1e-16;
        let factor = f64::from(self.beta) * f64::from(self.beta);
        let mut score = 0.0;
        let mut effective_order = 0u32;
        let (mut avg_prec, mut avg_rec) = (0.0, 0.0);
        for &[n_hyp, n_ref, n_match] in orders {
            let prec = if n_hyp > 0 { n_match as f64 / n_hyp as f64 } else { EPS };
            let rec = if n_ref > 0 { n_match as f64 / n_ref as f64 } else { EPS };
            let denom = factor * prec + rec;
            score += if denom > 0.0 { (1.0 + factor) * prec * rec / denom } else { EPS };
            if n_hyp > 0 && n_ref > 0 {
                avg_prec += prec;
                avg_rec += rec;
                effective_order += 1;
            }
        }
        if self.eps_smoothing {
            let order = (self.char_order + self.word_order) as f64;
            return 100.0 * score / order;
        }
        if effective_order == 0 {
            avg_prec = 0.0;
            avg_rec = 0.0;
        } else {
            avg_prec /= f64::from(effective_order);
            avg_rec /= f64::from(effective_order);
        }
        if avg_prec + avg_rec != 0.0 {
            let mut score = (1.0 + factor) * avg_prec * avg_rec;
            score /= (factor * avg_prec) + avg_rec;
            100.0 * score
        } else {
            0.0
        }
    }

    /// Turns (summed) statistics into a score.
    pub fn score_stats(&self, stats: &ChrfStats, nrefs: usize) -> ChrfScore {
        ChrfScore {
            score: self.f_score(stats),
            name: self.name(),
            char_order: self.char_order,
            word_order: self.word_order,
            beta: self.beta,
            signature: self.signature(nrefs),
        }
    }

    /// Per-segment statistics (of the best-matching reference), one per hypothesis.
    pub fn segment_stats<H, R, S>(&self, hyps: &[H], refs: &[R]) -> Result<Vec<ChrfStats>, EvalError>
    where
        H: AsRef<str> + Sync,
        R: AsRef<[S]> + Sync,
        S: AsRef<str> + Sync,
    {
        self.validate()?;
        par_segments(hyps, refs, |w: &mut ChrfWorker, hyp, refs| w.segment(self, hyp, refs))
    }

    /// Corpus chrF of `hyps` against the reference streams `refs`
    /// (sacreBLEU's `CHRF(...).corpus_score(hyps, refs)`).
    pub fn corpus_score<H, R, S>(&self, hyps: &[H], refs: &[R]) -> Result<ChrfScore, EvalError>
    where
        H: AsRef<str> + Sync,
        R: AsRef<[S]> + Sync,
        S: AsRef<str> + Sync,
    {
        let mut total = ChrfStats { orders: vec![[0; 3]; self.char_order + self.word_order] };
        for s in self.segment_stats(hyps, refs)? {
            total.add(&s);
        }
        Ok(self.score_stats(&total, refs.len()))
    }

    /// chrF of one sentence against its references (sacreBLEU's `sentence_score`).
    pub fn sentence_score<S: AsRef<str>>(&self, hyp: &str, refs: &[S]) -> Result<ChrfScore, EvalError> {
        self.validate()?;
        if refs.is_empty() {
            return Err(EvalError::NoReferences);
        }
        let refs: Vec<&str> = refs.iter().map(|r| r.as_ref()).collect();
        let stats = ChrfWorker::default().segment(self, hyp, &refs);
        Ok(self.score_stats(&stats, refs.len()))
    }
}

/// Corpus chrF2 with sacreBLEU's defaults.
pub fn corpus_chrf<H, R, S>(hyps: &[H], refs: &[R]) -> Result<ChrfScore, EvalError>
where
    H: AsRef<str> + Sync,
    R: AsRef<[S]> + Sync,
    S: AsRef<str> + Sync,
{
    ChrfConfig::default().corpus_score(hyps, refs)
}

/// A segment side, preprocessed: code points and (for chrF++) word ids.
#[derive(Default)]
struct Side {
    chars: Vec<u32>,
    words: Vec<u32>,
}

/// Reusable per-thread state.
#[derive(Default)]
struct ChrfWorker {
    interner: Interner,
    chars: NgramTrie,
    words: NgramTrie,
    hyp: Side,
    refs: Vec<Side>,
}

impl ChrfWorker {
    /// Extracts the code points and (for chrF++) the word ids of `line`. Words of a
    /// reference are interned; words of the hypothesis only looked up (`is_hyp`), so
    /// those absent from the references get `UNKNOWN`, which never matches.
    fn prepare(cfg: &ChrfConfig, line: &str, interner: &mut Interner, side: &mut Side, is_hyp: bool) {
        let lowered;
        let line = if cfg.lowercase {
            lowered = line.to_lowercase();
            lowered.as_str()
        } else {
            line
        };
        side.chars.clear();
        side.chars.reserve(line.len());
        if cfg.whitespace {
            side.chars.extend(line.chars().map(u32::from));
        } else {
            for c in line.chars() {
                let keep = match u8::try_from(c) {
                    Ok(b) if b < 0x80 => !ASCII_PY_WS[usize::from(b)],
                    _ => !is_py_whitespace(c),
                };
                if keep {
                    side.chars.push(u32::from(c));
                }
            }
        }
        side.words.clear();
        let mut id = |w: &str| if is_hyp { interner.get(w.as_bytes()) } else { interner.id(w.as_bytes()) };
        if cfg.word_order > 0 {
            // sacreBLEU's `_remove_punctuation`.
            for w in py_split(line) {
                let mut it = w.chars();
                let first = it.next();
                let last = it.next_back();
                match (first, last) {
                    (Some(_), None) => side.words.push(id(w)),
                    (Some(f), Some(l)) => {
                        if is_ascii_punct(l) {
                            let cut = w.len() - l.len_utf8();
                            side.words.push(id(&w[..cut]));
                            side.words.push(id(&w[cut..]));
                        } else if is_ascii_punct(f) {
                            let cut = f.len_utf8();
                            side.words.push(id(&w[..cut]));
                            side.words.push(id(&w[cut..]));
                        } else {
                            side.words.push(id(w));
                        }
                    }
                    (None, _) => {}
                }
            }
        }
    }

    /// sacreBLEU's `CHRF._compute_segment_statistics`.
    fn segment(&mut self, cfg: &ChrfConfig, hyp: &str, refs: &[&str]) -> ChrfStats {
        let ChrfWorker { interner, chars, words, hyp: hyp_side, refs: ref_sides } = self;
        interner.reset();
        if ref_sides.len() < refs.len() {
            ref_sides.resize_with(refs.len(), Side::default);
        }
        for (line, side) in refs.iter().zip(ref_sides.iter_mut()) {
            Self::prepare(cfg, line, interner, side, false);
        }
        Self::prepare(cfg, hyp, interner, hyp_side, true);

        let (nc, nw) = (cfg.char_order, cfg.word_order);
        let mut best: Option<(f64, ChrfStats)> = None;
        for side in &ref_sides[..refs.len()] {
            let mut orders = vec![[0u64; 3]; nc + nw];
            Self::match_units(&side.chars, &hyp_side.chars, nc, chars, &mut orders[..nc]);
            Self::match_units(&side.words, &hyp_side.words, nw, words, &mut orders[nc..]);
            let stats = ChrfStats { orders };
            let f = cfg.f_score(&stats);
            if best.as_ref().is_none_or(|(bf, _)| f > *bf) {
                best = Some((f, stats));
            }
        }
        best.map_or_else(ChrfStats::default, |(_, s)| s)
    }

    /// Fills `[hyp, ref, match]` for orders 1..=`max_order` of one unit type.
    fn match_units(
        reference: &[u32],
        hyp: &[u32],
        max_order: usize,
        trie: &mut NgramTrie,
        out: &mut [[u64; 3]],
    ) {
        if max_order == 0 {
            return;
        }
        trie.reset(reference.len() * max_order);
        trie.insert_all(reference, max_order);
        trie.match_all(hyp, max_order, |n| out[n][2] += 1);
        for (n, o) in out.iter_mut().enumerate() {
            let ref_ngrams = (reference.len() as u64).saturating_sub(n as u64);
            o[1] = ref_ngrams;
            // Hypothesis n-grams do not count when the reference has none of this order.
            o[0] = if ref_ngrams == 0 { 0 } else { (hyp.len() as u64).saturating_sub(n as u64) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    // python -c "from sacrebleu.metrics import CHRF; print(repr(CHRF().corpus_score(['the cat sat on the mat', 'Hello'], [['the cat sat on a mat', 'hello'], ['a cat is on the mat', 'Hello!']]).score))"
    // -> 71.41946888960595
    #[test]
    fn multi_reference_picks_best_per_sentence() {
        let hyps = ["the cat sat on the mat", "Hello"];
        let refs = [vec!["the cat sat on a mat", "hello"], vec!["a cat is on the mat", "Hello!"]];
        let s = corpus_chrf(&hyps, &refs).unwrap();
        assert!(close(s.score, 71.41946888960595), "{}", s.score);
        assert_eq!(s.name, "chrF2");
        assert!(s.signature.starts_with("nrefs:2|case:mixed|eff:yes|nc:6|nw:0|space:no|version:"));
    }

    // python -c "from sacrebleu.metrics import CHRF; print(repr(CHRF(lowercase=True).corpus_score(['The CAT sat'], [['the cat SAT']]).score))"
    // -> 100.0 (17.361111111111107 without lowercase=True)
    #[test]
    fn lowercase() {
        let cfg = ChrfConfig { lowercase: true, ..ChrfConfig::default() };
        let s = cfg.corpus_score(&["The CAT sat"], &[vec!["the cat SAT"]]).unwrap();
        assert!(close(s.score, 100.0));
        assert!(s.signature.starts_with("nrefs:1|case:lc|"));
        let mixed = corpus_chrf(&["The CAT sat"], &[vec!["the cat SAT"]]).unwrap();
        assert!(close(mixed.score, 17.361111111111107), "{}", mixed.score);
    }

    // python -c "from sacrebleu.metrics import CHRF; c=CHRF(word_order=2); print(repr(c.corpus_score(['the cat, sat (on) the mat.', 'x'], [['the cat sat on the mat!', 'x y']]).score), c.get_signature())"
    // -> 48.345734548103145 nrefs:1|case:mixed|eff:yes|nc:6|nw:2|space:no|version:2.6.0
    #[test]
    fn chrf_plus_plus() {
        let cfg = ChrfConfig { word_order: 2, ..ChrfConfig::default() };
        let s = cfg
            .corpus_score(&["the cat, sat (on) the mat.", "x"], &[vec!["the cat sat on the mat!", "x y"]])
            .unwrap();
        assert!(close(s.score, 48.345734548103145), "{}", s.score);
        assert_eq!(s.name, "chrF2++");
        assert!(s.signature.contains("|nc:6|nw:2|"));
    }

    // python -c "from sacrebleu.metrics import CHRF; c=CHRF(whitespace=True, eps_smoothing=True); print(repr(c.corpus_score(['a bc d'], [['a b cd']]).score), c.get_signature())"
    // -> 27.5 nrefs:1|case:mixed|eff:no|nc:6|nw:0|space:yes|version:2.6.0
    #[test]
    fn whitespace_and_eps_smoothing() {
        let cfg = ChrfConfig { whitespace: true, eps_smoothing: true, ..ChrfConfig::default() };
        let s = cfg.corpus_score(&["a bc d"], &[vec!["a b cd"]]).unwrap();
        assert!(close(s.score, 27.5), "{}", s.score);
        assert!(s.signature.contains("|eff:no|nc:6|nw:0|space:yes|"));
    }

    #[test]
    fn empty_corpus_and_empty_lines() {
        let hyps: [&str; 0] = [];
        let refs: [Vec<&str>; 1] = [vec![]];
        assert_eq!(corpus_chrf(&hyps, &refs).unwrap().score, 0.0);
        // python -c "from sacrebleu.metrics import CHRF; print(CHRF().corpus_score([''],[['']]), CHRF().corpus_score(['a'],[['']]))"
        // -> chrF2 = 0.00 chrF2 = 0.00
        assert_eq!(corpus_chrf(&[""], &[vec![""]]).unwrap().score, 0.0);
        assert_eq!(corpus_chrf(&["a"], &[vec![""]]).unwrap().score, 0.0);
    }

    #[test]
    fn invalid_orders_are_errors() {
        let cfg = ChrfConfig { char_order: 7, ..ChrfConfig::default() };
        assert!(matches!(cfg.corpus_score(&["a"], &[vec!["a"]]), Err(EvalError::InvalidOption(_))));
        let cfg = ChrfConfig { char_order: 0, word_order: 0, ..ChrfConfig::default() };
        assert!(cfg.sentence_score("a", &["a"]).is_err());
    }
}
