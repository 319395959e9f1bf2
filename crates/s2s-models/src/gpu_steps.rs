//! A sequence's time steps as separate tensors, what a decoder loop reads one step at a time
//! (issue 12): `x[:, t, :]` for every `t`.
//!
//! Narrowed step by step under autodiff, each step's backward zero-fills a gradient of the
//! whole sequence, writes the step's slice into it and adds it to the sum of the others: three
//! launches of a sequence-sized pass a step on a GPU, where a step is bound by launches
//! (~28 µs of host time each through wgpu on an H100), and each strided step a copy forward.
//! On a GPU ([`time_steps`] on cubecl, not with burn's fusion, `gpu-tuned`) the sequence is
//! copied once to time-major order, each step is a contiguous view of it, and each step's
//! backward writes its gradient in place into one zeroed time-major buffer: one launch a step.
//! On the CPU (flex) the narrowed steps stay: there a step's backward is a memory pass, not a
//! launch.
//!
//! # Shapes
//! - `x`: `[batch, time, d]` → `time` tensors `[batch, d]`

use burn::tensor::Tensor;

/// `x[:, t, :]` (`[batch, d]`) for every step `t` of `x` (`[batch, time, d]`), with one
/// gradient write a step on a GPU (see the module doc).
pub fn time_steps(x: Tensor<3>) -> Vec<Tensor<2>> {
    #[cfg(not(feature = "gpu-tuned"))]
    if !crate::flex_data::is_flex(&x.device()) {
        return <burn::backend::Dispatch as gpu::GpuSteps>::gpu_time_steps(x.into_dispatch())
            .into_iter()
            .map(Tensor::from_dispatch)
            .collect();
    }
    let time = x.dims()[1];
    (0..time).map(|t| x.clone().narrow(1, t, 1).squeeze_dim::<2>(1)).collect()
}

#[cfg(not(feature = "gpu-tuned"))]
mod gpu {
    use std::sync::{Arc, Mutex};

    use burn::backend::autodiff::Autodiff;
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::ops::FloatTensorOps;
    use burn::backend::{backend_extension, tensor::FloatTensor};
    use burn::tensor::{DType, Shape, Slice};
    use burn_cubecl::CubeBackend;
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::tensor::CubeTensor;
    use cubecl::cube;
    use cubecl::prelude::*;

    use crate::cube_launch::launch_dims;

    /// The split as a burn backend extension (cubecl runtimes without fusion).
    #[backend_extension(Cube, Autodiff)]
    pub trait GpuSteps: burn::backend::Backend {
        /// `x[:, t, :]` for every `t` (see [`super::time_steps`]).
        fn gpu_time_steps(x: FloatTensor<Self>) -> Vec<FloatTensor<Self>>;
    }

    type Mm = CubeBackend;

    /// `dst[offset + i] = src[i]`, one element per thread.
    #[cube(launch)]
    fn write_at(src: &[f32], dst: &mut [f32], offset: u32) {
        let i = ABSOLUTE_POS;
        if i < src.len() {
            dst[offset as usize + i] = src[i];
        }
    }

    /// `x` (`[batch, time, d]`) in time-major order, `[time, batch, d]`, contiguous.
    fn time_major(x: CubeTensor) -> CubeTensor {
        assert!(
            x.dtype == DType::F32 && x.meta.shape().num_dims() == 3,
            "time steps: x is not f32 [batch, time, d]"
        );
        into_contiguous(Mm::float_swap_dims(x, 0, 1))
    }

    /// Step `t` of a time-major `[time, batch, d]` tensor: `[batch, d]`, a view where the
    /// step's offset meets the device's alignment.
    fn step(tm: &CubeTensor, t: usize) -> CubeTensor {
        let s = tm.meta.shape();
        let (batch, d) = (s[1], s[2]);
        let slice = Mm::float_slice(
            tm.clone(),
            &[Slice::new(t as isize, Some(t as isize + 1), 1), Slice::full(), Slice::full()],
        );
        Mm::float_reshape(slice, Shape::from([batch, d]))
    }

    impl GpuSteps for CubeBackend {
        fn gpu_time_steps(x: CubeTensor) -> Vec<CubeTensor> {
            let tm = time_major(x);
            (0..tm.meta.shape()[0]).map(|t| step(&tm, t)).collect()
        }
    }

    /// The time-major gradient the steps' backward passes write into, `[time, batch, d]`:
    /// allocated (zeroed) by the first step whose backward runs, which registers it as the
    /// time-major node's gradient.
    #[derive(Debug, Default)]
    struct Sink(Mutex<Option<CubeTensor>>);

