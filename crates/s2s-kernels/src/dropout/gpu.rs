//! Dropout (Srivastava et al., 2014) as one cubecl kernel each way (wgpu): `y = x ⊙ D`,
//! `∂x = ∂y ⊙ D`, where `D` is `1/keep` with probability `keep` and 0 otherwise.
//!
//! burn's `Dropout::forward` draws a Bernoulli tensor on the device and multiplies twice:
//! three launches forward and two backward, each ~28 µs of host time through wgpu (measured on
//! an H100), at every dropout site of every step. Here element `e`'s mask is a hash of the
//! seed and `e` (lowbias32, C. Wellons, applied twice), recomputed in backward, so nothing is
//! drawn or stored on the device: one launch forward, one backward. Not the CPU's SplitMix64
//! stream ([`crate::dropout::mask`]): 64-bit integers are an optional feature on Vulkan
//! devices. The seed comes from the host ([`crate::device::draw_dropout_seed`]): drawing it on the
//! device would read it back, a synchronisation at every site. Not with burn's fusion
//! (`gpu-tuned`).
//!
//! The same mask function serves the GPU attention's dropout on its weights
//! ([`crate::attention::gpu`]), and the dropout is fused with its neighbour where the
//! Transformer has one:
//!
//! - the feed-forward ReLU ([`relu_dropout`], through [`crate::ops::relu_dropout`]): forward
//!   `max(x, 0) · D`, backward `∂y / keep` where the output is positive, so backward needs
//!   only the output;
//! - the residual ([`add_dropout`], through [`crate::ops::add_dropout`] from
//!   `Residual::output`): forward `x + y ⊙ D`, backward `∂x = ∂out`, `∂y = ∂out ⊙ D`. Its wgpu
//!   test uses a weighted loss so that a gradient swapped between `x` and `y` shows; leaving
//!   the mask out of `∂y` fails it.
//!
//! Flex keeps burn's ReLU, `x + dropout(y)` and the CPU mask.
//!
//! # Shapes
//! - `x`: any shape → the same shape

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::{backend_extension, tensor::FloatTensor};
use burn::tensor::DType;
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::cube;
use cubecl::prelude::*;

use crate::gpu::launch::{empty, launch_dims};
use crate::own_backward::WithBackward;

/// A 32-bit integer hash (lowbias32, C. Wellons).
#[cube]
pub(crate) fn mix(x: u32) -> u32 {
    let mut x = x;
    x ^= x >> 16;
    x *= 0x7feb_352du32;
    x ^= x >> 15;
    x *= 0x846c_a68bu32;
    x ^= x >> 16;
    x
}

/// `D` at element `e`: `scale` (`1/keep`) where `mix(mix(e ^ seed_lo) ^ seed_hi) >> 8` is
/// below the 24-bit `threshold` (`crate::dropout::mask::threshold(keep)`), else 0.
#[cube]
pub(crate) fn mask_at(e: u32, seed_lo: u32, seed_hi: u32, threshold: u32, scale: f32) -> f32 {
    let r = mix(mix(e ^ seed_lo) ^ seed_hi) >> 8;
    select(r < threshold, scale, 0.0f32)
}

/// [`mask_at`] with the seed from `seeds[2·slot..]` unless `slot` is
/// [`crate::gpu::step_scalars::NO_SLOT`] (a captured step's seed, written before each replay).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn mask_in(
    e: u32,
    seeds: &[u32],
    slot: u32,
    seed_lo: u32,
    seed_hi: u32,
    threshold: u32,
    scale: f32,
) -> f32 {
    let mut lo = seed_lo;
    let mut hi = seed_hi;
    if slot != 0xFFFF_FFFFu32 {
        lo = seeds[(2 * slot) as usize];
        hi = seeds[(2 * slot + 1) as usize];
    }
    mask_at(e, lo, hi, threshold, scale)
}

