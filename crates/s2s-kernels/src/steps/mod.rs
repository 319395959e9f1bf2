//! A sequence's time steps as separate tensors, what a decoder loop reads one step at a time:
//! `x[:, t, :]` for every `t` (the embedding projection, Bahdanau's embeddings).
//!
//! Narrowed step by step under autodiff, each step's backward zero-fills a gradient of the
//! whole sequence, writes the step's slice into it and adds it to the sum of the others: three
//! launches of a sequence-sized pass a step on a GPU, where a step is bound by launches
//! (~28 µs of host time each through wgpu on an H100), and each strided step a copy forward.
//! On a GPU ([`time_steps`] on cubecl, not with burn's fusion, `gpu-tuned`) the sequence is
//! copied once to time-major order, each step is a contiguous view of it, and each step's
//! backward writes its gradient in place into one zeroed time-major buffer: one launch a step
//! instead of three. The buffer is registered as the node's gradient by the first step to run
//! and written by the others through the same handle: no other operation reads it before the
//! node's own backward, which runs after all steps'. On the CPU (flex) under autodiff the same
//! layout serves: narrowed steps cost a zero fill and an add of the whole sequence's gradient
//! a step (`time²` passes, 8 % of Luong's training step on one thread, where the second
//! thread waits), the time-major steps one copy of the sequence forward and one write of each
//! step's gradient back (attention RNN training +14–15 %, the weights unchanged to the bit).
//! Without autodiff (decoding) the narrowed steps stay. Both backends share the autodiff
//! nodes; each supplies only its layout and its buffer (the private trait `TimeMajor`).
//!
//! The way back, [`stack_steps`] (a decoder's per-step outputs into one `[batch, time, d]`
//! tensor): burn's `stack` writes each step with a slice-assign of its own, a launch a step,
//! and its backward hands each step a strided view that the step's consumer copies. On a GPU
//! the steps are written [`GROUP`] (eight) at a time by one launch, in place, through a chain
//! of autodiff nodes, each taking the output so far and eight steps (burn's node has a fixed
//! number of parents, and its `backend_extension` routes no arrays or `Vec`s, so the eight are
//! eight arguments); backward makes one time-major copy of the gradient whose contiguous views
//! are the steps' gradients, and hands the same copy down the chain. Used for the readouts,
//! the attention weights, and the step-by-step RNN layer.
//!
//! # Shapes
//! - `x`: `[batch, time, d]` → `time` tensors `[batch, d]`
//! - [`stack_steps`]: `time` tensors `[batch, d]` → `[batch, time, d]`

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::{TensorMetadata, backend_extension, tensor::FloatTensor};
use burn::tensor::Tensor;

/// `x[:, t, :]` (`[batch, d]`) for every step `t` of `x` (`[batch, time, d]`), with one
/// gradient write a step (see the module doc).
pub fn time_steps(x: Tensor<3>) -> Vec<Tensor<2>> {
    let flex = crate::cpu::flex_data::is_flex(&x.device());
    if (flex && x.is_autodiff()) || (!flex && cfg!(not(feature = "gpu-tuned"))) {
        return <burn::backend::Dispatch as TimeSteps>::time_steps(x.into_dispatch())
            .into_iter()
            .map(Tensor::from_dispatch)
            .collect();
    }
    let time = x.dims()[1];
    (0..time).map(|t| x.clone().narrow(1, t, 1).squeeze_dim::<2>(1)).collect()
}

/// Steps a [`stack_steps`] launch writes (and autodiff node takes) on a GPU: the eight
/// arguments `p0`…`p7` of its extension.
#[cfg_attr(feature = "gpu-tuned", allow(dead_code))] // our GPU kernels' only, not built there
pub const GROUP: usize = 8;

