//! Softmax, log-softmax and each row's best token, as equations in plain burn tensor
//! operations: what this folder's kernels compute, and what runs under `--kernels reference`
//! (see [`crate::reference`]).

use burn::tensor::Tensor;
use burn::tensor::activation::{log_softmax as burn_log_softmax, softmax as burn_softmax};

/// `softmax` over the last dimension: `exp(xᵢ − max) / Σⱼ exp(xⱼ − max)`.
pub fn softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    burn_softmax(x, D - 1)
}

/// `log_softmax` over the last dimension.
pub fn log_softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    burn_log_softmax(x, D - 1)
}

/// Each row's best token (the first of equal scores, as f32) and its log-probability,
/// `[rows, 2]`.
pub fn best_log_prob_pairs(logits: Tensor<2>) -> Tensor<2> {
    let (best, ids) = log_softmax(logits).max_dim_with_indices(1); // [N, 1] each
    Tensor::cat(vec![ids.float(), best], 1)
}
