//! Paired significance tests exactly as sacreBLEU 2.6 runs them
//! (`sacrebleu/significance.py`, with numpy 2): paired bootstrap resampling and paired
//! approximate randomization of a baseline (the first system) against each other system,
//! for BLEU, chrF and TER.
//!
//! Both tests work on per-sentence sufficient statistics; a resampled corpus score is the
//! metric computed from the summed statistics of the drawn sentences.
//!
//! - **Bootstrap** (`bs`, 1000 resamples by default): `numpy.random.default_rng(seed)`
//!   draws `choice(n, size=(n_samples, n))` sentence indices, the same for the baseline and
//!   every system (seed fixed). For each system, the mean and 95% confidence interval
//!   (half the distance between the 2.5% and 97.5% order statistics, `n // 40` from each
//!   end) of its resampled scores, and the p-value `(c + 1) / (n_samples + 1)`, where `c`
//!   counts resamples whose centred absolute difference to the baseline,
//!   `|sys - base| - mean(|sys - base|)`, exceeds the actual absolute difference.
//! - **Approximate randomization** (`ar`, 10000 trials by default):
//!   `rng.integers(2, size=(n_trials, n), dtype=bool)` picks, per trial and sentence,
//!   whether the two systems swap that sentence's statistics; the p-value counts trials
//!   whose absolute score difference of the two pseudo-systems exceeds the actual one.
//!   No confidence interval (as sacreBLEU's command line).
//!
//! sacreBLEU resamples statistics stored as `float32` and, under numpy 2's promotion rules
//! (NEP 50), computes much of the resampled scores in single precision: BLEU's n-gram
//! precisions, chrF's precisions, recalls and F-score, TER's ratio; chrF and TER resampled
//! scores are then `float32` arrays whose means (numpy's pairwise summation) and
//! comparisons are single precision too. This module reproduces that arithmetic step by
//! step, so means, intervals and p-values are the same numbers sacreBLEU prints, not
//! merely close ones. (numpy 1.x promotes differently and its numbers differ slightly.)
//! The approximate randomization works on integer statistics and double precision, as
//! sacreBLEU does.
//!
//! Differences from sacreBLEU:
//! - With a multi-reference TER, averaged reference lengths are fractional; approximate
//!   randomization sums them in sentence order, where numpy's matrix product may sum in
//!   another order (last-bit differences of pseudo-scores, which could only matter for
//!   exact ties with the actual difference).
//! - sacreBLEU treats the seed 0 as "no seed" for the systems (but not for the baseline's
//!   interval); here 0 is a seed like any other.
//! - `Seed::Entropy` (sacreBLEU's `SACREBLEU_SEED=none`) draws fresh randomness, so its
//!   numbers are not reproducible, there as here.

use std::fmt;
use std::str::FromStr;

use crate::bleu::{BleuConfig, BleuStats, MAX_NGRAM_ORDER, Smoothing};
use crate::chrf::{ChrfConfig, MAX_CHAR_ORDER, MAX_WORD_ORDER};
use crate::error::EvalError;
use crate::nprng::Generator;
use crate::ter::{TerConfig, TerStats};

/// sacreBLEU's default seed (`SACREBLEU_SEED` unset).
pub const DEFAULT_SEED: u128 = 12345;

/// The most random draws (resamples or trials times segments) one test may make: beyond
/// sacreBLEU's defaults on a million segments, far below what would not finish.
pub const MAX_DRAWS: usize = 1 << 40;

/// Which paired test to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PairedTest {
    /// Paired bootstrap resampling (`--paired-bs`).
    Bootstrap,
    /// Paired approximate randomization (`--paired-ar`).
    ApproximateRandomization,
}

impl PairedTest {
    /// The signature key: `bs` or `ar`.
    pub fn key(self) -> &'static str {
        match self {
            PairedTest::Bootstrap => "bs",
            PairedTest::ApproximateRandomization => "ar",
        }
    }

    /// sacreBLEU's default number of resamples (1000) or trials (10000).
    pub fn default_samples(self) -> usize {
        match self {
            PairedTest::Bootstrap => 1000,
            PairedTest::ApproximateRandomization => 10000,
        }
    }
}

/// The random seed of the tests (sacreBLEU's `SACREBLEU_SEED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Seed {
    /// `numpy.random.default_rng(seed)`: reproducible draws.
    Fixed(u128),
    /// `SACREBLEU_SEED=none`: fresh randomness on every run.
    Entropy,
}

impl Default for Seed {
    fn default() -> Self {
        Seed::Fixed(DEFAULT_SEED)
    }
}

impl fmt::Display for Seed {
    /// As in signatures: `12345` or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seed::Fixed(s) => write!(f, "{s}"),
            Seed::Entropy => f.write_str("none"),
        }
    }
}

impl FromStr for Seed {
    type Err = EvalError;

    /// A non-negative integer, or `none` (any case) for fresh randomness.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("none") {
            return Ok(Seed::Entropy);
        }
        let t = t.strip_prefix('+').unwrap_or(t);
        t.replace('_', "").parse::<u128>().map(Seed::Fixed).map_err(|_| {
            EvalError::InvalidOption(format!("invalid seed {s:?} (expected a non-negative integer or none)"))
        })
    }
}

