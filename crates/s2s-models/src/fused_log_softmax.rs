//! `log_softmax` over the last dimension on the CPU in one fused pass per row, with its
//! backward `∂x = ∂y − softmax(x) Σ ∂y` (issue 12).
//!
//! Every decoder step normalises `[rows, vocabulary]` logits (8,000 classes in the benchmark).
//! burn composes `log_softmax` from a maximum, a subtraction, glibc's scalar `expf`, a sum, a
//! logarithm and another subtraction, each a pass over the logits and a new buffer. Here one
//! row is read three times — maximum, `Σ exp(x − max)` through the vectorised
//! [`crate::fastmath::exp`] in 16 lanes, and `x − max − ln Σ` — with rows in parallel. A burn
//! `#[backend_extension]` for flex; other backends keep burn's `log_softmax`.

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::tensor::{Tensor, TensorData};
use rayon::prelude::*;

use crate::fastmath::exp;
use crate::flex_data::f32s;

/// Lanes of the row reductions (what the compiler vectorises).
const LANES: usize = 16;

/// The fused `log_softmax` as a burn backend extension (flex only).
#[backend_extension(Flex, Autodiff)]
pub trait FastLogSoftmax: burn::backend::Backend {
    /// `log_softmax` over the last dimension, any rank.
    fn fast_log_softmax(x: FloatTensor<Self>) -> FloatTensor<Self>;
}

impl FastLogSoftmax for Flex {
    fn fast_log_softmax(x: FlexTensor) -> FlexTensor {
        rows(&x, None, |x, _, out| {
            let max = reduce(x, f32::NEG_INFINITY, f32::max);
            let lse = max + sum_exp(x, max).ln();
            out.iter_mut().zip(x).for_each(|(o, &x)| *o = x - lse);
        })
    }
}

impl<C: CheckpointStrategy> FastLogSoftmax for Autodiff<Flex, C> {
    fn fast_log_softmax(x: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct FastLogSoftmaxBackward;

        impl Backward<Flex, 1> for FastLogSoftmaxBackward {
            /// The output `y = log_softmax(x)`.
            type State = FlexTensor;

            fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                let [node] = ops.parents;
                let grad = grads.consume::<Flex>(&ops.node);
                if let Some(node) = node {
                    let dx = rows(&ops.state, Some(&grad), |y, g, out| {
                        let total = reduce(g, 0.0, |a, b| a + b);
                        for ((o, &y), &g) in out.iter_mut().zip(y).zip(g) {
                            *o = g - exp(y) * total;
                        }
                    });
                    grads.register::<Flex>(node.id, dx);
                }
            }
        }

        let (x, node) = x.into_parts();
        match FastLogSoftmaxBackward.prepare::<C>([node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let y = Flex::fast_log_softmax(x);
                prep.finish(y.clone(), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::fast_log_softmax(x)),
        }
    }
}

/// `f(row of a, row of b (or empty), output row)` for every row of the last dimension, groups
/// of rows in parallel.
fn rows(a: &FlexTensor, b: Option<&FlexTensor>, f: impl Fn(&[f32], &[f32], &mut [f32]) + Sync) -> FlexTensor {
    let shape = a.layout().shape().clone();
    let width = shape.as_slice().last().copied().unwrap_or(1).max(1);
    let a = f32s(a);
    let b = b.map(f32s);
    let mut out = vec![0f32; a.len()];
    let chunk = width * (1usize << 14).div_ceil(width);
    out.par_chunks_mut(chunk).zip(a.par_chunks(chunk)).enumerate().for_each(|(i, (o, a))| {
        let b = b.as_ref().map(|b| &b[i * chunk..i * chunk + a.len()]);
        for (r, (o, a)) in o.chunks_mut(width).zip(a.chunks(width)).enumerate() {
            f(a, b.map_or(&[][..], |b| &b[r * width..(r + 1) * width]), o);
        }
    });
    FlexTensor::from_data(TensorData::new(out, shape))
}

