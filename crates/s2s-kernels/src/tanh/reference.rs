//! `tanh`, as equations in plain burn tensor operations: what this folder's kernels compute,
//! and what runs under `--kernels reference` (see [`crate::reference`]).

use burn::tensor::Tensor;
use burn::tensor::activation::tanh as burn_tanh;

/// `tanh(x)`.
pub fn tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    burn_tanh(x)
}