impl Seed {
    /// The seed sacreBLEU would use: `SACREBLEU_SEED` if set, else 12345.
    pub fn from_env() -> Result<Seed, EvalError> {
        match std::env::var("SACREBLEU_SEED") {
            Ok(v) => v.parse(),
            Err(std::env::VarError::NotPresent) => Ok(Seed::default()),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(EvalError::InvalidOption("SACREBLEU_SEED is not valid Unicode".into()))
            }
        }
    }

    /// A fresh `numpy.random.default_rng` for this seed.
    pub fn generator(self) -> Generator {
        match self {
            Seed::Fixed(s) => Generator::default_rng(s),
            Seed::Entropy => Generator::from_entropy(),
        }
    }
}

/// A metric with its options, for multi-system scoring and paired tests.
#[derive(Clone, Debug, PartialEq)]
pub enum MetricConfig {
    /// BLEU.
    Bleu(BleuConfig),
    /// chrF / chrF++.
    Chrf(ChrfConfig),
    /// TER.
    Ter(TerConfig),
}

impl MetricConfig {
    /// The score's name, as sacreBLEU's table heads its column: `BLEU`, `chrF2`, `TER`.
    pub fn name(&self) -> String {
        match self {
            MetricConfig::Bleu(_) => "BLEU".into(),
            MetricConfig::Chrf(c) => c.name(),
            MetricConfig::Ter(_) => "TER".into(),
        }
    }

    /// The metric's signature for `nrefs` references.
    pub fn signature(&self, nrefs: usize) -> String {
        match self {
            MetricConfig::Bleu(c) => c.signature(nrefs),
            MetricConfig::Chrf(c) => c.signature(nrefs),
            MetricConfig::Ter(c) => c.signature(nrefs),
        }
    }

    /// The corpus score of `hyps`.
    pub fn corpus_score<H, R, S>(&self, hyps: &[H], refs: &[R]) -> Result<f64, EvalError>
    where
        H: AsRef<str> + Sync,
        R: AsRef<[S]> + Sync,
        S: AsRef<str> + Sync,
    {
        let stats = self.stats(hyps, refs)?;
        Ok(self.exact_score(&stats.sum()))
    }

    /// Per-sentence statistics in sacreBLEU's layout, one row per sentence: BLEU
    /// `[sys_len, ref_len, matches 1..4, totals 1..4]`, chrF `[hyp, ref, match]` per
    /// order, TER `[edits, average reference length]`.
    fn stats<H, R, S>(&self, hyps: &[H], refs: &[R]) -> Result<StatsMatrix, EvalError>
    where
        H: AsRef<str> + Sync,
        R: AsRef<[S]> + Sync,
        S: AsRef<str> + Sync,
    {
        let (cols, rows): (usize, Vec<f64>) = match self {
            MetricConfig::Bleu(c) => {
                let rows = c
                    .segment_stats(hyps, refs)?
                    .iter()
                    .flat_map(|s| {
                        let mut r = vec![s.sys_len as f64, s.ref_len as f64];
                        r.extend(s.counts.iter().map(|&x| x as f64));
                        r.extend(s.totals.iter().map(|&x| x as f64));
                        r
                    })
                    .collect();
                (2 + 2 * MAX_NGRAM_ORDER, rows)
            }
            MetricConfig::Chrf(c) => {
                let k = 3 * (c.char_order + c.word_order);
                let mut rows = Vec::with_capacity(hyps.len() * k);
                for s in c.segment_stats(hyps, refs)? {
                    let start = rows.len();
                    rows.extend(s.orders.iter().flat_map(|o| o.map(|x| x as f64)));
                    rows.resize(start + k, 0.0);
                }
                (k, rows)
            }
            MetricConfig::Ter(c) => {
                let rows = c
                    .segment_stats(hyps, refs)?
                    .iter()
                    .flat_map(|s| [s.num_edits as f64, s.ref_length])
                    .collect();
                (2, rows)
            }
        };
        Ok(StatsMatrix { cols, rows })
    }

    /// The score of summed statistics, as sacreBLEU computes it from Python integers
    /// (or from numpy's `int64` sums in approximate randomization).
    fn exact_score(&self, sums: &[f64]) -> f64 {
        match self {
            MetricConfig::Bleu(c) => c.score_value(&bleu_stats(sums)),
            MetricConfig::Chrf(c) => {
                let mut orders = [[0u64; 3]; MAX_CHAR_ORDER + MAX_WORD_ORDER];
                let k = (sums.len() / 3).min(orders.len());
                for (o, s) in orders.iter_mut().zip(sums.chunks_exact(3)) {
                    *o = [s[0] as u64, s[1] as u64, s[2] as u64];
                }
                c.f_score_orders(&orders[..k])
            }
            MetricConfig::Ter(_) => {
                TerConfig::score_value(&TerStats { num_edits: sums[0] as u64, ref_length: sums[1] })
            }
        }
    }

    /// The approximate randomization's score of a trial: numpy `int64` sums, where
    /// add-k smoothing's in-place addition truncates a fractional k.
    fn ar_score(&self, sums: &[f64]) -> f64 {
        match self {
            MetricConfig::Bleu(c @ BleuConfig { smoothing: Smoothing::AddK(k), .. }) => {
                let c = BleuConfig { smoothing: Smoothing::AddK(k.trunc()), ..*c };
                c.score_value(&bleu_stats(sums))
            }
            _ => self.exact_score(sums),
        }
    }

