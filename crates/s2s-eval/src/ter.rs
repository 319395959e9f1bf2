//! TER, translation edit rate (Snover et al., 2006), exactly as sacreBLEU 2.x computes it
//! (`sacrebleu/metrics/ter.py`, `lib_ter.py`, `tokenizers/tokenizer_ter.py`).
//!
//! Per segment: strip trailing whitespace, apply the Tercom tokeniser (lowercase unless
//! case-sensitive; optional normalisation, punctuation removal and Asian-script support),
//! split on whitespace. Against each reference, the number of edits is the number of
//! block shifts found by a greedy search plus the edit distance of the shifted hypothesis;
//! the segment keeps the fewest edits over the references and the average reference
//! length. The corpus score is `100 * edits / reference length`.
//!
//! The shift search is sacreBLEU's, heuristics and limits included: blocks of at most 10
//! words moved at most 50 positions, candidates ranked by edit-distance gain, then length,
//! then earliest start, then earliest target, and at most 1000 candidates per segment
//! (once reached, the search stops without applying the last shift found). The edit
//! distance is its beam search around the length-scaled diagonal (beam 25), with its
//! preference among operations, so the alignments and therefore the shifts are the same.
//! sacreBLEU's cache of edit-distance rows only saves time (a row depends only on the
//! hypothesis prefix, and every hypothesis of one segment has the same length), so this
//! implementation reuses rows differently and gets the same numbers.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::VERSION;
use crate::bleu::par_segments;
use crate::error::EvalError;
use crate::tokenize::{py_rstrip, py_split};

/// TER options; the default is sacreBLEU's (and Tercom's): case-insensitive, no
/// normalisation, punctuation kept, no Asian support.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TerConfig {
    /// Normalise: XML entities, punctuation tokenisation, possessives (`norm:yes`).
    pub normalized: bool,
    /// Remove punctuation `.,?:;!"()` (`punct:no`).
    pub no_punct: bool,
    /// With `normalized`, split CJK characters; with `no_punct`, also remove CJK and
    /// full-width punctuation (`asian:yes`).
    pub asian_support: bool,
    /// Do not lowercase (`case:mixed`).
    pub case_sensitive: bool,
}

/// Sufficient statistics of TER for one segment or, summed, for a corpus.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TerStats {
    /// Edits (shifts plus edit distance) against the closest reference.
    pub num_edits: u64,
    /// Average reference length in words (summed over the corpus).
    pub ref_length: f64,
}

/// A TER score, like sacreBLEU's `TERScore`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TerScore {
    /// TER in percent (can exceed 100).
    pub score: f64,
    /// Total edits.
    pub num_edits: u64,
    /// Total of the average reference lengths.
    pub ref_length: f64,
    /// The sacreBLEU-style signature, e.g.
    /// `nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:2.6.0+s2s-0.1.0`.
    pub signature: String,
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

impl TerConfig {
    /// The signature for `nrefs` reference streams, e.g.
    /// `nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:2.6.0+s2s-0.1.0`.
    pub fn signature(&self, nrefs: usize) -> String {
        format!(
            "nrefs:{nrefs}|case:{}|tok:tercom|norm:{}|punct:{}|asian:{}|version:{VERSION}",
            if self.case_sensitive { "mixed" } else { "lc" },
            yes_no(self.normalized),
            yes_no(!self.no_punct),
            yes_no(self.asian_support),
        )
    }

    /// sacreBLEU's `TercomTokenizer` (applied after `rstrip()`): the words of `line`
    /// joined by single spaces.
    pub fn tokenize(&self, line: &str) -> String {
        tercom_tokenize(self, line)
    }

    /// The score of (summed) statistics: sacreBLEU's `TER._compute_score_from_stats`.
    pub fn score_value(stats: &TerStats) -> f64 {
        let ratio = if stats.ref_length > 0.0 {
            stats.num_edits as f64 / stats.ref_length
        } else if stats.num_edits > 0 {
            1.0
        } else {
            0.0
        };
        100.0 * ratio
    }