/// The mask [`mask_at`] gives for `(seed, keep)` over `n` elements, computed on the host
/// (what the tests compare the kernels with, and the references multiply by).
pub(crate) fn dropout_mask(seed: u64, n: usize, keep: f32) -> Vec<f32> {
    let mix = |mut x: u32| {
        x ^= x >> 16;
        x = x.wrapping_mul(0x7feb_352d);
        x ^= x >> 15;
        x = x.wrapping_mul(0x846c_a68b);
        x ^ (x >> 16)
    };
    let threshold = crate::dropout::mask::threshold(keep);
    let keeps = |e: u32| mix(mix(e ^ seed as u32) ^ (seed >> 32) as u32) >> 8 < threshold;
    (0..n as u32).map(|e| if keeps(e) { 1.0 / keep } else { 0.0 }).collect()
}

/// `out[e] = x[e] · D[e]`, one element per thread.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn dropout_kernel(
    x: &[f32],
    out: &mut [f32],
    seeds: &[u32],
    slot: u32,
    seed_lo: u32,
    seed_hi: u32,
    threshold: u32,
    scale: f32,
) {
    let e = ABSOLUTE_POS;
    if e < x.len() {
        out[e] = x[e] * mask_in(e as u32, seeds, slot, seed_lo, seed_hi, threshold, scale);
    }
}

/// `out[e] = max(x[e], 0) · D[e]`, one element per thread.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn relu_dropout_kernel(
    x: &[f32],
    out: &mut [f32],
    seeds: &[u32],
    slot: u32,
    seed_lo: u32,
    seed_hi: u32,
    threshold: u32,
    scale: f32,
) {
    let e = ABSOLUTE_POS;
    if e < x.len() {
        let v = x[e];
        out[e] = select(v > 0.0f32, v, 0.0f32)
            * mask_in(e as u32, seeds, slot, seed_lo, seed_hi, threshold, scale);
    }
}

/// `out[e] = x[e] + y[e] · D[e]`, one element per thread.
#[cube(launch)]
fn add_dropout_kernel(
    x: &[f32],
    y: &[f32],
    out: &mut [f32],
    seeds: &[u32],
    slot: u32,
    seed_lo: u32,
    seed_hi: u32,
    threshold: u32,
    scale: f32,
) {
    let e = ABSOLUTE_POS;
    if e < out.len() {
        out[e] = x[e] + y[e] * mask_in(e as u32, seeds, slot, seed_lo, seed_hi, threshold, scale);
    }
}

/// `∂x[e] = ∂y[e] · scale` where `y[e] > 0` (the unit was positive and kept), else 0.
#[cube(launch)]
fn relu_dropout_backward(y: &[f32], dy: &[f32], dx: &mut [f32], scale: f32) {
    let e = ABSOLUTE_POS;
    if e < dx.len() {
        dx[e] = select(y[e] > 0.0f32, dy[e] * scale, 0.0f32);
    }
}

/// `x ⊙ D` for the mask of `(seed, keep)`.
pub fn dropout<const D: usize>(x: burn::tensor::Tensor<D>, seed: u64, keep: f32) -> burn::tensor::Tensor<D> {
    burn::tensor::Tensor::from_dispatch(<burn::backend::Dispatch as GpuDropout>::gpu_dropout(
        x.into_dispatch(),
        seed,
        keep,
    ))
}

/// `relu(x) ⊙ D` for the mask of `(seed, keep)` (`keep` 1: `relu(x)`).
pub fn relu_dropout<const D: usize>(
    x: burn::tensor::Tensor<D>,
    seed: u64,
    keep: f32,
) -> burn::tensor::Tensor<D> {
    burn::tensor::Tensor::from_dispatch(<burn::backend::Dispatch as GpuDropout>::gpu_relu_dropout(
        x.into_dispatch(),
        seed,
        keep,
    ))
}

/// `x + y ⊙ D` for the mask of `(seed, keep)`.
pub fn add_dropout<const D: usize>(
    x: burn::tensor::Tensor<D>,
    y: burn::tensor::Tensor<D>,
    seed: u64,
    keep: f32,
) -> burn::tensor::Tensor<D> {
    burn::tensor::Tensor::from_dispatch(<burn::backend::Dispatch as GpuDropout>::gpu_add_dropout(
        x.into_dispatch(),
        y.into_dispatch(),
        seed,
        keep,
    ))
}