    /// The bootstrap's score of `float32` sums, with numpy 2's arithmetic.
    fn bootstrap_score(&self, sums: &[f32]) -> Num {
        match self {
            MetricConfig::Bleu(c) => Num::Py(bleu_f32(c, sums)),
            MetricConfig::Chrf(c) => chrf_f32(c, sums),
            MetricConfig::Ter(_) => {
                let (edits, ref_len) = (Num::F32(sums[0]), Num::F32(sums[1]));
                let score = if ref_len.is_positive() {
                    edits / ref_len
                } else if edits.is_positive() {
                    Num::Py(1.0)
                } else {
                    Num::Py(0.0)
                };
                Num::Py(100.0) * score
            }
        }
    }
}

fn bleu_stats(s: &[f64]) -> BleuStats {
    let mut st = BleuStats { sys_len: s[0] as u64, ref_len: s[1] as u64, ..BleuStats::default() };
    for n in 0..MAX_NGRAM_ORDER {
        st.counts[n] = s[2 + n] as u64;
        st.totals[n] = s[2 + MAX_NGRAM_ORDER + n] as u64;
    }
    st
}

/// Per-sentence statistics, `cols` values per sentence.
struct StatsMatrix {
    cols: usize,
    rows: Vec<f64>,
}

impl StatsMatrix {
    fn len(&self) -> usize {
        self.rows.len().checked_div(self.cols).unwrap_or(0)
    }

    fn row(&self, i: usize) -> &[f64] {
        &self.rows[i * self.cols..(i + 1) * self.cols]
    }

    /// Python's `sum_of_lists`: column sums in sentence order.
    fn sum(&self) -> Vec<f64> {
        let mut total = vec![0.0; self.cols];
        for i in 0..self.len() {
            for (t, v) in total.iter_mut().zip(self.row(i)) {
                *t += v;
            }
        }
        total
    }

    /// `np.array(stats, dtype='float32')`.
    fn to_f32(&self) -> Vec<f32> {
        self.rows.iter().map(|&v| v as f32).collect()
    }
}

// ---------------------------------------------------------------------------------------
// numpy 2 scalar arithmetic

/// A value as sacreBLEU's resampling code holds it: a Python float (or int) or a numpy
/// `float32` scalar. Under NEP 50 a Python number is "weak": combined with a `float32`
/// it is first rounded to `float32` and the operation is done in single precision.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Num {
    Py(f64),
    F32(f32),
}

impl Num {
    fn value(self) -> f64 {
        match self {
            Num::Py(x) => x,
            Num::F32(x) => f64::from(x),
        }
    }

    fn is_positive(self) -> bool {
        self.value() > 0.0
    }

    fn op(self, o: Num, f: impl Fn(f64, f64) -> f64, g: impl Fn(f32, f32) -> f32) -> Num {
        match (self, o) {
            (Num::Py(a), Num::Py(b)) => Num::Py(f(a, b)),
            (Num::F32(a), Num::F32(b)) => Num::F32(g(a, b)),
            (Num::F32(a), Num::Py(b)) => Num::F32(g(a, b as f32)),
            (Num::Py(a), Num::F32(b)) => Num::F32(g(a as f32, b)),
        }
    }
}

impl std::ops::Add for Num {
    type Output = Num;
    fn add(self, o: Num) -> Num {
        self.op(o, |a, b| a + b, |a, b| a + b)
    }
}

impl std::ops::Mul for Num {
    type Output = Num;
    fn mul(self, o: Num) -> Num {
        self.op(o, |a, b| a * b, |a, b| a * b)
    }
}

impl std::ops::Div for Num {
    type Output = Num;
    fn div(self, o: Num) -> Num {
        self.op(o, |a, b| a / b, |a, b| a / b)
    }
}

/// sacreBLEU's `my_log`.
fn my_log(x: f64) -> f64 {
    if x == 0.0 { -9_999_999_999.0 } else { x.ln() }
}

/// `BLEU.compute_bleu` on `float32` sums: lengths as integers, precisions in single
/// precision, logarithms and the rest in double precision.
fn bleu_f32(cfg: &BleuConfig, s: &[f32]) -> f64 {
    let (sys_len, ref_len) = (s[0] as u64, s[1] as u64);
    let mut bp = 1.0;
    if sys_len < ref_len {
        bp = if sys_len > 0 { (1.0 - ref_len as f64 / sys_len as f64).exp() } else { 0.0 };
    }
    let mut correct = [0f32; MAX_NGRAM_ORDER];
    let mut total = [0f32; MAX_NGRAM_ORDER];
    correct.copy_from_slice(&s[2..2 + MAX_NGRAM_ORDER]);
    total.copy_from_slice(&s[2 + MAX_NGRAM_ORDER..2 + 2 * MAX_NGRAM_ORDER]);
    if correct.iter().all(|&c| c == 0.0) {
        return 0.0;
    }
    let mut precisions = [0.0f64; MAX_NGRAM_ORDER];
    let mut smooth_mteval = 1.0f64;
    let mut eff_order = MAX_NGRAM_ORDER;
    for n in 0..MAX_NGRAM_ORDER {
        if let Smoothing::AddK(k) = cfg.smoothing
            && n > 0
        {
            correct[n] += k as f32;
            total[n] += k as f32;
        }
        if total[n] == 0.0 {
            break;
        }
        if cfg.effective_order {
            eff_order = n + 1;
        }
        if correct[n] == 0.0 {
            match cfg.smoothing {
                Smoothing::Exp => {
                    smooth_mteval *= 2.0;
                    precisions[n] = f64::from(100.0f32 / (smooth_mteval as f32 * total[n]));
                }
                Smoothing::Floor(v) => precisions[n] = f64::from((100.0 * v) as f32 / total[n]),
                Smoothing::None | Smoothing::AddK(_) => {}
            }
        } else {
            precisions[n] = f64::from(100.0f32 * correct[n] / total[n]);
        }
    }
    let log_sum = precisions[..eff_order].iter().fold(0.0, |acc, &p| acc + my_log(p));
    bp * (log_sum / eff_order as f64).exp()
}

