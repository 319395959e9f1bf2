//! Layer normalisation: the fused CPU kernel (`cpu`) and the GPU kernels (`gpu`), chosen by
//! [`crate::ops::layer_norm`].

pub(crate) mod reference;

use burn::nn::{LayerNorm, LayerNormConfig};
use burn::tensor::Tensor;

pub mod cpu;
#[cfg(not(feature = "gpu-tuned"))]
pub mod gpu;

/// `norm`'s `γ`, `β` (zeros where it has none) and `ε`: what each kernel takes.
fn parameters(norm: &LayerNorm) -> (Tensor<1>, Tensor<1>, f64) {
    let gamma = norm.gamma.val();
    let beta = norm.beta.as_ref().map(|b| b.val()).unwrap_or_else(|| gamma.zeros_like());
    (gamma, beta, epsilon())
}

/// burn's `LayerNorm` epsilon, which every norm of this crate is built with
/// (`LayerNormConfig::new(d)`); the module keeps its own private.
fn epsilon() -> f64 {
    LayerNormConfig::new(1).epsilon
}