/// `op` folded over `x` in [`LANES`] independent lanes, then across them.
fn reduce(x: &[f32], init: f32, op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut lanes = [init; LANES];
    let mut blocks = x.chunks_exact(LANES);
    for block in &mut blocks {
        for (l, &v) in lanes.iter_mut().zip(block) {
            *l = op(*l, v);
        }
    }
    blocks.remainder().iter().fold(lanes.into_iter().fold(init, &op), |a, &v| op(a, v))
}

/// `Σ exp(xᵢ − max)` in [`LANES`] lanes.
fn sum_exp(x: &[f32], max: f32) -> f32 {
    let mut lanes = [0f32; LANES];
    let mut blocks = x.chunks_exact(LANES);
    for block in &mut blocks {
        for (l, &v) in lanes.iter_mut().zip(block) {
            *l += exp(v - max);
        }
    }
    blocks.remainder().iter().map(|&v| exp(v - max)).sum::<f32>() + lanes.iter().sum::<f32>()
}

/// `log_softmax` over the last dimension: the fused kernel on flex devices, burn's elsewhere.
pub fn log_softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    if crate::flex_data::is_flex(&x.device()) {
        Tensor::from_dispatch(<Dispatch as FastLogSoftmax>::fast_log_softmax(x.into_dispatch()))
    } else {
        burn::tensor::activation::log_softmax(x, D - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::Device;

    /// Equal to a float64 reference, value and gradient (`∂x = ∂y − p Σ∂y`), on an autodiff
    /// device and without, with a row width that leaves a partial lane block and rows spanning
    /// several chunks; and to burn's `log_softmax`.
    #[test]
    fn equals_a_float64_reference() {
        let d = Device::flex().autodiff();
        for shape in [[2, 3, 8003], [1, 4, 5]] {
            let width = shape[2];
            let n = shape.iter().product::<usize>();
            let xs: Vec<f32> =
                (0..n).map(|i| 8.0 * (i as f32 * 0.37).sin() * (i as f32 * 0.011).cos()).collect();
            let gs: Vec<f32> = (0..n).map(|i| (i as f32 * 1.3).cos()).collect();
            let x = Tensor::<3>::from_data(TensorData::new(xs.clone(), shape), &d);
            let w = Tensor::<3>::from_data(TensorData::new(gs.clone(), shape), &d);
            let (mut want_y, mut want_dx) = (vec![0f64; xs.len()], vec![0f64; xs.len()]);
            for r in 0..xs.len() / width {
                let row = r * width..(r + 1) * width;
                let max = xs[row.clone()].iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
                let lse = max + xs[row.clone()].iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
                let total: f64 = gs[row.clone()].iter().map(|&g| g as f64).sum();
                for i in row {
                    want_y[i] = xs[i] as f64 - lse;
                    want_dx[i] = gs[i] as f64 - want_y[i].exp() * total;
                }
            }
            let worst = |got: Tensor<3>, want: &[f64]| {
                let got: Vec<f32> = got.into_data().try_to_vec().unwrap();
                got.iter().zip(want).map(|(&a, &b)| (a as f64 - b).abs()).fold(0.0, f64::max)
            };
            let xg = x.clone().require_grad();
            let y = log_softmax(xg.clone());
            let grads = (y.clone() * w.clone()).sum().backward();
            let (ey, edx) = (worst(y.inner(), &want_y), worst(xg.grad(&grads).expect("∂x"), &want_dx));
            assert!(ey < 1e-5 && edx < 1e-6, "{shape:?}: value off by {ey}, gradient by {edx}");
            let plain = x.inner();
            let burn = burn::tensor::activation::log_softmax(plain.clone(), 2);
            assert!(max_diff(log_softmax(plain), burn) < 1e-4);
        }
    }

    /// Masked classes (−∞) get probability 0, the others still sum to 1.
    #[test]
    fn negative_infinity_is_probability_zero() {
        let d = Device::flex();
        let x = Tensor::<2>::from_data(TensorData::new(vec![1.0, f32::NEG_INFINITY, 2.0, 0.5], [1, 4]), &d);
        let p: Vec<f32> = log_softmax(x).exp().into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(p[1], 0.0);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6, "{p:?}");
    }
}