/// `CHRF._compute_f_score` on `float32` sums.
fn chrf_f32(cfg: &ChrfConfig, s: &[f32]) -> Num {
    let eps = Num::Py(1e-16);
    let factor = Num::Py(f64::from(cfg.beta) * f64::from(cfg.beta));
    let one_plus = Num::Py(1.0 + f64::from(cfg.beta) * f64::from(cfg.beta));
    let mut score = Num::Py(0.0);
    let mut effective_order = 0u32;
    let (mut avg_prec, mut avg_rec) = (Num::Py(0.0), Num::Py(0.0));
    for o in s.chunks_exact(3) {
        let (n_hyp, n_ref, n_match) = (o[0], o[1], o[2]);
        let prec = if n_hyp > 0.0 { Num::F32(n_match / n_hyp) } else { eps };
        let rec = if n_ref > 0.0 { Num::F32(n_match / n_ref) } else { eps };
        let denom = factor * prec + rec;
        score = score + if denom.is_positive() { one_plus * prec * rec / denom } else { eps };
        if n_hyp > 0.0 && n_ref > 0.0 {
            avg_prec = avg_prec + prec;
            avg_rec = avg_rec + rec;
            effective_order += 1;
        }
    }
    if cfg.eps_smoothing {
        return Num::Py(100.0) * score / Num::Py((cfg.char_order + cfg.word_order) as f64);
    }
    if effective_order == 0 {
        avg_prec = Num::Py(0.0);
        avg_rec = Num::Py(0.0);
    } else {
        avg_prec = avg_prec / Num::Py(f64::from(effective_order));
        avg_rec = avg_rec / Num::Py(f64::from(effective_order));
    }
    if (avg_prec + avg_rec).value() != 0.0 {
        let mut score = one_plus * avg_prec * avg_rec;
        score = score / (factor * avg_prec + avg_rec);
        Num::Py(100.0) * score
    } else {
        Num::Py(0.0)
    }
}

// ---------------------------------------------------------------------------------------
// numpy arrays of scores

/// An array of resampled scores: `np.array([...])` is `float32` when every score is a
/// `float32` scalar, else `float64`.
#[derive(Clone, Debug)]
enum Scores {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Scores {
    fn from_nums(nums: &[Num]) -> Scores {
        let f32s: Option<Vec<f32>> =
            nums.iter().map(|n| if let Num::F32(x) = n { Some(*x) } else { None }).collect();
        match f32s {
            Some(v) => Scores::F32(v),
            None => Scores::F64(nums.iter().map(|n| n.value()).collect()),
        }
    }