/// Dropout as a burn backend extension (cubecl runtimes without fusion).
#[backend_extension(Cube, Autodiff)]
pub trait GpuDropout: burn::backend::Backend {
    /// `x ⊙ D` for the mask of `(seed, keep)` (see the module doc).
    fn gpu_dropout(x: FloatTensor<Self>, seed: u64, keep: f32) -> FloatTensor<Self>;

    /// `relu(x) ⊙ D` (`keep` 1: `relu(x)`): the Transformer's feed-forward hidden layer, one
    /// launch each way where burn's ReLU (a comparison and a fill each way) and the dropout
    /// were four.
    fn gpu_relu_dropout(x: FloatTensor<Self>, seed: u64, keep: f32) -> FloatTensor<Self>;

    /// `x + y ⊙ D` (`x` and `y` of one shape): a residual connection with dropout on its
    /// branch, one launch forward where the dropout and the add were two. Backward passes
    /// `∂out` to `x` as it is and `∂out ⊙ D` to `y`, one launch.
    fn gpu_add_dropout(x: FloatTensor<Self>, y: FloatTensor<Self>, seed: u64, keep: f32)
    -> FloatTensor<Self>;
}

/// The mask's kernel arguments from its seed and keep share: the seed's slot
/// ([`crate::gpu::step_scalars::slot_of`]), its two halves, the hash threshold below which an
/// element is kept, and the kept elements' scale `1 / keep`.
fn mask_args(seed: u64, keep: f32) -> (u32, u32, u32, u32, f32) {
    let slot = crate::gpu::step_scalars::slot_of(seed);
    (slot, seed as u32, (seed >> 32) as u32, crate::dropout::mask::threshold(keep), 1.0 / keep)
}

/// `x` made contiguous, an output buffer of its shape and the launch size for its elements.
fn elementwise(x: CubeTensor) -> (CubeTensor, CubeTensor, CubeCount, CubeDim) {
    assert!(x.dtype == DType::F32, "the dropout kernel computes in f32");
    let n = x.meta.num_elements();
    assert!(n <= u32::MAX as usize, "the dropout kernel indexes elements in 32 bits");
    let x = into_contiguous(x);
    let out = empty(&x, x.meta.shape().clone());
    let (count, dim) = launch_dims(&x, n);
    (x, out, count, dim)
}

/// `x + y ⊙ D`, contiguous, in their (one) shape.
fn add_apply(x: CubeTensor, y: CubeTensor, seed: u64, keep: f32) -> CubeTensor {
    assert!(y.dtype == DType::F32, "the dropout kernel computes in f32");
    assert_eq!(x.meta.shape(), y.meta.shape(), "a residual adds tensors of one shape");
    let (x, out, count, dim) = elementwise(x);
    let (slot, lo, hi, threshold, scale) = mask_args(seed, keep);
    let seeds = crate::gpu::step_scalars::seeds(&x).into_buffer_arg();
    let (client, y) = (x.client.clone(), into_contiguous(y));
    let (x, y, o) = (x.into_buffer_arg(), y.into_buffer_arg(), out.clone().into_buffer_arg());
    add_dropout_kernel::launch(&client, count, dim, x, y, o, seeds, slot, lo, hi, threshold, scale);
    out
}

/// `x ⊙ D` (with `relu`, `relu(x) ⊙ D`), contiguous, in `x`'s shape.
fn apply_with(x: CubeTensor, seed: u64, keep: f32, relu: bool) -> CubeTensor {
    let (x, out, count, dim) = elementwise(x);
    let (slot, lo, hi, threshold, scale) = mask_args(seed, keep);
    let seeds = crate::gpu::step_scalars::seeds(&x).into_buffer_arg();
    let (client, x_arg, out_arg) = (x.client.clone(), x.into_buffer_arg(), out.clone().into_buffer_arg());
    if relu {
        relu_dropout_kernel::launch(
            &client, count, dim, x_arg, out_arg, seeds, slot, lo, hi, threshold, scale,
        );
    } else {
        dropout_kernel::launch(&client, count, dim, x_arg, out_arg, seeds, slot, lo, hi, threshold, scale);
    }
    out
}