/// `[batch, time, d]` from `time` steps `[batch, d]` (at least one): burn's `stack` along
/// axis 1, written [`GROUP`] steps a launch on a GPU (see the module doc).
pub fn stack_steps(parts: Vec<Tensor<2>>) -> Tensor<3> {
    assert!(!parts.is_empty(), "stack_steps: no steps");
    #[cfg(not(feature = "gpu-tuned"))]
    if !crate::cpu::flex_data::is_flex(&parts[0].device()) {
        let time = parts.len();
        let mut acc: Option<Tensor<3>> = None;
        for (g, group) in parts.chunks(GROUP).enumerate() {
            // Slots past the group's end repeat its first step; the kernel reads none of them.
            let p = |i: usize| group.get(i).unwrap_or(&group[0]).clone().into_dispatch();
            // The first group allocates the output; its `acc` slot is a placeholder.
            let a = acc.take().map_or_else(|| p(0), Tensor::into_dispatch);
            let out = <burn::backend::Dispatch as gpu::GpuSteps>::gpu_stack_group(
                a,
                p(0),
                p(1),
                p(2),
                p(3),
                p(4),
                p(5),
                p(6),
                p(7),
                time,
                g * GROUP,
                group.len(),
            );
            acc = Some(Tensor::from_dispatch(out));
        }
        return acc.expect("at least one group");
    }
    Tensor::stack(parts, 1)
}

/// The split as a burn backend extension (flex, and cubecl runtimes without fusion).
#[backend_extension(Flex, Cube: cfg(not(feature = "gpu-tuned")), Autodiff)]
pub trait TimeSteps: burn::backend::Backend {
    /// `x[:, t, :]` for every `t` (see [`time_steps`]).
    fn time_steps(x: FloatTensor<Self>) -> Vec<FloatTensor<Self>>;
}

/// What the time-major steps need of a backend: the layout both ways, and the buffer the
/// steps' backward passes write their gradients into.
trait TimeMajor: burn::backend::Backend {
    /// Where the steps' gradients are gathered, `[time, batch, d]`.
    type Buffer: Debug + Send + 'static;

    /// `x` (`[batch, time, d]`, f32) in time-major order, `[time, batch, d]`, contiguous.
    fn time_major(x: FloatTensor<Self>) -> FloatTensor<Self>;

    /// Step `t` of a time-major tensor: a `[batch, d]` view.
    fn step(tm: &FloatTensor<Self>, t: usize) -> FloatTensor<Self>;

    /// A zeroed buffer of `shape` on `like`'s device, and what stands as the time-major
    /// node's gradient until its backward takes the buffer.
    fn zeroed(shape: [usize; 3], like: &FloatTensor<Self>) -> (Self::Buffer, FloatTensor<Self>);

    /// Step `t`'s gradient (`[batch, d]`) written into the buffer.
    fn write(buffer: &mut Self::Buffer, t: usize, grad: FloatTensor<Self>, shape: [usize; 3]);

    /// The complete buffer as a time-major tensor.
    fn finish(buffer: Self::Buffer, shape: [usize; 3]) -> FloatTensor<Self>;
}

/// Every step of `x`, as views of its time-major copy (no autodiff).
fn plain_time_steps<B: TimeMajor>(x: FloatTensor<B>) -> Vec<FloatTensor<B>> {
    let tm = B::time_major(x);
    let time = tm.shape()[0];
    (0..time).map(|t| B::step(&tm, t)).collect()
}

/// The buffer the steps' backward passes write into: made by the first of them to run.
#[derive(Debug)]
struct Sink<B: TimeMajor>(Mutex<Option<B::Buffer>>);

/// `x` → time-major: its gradient is the sink, complete once every step's backward has run
/// (burn runs them first: the steps are this node's only children), handed back to `x` in
/// `x`'s order.
#[derive(Debug)]
struct TimeMajorBackward<B>(PhantomData<B>);

impl<B: TimeMajor> Backward<B, 1> for TimeMajorBackward<B> {
    /// The sink and the time-major shape.
    type State = (Arc<Sink<B>>, [usize; 3]);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        // What the first step registered, so that this node has a gradient.
        let _ = grads.consume::<B>(&ops.node);
        let Some(node) = node else { return };
        let (sink, shape) = ops.state;
        let buffer = sink.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        let buffer = buffer.expect("time steps: a step's backward ran before this one");
        grads.register::<B>(node.id, B::float_swap_dims(B::finish(buffer, shape), 0, 1));
    }
}