    /// Turns (summed) statistics into a score.
    pub fn score_stats(&self, stats: &TerStats, nrefs: usize) -> TerScore {
        TerScore {
            score: Self::score_value(stats),
            num_edits: stats.num_edits,
            ref_length: stats.ref_length,
            signature: self.signature(nrefs),
        }
    }

    /// Per-segment statistics, one per hypothesis.
    pub fn segment_stats<H, R, S>(&self, hyps: &[H], refs: &[R]) -> Result<Vec<TerStats>, EvalError>
    where
        H: AsRef<str> + Sync,
        R: AsRef<[S]> + Sync,
        S: AsRef<str> + Sync,
    {
        par_segments(hyps, refs, |w: &mut TerWorker, hyp, refs| w.segment(self, hyp, refs))
    }

    /// Sums segment statistics as sacreBLEU does (edits as integers, reference lengths
    /// as floats in order).
    pub fn sum_stats(stats: &[TerStats]) -> TerStats {
        let mut total = TerStats::default();
        for s in stats {
            total.num_edits += s.num_edits;
            total.ref_length += s.ref_length;
        }
        total
    }

    /// Corpus TER of `hyps` against the reference streams `refs`
    /// (sacreBLEU's `TER(...).corpus_score(hyps, refs)`).
    pub fn corpus_score<H, R, S>(&self, hyps: &[H], refs: &[R]) -> Result<TerScore, EvalError>
    where
        H: AsRef<str> + Sync,
        R: AsRef<[S]> + Sync,
        S: AsRef<str> + Sync,
    {
        let stats = self.segment_stats(hyps, refs)?;
        Ok(self.score_stats(&Self::sum_stats(&stats), refs.len()))
    }

    /// TER of one sentence against its references (sacreBLEU's `sentence_score`).
    pub fn sentence_score<S: AsRef<str>>(&self, hyp: &str, refs: &[S]) -> Result<TerScore, EvalError> {
        if refs.is_empty() {
            return Err(EvalError::NoReferences);
        }
        let refs: Vec<&str> = refs.iter().map(|r| r.as_ref()).collect();
        let stats = TerWorker::default().segment(self, hyp, &refs);
        Ok(self.score_stats(&stats, refs.len()))
    }
}

/// Corpus TER with sacreBLEU's defaults.
pub fn corpus_ter<H, R, S>(hyps: &[H], refs: &[R]) -> Result<TerScore, EvalError>
where
    H: AsRef<str> + Sync,
    R: AsRef<[S]> + Sync,
    S: AsRef<str> + Sync,
{
    TerConfig::default().corpus_score(hyps, refs)
}

// ---------------------------------------------------------------------------------------
// Tokeniser

/// `[{-~[-` -&(-+:-@/]`: the characters `_normalize_general_and_western` pads with spaces.
fn is_western_punct(c: char) -> bool {
    matches!(c, '{'..='~' | '['..='`' | ' '..='&' | '('..='+' | ':'..='@' | '/')
}

fn is_cjk_ideograph(c: char) -> bool {
    matches!(c, '\u{4e00}'..='\u{9fff}' | '\u{3400}'..='\u{4dbf}')
}

fn is_cjk_stroke_or_radical(c: char) -> bool {
    matches!(c, '\u{31c0}'..='\u{31ef}' | '\u{2e80}'..='\u{2eff}')
}

fn is_cjk_compat(c: char) -> bool {
    matches!(c, '\u{3300}'..='\u{33ff}' | '\u{f900}'..='\u{faff}' | '\u{fe30}'..='\u{fe4f}')
}

/// sacreBLEU's range for "Enclosed CJK Letters and Months", `\u3200-\u3f22` as written.
fn is_cjk_enclosed(c: char) -> bool {
    matches!(c, '\u{3200}'..='\u{3f22}')
}

