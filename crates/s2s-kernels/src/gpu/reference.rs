//! Joining columns as equations in plain burn tensor operations: what this folder's kernels
//! compute, and what runs under `--kernels reference` (see [`crate::reference`]).

use burn::tensor::Tensor;

/// `[a | b | …]` along the last axis.
pub fn cat_columns(parts: Vec<Tensor<2>>) -> Tensor<2> {
    Tensor::cat(parts, 1)
}

/// `[a | b | …]` along the last axis of `[batch, time, dᵢ]` tensors.
pub fn cat_features(parts: Vec<Tensor<3>>) -> Tensor<3> {
    Tensor::cat(parts, 2)
}
