//! The label-smoothed cross-entropy, as equations in plain burn tensor operations: what this
//! folder's kernels compute, and what runs under `--kernels reference` (see
//! [`crate::reference`]).

use crate::softmax::reference::log_softmax;
use burn::tensor::{Int, Tensor};

/// Label-smoothed cross-entropy (Szegedy et al., 2016; as in fairseq) summed over real target
/// tokens: `ℓₜ = (1 − ε)·(−log p(yₜ)) + ε·(1/V)·Σᵥ(−log p(v))`. `logits` `[batch, tgt, vocab]`,
/// `targets` `[batch, tgt]`, `keep` `[batch, tgt]` (1 on real tokens). Returns
/// (Σ smoothed loss, Σ −log p(yₜ)).
pub fn label_smoothed_xent(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    keep: &Tensor<2>,
    epsilon: f64,
) -> (Tensor<1>, Tensor<1>) {
    let vocab = logits.dims()[2];
    let logp = log_softmax(logits); // [B, T, V]
    let nll = logp.clone().gather(2, targets.unsqueeze_dim::<3>(2)).squeeze_dim::<2>(2).neg(); // [B, T]
    let nll = nll * keep.clone();
    let nll_sum = crate::device::sum_all(nll.clone());
    if epsilon == 0.0 {
        return (nll_sum.clone(), nll_sum);
    }
    let uniform = logp.sum_dim(2).squeeze_dim::<2>(2).neg().div_scalar(vocab as f64) * keep.clone(); // [B, T]
    let smoothed = nll.mul_scalar(1.0 - epsilon) + uniform.mul_scalar(epsilon);
    (crate::device::sum_all(smoothed), nll_sum)
}