    fn as_f64(&self) -> Vec<f64> {
        match self {
            Scores::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Scores::F64(v) => v.clone(),
        }
    }
}

/// numpy's pairwise summation (`pairwise_sum_DOUBLE` / `_FLOAT`): blocks of 8 partial sums
/// up to 128 elements, halves (at a multiple of 8) above.
macro_rules! pairwise_sum {
    ($name:ident, $t:ty) => {
        fn $name(a: &[$t]) -> $t {
            let n = a.len();
            if n < 8 {
                let mut res: $t = 0.0;
                for &x in a {
                    res += x;
                }
                res
            } else if n <= 128 {
                let mut r = [0.0 as $t; 8];
                r.copy_from_slice(&a[..8]);
                let mut i = 8;
                while i < n - n % 8 {
                    for j in 0..8 {
                        r[j] += a[i + j];
                    }
                    i += 8;
                }
                let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
                while i < n {
                    res += a[i];
                    i += 1;
                }
                res
            } else {
                let mut n2 = n / 2;
                n2 -= n2 % 8;
                $name(&a[..n2]) + $name(&a[n2..])
            }
        }
    };
}

pairwise_sum!(pairwise_sum_f64, f64);
pairwise_sum!(pairwise_sum_f32, f32);

/// `ndarray.mean()` of a non-empty array.
fn mean_f64(a: &[f64]) -> f64 {
    (0.0 + pairwise_sum_f64(a)) / a.len() as f64
}

fn mean_f32(a: &[f32]) -> f32 {
    (0.0 + pairwise_sum_f32(a)) / a.len() as f32
}

/// sacreBLEU's `estimate_ci`: (mean, half-width of the 95% interval), in the array's
/// precision.
fn estimate_ci(scores: &Scores) -> (f64, f64) {
    fn bounds(n: usize) -> (usize, usize) {
        let lower = n / 40;
        (lower, n - lower - 1)
    }
    match scores {
        Scores::F32(v) => {
            let mut v = v.clone();
            v.sort_by(f32::total_cmp);
            let (lo, hi) = bounds(v.len());
            (f64::from(mean_f32(&v)), f64::from(0.5f32 * (v[hi] - v[lo])))
        }
        Scores::F64(v) => {
            let mut v = v.clone();
            v.sort_by(f64::total_cmp);
            let (lo, hi) = bounds(v.len());
            (mean_f64(&v), 0.5 * (v[hi] - v[lo]))
        }
    }
}

/// sacreBLEU's `_compute_p_value` of the bootstrap: the centred absolute differences
/// `|sys - base| - mean(|sys - base|)` compared with `real` in the arrays' precision.
fn bootstrap_p_value(sys: &Scores, base: &Scores, real: f64) -> f64 {
    let count = match (sys, base) {
        (Scores::F32(s), Scores::F32(b)) => {
            let d: Vec<f32> = s.iter().zip(b).map(|(x, y)| (x - y).abs()).collect();
            let m = mean_f32(&d);
            let real = real as f32;
            d.iter().filter(|&&x| x - m > real).count()
        }
        _ => {
            let (s, b) = (sys.as_f64(), base.as_f64());
            let d: Vec<f64> = s.iter().zip(&b).map(|(x, y)| (x - y).abs()).collect();
            let m = mean_f64(&d);
            d.iter().filter(|&&x| x - m > real).count()
        }
    };
    let n = match sys {
        Scores::F32(v) => v.len(),
        Scores::F64(v) => v.len(),
    };
    (count + 1) as f64 / (n + 1) as f64
}

// ---------------------------------------------------------------------------------------
// The tests

/// One system's result for one metric (sacreBLEU's `Result`).
#[derive(Clone, Debug, PartialEq)]
pub struct PairedResult {
    /// The actual corpus score.
    pub score: f64,
    /// The p-value against the baseline (`None` for the baseline).
    pub p_value: Option<f64>,
    /// The bootstrap estimate of the true mean (bootstrap only).
    pub mean: Option<f64>,
    /// Half-width of the 95% confidence interval around `mean` (bootstrap only).
    pub ci: Option<f64>,
}

/// One metric's results for all systems, baseline first.
#[derive(Clone, Debug, PartialEq)]
pub struct PairedColumn {
    /// The score's name: `BLEU`, `chrF2`, `TER`, ...
    pub name: String,
    /// The metric's signature with the test's entries, e.g.
    /// `nrefs:1|bs:1000|seed:12345|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0+s2s-0.1.0`.
    pub signature: String,
    /// One result per system, in the order given (the baseline first).
    pub results: Vec<PairedResult>,
}

/// How to run a paired test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairedOptions {
    /// Bootstrap or approximate randomization.
    pub test: PairedTest,
    /// Resamples (bootstrap) or trials (randomization); 0 means the default (1000 or
    /// 10000), as in sacreBLEU.
    pub samples: usize,
    /// The random seed.
    pub seed: Seed,
}

impl PairedOptions {
    /// The number of resamples or trials actually used.
    pub fn effective_samples(&self) -> usize {
        if self.samples > 0 { self.samples } else { self.test.default_samples() }
    }
}

/// Inserts the test's entries after `nrefs:N` as sacreBLEU's `Signature` orders them.
fn test_signature(sig: &str, opts: &PairedOptions) -> String {
    let extra = format!("{}:{}|seed:{}", opts.test.key(), opts.effective_samples(), opts.seed);
    match sig.split_once('|') {
        Some((nrefs, rest)) => format!("{nrefs}|{extra}|{rest}"),
        None => format!("{sig}|{extra}"),
    }
}

/// Runs sacreBLEU's paired test (`PairedTest(...)()`): `systems[0]` is the baseline, each
/// other system is compared with it, for each metric in the order given.
///
/// Every system must have one hypothesis per reference segment; at least two systems
/// and one metric are required.
pub fn paired_test<Y, H, R, S>(
    systems: &[Y],
    refs: &[R],
    metrics: &[MetricConfig],
    opts: &PairedOptions,
) -> Result<Vec<PairedColumn>, EvalError>
where
    Y: AsRef<[H]> + Sync,
    H: AsRef<str> + Sync,
    R: AsRef<[S]> + Sync,
    S: AsRef<str> + Sync,
{
    if systems.len() < 2 {
        return Err(EvalError::InvalidOption("paired tests need at least two systems".into()));
    }
    if metrics.is_empty() {
        return Err(EvalError::InvalidOption("paired tests need at least one metric".into()));
    }
    let n = systems[0].as_ref().len();
    if n == 0 {
        return Err(EvalError::InvalidOption("paired tests need at least one segment".into()));
    }
    let samples = opts.effective_samples();
    if samples.checked_mul(n).is_none_or(|draws| draws > MAX_DRAWS) {
        return Err(EvalError::InvalidOption(format!(
            "{samples} samples of {n} segments is too many (at most {MAX_DRAWS} draws)"
        )));
    }
    let mut columns = Vec::with_capacity(metrics.len());
    for metric in metrics {
        let signature = test_signature(&metric.signature(refs.len()), opts);
        let stats: Vec<StatsMatrix> =
            systems.iter().map(|hyps| metric.stats(hyps.as_ref(), refs)).collect::<Result<_, _>>()?;
        let scores: Vec<f64> = stats.iter().map(|s| metric.exact_score(&s.sum())).collect();
        let results = match opts.test {
            PairedTest::Bootstrap => bootstrap(metric, &stats, &scores, samples, opts.seed)?,
            PairedTest::ApproximateRandomization => {
                randomization(metric, &stats, &scores, samples, opts.seed)
            }
        };
        columns.push(PairedColumn { name: metric.name(), signature, results });
    }
    Ok(columns)
}

