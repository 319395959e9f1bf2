//! Label-smoothed cross-entropy over real target tokens (Szegedy et al., 2016; as in fairseq):
//! `ℓₜ = (1 − ε)·(−log p(yₜ)) + ε·(1/V)·Σᵥ(−log p(v))`, summed over non-padding positions.
//! The plain negative log-likelihood is returned beside it, for perplexity.

use burn::tensor::activation::log_softmax;
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
/// positions where `keep` `[batch, tgt]` is 1 (on the CPU through one fused kernel,
/// [`crate::fused_loss`]).
pub fn label_smoothed_loss(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    keep: &Tensor<2>,
    epsilon: f64,
) -> LossSums {
    let [batch, tgt, vocab] = logits.dims();
    if s2s_models::flex_data::is_flex(&logits.device()) {
        let rows = crate::fused_loss::smoothed_xent(
            logits.reshape([batch * tgt, vocab]),
            targets.reshape([batch * tgt]).float(),
            keep.clone().reshape([batch * tgt]),
            epsilon,
        ); // [B·T, 2]
        return LossSums { nll: rows.clone().narrow(1, 0, 1).sum(), smoothed: rows.narrow(1, 1, 1).sum() };
    }
    composed(logits, targets, keep, epsilon)
}

/// [`label_smoothed_loss`] from tensor operations: every backend, and what the fused CPU
/// kernel ([`crate::fused_loss`]) is tested against.
pub fn composed(logits: Tensor<3>, targets: Tensor<2, Int>, keep: &Tensor<2>, epsilon: f64) -> LossSums {
    let vocab = logits.dims()[2];
    let logp = log_softmax(logits, 2); // [B, T, V]
    let nll = logp.clone().gather(2, targets.unsqueeze_dim::<3>(2)).squeeze_dim::<2>(2).neg(); // [B, T]
    let nll = nll * keep.clone();
    let nll_sum = nll.clone().sum();
    if epsilon == 0.0 {
        return LossSums { smoothed: nll_sum.clone(), nll: nll_sum };
    }
    let uniform = logp.sum_dim(2).squeeze_dim::<2>(2).neg().div_scalar(vocab as f64) * keep.clone(); // [B, T]
    let smoothed = nll.mul_scalar(1.0 - epsilon) + uniform.mul_scalar(epsilon);
    LossSums { smoothed: smoothed.sum(), nll: nll_sum }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, Distribution, TensorData};

    /// The fused kernel equals the composed operations: both sums, and the gradient of a
    /// weighted sum of them with respect to the logits, with padding, for ε = 0 and 0.1.
    #[test]
    fn fused_kernel_equals_the_composed_operations() {
        let d = Device::flex().autodiff();
        let (b, t, v) = (3, 4, 37); // 37: two 16-lane blocks and a tail in the fused reductions
        let logits = Tensor::<3>::random([b, t, v], Distribution::Normal(0.0, 3.0), &d);
        let ids: Vec<i64> = (0..b * t).map(|i| (i * 7 % v) as i64).collect();
        let targets = Tensor::<2, Int>::from_data(TensorData::new(ids, [b, t]), &d);
        let keep_v: Vec<f32> = (0..b * t).map(|i| if i % 5 == 4 { 0.0 } else { 1.0 }).collect();
        let keep = Tensor::<2>::from_data(TensorData::new(keep_v, [b, t]), &d);
        for eps in [0.0, 0.1] {
            let run = |fused: bool| {
                let x = logits.clone().require_grad();
                let l = if fused {
                    label_smoothed_loss(x.clone(), targets.clone(), &keep, eps)
                } else {
                    composed(x.clone(), targets.clone(), &keep, eps)
                };
                let (nll, sm) = (l.nll.clone().into_scalar::<f32>(), l.smoothed.clone().into_scalar::<f32>());
                let g = (l.nll * 0.3 + l.smoothed * 0.7).backward();
                (nll, sm, x.grad(&g).expect("∂logits").reshape([b * t, v]))
            };
            let (n1, s1, g1) = run(true);
            let (n2, s2, g2) = run(false);
            assert!((n1 - n2).abs() < 1e-4 * n2.abs().max(1.0), "ε={eps}: nll {n1} vs {n2}");
            assert!((s1 - s2).abs() < 1e-4 * s2.abs().max(1.0), "ε={eps}: smoothed {s1} vs {s2}");
            let diff = (g1 - g2).abs().max().into_scalar::<f32>();
            assert!(diff < 1e-5, "ε={eps}: gradients differ by {diff}");
        }
    }

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
