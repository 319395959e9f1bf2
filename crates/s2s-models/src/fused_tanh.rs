//! `tanh` on the CPU through the vectorised [`crate::fastmath::tanh`], with its backward
//! `∂x = ∂y ⊙ (1 − y²)` (issue 12).
//!
//! flex's `tanh` calls glibc's scalar `tanhf` per element; in Bahdanau's additive score
//! `vᵀ tanh(W₁hᵢ + W₂s)` that is `[batch, src, attention]` elements at every decoder step, and
//! it was 16 % of a training step on the bahdanau bench shape. A burn `#[backend_extension]`
//! for flex; other backends keep burn's `tanh`.

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::tensor::{Tensor, TensorData};
use rayon::prelude::*;

use crate::flex_data::f32s;

/// The vectorised `tanh` as a burn backend extension (flex only).
#[backend_extension(Flex, Autodiff)]
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
            |x, _| crate::fastmath::tanh(x),
        )
    }
}

impl<C: CheckpointStrategy> FastTanh for Autodiff<Flex, C> {
    fn fast_tanh(x: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct FastTanhBackward;

        impl Backward<Flex, 1> for FastTanhBackward {
            /// The output `y`.
            type State = FlexTensor;

            fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                let [node] = ops.parents;
                let grad = grads.consume::<Flex>(&ops.node);
                if let Some(node) = node {
                    grads.register::<Flex>(
                        node.id,
                        map(
                            &ops.state,
                            Some(&grad),
                            #[inline(always)]
                            |y, g| g * (1.0 - y * y),
                        ),
                    );
                }
            }
        }

        let (x, node) = x.into_parts();
        match FastTanhBackward.prepare::<C>([node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let y = Flex::fast_tanh(x);
                prep.finish(y.clone(), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::fast_tanh(x)),
        }
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
                crate::fastmath::wide(
                    #[inline(always)]
                    || o.iter_mut().zip(a).zip(b).for_each(|((o, &a), &b)| *o = f(a, b)),
                )
            },
        ),
        None => out.par_chunks_mut(CHUNK).zip(a.par_chunks(CHUNK)).for_each(|(o, a)| {
            crate::fastmath::wide(
                #[inline(always)]
                || o.iter_mut().zip(a).for_each(|(o, &a)| *o = f(a, 0.0)),
            )
        }),
    }
    FlexTensor::from_data(TensorData::new(out, shape))
}

/// `tanh(x)`: the vectorised kernel on flex devices, burn's `tanh` elsewhere.
pub fn tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    if crate::flex_data::is_flex(&x.device()) {
        Tensor::from_dispatch(<Dispatch as FastTanh>::fast_tanh(x.into_dispatch()))
    } else {
        burn::tensor::activation::tanh(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::{Device, Distribution};

    /// Equal to burn's `tanh`, value and gradient, on an autodiff device and without.
    #[test]
    fn equals_burns_tanh() {
        let d = Device::flex().autodiff();
        d.seed(4);
        let x = Tensor::<3>::random([3, 70, 129], Distribution::Normal(0.0, 2.0), &d);
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
}