/// `x ⊙ D`, contiguous, in `x`'s shape.
fn apply(x: CubeTensor, seed: u64, keep: f32) -> CubeTensor {
    apply_with(x, seed, keep, false)
}

impl GpuDropout for CubeBackend {
    fn gpu_dropout(x: CubeTensor, seed: u64, keep: f32) -> CubeTensor {
        apply(x, seed, keep)
    }

    fn gpu_relu_dropout(x: CubeTensor, seed: u64, keep: f32) -> CubeTensor {
        apply_with(x, seed, keep, true)
    }

    fn gpu_add_dropout(x: CubeTensor, y: CubeTensor, seed: u64, keep: f32) -> CubeTensor {
        add_apply(x, y, seed, keep)
    }
}

impl<C: CheckpointStrategy> GpuDropout for Autodiff<CubeBackend, C> {
    fn gpu_dropout(x: FloatTensor<Self>, seed: u64, keep: f32) -> FloatTensor<Self> {
        Self::with_backward(
            [x],
            // Keeps the mask's seed and keep share: `D` is recomputed.
            |[x], _| (apply(x, seed, keep), Some((seed, keep))),
            |(seed, keep), dy, _| [Some(apply(dy, seed, keep))],
        )
    }

    fn gpu_relu_dropout(x: FloatTensor<Self>, seed: u64, keep: f32) -> FloatTensor<Self> {
        Self::with_backward(
            [x],
            |[x], keep_state| {
                let y = apply_with(x, seed, keep, true);
                // The output (positive exactly where the unit was positive and kept) and `1/keep`.
                (y.clone(), keep_state.then(|| (y, 1.0 / keep)))
            },
            |(y, scale): (CubeTensor, f32), dy, _| {
                let dy = into_contiguous(dy);
                let dx = empty(&y, y.meta.shape().clone());
                let (count, dim) = launch_dims(&y, y.meta.num_elements());
                relu_dropout_backward::launch(
                    &y.client.clone(),
                    count,
                    dim,
                    y.into_buffer_arg(),
                    dy.into_buffer_arg(),
                    dx.clone().into_buffer_arg(),
                    scale,
                );
                [Some(dx)]
            },
        )
    }

