//! Layer normalisation (Ba, Kiros & Hinton, 2016) as cubecl kernels (wgpu): the GPU
//! counterpart of [`crate::layer_norm::cpu`], with the same equations:
//!
//! `y = γ ⊙ x̂ + β`, `x̂ = (x − μ) / √(σ² + ε)` over the last dimension; with `g = ∂y ⊙ γ`,
//! `∂x = (g − mean(g) − x̂ · mean(g ⊙ x̂)) / √(σ² + ε)`, `∂γ = Σ_rows ∂y ⊙ x̂`, `∂β = Σ_rows ∂y`.
//!
//! burn's `LayerNorm` is about a dozen tensor operations forward and twice as many backward,
//! and on a GPU through wgpu each costs ~28 µs of host time (measured on an H100): ~600
//! launches a training step for the 17 norms of the Transformer bench shape. Here it is one
//! launch forward (a thread a row) and two backward (a thread a row for `∂x`, a thread a
//! column for `∂γ` and `∂β`): 3 launches where the composed form was ~36, registered with
//! burn's autodiff as one node. Not with burn's fusion (`gpu-tuned`), whose fused-stream
//! tensors this does not take.
//!
//! # Shapes
//! - `x`: `[..., d]` (any rank), `γ`, `β`: `[d]` → `y` like `x`; saved `(μ, 1/√(σ² + ε))`
//!   per row: `[rows, 2]`

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::{Dispatch, backend_extension, tensor::FloatTensor};
use burn::nn::LayerNorm;
use burn::tensor::{DType, Tensor};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::cube;
use cubecl::prelude::*;

use crate::gpu::launch::{empty, launch_dims};
use crate::own_backward::WithBackward;

/// The layer norm as a burn backend extension (cubecl runtimes without fusion).
#[backend_extension(Cube, Autodiff)]
pub trait GpuLayerNorm: burn::backend::Backend {
    /// `γ ⊙ (x − μ)/√(σ² + ε) + β` over the last dimension of `x` (any rank); `γ`, `β`: `[d]`.
    fn gpu_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self>;
}

/// One row per thread: its mean and variance (two passes, as burn's `var_mean_bias`), the
/// output, and `(μ, 1/√(σ² + ε))` into `stats`.
#[cube(launch)]
fn norm_forward(x: &[f32], gamma: &[f32], beta: &[f32], y: &mut [f32], stats: &mut [f32], epsilon: f32) {
    let row = ABSOLUTE_POS;
    let d = gamma.len();
    if row < stats.len() / 2 {
        let at = row * d;
        let mut sum = 0.0f32;
        for c in 0..d {
            sum += x[at + c];
        }
        let mean = sum / d as f32;
        let mut var = 0.0f32;
        for c in 0..d {
            let e = x[at + c] - mean;
            var += e * e;
        }
        let rstd = 1.0 / f32::sqrt(var / d as f32 + epsilon);
        for c in 0..d {
            y[at + c] = gamma[c] * ((x[at + c] - mean) * rstd) + beta[c];
        }
        stats[2 * row] = mean;
        stats[2 * row + 1] = rstd;
    }
}

/// One row per thread: `∂x` from `∂y`.
#[cube(launch)]
fn norm_backward_rows(x: &[f32], gamma: &[f32], stats: &[f32], dy: &[f32], dx: &mut [f32]) {
    let row = ABSOLUTE_POS;
    let d = gamma.len();
    if row < stats.len() / 2 {
        let at = row * d;
        let (mean, rstd) = (stats[2 * row], stats[2 * row + 1]);
        let mut sum_g = 0.0f32;
        let mut sum_gx = 0.0f32;
        for c in 0..d {
            let g = dy[at + c] * gamma[c];
            sum_g += g;
            sum_gx += g * ((x[at + c] - mean) * rstd);
        }
        let (mean_g, mean_gx) = (sum_g / d as f32, sum_gx / d as f32);
        for c in 0..d {
            let xh = (x[at + c] - mean) * rstd;
            dx[at + c] = (dy[at + c] * gamma[c] - mean_g - xh * mean_gx) * rstd;
        }
    }
}

/// One column per thread: `∂γ` and `∂β`, summed over the rows.
#[cube(launch)]
fn norm_backward_columns(x: &[f32], stats: &[f32], dy: &[f32], d_gamma: &mut [f32], d_beta: &mut [f32]) {
    let c = ABSOLUTE_POS;
    let d = d_gamma.len();
    if c < d {
        let rows = stats.len() / 2;
        let mut sum_gamma = 0.0f32;
        let mut sum_beta = 0.0f32;
        for row in 0..rows {
            let at = row * d + c;
            sum_gamma += dy[at] * ((x[at] - stats[2 * row]) * stats[2 * row + 1]);
            sum_beta += dy[at];
        }
        d_gamma[c] = sum_gamma;
        d_beta[c] = sum_beta;
    }
}

