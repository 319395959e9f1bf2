//! `tanh` on the CPU through the vectorised [`crate::cpu::fastmath::tanh`], with its backward
//! `∂x = ∂y ⊙ (1 − y²)`.
//!
//! flex's `tanh` calls glibc's scalar `tanhf` per element; in Bahdanau's additive score
//! `vᵀ tanh(W₁hᵢ + W₂s)` that is `[batch, src, attention]` elements at every decoder step, and
//! it was 16 % of a training step on the bahdanau bench shape. A burn `#[backend_extension]`
//! for flex, and for cubecl ([`gpu`]: one launch each way, where burn's backward composes
//! four — Luong's `h̃ₜ = tanh(W_c [cₜ; sₜ])` at every decoder step); under burn's fusion
//! (`gpu-tuned`) burn's `tanh`.

pub(crate) mod reference;

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::flex::FlexTensor;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::tensor::{Tensor, TensorData};
use rayon::prelude::*;

use crate::cpu::flex_data::f32s;
use crate::own_backward::WithBackward;

/// The vectorised `tanh` as a burn backend extension (flex, and cubecl without fusion).
#[backend_extension(Flex, Cube: cfg(not(feature = "gpu-tuned")), Autodiff)]
pub trait FastTanh: burn::backend::Backend {
    /// `tanh` element by element, any shape.
    fn fast_tanh(x: FloatTensor<Self>) -> FloatTensor<Self>;
}

impl FastTanh for Flex {
    fn fast_tanh(x: FlexTensor) -> FlexTensor {
        map(
            &x,
            None,
            #[inline(always)]
            |x, _| crate::cpu::fastmath::tanh(x),
        )
    }
}

impl<C: CheckpointStrategy> FastTanh for Autodiff<Flex, C> {
    fn fast_tanh(x: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::with_backward(
            [x],
            |[x], keep| {
                let y = Flex::fast_tanh(x);
                // The output `y`.
                (y.clone(), keep.then_some(y))
            },
            |y, dy, _| {
                [Some(map(
                    &y,
                    Some(&dy),
                    #[inline(always)]
                    |y, g| g * (1.0 - y * y),
                ))]
            },
        )
    }
}

/// `f(a, b)` element by element over `a` (and `b`, same shape, or 0), in parallel chunks.
fn map(a: &FlexTensor, b: Option<&FlexTensor>, f: impl Fn(f32, f32) -> f32 + Sync) -> FlexTensor {
    const CHUNK: usize = 1 << 14;
    let shape = a.layout().shape().clone();
    let a = f32s(a);
    let mut out = vec![0f32; a.len()];
    match b.map(f32s) {
        Some(b) => out.par_chunks_mut(CHUNK).zip(a.par_chunks(CHUNK)).zip(b.par_chunks(CHUNK)).for_each(
            |((o, a), b)| {
                crate::cpu::fastmath::wide(
                    #[inline(always)]
                    || o.iter_mut().zip(a).zip(b).for_each(|((o, &a), &b)| *o = f(a, b)),
                )
            },
        ),
        None => out.par_chunks_mut(CHUNK).zip(a.par_chunks(CHUNK)).for_each(|(o, a)| {
            crate::cpu::fastmath::wide(
                #[inline(always)]
                || o.iter_mut().zip(a).for_each(|(o, &a)| *o = f(a, 0.0)),
            )
        }),
    }
    FlexTensor::from_data(TensorData::new(out, shape))
}

/// `tanh(x)`: the vectorised kernel on flex devices, the cubecl kernels on a GPU (not under
/// burn's fusion, `gpu-tuned`: [`crate::ops::tanh`] runs the reference there).
pub fn tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as FastTanh>::fast_tanh(x.into_dispatch()))
}

/// `tanh` and its backward as cubecl kernels, one launch each way.
#[cfg(not(feature = "gpu-tuned"))]
mod gpu {
    use burn::backend::autodiff::Autodiff;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::tensor::FloatTensor;
    use burn::tensor::DType;
    use burn_cubecl::CubeBackend;
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::tensor::CubeTensor;
    use cubecl::cube;
    use cubecl::prelude::*;

