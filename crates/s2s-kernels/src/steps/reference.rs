//! A sequence's steps sliced and stacked, as equations in plain burn tensor operations: what
//! this folder's kernels compute, and what runs under `--kernels reference` (see
//! [`crate::reference`]).

use burn::tensor::Tensor;

/// `x[:, t, :]` for every step `t` of `x` (`[batch, time, d]`).
pub fn time_steps(x: Tensor<3>) -> Vec<Tensor<2>> {
    let time = x.dims()[1];
    (0..time).map(|t| x.clone().narrow(1, t, 1).squeeze_dim::<2>(1)).collect()
}

/// `[batch, time, d]` from `time` steps `[batch, d]`.
pub fn stack_steps(parts: Vec<Tensor<2>>) -> Tensor<3> {
    Tensor::stack(parts, 1)
}