/// `[rows, d]` of `x` against `γ`'s `d`.
fn rows(x: &CubeTensor, gamma: &CubeTensor) -> (usize, usize) {
    let d = gamma.meta.num_elements();
    let n = x.meta.num_elements();
    assert!(
        d > 0 && n % d == 0 && x.meta.shape()[x.meta.shape().num_dims() - 1] == d,
        "layer norm: last dimension is not γ's"
    );
    assert!(x.dtype == DType::F32 && gamma.dtype == DType::F32, "the layer-norm kernels compute in f32");
    (n / d, d)
}

/// The output and each row's `(μ, 1/√(σ² + ε))`.
fn forward(x: CubeTensor, gamma: CubeTensor, beta: CubeTensor, epsilon: f64) -> (CubeTensor, CubeTensor) {
    let (rows, d) = rows(&x, &gamma);
    assert_eq!(beta.meta.num_elements(), d, "layer norm: β is not [d]");
    let (x, gamma, beta) = (into_contiguous(x), into_contiguous(gamma), into_contiguous(beta));
    let y = empty(&x, x.meta.shape().clone());
    let stats = empty(&x, [rows, 2]);
    let (count, dim) = launch_dims(&x, rows);
    norm_forward::launch(
        &x.client.clone(),
        count,
        dim,
        x.into_buffer_arg(),
        gamma.into_buffer_arg(),
        beta.into_buffer_arg(),
        y.clone().into_buffer_arg(),
        stats.clone().into_buffer_arg(),
        epsilon as f32,
    );
    (y, stats)
}

/// `(∂x, ∂γ, ∂β)`.
fn backward(x: CubeTensor, gamma: CubeTensor, stats: CubeTensor, dy: CubeTensor) -> [CubeTensor; 3] {
    let (rows, d) = rows(&x, &gamma);
    let dy = into_contiguous(dy);
    let dx = empty(&x, x.meta.shape().clone());
    let (d_gamma, d_beta) = (empty(&x, [d]), empty(&x, [d]));
    let (count, dim) = launch_dims(&x, rows);
    norm_backward_rows::launch(
        &x.client.clone(),
        count,
        dim,
        x.clone().into_buffer_arg(),
        gamma.into_buffer_arg(),
        stats.clone().into_buffer_arg(),
        dy.clone().into_buffer_arg(),
        dx.clone().into_buffer_arg(),
    );
    let (count, dim) = launch_dims(&x, d);
    norm_backward_columns::launch(
        &x.client.clone(),
        count,
        dim,
        x.into_buffer_arg(),
        stats.into_buffer_arg(),
        dy.into_buffer_arg(),
        d_gamma.clone().into_buffer_arg(),
        d_beta.clone().into_buffer_arg(),
    );
    [dx, d_gamma, d_beta]
}

impl GpuLayerNorm for CubeBackend {
    fn gpu_layer_norm(x: CubeTensor, gamma: CubeTensor, beta: CubeTensor, epsilon: f64) -> CubeTensor {
        forward(x, gamma, beta, epsilon).0
    }
}

impl<C: CheckpointStrategy> GpuLayerNorm for Autodiff<CubeBackend, C> {
    fn gpu_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        Self::with_backward(
            [x, gamma, beta],
            |[x, gamma, beta], keep| {
                if !keep {
                    return (forward(x, gamma, beta, epsilon).0, None);
                }
                let x = into_contiguous(x);
                let (y, stats) = forward(x.clone(), gamma.clone(), beta, epsilon);
                // `x`, `γ`, and `(μ, 1/√(σ² + ε))` of every row.
                (y, Some((x, gamma, stats)))
            },
            |(x, gamma, stats), dy, _| backward(x, gamma, stats, dy).map(Some),
        )
    }
}

/// `norm(x)`, `γ ⊙ (x − μ)/√(σ² + ε) + β` over the last dimension, on a cubecl device (not
/// flex; not with `gpu-tuned`).
pub fn layer_norm<const D: usize>(norm: &LayerNorm, x: Tensor<D>) -> Tensor<D> {
    let (gamma, beta, epsilon) = super::parameters(norm);
    Tensor::from_dispatch(<Dispatch as GpuLayerNorm>::gpu_layer_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        epsilon,
    ))
}
