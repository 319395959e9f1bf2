//! Layer normalisation (Ba, Kiros & Hinton, 2016) on the CPU in one fused pass per row, with
//! its backward:
//!
//! `y = γ ⊙ x̂ + β`, `x̂ = (x − μ) / √(σ² + ε)` over the last dimension; with `g = ∂y ⊙ γ`,
//! `∂x = (g − mean(g) − x̂ · mean(g ⊙ x̂)) / √(σ² + ε)`, `∂γ = Σ_rows ∂y ⊙ x̂`, `∂β = Σ_rows ∂y`.
//!
//! burn's `LayerNorm` is composed from a dozen tensor operations forward and about twice as many
//! backward, each a pass over the activations and a new buffer: on the Transformer bench shape
//! (`[64, 24, 256]`) 9.9 ms forward and backward per norm, 17 norms per step. Here a row is read
//! twice forward (mean, then variance and output) and twice backward, rows in parallel, and
//! only `μ` and `1/√(σ² + ε)` per row are kept for the backward. A burn `#[backend_extension]`
//! for flex; other backends keep burn's `LayerNorm`. burn's `LayerNorm` keeps its epsilon
//! private, so the fused norm uses `LayerNormConfig`'s default (1e-5), which every norm here
//! is built with.

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::flex::FlexTensor;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::nn::LayerNorm;
use burn::tensor::{Tensor, TensorData};
use rayon::prelude::*;

use crate::cpu::fastmath::{LANES, lane_fold, lane_fold_map};
use crate::cpu::flex_data::f32s;
use crate::own_backward::WithBackward;

/// The fused layer norm as a burn backend extension (flex only).
#[backend_extension(Flex, Autodiff)]
pub trait FusedLayerNorm: burn::backend::Backend {
    /// `γ ⊙ (x − μ)/√(σ² + ε) + β` over the last dimension of `x` (any rank); `γ`, `β`: `[d]`.
    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self>;
}

impl FusedLayerNorm for Flex {
    fn fused_layer_norm(x: FlexTensor, gamma: FlexTensor, beta: FlexTensor, epsilon: f64) -> FlexTensor {
        forward(&x, &gamma, &beta, epsilon).0
    }
}

impl<C: CheckpointStrategy> FusedLayerNorm for Autodiff<Flex, C> {
    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        Self::with_backward(
            [x, gamma, beta],
            |[x, gamma, beta], keep| {
                let (y, stats) = forward(&x, &gamma, &beta, epsilon);
                // `x`, `γ`, and `(μ, 1/√(σ² + ε))` of every row.
                (y, keep.then_some((x, gamma, stats)))
            },
            |(x, gamma, stats), dy, _| {
                let (dx, dgamma, dbeta) = backward(&x, &gamma, &stats, &dy);
                let d = dgamma.len();
                let vector = |v| Some(FlexTensor::from_data(TensorData::new(v, [d])));
                [Some(dx), vector(dgamma), vector(dbeta)]
            },
        )
    }
}

/// Rows per parallel task: about 16k elements.
fn rows_per_task(d: usize) -> usize {
    (1usize << 14).div_ceil(d.max(1))
}

/// The output and each row's `(μ, 1/√(σ² + ε))` (a `[rows, 2]` tensor).
fn forward(x: &FlexTensor, gamma: &FlexTensor, beta: &FlexTensor, epsilon: f64) -> (FlexTensor, FlexTensor) {
    let shape = x.layout().shape().clone();
    let (x, gamma, beta) = (f32s(x), f32s(gamma), f32s(beta));
    let d = gamma.len();
    assert!(d > 0 && x.len() % d == 0 && beta.len() == d, "layer norm: last dimension is not γ's");
    let rows = x.len() / d;
    let mut y = vec![0f32; x.len()];
    let mut stats = vec![0f32; 2 * rows];
    let task = rows_per_task(d);
    y.par_chunks_mut(task * d).zip(x.par_chunks(task * d)).zip(stats.par_chunks_mut(2 * task)).for_each(
        |((y, x), stats)| {
            for ((y, x), st) in y.chunks_mut(d).zip(x.chunks(d)).zip(stats.chunks_mut(2)) {
                let mean = lane_fold(x, 0.0, |a, b| a + b) / d as f32;
                let var = lane_fold_map(x, 0.0, |v| (v - mean) * (v - mean), |a, b| a + b) / d as f32;
                let rstd = 1.0 / (var + epsilon as f32).sqrt();
                for (((y, &x), &g), &b) in y.iter_mut().zip(x).zip(gamma.iter()).zip(beta.iter()) {
                    *y = (x - mean) * rstd * g + b;
                }
                st.copy_from_slice(&[mean, rstd]);
            }
        },
    );
    (
        FlexTensor::from_data(TensorData::new(y, shape)),
        FlexTensor::from_data(TensorData::new(stats, [rows, 2])),
    )
}

