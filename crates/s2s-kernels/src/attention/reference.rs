//! Attention: the recurrent decoders' scores and context as equations in plain burn tensor
//! operations: what this folder's kernels for them compute, and what runs under `--kernels
//! reference` (see [`crate::reference`]). The Transformer's scaled dot-product attention is the
//! model's own (`scaled_dot_product` in the models' `transformer/mha.rs`), which runs wherever
//! this folder's multi-head kernels do not.

use crate::softmax::reference::softmax;
use burn::tensor::Tensor;
use burn::tensor::activation::tanh as burn_tanh;

/// Dot scores (Luong et al., 2015, eq. 8): `e[b, j] = keys[b, j, :] · q[b, :]`.
pub fn dot_scores(q: Tensor<2>, keys: &Tensor<3>) -> Tensor<2> {
    (keys.clone() * q.unsqueeze_dim::<3>(1)).sum_dim(2).squeeze_dim::<2>(2)
}

/// Additive scores (Bahdanau et al., 2015, eq. 6): `e[b, j] = vᵀ tanh(keys[b, j, :] + q[b, :])`,
/// `v` `[d, 1]`.
pub fn additive_scores(q: Tensor<2>, keys: &Tensor<3>, v: Tensor<2>) -> Tensor<2> {
    let [b, s, a] = keys.dims();
    burn_tanh(keys.clone() + q.unsqueeze_dim::<3>(1)).reshape([b * s, a]).matmul(v).reshape([b, s])
}

/// The context (Bahdanau et al., 2015, eq. 5): `c[b, :] = Σⱼ α[b, j] values[b, j, :]`.
pub fn weighted_sum(weights: Tensor<2>, values: &Tensor<3>) -> Tensor<2> {
    (weights.unsqueeze_dim::<3>(2) * values.clone()).sum_dim(1).squeeze_dim::<2>(1)
}

/// `α = softmax(e + mask)`, `c = Σⱼ αⱼ hⱼ`: (context `[batch, d]`, weights `[batch, src]`);
/// `key_mask` is 0 on real positions and `−∞` on padding.
pub fn attend(scores: Tensor<2>, values: &Tensor<3>, key_mask: &Tensor<2>) -> (Tensor<2>, Tensor<2>) {
    let weights = softmax(scores + key_mask.clone());
    (weighted_sum(weights.clone(), values), weights)
}