/// A step: its gradient written into the sink at its place.
#[derive(Debug)]
struct StepBackward<B>(PhantomData<B>);

impl<B: TimeMajor> Backward<B, 1> for StepBackward<B> {
    /// The sink, this step, and the time-major shape.
    type State = (Arc<Sink<B>>, usize, [usize; 3]);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let Some(node) = node else { return };
        let (sink, t, shape) = ops.state;
        let mut sink = sink.0.lock().unwrap_or_else(|e| e.into_inner());
        let buffer = sink.get_or_insert_with(|| {
            let (buffer, stand_in) = B::zeroed(shape, &grad);
            grads.register::<B>(node.id, stand_in);
            buffer
        });
        B::write(buffer, t, grad, shape);
    }
}

/// Every step of `x` under autodiff: one time-major node, then one node a step.
fn autodiff_time_steps<B: TimeMajor, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
) -> Vec<FloatTensor<Autodiff<B, C>>> {
    let (x, x_node) = x.into_parts();
    let tm = B::time_major(x);
    let s = tm.shape();
    let shape = [s[0], s[1], s[2]];
    let sink = Arc::new(Sink::<B>(Mutex::new(None)));
    let tm = match TimeMajorBackward::<B>(PhantomData).prepare::<C>([x_node]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish((sink.clone(), shape), tm),
        OpsKind::UnTracked(prep) => prep.finish(tm),
    };
    (0..shape[0])
        .map(|t| {
            let view = B::step(tm.primitive(), t);
            match StepBackward::<B>(PhantomData).prepare::<C>([tm.node()]).compute_bound().stateful() {
                OpsKind::Tracked(prep) => prep.finish((sink.clone(), t, shape), view),
                OpsKind::UnTracked(prep) => prep.finish(view),
            }
        })
        .collect()
}

#[cfg(not(feature = "gpu-tuned"))]
mod gpu {
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

    use super::TimeMajor;
    use crate::gpu::launch::{self as cube_launch, launch_dims};

    /// The stacking as a burn backend extension (cubecl runtimes without fusion).
    #[backend_extension(Cube, Autodiff)]
    pub trait GpuSteps: burn::backend::Backend {
        /// `acc` (`[batch, time, d]`) with the first `count` of `p0`…`p7` (`[batch, d]`; the
        /// extension routes no arrays) written at steps `first..first + count`; a fresh output
        /// when `first` is 0 (`acc` then unused). See [`super::stack_steps`].
        #[allow(clippy::too_many_arguments)]
        fn gpu_stack_group(
            acc: FloatTensor<Self>,
            p0: FloatTensor<Self>,
            p1: FloatTensor<Self>,
            p2: FloatTensor<Self>,
            p3: FloatTensor<Self>,
            p4: FloatTensor<Self>,
            p5: FloatTensor<Self>,
            p6: FloatTensor<Self>,
            p7: FloatTensor<Self>,
            time: usize,
            first: usize,
            count: usize,
        ) -> FloatTensor<Self>;
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

    impl super::TimeMajor for CubeBackend {
        /// Written in place through a handle the gradient registry holds too (it stands as the
        /// time-major node's gradient): nothing reads it before that node's backward, which
        /// runs after every step's.
        type Buffer = CubeTensor;

        fn time_major(x: CubeTensor) -> CubeTensor {
            assert!(
                x.dtype == DType::F32 && x.meta.shape().num_dims() == 3,
                "time steps: x is not f32 [batch, time, d]"
            );
            into_contiguous(Mm::float_swap_dims(x, 0, 1))
        }

        /// A view where the step's offset meets the device's alignment.
        fn step(tm: &CubeTensor, t: usize) -> CubeTensor {
            let s = tm.meta.shape();
            let (batch, d) = (s[1], s[2]);
            let slice = Mm::float_slice(
                tm.clone(),
                &[Slice::new(t as isize, Some(t as isize + 1), 1), Slice::full(), Slice::full()],
            );
            Mm::float_reshape(slice, Shape::from([batch, d]))
        }