/// `∂x` (shaped as `x`), `∂γ` and `∂β` (see the module doc).
fn backward(
    x: &FlexTensor,
    gamma: &FlexTensor,
    stats: &FlexTensor,
    dy: &FlexTensor,
) -> (FlexTensor, Vec<f32>, Vec<f32>) {
    let shape = x.layout().shape().clone();
    let (x, gamma, stats, dy) = (f32s(x), f32s(gamma), f32s(stats), f32s(dy));
    let d = gamma.len();
    let task = rows_per_task(d);
    let mut dx = vec![0f32; x.len()];
    // Each task's partial ∂γ and ∂β, summed after.
    let partial: Vec<(Vec<f32>, Vec<f32>)> = dx
        .par_chunks_mut(task * d)
        .zip(x.par_chunks(task * d))
        .zip(dy.par_chunks(task * d))
        .zip(stats.par_chunks(2 * task))
        .map(|(((dx, x), dy), stats)| {
            let (mut dgamma, mut dbeta) = (vec![0f32; d], vec![0f32; d]);
            for (((dx, x), dy), st) in
                dx.chunks_mut(d).zip(x.chunks(d)).zip(dy.chunks(d)).zip(stats.chunks(2))
            {
                let (mean, rstd) = (st[0], st[1]);
                // Σ g and Σ g ⊙ x̂ in LANES lanes, g = ∂y ⊙ γ.
                let (mut sg, mut sgx) = ([0f32; LANES], [0f32; LANES]);
                for ((x, dy), gamma) in x.chunks(LANES).zip(dy.chunks(LANES)).zip(gamma.chunks(LANES)) {
                    for l in 0..x.len() {
                        let g = dy[l] * gamma[l];
                        sg[l] += g;
                        sgx[l] += g * (x[l] - mean) * rstd;
                    }
                }
                let a = sg.iter().sum::<f32>() / d as f32;
                let b = sgx.iter().sum::<f32>() / d as f32;
                for i in 0..d {
                    let xhat = (x[i] - mean) * rstd;
                    dx[i] = rstd * (dy[i] * gamma[i] - a - xhat * b);
                    dgamma[i] += dy[i] * xhat;
                    dbeta[i] += dy[i];
                }
            }
            (dgamma, dbeta)
        })
        .collect();
    let (mut dgamma, mut dbeta) = (vec![0f32; d], vec![0f32; d]);
    for (pg, pb) in partial {
        dgamma.iter_mut().zip(pg).for_each(|(a, b)| *a += b);
        dbeta.iter_mut().zip(pb).for_each(|(a, b)| *a += b);
    }
    (FlexTensor::from_data(TensorData::new(dx, shape)), dgamma, dbeta)
}

/// `norm(x)` on flex: one fused pass per row, with its own backward.
pub fn layer_norm<const D: usize>(norm: &LayerNorm, x: Tensor<D>) -> Tensor<D> {
    let (gamma, beta, epsilon) = super::parameters(norm);
    Tensor::from_dispatch(<Dispatch as FusedLayerNorm>::fused_layer_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        epsilon,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::module::Param;
    use burn::nn::LayerNormConfig;
    use burn::tensor::Device;

    /// [`crate::ops::layer_norm`] (this kernel on flex) equal to burn's `LayerNorm`, output and the gradients of `x`, `γ` and `β`, on an autodiff
    /// device and without, for a width that is a whole number of lanes and one that is not.
    #[test]
    fn equals_burns_layer_norm() {
        equals_burns_layer_norm_on(Device::flex());
    }

    /// The same for the GPU kernels ([`crate::layer_norm::gpu`]) on wgpu (lavapipe where there
    /// is no GPU).
    #[test]
    fn gpu_kernels_equal_burns_layer_norm() {
        let Some(gpu) = crate::testing::wgpu_or_skip() else { return };
        equals_burns_layer_norm_on(gpu);
    }

    fn equals_burns_layer_norm_on(plain: Device) {
        let d = plain.clone().autodiff();
        for shape in [[3, 50, 256], [2, 5, 37]] {
            let (n, w) = (shape.iter().product::<usize>(), shape[2]);
            let wave = |n: usize, k: f32, a: f32| {
                (0..n)
                    .map(|i| a * (i as f32 * k).sin() + 0.3 * (i as f32 * 0.013).cos())
                    .collect::<Vec<f32>>()
            };
            let x = Tensor::<3>::from_data(TensorData::new(wave(n, 0.37, 3.0), shape), &d);
            let r = Tensor::<3>::from_data(TensorData::new(wave(n, 1.3, 1.0), shape), &d);
            let make_norm = |d: &Device| {
                let mut norm = LayerNormConfig::new(w).init(d);
                norm.gamma =
                    Param::from_tensor(Tensor::from_data(TensorData::new(wave(w, 0.7, 1.0), [w]), d));
                let beta = Tensor::from_data(TensorData::new(wave(w, 2.1, 0.5), [w]), d);
                norm.beta = Some(Param::from_tensor(beta));
                norm
            };
            let norm = make_norm(&d);
            let run = |fused: bool| {
                let x = x.clone().require_grad();
                let y =
                    if fused { crate::ops::layer_norm(&norm, x.clone()) } else { norm.forward(x.clone()) };
                let g = (y.clone() * r.clone()).sum().backward();
                let beta = norm.beta.as_ref().expect("β").val();
                (
                    y.inner(),
                    x.grad(&g).expect("∂x"),
                    norm.gamma.val().grad(&g).expect("∂γ"),
                    beta.grad(&g).expect("∂β"),
                )
            };
            let (y1, dx1, dg1, db1) = run(true);
            let (y2, dx2, dg2, db2) = run(false);
            assert!(max_diff(y1, y2) < 1e-5, "{shape:?}: y");
            assert!(max_diff(dx1, dx2) < 1e-4, "{shape:?}: ∂x");
            assert!(max_diff(dg1, dg2) < 1e-3, "{shape:?}: ∂γ");
            assert!(max_diff(db1, db2) < 1e-3, "{shape:?}: ∂β");
            let norm_plain = make_norm(&plain);
            let x = Tensor::<3>::from_data(x.into_data(), &plain);
            assert!(
                max_diff(crate::ops::layer_norm(&norm_plain, x.clone()), norm_plain.forward(x)) < 1e-5,
                "{shape:?}: no autodiff"
            );
        }
    }
}
