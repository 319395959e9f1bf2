//! Sampling: each next token drawn from the model's distribution instead of taken at its
//! maximum — for back-translation (Edunov et al., 2018) and for showing what a model believes.
//!
//! At every step, for each row: `p = softmax(logits / T)` (temperature `T`), then top-k keeps
//! the `k` most probable tokens, then top-p (nucleus, Holtzman et al., 2020) keeps the fewest
//! most probable tokens whose mass reaches `p`; the kept probabilities are renormalised and one
//! token is drawn. This is the order of fairseq's `--sampling-topk`/`--sampling-topp` and of
//! Hugging Face's `generate`.
//!
//! Draws are reproducible and independent of batching: sentence `i` (its index in the whole
//! input, which the caller passes for every row) draws from its own stream, a SplitMix64 seeded
//! with `seed ^ (i + 1)·0x9E3779B97F4A7C15`, one uniform number per token. So the same seed gives
//! the same outputs whatever the batch size, sentence order or device.
//!
//! [`Hypothesis::score`] is the sum of the drawn tokens' log-probabilities under the model
//! itself (temperature 1, nothing truncated): what the model believes of the sample.

use burn::tensor::{Int, Tensor, TensorData};
use s2s_data::rng::SplitMix64;
use s2s_models::Source;
use serde::{Deserialize, Serialize};

use crate::greedy::{BOS, EOS, Hypothesis, keep_rows};
use crate::incremental::Incremental;
use crate::limits::MaxLength;

/// How to sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SampleConfig {
    /// Temperature `T > 0` (1: the model's distribution; below 1 sharper, above 1 flatter).
    pub temperature: f64,
    /// Keep only the `k` most probable tokens (0: no limit).
    pub top_k: usize,
    /// Keep the fewest most probable tokens whose mass reaches `p` (1: no limit).
    pub top_p: f64,
    /// Seed of the draws.
    pub seed: u64,
    /// Index in the whole input of the first sentence handed to a translation call (a chunk
    /// of a stream; see the module doc).
    pub first_index: u64,
    /// Output length limit.
    pub max_length: MaxLength,
}

impl Default for SampleConfig {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 1,
            first_index: 0,
            max_length: MaxLength::default(),
        }
    }
}

/// A sampling setting out of its range.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum SampleError {
    /// The temperature is not a positive number.
    #[error("temperature must be a positive number, got {0}")]
    Temperature(f64),
    /// Top-p is outside `(0, 1]`.
    #[error("top-p must be in (0, 1], got {0}")]
    TopP(f64),
}