        fn zeroed(shape: [usize; 3], like: &CubeTensor) -> (CubeTensor, CubeTensor) {
            let zeros = Mm::float_zeros(Shape::from(shape), &like.device, burn::tensor::FloatDType::F32);
            (zeros.clone(), zeros)
        }

        fn write(buffer: &mut CubeTensor, t: usize, grad: CubeTensor, shape: [usize; 3]) {
            let grad = into_contiguous(grad);
            let n = grad.meta.num_elements();
            assert_eq!(n, shape[1] * shape[2], "time steps: a step's gradient is not [batch, d]");
            let (count, dim) = launch_dims(&grad, n);
            write_at::launch(
                &grad.client.clone(),
                count,
                dim,
                grad.into_buffer_arg(),
                buffer.clone().into_buffer_arg(),
                (t * n) as u32,
            );
        }

        fn finish(buffer: CubeTensor, _: [usize; 3]) -> CubeTensor {
            buffer
        }
    }

    impl super::TimeSteps for CubeBackend {
        fn time_steps(x: CubeTensor) -> Vec<CubeTensor> {
            super::plain_time_steps::<Self>(x)
        }
    }

    impl<C: CheckpointStrategy> super::TimeSteps for Autodiff<CubeBackend, C> {
        fn time_steps(x: FloatTensor<Self>) -> Vec<FloatTensor<Self>> {
            super::autodiff_time_steps::<CubeBackend, C>(x)
        }
    }

    /// Thread `i` copies elements `i`, `i + stride`, … of each part `s` (`[batch, d]`, `n`
    /// elements) to step `first + s` of `out` (`[batch, time, d]`).
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    fn write_steps(
        parts: &Sequence<Box<[f32]>>,
        out: &mut [f32],
        d: u32,
        time: u32,
        n: u32,
        first: u32,
        stride: u32,
    ) {
        let i = ABSOLUTE_POS;
        let (d, time, n, stride) = (d as usize, time as usize, n as usize, stride as usize);
        if i < stride {
            #[unroll]
            for s in 0..parts.len() {
                let part = parts.index(s);
                let t = first as usize + s;
                for j in 0..(n + stride - 1) / stride {
                    let e = i + j * stride;
                    if e < n {
                        out[(e / d * time + t) * d + e % d] = part[e];
                    }
                }
            }
        }
    }

    /// Writes `parts` (`[batch, d]` each) at steps `first..` of `out` (`[batch, time, d]`,
    /// contiguous), as many a launch as the device binds.
    fn write_group(out: &CubeTensor, parts: &[CubeTensor], first: usize) {
        let s = out.meta.shape();
        let (batch, time, d) = (s[0], s[1], s[2]);
        for p in parts {
            let ps = p.meta.shape();
            assert!(
                p.dtype == DType::F32 && ps.num_dims() == 2 && [ps[0], ps[1]] == [batch, d],
                "stack_steps: a step is not f32 [batch, d]"
            );
        }
        let parts: Vec<CubeTensor> = parts.iter().cloned().map(into_contiguous).collect();
        let per = cube_launch::per_launch(out, 1, super::GROUP);
        let (count, dim, stride) = cube_launch::strided(out, batch * d);
        for (c, chunk) in parts.chunks(per).enumerate() {
            write_steps::launch(
                &out.client.clone(),
                count.clone(),
                dim,
                cube_launch::buffers(chunk),
                out.clone().into_buffer_arg(),
                d as u32,
                time as u32,
                (batch * d) as u32,
                (first + c * per) as u32,
                stride,
            );
        }
    }

    /// The output a group writes into: `acc`, or a fresh one for the first group.
    fn group_output(acc: CubeTensor, part: &CubeTensor, time: usize, first: usize) -> CubeTensor {
        if first == 0 {
            let s = part.meta.shape();
            cube_launch::empty(part, [s[0], time, s[1]])
        } else {
            acc
        }
    }