/// `TercomTokenizer.ASIAN_PUNCT`.
fn is_asian_punct(c: char) -> bool {
    matches!(c, '\u{3001}' | '\u{3002}' | '\u{3008}'..='\u{3011}' | '\u{3014}'..='\u{301f}' | '\u{ff61}'..='\u{ff65}' | '\u{30fb}')
}

/// `TercomTokenizer.FULL_WIDTH_PUNCT`.
fn is_full_width_punct(c: char) -> bool {
    matches!(
        c,
        '\u{ff0e}'
            | '\u{ff0c}'
            | '\u{ff1f}'
            | '\u{ff1a}'
            | '\u{ff1b}'
            | '\u{ff01}'
            | '\u{ff02}'
            | '\u{ff08}'
            | '\u{ff09}'
    )
}

/// `re.sub(r"([class])", r" \1 ", s)`.
fn pad_chars(s: &str, class: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if class(c) {
            out.push(' ');
            out.push(c);
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// `re.sub(r"([A])([B])", repl, s)` for single-character classes: leftmost,
/// non-overlapping matches of a pair of characters, replaced by `repl(a, b, out)`.
fn sub_pairs(
    s: &str,
    first: impl Fn(char) -> bool,
    second: impl Fn(char) -> bool,
    repl: impl Fn(char, char, &mut String),
) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len() + 8);
    let mut i = 0;
    while i < chars.len() {
        if i + 1 < chars.len() && first(chars[i]) && second(chars[i + 1]) {
            repl(chars[i], chars[i + 1], &mut out);
            i += 2;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// sacreBLEU's `_normalize_general_and_western`.
fn normalize_general_and_western(s: &str) -> String {
    let s = s.replace("\n-", "").replace('\n', " ");
    let s = s.replace("&quot;", "\"").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">");
    let s = pad_chars(&format!(" {s} "), is_western_punct);
    // Possessives: "'s " and a final "'s".
    let mut s = s.replace("'s ", " 's ");
    if let Some(stem) = s.strip_suffix("'s") {
        s = format!("{stem} 's");
    }
    let not_digit = |c: char| !c.is_ascii_digit();
    let period_comma = |c: char| c == '.' || c == ',';
    // Period and comma unless preceded by a digit, then unless followed by one.
    let s = sub_pairs(&s, not_digit, period_comma, |a, b, out| {
        out.push(a);
        out.push(' ');
        out.push(b);
        out.push(' ');
    });
    let s = sub_pairs(&s, period_comma, not_digit, |a, b, out| {
        out.push(' ');
        out.push(a);
        out.push(' ');
        out.push(b);
    });
    // Dash preceded by a digit.
    sub_pairs(
        &s,
        |c| c.is_ascii_digit(),
        |c| c == '-',
        |a, b, out| {
            out.push(a);
            out.push(' ');
            out.push(b);
            out.push(' ');
        },
    )
}

/// sacreBLEU's `_normalize_asian`.
fn normalize_asian(s: &str) -> String {
    let mut s = pad_chars(s, is_cjk_ideograph);
    s = pad_chars(&s, is_cjk_stroke_or_radical);
    s = pad_chars(&s, is_cjk_compat);
    s = pad_chars(&s, is_cjk_enclosed);
    // Hiragana, Katakana and Katakana Phonetic Extensions: sacreBLEU's patterns
    // `(^|^[X])([X]+)(?=$|^[X])` only match a string made entirely of such characters
    // (here the string always starts with a space, so they never do).
    for range in [('\u{3040}', '\u{309f}'), ('\u{30a0}', '\u{30ff}'), ('\u{31f0}', '\u{31ff}')] {
        if !s.is_empty() && s.chars().all(|c| (range.0..=range.1).contains(&c)) {
            s = format!(" {s} ");
        }
    }
    s = pad_chars(&s, is_asian_punct);
    pad_chars(&s, is_full_width_punct)
}

fn tercom_tokenize(cfg: &TerConfig, sent: &str) -> String {
    if sent.is_empty() {
        return String::new();
    }
    let mut s = if cfg.case_sensitive { sent.to_owned() } else { sent.to_lowercase() };
    if cfg.normalized {
        s = normalize_general_and_western(&s);
        if cfg.asian_support {
            s = normalize_asian(&s);
        }
    }
    if cfg.no_punct {
        s.retain(|c| !matches!(c, '.' | ',' | '?' | ':' | ';' | '!' | '"' | '(' | ')'));
        if cfg.asian_support {
            s.retain(|c| !is_asian_punct(c) && !is_full_width_punct(c));
        }
    }
    py_split(&s).collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------------------------------
// Edit distance and shifts (sacreBLEU's lib_ter.py)

const MAX_SHIFT_SIZE: usize = 10;
const MAX_SHIFT_DIST: usize = 50;
const BEAM_WIDTH: i64 = 25;
const MAX_SHIFT_CANDIDATES: usize = 1000;
const INF: i64 = 10_000_000_000_000_000;

const OP_NOP: u8 = b' ';
const OP_SUB: u8 = b's';
const OP_INS: u8 = b'i';
const OP_DEL: u8 = b'd';
const OP_UNDEF: u8 = b'x';

#[derive(Clone, Copy, Debug)]
struct Cell {
    cost: i64,
    op: u8,
}

const EMPTY: Cell = Cell { cost: INF, op: OP_UNDEF };

/// The beam edit distance against one reference, for hypotheses of one length.
struct BeamEditDistance<'a> {
    reference: &'a [u32],
    /// Row width: reference length + 1.
    width: usize,
    n_hyp: usize,
    ratio: f64,
    beam: i64,
    /// The full matrix of `base` (the hypothesis being shifted), for its trace.
    matrix: Vec<Cell>,
    base: Vec<u32>,
    /// Two rolling rows for candidates.
    prev: Vec<Cell>,
    cur: Vec<Cell>,
}

impl<'a> BeamEditDistance<'a> {
    fn new(reference: &'a [u32], n_hyp: usize) -> Self {
        let width = reference.len() + 1;
        let ratio = if n_hyp > 0 { reference.len() as f64 / n_hyp as f64 } else { 1.0 };
        let beam = if (BEAM_WIDTH as f64) < ratio / 2.0 {
            (ratio / 2.0 + BEAM_WIDTH as f64).ceil() as i64
        } else {
            BEAM_WIDTH
        };
        let mut matrix = vec![EMPTY; width * (n_hyp + 1)];
        for (j, c) in matrix[..width].iter_mut().enumerate() {
            *c = Cell { cost: j as i64, op: OP_INS };
        }
        BeamEditDistance {
            reference,
            width,
            n_hyp,
            ratio,
            beam,
            matrix,
            base: Vec::new(),
            prev: vec![EMPTY; width],
            cur: vec![EMPTY; width],
        }
    }

    /// The columns row `i` computes.
    fn columns(&self, i: usize) -> (usize, usize) {
        let diag = (i as f64 * self.ratio).floor() as i64;
        let min_j = (diag - self.beam).max(0) as usize;
        let mut max_j = (diag + self.beam).min(self.width as i64).max(0) as usize;
        if i == self.n_hyp {
            max_j = self.width;
        }
        (min_j, max_j)
    }

    /// Computes row `i` (hypothesis word `word`) into `cur` from `prev`.
    fn row(&self, i: usize, word: u32, prev: &[Cell], cur: &mut [Cell]) {
        cur.fill(EMPTY);
        let (min_j, max_j) = self.columns(i);
        for j in min_j..max_j {
            if j == 0 {
                cur[0] = Cell { cost: prev[0].cost + 1, op: OP_DEL };
                continue;
            }
            let (cost_sub, op_sub) = if word == self.reference[j - 1] { (0, OP_NOP) } else { (1, OP_SUB) };
            let mut best = cur[j];
            for (cost, op) in [
                (prev[j - 1].cost + cost_sub, op_sub),
                (prev[j].cost + 1, OP_DEL),
                (cur[j - 1].cost + 1, OP_INS),
            ] {
                if best.cost > cost {
                    best = Cell { cost, op };
                }
            }
            cur[j] = best;
        }
    }

    /// Sets the base hypothesis and computes its full matrix (reusing the rows of the
    /// previous base's common prefix). Returns its edit distance and its trace (sacreBLEU's
    /// operations, rewriting the hypothesis into the reference).
    fn set_base(&mut self, hyp: &[u32]) -> (i64, Vec<u8>) {
        let common = self.base.iter().zip(hyp).take_while(|(a, b)| a == b).count();
        self.base.clear();
        self.base.extend_from_slice(hyp);
        let w = self.width;
        let mut matrix = std::mem::take(&mut self.matrix);
        for i in common + 1..=self.n_hyp {
            let (done, rest) = matrix.split_at_mut(i * w);
            self.row(i, hyp[i - 1], &done[(i - 1) * w..], &mut rest[..w]);
        }
        self.matrix = matrix;

        let mut trace = Vec::new();
        let (mut i, mut j) = (self.n_hyp, self.width - 1);
        while i > 0 || j > 0 {
            let op = self.matrix[i * w + j].op;
            trace.push(op);
            match op {
                OP_SUB | OP_NOP => {
                    i -= 1;
                    j -= 1;
                }
                OP_INS => j -= 1,
                // OP_DEL; an undefined cell cannot be on the path (see `row`), but stop
                // rather than loop if it were.
                OP_DEL if i > 0 => i -= 1,
                _ => break,
            }
        }
        trace.reverse();
        (self.matrix[self.n_hyp * w + w - 1].cost, trace)
    }

    /// The edit distance of `hyp`, which shares its first `common` words with the base.
    fn distance(&mut self, hyp: &[u32], common: usize) -> i64 {
        let w = self.width;
        if common >= self.n_hyp {
            return self.matrix[self.n_hyp * w + w - 1].cost;
        }
        let mut prev = std::mem::take(&mut self.prev);
        let mut cur = std::mem::take(&mut self.cur);
        prev.copy_from_slice(&self.matrix[common * w..(common + 1) * w]);
        for i in common + 1..=self.n_hyp {
            self.row(i, hyp[i - 1], &prev, &mut cur);
            std::mem::swap(&mut prev, &mut cur);
        }
        let d = prev[w - 1].cost;
        self.prev = prev;
        self.cur = cur;
        d
    }
}

/// sacreBLEU's `_perform_shift`.
fn perform_shift(words: &[u32], start: usize, length: usize, target: usize, out: &mut Vec<u32>) {
    out.clear();
    let n = words.len();
    let s = |a: usize, b: usize| &words[a.min(n)..b.min(n).max(a.min(n))];
    if target < start {
        out.extend_from_slice(s(0, target));
        out.extend_from_slice(s(start, start + length));
        out.extend_from_slice(s(target, start));
        out.extend_from_slice(s(start + length, n));
    } else if target > start + length {
        out.extend_from_slice(s(0, start));
        out.extend_from_slice(s(start + length, target));
        out.extend_from_slice(s(start, start + length));
        out.extend_from_slice(s(target, n));
    } else {
        out.extend_from_slice(s(0, start));
        out.extend_from_slice(s(start + length, length + target));
        out.extend_from_slice(s(start, start + length));
        out.extend_from_slice(s(length + target, n));
    }
}

/// How sacreBLEU ranks a shift: (edit-distance gain, length, -start, -target).
type ShiftRank = (i64, usize, i64, i64);

/// sacreBLEU's `_shift`: the best shift of `hyp` (`(gain, shifted)`, or gain 0 and no
/// shift), counting evaluated candidates in `checked`.
fn best_shift(
    hyp: &[u32],
    reference: &[u32],
    ed: &mut BeamEditDistance<'_>,
    checked: &mut usize,
) -> (i64, Option<Vec<u32>>) {
    let (pre_score, trace) = ed.set_base(hyp);
    // Alignment of the flipped trace (rewriting the reference into the hypothesis).
    let (n_h, n_r) = (hyp.len(), reference.len());
    let mut align = vec![-1i64; n_r];
    let mut hyp_err = Vec::with_capacity(n_h);
    let mut ref_err = Vec::with_capacity(n_r);
    let (mut pos_h, mut pos_r) = (-1i64, -1i64);
    for &op in &trace {
        match op {
            OP_NOP | OP_SUB => {
                pos_h += 1;
                pos_r += 1;
                if let Some(a) = align.get_mut(pos_r as usize) {
                    *a = pos_h;
                }
                let e = u32::from(op == OP_SUB);
                hyp_err.push(e);
                ref_err.push(e);
            }
            // A deletion from the hypothesis is an insertion when flipped.
            OP_DEL => {
                pos_h += 1;
                hyp_err.push(1);
            }
            _ => {
                pos_r += 1;
                if let Some(a) = align.get_mut(pos_r as usize) {
                    *a = pos_h;
                }
                ref_err.push(1);
            }
        }
    }
    let sum = |v: &[u32], a: usize, b: usize| -> u32 { v[a.min(v.len())..b.min(v.len())].iter().sum() };

    // (gain, length, -start, -target) ranks candidates; the first best is kept.
    let mut best: Option<(ShiftRank, Vec<u32>)> = None;
    let mut shifted = Vec::with_capacity(n_h);
    'pairs: for start_h in 0..n_h {
        for start_r in 0..n_r {
            if start_r.abs_diff(start_h) > MAX_SHIFT_DIST {
                continue;
            }
            let mut length = 0;
            while length < MAX_SHIFT_SIZE && hyp[start_h + length] == reference[start_r + length] {
                length += 1;
                // The pair (start_h, start_r, length).
                let skip = sum(&hyp_err, start_h, start_h + length) == 0
                    || sum(&ref_err, start_r, start_r + length) == 0
                    || (start_h as i64 <= align[start_r] && align[start_r] < (start_h + length) as i64);
                if !skip {
                    let mut prev_idx = -1i64;
                    for offset in -1..length as i64 {
                        let r = start_r as i64 + offset;
                        let idx = if r == -1 {
                            0
                        } else if (r as usize) < n_r {
                            align[r as usize] + 1
                        } else {
                            break;
                        };
                        if idx == prev_idx {
                            continue;
                        }
                        prev_idx = idx;
                        let target = idx as usize;
                        perform_shift(hyp, start_h, length, target, &mut shifted);
                        let common = start_h.min(target);
                        let gain = pre_score - ed.distance(&shifted, common);
                        let key = (gain, length, -(start_h as i64), -idx);
                        *checked += 1;
                        if best.as_ref().is_none_or(|(k, _)| key > *k) {
                            best = Some((key, shifted.clone()));
                        }
                    }
                    if *checked >= MAX_SHIFT_CANDIDATES {
                        break 'pairs;
                    }
                }
                if n_h == start_h + length || n_r == start_r + length {
                    break;
                }
            }
        }
    }
    match best {
        Some(((gain, ..), words)) => (gain, Some(words)),
        None => (0, None),
    }
}

/// sacreBLEU's `translation_edit_rate`: (edits, reference length).
fn translation_edit_rate(hyp: &[u32], reference: &[u32]) -> (u64, usize) {
    if reference.is_empty() {
        return (hyp.len() as u64, 0);
    }
    let mut ed = BeamEditDistance::new(reference, hyp.len());
    let mut shifts = 0u64;
    let mut words = hyp.to_vec();
    let mut checked = 0;
    loop {
        let (gain, shifted) = best_shift(&words, reference, &mut ed, &mut checked);
        if checked >= MAX_SHIFT_CANDIDATES || gain <= 0 {
            break;
        }
        match shifted {
            Some(s) => words = s,
            None => break,
        }
        shifts += 1;
    }
    let (distance, _) = ed.set_base(&words);
    (shifts + distance.max(0) as u64, reference.len())
}

/// Reusable per-thread state.
#[derive(Default)]
struct TerWorker {
    ids: HashMap<String, u32>,
}

impl TerWorker {
    fn words(&mut self, cfg: &TerConfig, line: &str) -> Vec<u32> {
        let tokens = tercom_tokenize(cfg, py_rstrip(line));
        py_split(&tokens)
            .map(|w| {
                let next = self.ids.len() as u32;
                *self.ids.entry(w.to_owned()).or_insert(next)
            })
            .collect()
    }

    /// sacreBLEU's `TER._compute_segment_statistics`.
    fn segment(&mut self, cfg: &TerConfig, hyp: &str, refs: &[&str]) -> TerStats {
        self.ids.clear();
        let hyp_words = self.words(cfg, hyp);
        let mut best = u64::MAX;
        let mut ref_lengths = 0usize;
        for r in refs {
            let ref_words = self.words(cfg, r);
            let (edits, len) = translation_edit_rate(&hyp_words, &ref_words);
            ref_lengths += len;
            best = best.min(edits);
        }
        let ref_length = if refs.is_empty() { 0.0 } else { ref_lengths as f64 / refs.len() as f64 };
        TerStats { num_edits: if refs.is_empty() { 0 } else { best }, ref_length }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(s: &str) -> Vec<u32> {
        s.bytes().map(u32::from).collect()
    }

    // from sacrebleu.metrics.lib_ter import _perform_shift as p
    // for s, l, t in [(3,2,0), (1,2,6), (1,3,2), (2,3,4), (4,3,5), (0,7,3)]: print(''.join(p(list('abcdefg'), s, l, t)))
    #[test]
    fn shifts_move_blocks_like_sacrebleu() {
        let cases = [
            (3, 2, 0, "deabcfg"),
            (1, 2, 6, "adefbcg"),
            (1, 3, 2, "aebcdfg"),
            (2, 3, 4, "abfgcde"),
            (4, 3, 5, "abcdefg"),
            (0, 7, 3, "abcdefg"),
        ];
        let mut out = Vec::new();
        for (start, length, target, want) in cases {
            perform_shift(&ids("abcdefg"), start, length, target, &mut out);
            assert_eq!(out, ids(want), "shift({start}, {length}, {target})");
        }
    }

    // from sacrebleu.metrics.lib_ter import translation_edit_rate as t; t(h.split(), r.split())
    #[test]
    fn edit_rate_with_shifts_and_empty_sides() {
        let words =
            |s: &str| -> Vec<u32> { s.split_whitespace().map(|w| u32::from(w.as_bytes()[0])).collect() };
        let cases = [
            ("a b c d", "c d a b", (1, 4)),
            ("t c s o t m", "o t m t c s", (1, 6)),
            ("a", "b c d e", (4, 4)),
            ("", "a b", (2, 2)),
            ("x y", "", (2, 0)),
        ];
        for (h, r, want) in cases {
            assert_eq!(translation_edit_rate(&words(h), &words(r)), want, "{h:?} vs {r:?}");
        }
    }

    // TER(normalized=True).tokenizer("Hello, World! It's John's 3.5-4 &amp; co."), and with
    // no_punct=True, asian_support=True: TER(...).tokenizer("北京。“好”！")
    #[test]
    fn tokenizer_examples() {
        let norm = TerConfig { normalized: true, ..TerConfig::default() };
        assert_eq!(
            norm.tokenize("Hello, World! It's John's 3.5-4 &amp; co."),
            "hello , world ! it 's john 's 3.5 - 4 & co ."
        );
        let asian = TerConfig { no_punct: true, asian_support: true, ..TerConfig::default() };
        assert_eq!(asian.tokenize("北京。“好”！"), "北京“好”");
        assert_eq!(TerConfig::default().tokenize("  A  b "), "a b");
    }
}