impl SampleConfig {
    /// What is wrong with the settings, if anything.
    pub fn check(&self) -> Result<(), SampleError> {
        if !(self.temperature > 0.0 && self.temperature.is_finite()) {
            return Err(SampleError::Temperature(self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SampleError::TopP(self.top_p));
        }
        Ok(())
    }
}

/// The random stream of sentence `index` (see the module doc).
fn stream(seed: u64, index: u64) -> SplitMix64 {
    SplitMix64::new(seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Draws a token from one row of logits; returns (token, its log-probability under the model).
fn draw(logits: &[f32], cfg: &SampleConfig, rng: &mut SplitMix64) -> (usize, f64) {
    // Log-softmax of the raw logits: the model's own log-probabilities, for the score.
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let log_z = max + logits.iter().map(|&l| (l as f64 - max).exp()).sum::<f64>().ln();
    // The tempered distribution, most probable first (ties by index, so the order is fixed).
    let t = cfg.temperature;
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if cfg.top_k > 0 {
        order.truncate(cfg.top_k);
    }
    let weights: Vec<f64> = order.iter().map(|&i| ((logits[i] as f64 - max) / t).exp()).collect();
    let total: f64 = weights.iter().sum();
    // Nucleus over the tempered probabilities, renormalised after top-k.
    let mut keep = weights.len();
    if cfg.top_p < 1.0 {
        let mut mass = 0.0;
        for (j, w) in weights.iter().enumerate() {
            mass += w / total;
            if mass >= cfg.top_p {
                keep = j + 1;
                break;
            }
        }
    }
    let kept: f64 = weights[..keep].iter().sum();
    let u = rng.unit() * kept;
    let mut acc = 0.0;
    let mut pick = order[keep - 1];
    for (j, w) in weights[..keep].iter().enumerate() {
        acc += w;
        if u < acc {
            pick = order[j];
            break;
        }
    }
    (pick, logits[pick] as f64 - log_z)
}

/// Samples one translation for every row of `src`; `index[r]` is row `r`'s sentence index in
/// the whole input, which picks its random stream (see the module doc).
///
/// # Panics
/// When `index` does not have one entry per row (a programming error).
pub fn sample<M: Incremental>(model: &M, src: &Source, cfg: &SampleConfig, index: &[u64]) -> Vec<Hypothesis> {
    let device = src.ids.device();
    let batch = src.batch();
    assert_eq!(index.len(), batch, "one sentence index per row");
    let limits: Vec<usize> = src.lens.iter().map(|&l| cfg.max_length.for_source(l)).collect();
    let mut rngs: Vec<SplitMix64> = index.iter().map(|&i| stream(cfg.seed, i)).collect();
    let mut out: Vec<Hypothesis> =
        (0..batch).map(|_| Hypothesis { tokens: Vec::new(), score: 0.0, attention: None }).collect();
    let mut state = model.encode(src);
    let mut rows: Vec<usize> = (0..batch).collect(); // state row r ↔ sentence rows[r]
    let mut last: Vec<i64> = vec![BOS as i64; batch];
    while !rows.is_empty() {
        let n = rows.len();
        let input = Tensor::<1, Int>::from_data(TensorData::new(last.clone(), [n]), &device);
        let (step, next) = model.step(state, input);
        state = next;
        let vocab = step.logits.dims()[1];
        let logits: Vec<f32> =
            step.logits.into_data().convert::<f32>().try_to_vec::<f32>().unwrap_or_default();
        let mut keep = Vec::with_capacity(n);
        let mut next_last = Vec::with_capacity(n);
        for (r, &sent) in rows.iter().enumerate() {
            let (id, lp) = draw(&logits[r * vocab..(r + 1) * vocab], cfg, &mut rngs[sent]);
            let h = &mut out[sent];
            h.score += lp;
            if id as u32 == EOS {
                continue;
            }
            h.tokens.push(id as u32);
            if h.tokens.len() < limits[sent] {
                keep.push(r);
                next_last.push(id as i64);
            }
        }
        if keep.is_empty() {
            break;
        }
        state = keep_rows(model, state, &mut rows, &keep, &device);
        last = next_last;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SampleConfig {
        SampleConfig::default()
    }

    #[test]
    fn top_k_one_is_the_maximum() {
        let logits = [0.1f32, 2.0, -1.0, 1.9];
        let mut rng = stream(7, 0);
        for _ in 0..50 {
            assert_eq!(draw(&logits, &SampleConfig { top_k: 1, ..cfg() }, &mut rng).0, 1);
        }
    }

    #[test]
    fn a_small_nucleus_is_the_maximum_and_a_large_one_keeps_the_rest() {
        let logits = [0.0f32, 3.0, 1.0, 2.0];
        let mut rng = stream(3, 5);
        for _ in 0..50 {
            assert_eq!(draw(&logits, &SampleConfig { top_p: 0.1, ..cfg() }, &mut rng).0, 1);
        }
        // p(1) ≈ 0.64, p(3) ≈ 0.24: a nucleus of 0.8 keeps exactly tokens 1 and 3.
        let seen: std::collections::BTreeSet<usize> =
            (0..400).map(|_| draw(&logits, &SampleConfig { top_p: 0.8, ..cfg() }, &mut rng).0).collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![1, 3]);
    }

    #[test]
    fn draws_follow_the_tempered_distribution() {
        // p ∝ exp(l / T): with T = 2, logits (0, ln 4·2) give probabilities 1/3 and 2/3.
        let logits = [0.0f32, (4.0f32).ln()];
        let c = SampleConfig { temperature: 2.0, ..cfg() };
        let mut rng = stream(11, 0);
        let n = 30_000;
        let ones = (0..n).filter(|_| draw(&logits, &c, &mut rng).0 == 1).count() as f64 / n as f64;
        assert!((ones - 2.0 / 3.0).abs() < 0.01, "{ones}");
        // The score is the model's own log-probability (temperature 1): ln 0.8 for token 1.
        let (id, lp) = draw(&logits, &SampleConfig { top_k: 1, ..c }, &mut rng);
        assert_eq!(id, 1);
        assert!((lp - 0.8f64.ln()).abs() < 1e-6);
    }

    #[test]
    fn settings_are_checked() {
        assert!(SampleConfig { temperature: 0.0, ..cfg() }.check().is_err());
        assert!(SampleConfig { top_p: 0.0, ..cfg() }.check().is_err());
        assert!(SampleConfig { top_p: 1.5, ..cfg() }.check().is_err());
        assert!(cfg().check().is_ok());
    }
}
