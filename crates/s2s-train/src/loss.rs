//! Label-smoothed cross-entropy over real target tokens (Szegedy et al., 2016; as in fairseq):
//! `ℓₜ = (1 − ε)·(−log p(yₜ)) + ε·(1/V)·Σᵥ(−log p(v))`, summed over non-padding positions.
//! The plain negative log-likelihood is returned beside it, for perplexity.

use burn::tensor::{Int, Tensor};

/// Summed losses of one batch.
#[derive(Debug, Clone)]
pub struct LossSums {
    /// Σ label-smoothed loss over real tokens (what is optimised, after dividing by tokens).
    pub smoothed: Tensor<1>,
    /// Σ −log p(yₜ) over real tokens (perplexity's numerator).
    pub nll: Tensor<1>,
}

/// Losses of `logits` `[batch, tgt, vocab]` against `targets` `[batch, tgt]`, counting only
/// positions where `keep` `[batch, tgt]` is 1 (one operation, `s2s_kernels::ops::label_smoothed_xent`).
pub fn label_smoothed_loss(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    keep: &Tensor<2>,
    epsilon: f64,
) -> LossSums {
    let (smoothed, nll) = s2s_kernels::ops::label_smoothed_xent(logits, targets, keep, epsilon);
    LossSums { smoothed, nll }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, TensorData};

    #[test]
    fn matches_hand_computation_and_ignores_padding() {
        let d = Device::flex();
        // One row, two positions; the second is padding and carries a huge logit that must not count.
        let logits = Tensor::<3>::from_data(TensorData::new(vec![0f32, 1., 2., 100., 0., 0.], [1, 2, 3]), &d);
        let targets = Tensor::<2, Int>::from_data(TensorData::new(vec![2i64, 1], [1, 2]), &d);
        let keep = Tensor::<2>::from_data(TensorData::new(vec![1f32, 0.], [1, 2]), &d);
        let z = (0f64.exp() + 1f64.exp() + 2f64.exp()).ln();
        let logp = [0.0 - z, 1.0 - z, 2.0 - z];
        let nll = -logp[2];
        let uniform = -(logp.iter().sum::<f64>()) / 3.0;
        let l = label_smoothed_loss(logits, targets, &keep, 0.1);
        let got_nll = l.nll.into_scalar::<f32>() as f64;
        let got = l.smoothed.into_scalar::<f32>() as f64;
        assert!((got_nll - nll).abs() < 1e-5, "{got_nll} vs {nll}");
        assert!((got - (0.9 * nll + 0.1 * uniform)).abs() < 1e-5, "{got}");
    }
}