    use crate::gpu::launch::{empty, launch_dims};
    use crate::own_backward::WithBackward;

    /// `y = tanh(x)`, one element per thread.
    #[cube(launch)]
    fn tanh_forward(x: &[f32], y: &mut [f32]) {
        let n = ABSOLUTE_POS;
        if n < y.len() {
            y[n] = f32::tanh(x[n]);
        }
    }

    /// `∂x = ∂y ⊙ (1 − y²)`, one element per thread.
    #[cube(launch)]
    fn tanh_backward(y: &[f32], dy: &[f32], dx: &mut [f32]) {
        let n = ABSOLUTE_POS;
        if n < dx.len() {
            dx[n] = dy[n] * (1.0 - y[n] * y[n]);
        }
    }

    fn forward(x: CubeTensor) -> CubeTensor {
        assert_eq!(x.dtype, DType::F32, "the tanh kernel computes in f32");
        let x = into_contiguous(x);
        let y = empty(&x, x.meta.shape().clone());
        let (count, dim) = launch_dims(&x, x.meta.num_elements());
        tanh_forward::launch(&x.client.clone(), count, dim, x.into_buffer_arg(), y.clone().into_buffer_arg());
        y
    }

    impl super::FastTanh for CubeBackend {
        fn fast_tanh(x: CubeTensor) -> CubeTensor {
            forward(x)
        }
    }

    impl<C: CheckpointStrategy> super::FastTanh for Autodiff<CubeBackend, C> {
        fn fast_tanh(x: FloatTensor<Self>) -> FloatTensor<Self> {
            Self::with_backward(
                [x],
                |[x], keep| {
                    let y = forward(x);
                    // The output `y` (contiguous).
                    (y.clone(), keep.then_some(y))
                },
                |y: CubeTensor, dy, _| {
                    let dy = into_contiguous(dy);
                    let dx = empty(&y, y.meta.shape().clone());
                    let (count, dim) = launch_dims(&y, y.meta.num_elements());
                    tanh_backward::launch(
                        &y.client.clone(),
                        count,
                        dim,
                        y.into_buffer_arg(),
                        dy.into_buffer_arg(),
                        dx.clone().into_buffer_arg(),
                    );
                    [Some(dx)]
                },
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::{Device, Distribution};

    /// Equal to burn's `tanh` on `d` (autodiff), value and gradient, and without autodiff;
    /// inputs drawn with standard deviation `scale`.
    fn check(d: Device, scale: f64) {
        d.seed(4);
        let x = Tensor::<3>::random([3, 70, 129], Distribution::Normal(0.0, scale), &d);
        let w = Tensor::<3>::random([3, 70, 129], Distribution::Normal(0.0, 1.0), &d);
        let run = |fast: bool| {
            let x = x.clone().require_grad();
            let y = if fast { tanh(x.clone()) } else { burn::tensor::activation::tanh(x.clone()) };
            let g = (y.clone() * w.clone()).sum().backward();
            (y.inner(), x.grad(&g).expect("∂x"))
        };
        let ((y1, g1), (y2, g2)) = (run(true), run(false));
        assert!(max_diff(y1, y2) < 1e-6);
        // `∂x = w ⊙ (1 − y²)`: an error `ε` in `y` (~1e-7 here) moves it by `2|w y| ε`, and
        // |w| reaches 4 among these 27k draws (the bound was 1e-6 unseeded: a third of runs
        // failed).
        assert!(max_diff(g1, g2) < 1e-6 * 8.0);
        let plain = x.inner();
        assert!(max_diff(tanh(plain.clone()), burn::tensor::activation::tanh(plain)) < 1e-6);
    }

    #[test]
    fn equals_burns_tanh() {
        check(Device::flex().autodiff(), 2.0);
    }

    /// The cubecl kernels on wgpu (lavapipe where there is no GPU), inputs out to ±40.
    #[cfg(not(feature = "gpu-tuned"))]
    #[test]
    fn kernels_equal_burns_tanh_on_wgpu() {
        let Some(plain) = crate::testing::wgpu_or_skip() else { return };
        check(plain.autodiff(), 8.0);
    }
}