/// Resampled scores of each of `stats` (`stats_np[idxs]`, summed per resample in
/// `float32`), drawing each resample's `n` indices from `rng` as
/// `rng.choice(n, size=(samples, n))` does (the draws are streamed, not stored).
fn resample(
    metric: &MetricConfig,
    stats: &[&[f32]],
    cols: usize,
    n: usize,
    samples: usize,
    rng: &mut Generator,
) -> Result<Vec<Scores>, EvalError> {
    let mut nums: Vec<Vec<Num>> = vec![Vec::with_capacity(samples); stats.len()];
    let mut sums = vec![0f32; cols];
    for _ in 0..samples {
        let idx = rng.choice(n, n)?;
        for (st, out) in stats.iter().zip(nums.iter_mut()) {
            sums.fill(0.0);
            for &i in &idx {
                for (t, v) in sums.iter_mut().zip(&st[i * cols..(i + 1) * cols]) {
                    *t += v;
                }
            }
            out.push(metric.bootstrap_score(&sums));
        }
    }
    Ok(nums.iter().map(|v| Scores::from_nums(v)).collect())
}

fn bootstrap(
    metric: &MetricConfig,
    stats: &[StatsMatrix],
    scores: &[f64],
    samples: usize,
    seed: Seed,
) -> Result<Vec<PairedResult>, EvalError> {
    let n = stats[0].len();
    let cols = stats[0].cols;
    let f32s: Vec<Vec<f32>> = stats.iter().map(StatsMatrix::to_f32).collect();
    // sacreBLEU seeds a new generator for the baseline's interval and for each system; with
    // a fixed seed they all draw the same indices, so the baseline's resampled scores are
    // computed once.
    let base_scores = resample(metric, &[&f32s[0]], cols, n, samples, &mut seed.generator())?.remove(0);
    let (mean, ci) = estimate_ci(&base_scores);
    let mut results = vec![PairedResult { score: scores[0], p_value: None, mean: Some(mean), ci: Some(ci) }];
    for s in 1..stats.len() {
        let mut rng = seed.generator();
        let (base, sys) = match seed {
            Seed::Fixed(_) => {
                (base_scores.clone(), resample(metric, &[&f32s[s]], cols, n, samples, &mut rng)?.remove(0))
            }
            Seed::Entropy => {
                let mut both = resample(metric, &[&f32s[0], &f32s[s]], cols, n, samples, &mut rng)?;
                let sys = both.remove(1);
                (both.remove(0), sys)
            }
        };
        let (mean, ci) = estimate_ci(&sys);
        let diff = (scores[0] - scores[s]).abs();
        let p = bootstrap_p_value(&sys, &base, diff);
        results.push(PairedResult { score: scores[s], p_value: Some(p), mean: Some(mean), ci: Some(ci) });
    }
    Ok(results)
}

/// The booleans of `rng.integers(2, size=(trials, n), dtype=bool)`, streamed: the packed
/// 32-bit draws of [`Generator::random_bools`], kept from the current trial on.
struct BoolStream {
    rng: Generator,
    words: Vec<u32>,
    /// Index (in booleans) of the first bit of `words[0]`.
    start: usize,
}

impl BoolStream {
    /// Makes the booleans `from..to` available (dropping those before `from`).
    fn fill(&mut self, from: usize, to: usize) {
        let drop = (from - self.start) / 32;
        if drop > 0 {
            self.words.drain(..drop.min(self.words.len()));
            self.start += 32 * drop;
        }
        // One word past `to`, for reads that straddle two words.
        while self.start + 32 * self.words.len() < to + 32 {
            self.words.extend(self.rng.random_bools(32));
        }
    }

    /// Up to 32 booleans from boolean `e` (made available by `fill`), the first lowest.
    fn bits_at(&self, e: usize) -> usize {
        bits_at(&self.words, e - self.start)
    }
}

fn randomization(
    metric: &MetricConfig,
    stats: &[StatsMatrix],
    scores: &[f64],
    trials: usize,
    seed: Seed,
) -> Vec<PairedResult> {
    let n = stats[0].len();
    let cols = stats[0].cols;
    let base = &stats[0];
    let base_sum = base.sum();
    let mut results = vec![PairedResult { score: scores[0], p_value: None, mean: None, ci: None }];
    for s in 1..stats.len() {
        let mut bits = BoolStream { rng: seed.generator(), words: Vec::new(), start: 0 };
        let sys = &stats[s];
        let sys_sum = sys.sum();
        // Swapping sentence i moves (base_i - sys_i) from one pseudo-system to the other;
        // the moved sums come from tables of every subset of each block of sentences.
        let delta: Vec<f64> = base.rows.iter().zip(&sys.rows).map(|(b, s)| b - s).collect();
        let block = block_size(n, cols);
        let subsets = 1usize << block;
        let table = subset_sums(&delta, n, cols, block);
        let blocks = n.div_ceil(block);
        let diff = (scores[0] - scores[s]).abs();
        let mut acc = vec![0.0; cols];
        let (mut a, mut b) = (vec![0.0; cols], vec![0.0; cols]);
        let mut count = 0usize;
        for t in 0..trials {
            acc.fill(0.0);
            bits.fill(t * n, (t + 1) * n);
            for k in 0..blocks {
                let mut mask = bits.bits_at(t * n + block * k) & (subsets - 1);
                let left = n - block * k;
                if left < block {
                    mask &= (1 << left) - 1;
                }
                let row = &table[(k * subsets + mask) * cols..][..cols];
                for (x, d) in acc.iter_mut().zip(row) {
                    *x += d;
                }
            }
            for j in 0..cols {
                a[j] = sys_sum[j] + acc[j];
                b[j] = base_sum[j] - acc[j];
            }
            if (metric.ar_score(&a) - metric.ar_score(&b)).abs() > diff {
                count += 1;
            }
        }
        let p = (count + 1) as f64 / (trials + 1) as f64;
        results.push(PairedResult { score: scores[s], p_value: Some(p), mean: None, ci: None });
    }
    results
}