    impl<C: CheckpointStrategy> GpuSteps for Autodiff<CubeBackend, C> {
        fn gpu_time_steps(x: FloatTensor<Self>) -> Vec<FloatTensor<Self>> {
            /// `x` → time-major: its gradient (the sink, complete once every step's backward
            /// has run, which burn does first: the steps are this node's only children)
            /// goes back to `x` as a view in `x`'s order.
            #[derive(Debug)]
            struct TimeMajorBackward;

            impl Backward<CubeBackend, 1> for TimeMajorBackward {
                type State = ();

                fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                    let [node] = ops.parents;
                    let grad = grads.consume::<CubeBackend>(&ops.node);
                    if let Some(node) = node {
                        grads.register::<CubeBackend>(node.id, Mm::float_swap_dims(grad, 0, 1));
                    }
                }
            }

            #[derive(Debug)]
            struct StepBackward;

            impl Backward<CubeBackend, 1> for StepBackward {
                /// The sink, this step, and the time-major shape.
                type State = (Arc<Sink>, usize, [usize; 3]);

                fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                    let [node] = ops.parents;
                    let grad = into_contiguous(grads.consume::<CubeBackend>(&ops.node));
                    let Some(node) = node else { return };
                    let (sink, t, shape) = ops.state;
                    let mut sink = sink.0.lock().unwrap_or_else(|e| e.into_inner());
                    let buffer = sink.get_or_insert_with(|| {
                        let zeros =
                            Mm::float_zeros(Shape::from(shape), &grad.device, burn::tensor::FloatDType::F32);
                        grads.register::<CubeBackend>(node.id, zeros.clone());
                        zeros
                    });
                    let n = grad.meta.num_elements();
                    assert_eq!(n, shape[1] * shape[2], "time steps: a step's gradient is not [batch, d]");
                    let (count, dim) = launch_dims(&grad, n);
                    // In place, though the gradient registry holds the buffer too: nothing
                    // reads it before the time-major node's backward, which runs after this.
                    write_at::launch(
                        &grad.client.clone(),
                        count,
                        dim,
                        grad.into_buffer_arg(),
                        buffer.clone().into_buffer_arg(),
                        (t * n) as u32,
                    );
                }
            }

            let (x, x_node) = x.into_parts();
            let tm = TimeMajorBackward.prepare::<C>([x_node]).compute_bound().stateless(time_major(x));
            let s = tm.primitive().meta.shape();
            let shape = [s[0], s[1], s[2]];
            let sink = Arc::new(Sink::default());
            (0..shape[0])
                .map(|t| {
                    let view = step(tm.primitive(), t);
                    match StepBackward.prepare::<C>([tm.node()]).compute_bound().stateful() {
                        OpsKind::Tracked(prep) => prep.finish((sink.clone(), t, shape), view),
                        OpsKind::UnTracked(prep) => prep.finish(view),
                    }
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::Distribution;

    /// On wgpu (lavapipe where there is no GPU) the steps and the gradient of a loss that uses
    /// some of them (step 1 twice, step 2 not at all) equal narrowing step by step, with a
    /// width whose step offsets miss the device's alignment and one whose do not.
    #[test]
    fn steps_and_their_gradient_equal_narrowing_on_wgpu() {
        let Some(plain) = crate::testing::wgpu_or_skip() else { return };
        let ad = plain.clone().autodiff();
        for (batch, time, d) in [(3, 4, 5), (4, 3, 64)] {
            let x = Tensor::<3>::random([batch, time, d], Distribution::Normal(0.0, 1.0), &plain);
            let w = Tensor::<3>::random([time, batch, d], Distribution::Normal(0.0, 1.0), &plain);
            let narrowed: Vec<Tensor<2>> =
                (0..time).map(|t| x.clone().narrow(1, t, 1).squeeze_dim::<2>(1)).collect();
            for (a, b) in time_steps(x.clone()).into_iter().zip(narrowed) {
                assert_eq!(a.to_data(), b.to_data(), "forward, d = {d}");
            }
            let grad = |split: fn(Tensor<3>) -> Vec<Tensor<2>>| {
                let xa = Tensor::<3>::from_data(x.to_data(), &ad).require_grad();
                let wa = Tensor::<3>::from_data(w.to_data(), &ad);
                let steps = split(xa.clone());
                let weight = |t: usize| wa.clone().narrow(0, t, 1).squeeze_dim::<2>(0);
                let mut loss = (steps[1].clone() * steps[1].clone()).sum();
                for (t, s) in steps.iter().enumerate().filter(|(t, _)| *t != 2) {
                    loss = loss + (s.clone() * weight(t)).sum();
                }
                xa.grad(&loss.backward()).unwrap()
            };
            let reference = |x: Tensor<3>| -> Vec<Tensor<2>> {
                let time = x.dims()[1];
                (0..time).map(|t| x.clone().narrow(1, t, 1).squeeze_dim::<2>(1)).collect()
            };
            assert!(max_diff(grad(time_steps), grad(reference)) < 1e-5, "gradient, d = {d}");
        }
    }
}