    impl GpuSteps for CubeBackend {
        fn gpu_stack_group(
            acc: CubeTensor,
            p0: CubeTensor,
            p1: CubeTensor,
            p2: CubeTensor,
            p3: CubeTensor,
            p4: CubeTensor,
            p5: CubeTensor,
            p6: CubeTensor,
            p7: CubeTensor,
            time: usize,
            first: usize,
            count: usize,
        ) -> CubeTensor {
            let parts = [p0, p1, p2, p3, p4, p5, p6, p7];
            let out = group_output(acc, &parts[0], time, first);
            write_group(&out, &parts[..count], first);
            out
        }
    }

    /// A group's steps and the output so far: each step's gradient a view of one time-major
    /// copy of the output's gradient, and that copy (seen in `[batch, time, d]` order) the
    /// earlier groups' gradient, which they need not copy again.
    #[derive(Debug)]
    struct StackGroupBackward;

    impl Backward<CubeBackend, { 1 + super::GROUP }> for StackGroupBackward {
        /// The group's first step and its number of steps.
        type State = (usize, usize);

        fn backward(
            self,
            ops: Ops<Self::State, { 1 + super::GROUP }>,
            grads: &mut Gradients,
            _: &mut Checkpointer,
        ) {
            let grad = grads.consume::<CubeBackend>(&ops.node);
            let (first, count) = ops.state;
            // A view of a contiguous time-major tensor when a later group made it.
            let tm = <CubeBackend as TimeMajor>::time_major(grad);
            let [acc, parts @ ..] = ops.parents;
            for (i, node) in parts.into_iter().take(count).enumerate() {
                if let Some(node) = node {
                    grads.register::<CubeBackend>(node.id, CubeBackend::step(&tm, first + i));
                }
            }
            // The first group's `acc` is a placeholder (see `stack_steps`).
            if let (Some(acc), true) = (acc, first > 0) {
                grads.register::<CubeBackend>(acc.id, Mm::float_swap_dims(tm, 0, 1));
            }
        }
    }

