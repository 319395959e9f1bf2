//! Perplexity of a teacher-forced model on a reference corpus.
//!
//! Definition used throughout the toolkit: with the model fed the gold target prefix
//! (teacher forcing), sum the negative log-likelihood (natural log) of every target
//! token, **including** the end-of-sentence token and **excluding** padding (and the
//! begin-of-sentence token, which is input, never predicted); perplexity is
//! `exp(sum_nll / tokens)`. Label smoothing must not be applied to the NLL summed here.

use serde::{Deserialize, Serialize};

/// `exp(sum_nll / tokens)`: the exponential of the mean per-token negative
/// log-likelihood (natural log), see the [module documentation](self) for which tokens
/// count.
///
/// With `tokens == 0` the mean is undefined and this returns `f64::INFINITY` (never
/// NaN), so that "lower is better" comparisons such as best-checkpoint selection treat
/// an empty evaluation as the worst possible. A mean NLL above ~709.78 also overflows
/// to infinity.
pub fn perplexity(sum_nll: f64, tokens: u64) -> f64 {
    if tokens == 0 {
        return f64::INFINITY;
    }
    (sum_nll / tokens as f64).exp()
}

/// Accumulates summed NLL and token counts over batches, then gives the perplexity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NllAccumulator {
    /// Sum of per-token negative log-likelihoods (natural log).
    pub sum_nll: f64,
    /// Number of target tokens summed (EOS included, padding excluded).
    pub tokens: u64,
}

impl NllAccumulator {
    /// Adds a batch: its summed NLL and its number of non-padding target tokens.
    pub fn add(&mut self, sum_nll: f64, tokens: u64) {
        self.sum_nll += sum_nll;
        self.tokens += tokens;
    }

    /// Mean NLL per token (`f64::INFINITY` when no token was added).
    pub fn mean_nll(&self) -> f64 {
        if self.tokens == 0 { f64::INFINITY } else { self.sum_nll / self.tokens as f64 }
    }

    /// [`perplexity`] of what was accumulated.
    pub fn perplexity(&self) -> f64 {
        perplexity(self.sum_nll, self.tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_model_has_vocab_size_perplexity() {
        // A uniform model over 8 symbols: NLL ln(8) per token.
        let ppl = perplexity(10.0 * 8f64.ln(), 10);
        assert!((ppl - 8.0).abs() < 1e-12);
    }

    #[test]
    fn zero_tokens_is_infinite() {
        assert_eq!(perplexity(0.0, 0), f64::INFINITY);
        assert_eq!(NllAccumulator::default().perplexity(), f64::INFINITY);
    }

    #[test]
    fn accumulator_sums_batches() {
        let mut acc = NllAccumulator::default();
        acc.add(2.0, 2);
        acc.add(4.0, 2);
        assert_eq!(acc.mean_nll(), 1.5);
        assert!((acc.perplexity() - 1.5f64.exp()).abs() < 1e-12);
        assert_eq!(perplexity(0.0, 5), 1.0);
    }
}