/// Sentences per block of [`subset_sums`]: 8 while the table stays within 32 MiB, fewer
/// for large corpora (down to 1: a table of `[0, delta]` per sentence).
fn block_size(n: usize, cols: usize) -> usize {
    const BUDGET: usize = 32 << 20;
    let bytes = |block: usize| n.div_ceil(block).saturating_mul(1 << block).saturating_mul(cols.max(1) * 8);
    [8, 4, 2].into_iter().find(|&b| bytes(b) <= BUDGET).unwrap_or(1)
}

/// For each block of `block` sentences, the column sums of `delta` over every subset of
/// the block: row `k << block | mask` (bit `i` of `mask` is sentence `block * k + i`).
/// The statistics are integers (TER's averaged reference lengths aside), so the order of
/// the additions does not change the sums.
fn subset_sums(delta: &[f64], n: usize, cols: usize, block: usize) -> Vec<f64> {
    let (blocks, subsets) = (n.div_ceil(block), 1usize << block);
    let mut table = vec![0.0; blocks * subsets * cols];
    for k in 0..blocks {
        for mask in 1..subsets {
            let i = block * k + mask.trailing_zeros() as usize;
            let prev = (k * subsets + (mask & (mask - 1))) * cols;
            let at = (k * subsets + mask) * cols;
            for j in 0..cols {
                let d = if i < n { delta[i * cols + j] } else { 0.0 };
                table[at + j] = table[prev + j] + d;
            }
        }
    }
    table
}