    impl<C: CheckpointStrategy> GpuSteps for Autodiff<CubeBackend, C> {
        fn gpu_stack_group(
            acc: FloatTensor<Self>,
            p0: FloatTensor<Self>,
            p1: FloatTensor<Self>,
            p2: FloatTensor<Self>,
            p3: FloatTensor<Self>,
            p4: FloatTensor<Self>,
            p5: FloatTensor<Self>,
            p6: FloatTensor<Self>,
            p7: FloatTensor<Self>,
            time: usize,
            first: usize,
            count: usize,
        ) -> FloatTensor<Self> {
            let parts = [p0, p1, p2, p3, p4, p5, p6, p7];
            let (acc, acc_node) = acc.into_parts();
            let (parts, part_nodes): (Vec<CubeTensor>, Vec<_>) =
                parts.into_iter().map(|p| p.into_parts()).unzip();
            let mut nodes = vec![acc_node];
            nodes.extend(part_nodes);
            let nodes: [_; 1 + super::GROUP] =
                nodes.try_into().unwrap_or_else(|_| unreachable!("1 + GROUP nodes"));
            let out = group_output(acc, &parts[0], time, first);
            write_group(&out, &parts[..count], first);
            match StackGroupBackward.prepare::<C>(nodes).compute_bound().stateful() {
                OpsKind::Tracked(prep) => prep.finish((first, count), out),
                OpsKind::UnTracked(prep) => prep.finish(out),
            }
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

    /// On wgpu [`stack_steps`] equals burn's `stack`, forward and the gradient of a loss that
    /// reads the result through a strided view and twice, for step counts within one group,
    /// at a group's end and past it, and with the result reaching no loss.
    #[test]
    fn stacked_steps_and_their_gradient_equal_burns_stack_on_wgpu() {
        let Some(plain) = crate::testing::wgpu_or_skip() else { return };
        let ad = plain.clone().autodiff();
        for (batch, time, d) in [(3, 1, 5), (4, 8, 3), (3, 19, 64)] {
            let xs: Vec<Tensor<2>> = (0..time)
                .map(|_| Tensor::random([batch, d], Distribution::Normal(0.0, 1.0), &plain))
                .collect();
            let w = Tensor::<3>::random([time, batch, d], Distribution::Normal(0.0, 1.0), &plain);
            let run = |stack: fn(Vec<Tensor<2>>) -> Tensor<3>| {
                let xa: Vec<Tensor<2>> =
                    xs.iter().map(|x| Tensor::from_data(x.to_data(), &ad).require_grad()).collect();
                let wa = Tensor::<3>::from_data(w.to_data(), &ad);
                let y = stack(xa.iter().map(|x| x.clone() * 2.0).collect());
                let loss = (y.clone().swap_dims(0, 1) * wa).sum() + (y.clone() * y.clone()).sum();
                let grads = loss.backward();
                let g: Vec<Tensor<2>> = xa.iter().map(|x| x.grad(&grads).unwrap()).collect();
                (y.inner(), g)
            };
            let (y1, g1) = run(stack_steps);
            let (y2, g2) = run(|p| Tensor::stack(p, 1));
            assert_eq!(y1.to_data(), y2.to_data(), "forward, time {time}");
            for (t, (a, b)) in g1.into_iter().zip(g2).enumerate() {
                assert!(max_diff(a, b) < 1e-5, "gradient of step {t}, time {time}");
            }
            let unused =
                stack_steps(xs.iter().map(|x| Tensor::from_data(x.to_data(), &ad).require_grad()).collect());
            assert_eq!(unused.inner().to_data(), Tensor::stack::<3>(xs.clone(), 1).to_data());
        }
    }
}

/// The CPU's time-major steps (see the module doc).
mod cpu {
    use burn::backend::Flex;
    use burn::backend::autodiff::Autodiff;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::flex::FlexTensor;
    use burn::backend::tensor::FloatTensor;
    use burn::tensor::{DType, Shape, TensorData};

    use crate::cpu::flex_data::f32s;

    impl super::TimeMajor for Flex {
        type Buffer = Vec<f32>;

        fn time_major(x: FlexTensor) -> FlexTensor {
            assert!(
                x.dtype() == DType::F32 && x.layout().shape().num_dims() == 3,
                "time steps: x is not f32 [batch, time, d]"
            );
            x.transpose(0, 1).to_contiguous()
        }

        fn step(tm: &FlexTensor, t: usize) -> FlexTensor {
            let s = tm.layout().shape();
            let (batch, d) = (s[1], s[2]);
            tm.narrow(0, t, 1).reshape(Shape::from([batch, d]))
        }

        fn zeroed(shape: [usize; 3], _: &FlexTensor) -> (Vec<f32>, FlexTensor) {
            (vec![0.0; shape.iter().product()], FlexTensor::zeros(Shape::from(shape), DType::F32))
        }

        fn write(buffer: &mut Vec<f32>, t: usize, grad: FlexTensor, shape: [usize; 3]) {
            let n = shape[1] * shape[2];
            let grad = f32s(&grad);
            assert_eq!(grad.len(), n, "time steps: a step's gradient is not [batch, d]");
            buffer[t * n..(t + 1) * n].copy_from_slice(&grad);
        }

        fn finish(buffer: Vec<f32>, shape: [usize; 3]) -> FlexTensor {
            FlexTensor::from_data(TensorData::new(buffer, shape))
        }
    }

    impl super::TimeSteps for Flex {
        fn time_steps(x: FlexTensor) -> Vec<FlexTensor> {
            super::plain_time_steps::<Self>(x)
        }
    }

    impl<C: CheckpointStrategy> super::TimeSteps for Autodiff<Flex, C> {
        fn time_steps(x: FloatTensor<Self>) -> Vec<FloatTensor<Self>> {
            super::autodiff_time_steps::<Flex, C>(x)
        }
    }
}