    fn gpu_add_dropout(
        x: FloatTensor<Self>,
        y: FloatTensor<Self>,
        seed: u64,
        keep: f32,
    ) -> FloatTensor<Self> {
        Self::with_backward(
            [x, y],
            // Keeps the mask's seed and keep share: `D` is recomputed.
            |[x, y], _| (add_apply(x, y, seed, keep), Some((seed, keep))),
            |(seed, keep), dy, [_, y_needed]| {
                let dy_of_y = y_needed.then(|| apply(dy.clone(), seed, keep));
                [Some(dy), dy_of_y]
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::backend::Dispatch;
    use burn::tensor::{Distribution, Tensor, TensorData};

    /// On wgpu (lavapipe where there is no GPU) the kernel applies the host's mask forward,
    /// and the gradient of `Σ w ⊙ dropout(x)` is `w ⊙ D`; the mask keeps about `keep`.
    #[test]
    fn kernel_applies_the_hash_mask_both_ways_on_wgpu() {
        let Some(plain) = crate::testing::wgpu_or_skip() else { return };
        let ad = plain.clone().autodiff();
        let (shape, seed, keep) = ([37, 101], 0x1234_5678_9abc_def0u64, 0.7f32);
        let x = Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), &plain);
        let w = Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), &plain);
        let mask = dropout_mask(seed, 37 * 101, keep);
        let kept = mask.iter().filter(|&&m| m != 0.0).count() as f32 / mask.len() as f32;
        assert!((kept - keep).abs() < 0.03, "kept {kept}");
        let mask = Tensor::<2>::from_data(TensorData::new(mask, shape), &plain);
        let drop = |x: Tensor<2>| {
            Tensor::<2>::from_dispatch(<Dispatch as GpuDropout>::gpu_dropout(x.into_dispatch(), seed, keep))
        };
        assert!(max_diff(drop(x.clone()), x.clone() * mask.clone()) < 1e-6, "forward");
        let xa = Tensor::<2>::from_data(x.to_data(), &ad).require_grad();
        let loss = (drop(xa.clone()) * Tensor::<2>::from_data(w.to_data(), &ad)).sum();
        let g = xa.grad(&loss.backward()).unwrap();
        assert!(max_diff(g, w * mask) < 1e-6, "backward");
    }

    /// On wgpu `relu` then dropout in one kernel equals burn's ReLU followed by the dropout
    /// kernel, forward and backward, with dropout (`keep` 0.7) and without (`keep` 1), on
    /// inputs that include exact zeros.
    #[test]
    fn relu_dropout_equals_relu_then_dropout_on_wgpu() {
        let Some(plain) = crate::testing::wgpu_or_skip() else { return };
        let ad = plain.clone().autodiff();
        let (shape, seed) = ([37, 101], 0x0bad_cafe_f00d_1234u64);
        let x = Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), &plain);
        let x = x.clone().mask_fill(x.clone().abs().lower_elem(0.05), 0.0);
        let w = Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), &plain);
        for keep in [0.7f32, 1.0] {
            let run = |fused: bool| {
                let xa = Tensor::<2>::from_data(x.to_data(), &ad).require_grad();
                let y = if fused {
                    <Dispatch as GpuDropout>::gpu_relu_dropout(xa.clone().into_dispatch(), seed, keep)
                } else {
                    let r = burn::tensor::activation::relu(xa.clone()).into_dispatch();
                    <Dispatch as GpuDropout>::gpu_dropout(r, seed, keep)
                };
                let y = Tensor::<2>::from_dispatch(y);
                let loss = (y.clone() * Tensor::<2>::from_data(w.to_data(), &ad)).sum();
                (y.inner(), xa.grad(&loss.backward()).unwrap())
            };
            let ((y1, g1), (y2, g2)) = (run(true), run(false));
            assert!(max_diff(y1, y2) < 1e-6, "forward, keep {keep}");
            assert!(max_diff(g1, g2) < 1e-6, "backward, keep {keep}");
        }
    }

    /// On wgpu the residual kernel `x + y ⊙ D` equals `x +` the dropout kernel's `y ⊙ D`,
    /// forward and in both gradients (weighted, so a gradient swapped between `x` and `y` or
    /// a mask left out of one of them shows).
    #[test]
    fn add_dropout_equals_add_of_dropout_on_wgpu() {
        let Some(plain) = crate::testing::wgpu_or_skip() else { return };
        let ad = plain.clone().autodiff();
        let (shape, seed, keep) = ([23, 57], 0x5eed_0123_4567_89abu64, 0.8f32);
        let random = || Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), &plain);
        let (x, y, w) = (random(), random(), random());
        let run = |fused: bool| {
            let xa = Tensor::<2>::from_data(x.to_data(), &ad).require_grad();
            let ya = Tensor::<2>::from_data(y.to_data(), &ad).require_grad();
            let out = if fused {
                Tensor::<2>::from_dispatch(<Dispatch as GpuDropout>::gpu_add_dropout(
                    xa.clone().into_dispatch(),
                    ya.clone().into_dispatch(),
                    seed,
                    keep,
                ))
            } else {
                let dropped = <Dispatch as GpuDropout>::gpu_dropout(ya.clone().into_dispatch(), seed, keep);
                xa.clone() + Tensor::<2>::from_dispatch(dropped)
            };
            let loss = (out.clone() * Tensor::<2>::from_data(w.to_data(), &ad)).sum();
            let grads = loss.backward();
            (out.inner(), xa.grad(&grads).unwrap(), ya.grad(&grads).unwrap())
        };
        let ((o1, gx1, gy1), (o2, gx2, gy2)) = (run(true), run(false));
        assert!(max_diff(o1, o2) < 1e-6, "forward");
        assert!(max_diff(gx1, gx2) < 1e-6, "∂x");
        assert!(max_diff(gy1, gy2) < 1e-6, "∂y");
    }
}