/// Up to 32 booleans from element `e` of [`Generator::random_bools`]' packed output, the
/// first in the lowest bit (zeros past its end).
fn bits_at(bits: &[u32], e: usize) -> usize {
    let (w, o) = (e / 32, e % 32);
    let lo = u64::from(bits.get(w).copied().unwrap_or(0));
    let hi = u64::from(bits.get(w + 1).copied().unwrap_or(0));
    ((lo | (hi << 32)) >> o) as u32 as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chrf::ChrfStats;

    // Golden values printed by numpy 2.4.6 / sacreBLEU 2.6.0, with
    // import numpy as np; from sacrebleu.metrics import BLEU, CHRF, TER
    // x = np.array([((i*0.37) % 1.7) + 1/(i+1) for i in range(1000)])

    fn chrf_stats(s: &[f64]) -> ChrfStats {
        ChrfStats { orders: s.chunks_exact(3).map(|o| [o[0] as u64, o[1] as u64, o[2] as u64]).collect() }
    }

    /// The value of a float32 result (it must be one).
    fn single(n: Num) -> f64 {
        match n {
            Num::F32(x) => f64::from(x),
            Num::Py(x) => panic!("{x} is a Python float, not float32"),
        }
    }

    fn x() -> Vec<f64> {
        (0..1000).map(|i| ((f64::from(i) * 0.37) % 1.7) + 1.0 / f64::from(i + 1)).collect()
    }

    #[test]
    fn pairwise_sums_and_means_match_numpy() {
        // x.sum(), x.mean(), x.astype(np.float32).sum(), x.astype(np.float32).mean(), x[:100].sum(), x[:5].sum()
        let x = x();
        assert_eq!(pairwise_sum_f64(&x), 853.5854708605527);
        assert_eq!(mean_f64(&x), 0.8535854708605527);
        let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        assert_eq!(f64::from(pairwise_sum_f32(&x32)), 853.58544921875);
        assert_eq!(f64::from(mean_f32(&x32)), 0.853585422039032);
        assert_eq!(pairwise_sum_f64(&x[..100]), 87.38737751763964);
        assert_eq!(pairwise_sum_f64(&x[..5]), 5.9833333333333325);
    }

    #[test]
    fn bleu_on_float32_statistics_matches_numpy_2() {
        // BLEU()._compute_score_from_stats(np.array([...], dtype='float32')).score
        let b = [39114., 38914., 26170., 16390., 11089., 7704., 39114., 37077., 35040., 33009.];
        assert_eq!(bleu_f32(&BleuConfig::default(), &b), 38.44496886173599);
        // b2 = [30,40,20,5,0,0,30,29,28,27]: exp, floor, none, add-k 0.5
        let b2 = [30., 40., 20., 5., 0., 0., 30., 29., 28., 27.];
        let run = |smoothing| bleu_f32(&BleuConfig { smoothing, ..BleuConfig::default() }, &b2);
        assert_eq!(run(Smoothing::Exp), 4.730994069236885);
        assert_eq!(run(Smoothing::FLOOR_DEFAULT), 2.5160826455622);
        assert_eq!(run(Smoothing::None), 0.0);
        assert_eq!(run(Smoothing::AddK(0.5)), 5.685754946933866);
    }

    #[test]
    fn chrf_and_ter_on_float32_statistics_match_numpy_2() {
        // c = [100,90,50, 99,89,30, 98,88,20, 97,87,10, 96,86,5, 95,85,0]
        // float(CHRF()._compute_f_score(c_f32)) -> 21.075817108154297 (float32; with Python
        // ints: 21.07581554514937); eps_smoothing=True -> 21.075809478759766
        let c = [100., 90., 50., 99., 89., 30., 98., 88., 20., 97., 87., 10., 96., 86., 5., 95., 85., 0.];
        let cfg = ChrfConfig::default();
        assert_eq!(single(chrf_f32(&cfg, &c)), 21.075817108154297);
        let exact = cfg.f_score(&chrf_stats(&c.map(f64::from)));
        assert_eq!(exact, 21.07581554514937);
        let eps = ChrfConfig { eps_smoothing: true, ..cfg };
        assert_eq!(single(chrf_f32(&eps, &c)), 21.075809478759766);
        // No hypothesis n-grams: a Python float 0.0; some: float32 50.0.
        let none = [0., 5., 0., 0., 4., 0., 0., 3., 0., 0., 2., 0., 0., 1., 0., 0., 0., 0.];
        assert_eq!(chrf_f32(&cfg, &none), Num::Py(0.0));
        let some = [0., 5., 0., 4., 4., 2., 0., 3., 0., 0., 2., 0., 0., 1., 0., 0., 0., 0.];
        assert_eq!(chrf_f32(&cfg, &some), Num::F32(50.0));
        // TER()._compute_score_from_stats(np.array(t, dtype='float32')).score
        let ter = MetricConfig::Ter(TerConfig::default());
        assert_eq!(single(ter.bootstrap_score(&[7.0, 30.0])), 23.33333396911621);
        assert_eq!(ter.bootstrap_score(&[3.0, 0.0]), Num::Py(100.0));
        assert_eq!(ter.bootstrap_score(&[0.0, 0.0]), Num::Py(0.0));
    }

    #[test]
    fn randomization_tables_sum_every_subset() {
        // 11 sentences, 2 columns: every block size gives each subset's plain sum.
        let delta: Vec<f64> = (0..22).map(|v| f64::from(v * v % 7) - 3.0).collect();
        for block in [1, 2, 4, 8] {
            let table = subset_sums(&delta, 11, 2, block);
            for k in 0..11usize.div_ceil(block) {
                for mask in 0..1usize << block {
                    let mut want = [0.0; 2];
                    for i in 0..block {
                        let s = block * k + i;
                        if mask >> i & 1 == 1 && s < 11 {
                            want[0] += delta[2 * s];
                            want[1] += delta[2 * s + 1];
                        }
                    }
                    let at = (k * (1 << block) + mask) * 2;
                    assert_eq!(&table[at..at + 2], &want, "block {block}, k {k}, mask {mask}");
                }
            }
        }
        assert_eq!(block_size(2037, 18), 8);
        assert_eq!(block_size(20_000, 18), 4);
        assert_eq!(block_size(200_000, 18), 1);
        assert_eq!(block_size(usize::MAX / 2, 18), 1);
        assert_eq!(bits_at(&[0xdead_beef, 0x1234_5678], 4) & 0xff, 0xee);
        assert_eq!(bits_at(&[0xdead_beef, 0x1234_5678], 28) & 0xff, 0x8d);
    }

    #[test]
    fn score_arrays_take_numpy_dtypes() {
        assert!(matches!(Scores::from_nums(&[Num::F32(1.0), Num::F32(2.0)]), Scores::F32(_)));
        assert!(matches!(Scores::from_nums(&[Num::F32(1.0), Num::Py(2.0)]), Scores::F64(_)));
        // Comparisons of float32 arrays round the Python float first:
        // np.array([0.1], dtype=np.float32) > 0.1 -> array([False])
        let s = Scores::F32(vec![0.1, 0.1]);
        let b = Scores::F32(vec![0.0, 0.2]);
        // |d| = [0.1, 0.1], mean 0.1, centred [0, 0]: nothing exceeds 0.0 -> p = 1/3
        assert_eq!(bootstrap_p_value(&s, &b, 0.0), 1.0 / 3.0);
        // A real difference just below a centred float32 difference rounds up to it, so it
        // is not exceeded (in double precision it would be).
        let s = Scores::F32(vec![0.5, 0.1]);
        let b = Scores::F32(vec![0.0, 0.0]);
        let v = 0.5f32 - mean_f32(&[0.5, 0.1]);
        assert_eq!(bootstrap_p_value(&s, &b, f64::from(v) - 1e-12), 1.0 / 3.0);
        let (s64, b64) = (Scores::F64(s.as_f64()), Scores::F64(b.as_f64()));
        assert_eq!(bootstrap_p_value(&s64, &b64, f64::from(v) - 1e-12), 2.0 / 3.0);
        assert_eq!(
            test_signature(
                "nrefs:1|case:lc|version:x",
                &PairedOptions {
                    test: PairedTest::ApproximateRandomization,
                    samples: 0,
                    seed: Seed::Fixed(7),
                }
            ),
            "nrefs:1|ar:10000|seed:7|case:lc|version:x"
        );
    }
}
