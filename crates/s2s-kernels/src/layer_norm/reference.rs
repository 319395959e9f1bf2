//! Layer normalisation, as equations in plain burn tensor operations: what this folder's
//! kernels compute, and what runs under `--kernels reference` (see [`crate::reference`]).

use burn::nn::LayerNorm;
use burn::tensor::Tensor;

/// Layer normalisation (Ba et al., 2016): `γ ⊙ (x − μ) / √(σ² + ε) + β` over the last
/// dimension (burn's `LayerNorm`).
pub fn layer_norm<const D: usize>(norm: &LayerNorm, x: Tensor<D>) -> Tensor<D> {
    norm.forward(x)
}
