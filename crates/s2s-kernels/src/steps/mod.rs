//! A sequence's time steps as separate tensors, what a decoder loop reads one step at a time:
//! `x[:, t, :]` for every `t` (the embedding projection, Bahdanau's embeddings).
//!
//! Narrowed step by step under autodiff, each step's backward zero-fills a gradient of the
//! whole sequence, writes the step's slice into it and adds it to the sum of the others: three
//! launches of a sequence-sized pass a step on a GPU, where a step is bound by launches
//! (~28 µs of host time each through wgpu on an H100), and each strided step a copy forward.
//! On a GPU ([`time_major`] on cubecl, not with burn's fusion, `gpu-tuned`) the sequence is
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
//! The way back, [`crate::ops::stack_steps`] (a decoder's per-step outputs into one `[batch, time, d]`
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
//! - [`crate::ops::stack_steps`]: `time` tensors `[batch, d]` → `[batch, time, d]`

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

/// `x[:, t, :]` (`[batch, d]`) for every step `t` of `x` (`[batch, time, d]`) as contiguous
/// views of one time-major copy, with one gradient write a step (see the module doc): flex
/// under autodiff and cubecl without fusion ([`crate::ops::time_steps`] chooses).
pub fn time_major(x: Tensor<3>) -> Vec<Tensor<2>> {
    <burn::backend::Dispatch as TimeSteps>::time_steps(x.into_dispatch())
        .into_iter()
        .map(Tensor::from_dispatch)
        .collect()
}

/// Steps a [`gpu::stack_groups`] launch writes (and autodiff node takes) on a GPU: the eight
/// arguments `p0`…`p7` of its extension.
#[cfg_attr(feature = "gpu-tuned", allow(dead_code))] // our GPU kernels' only, not built there
pub const GROUP: usize = 8;

/// The split as a burn backend extension (flex, and cubecl runtimes without fusion).
#[backend_extension(Flex, Cube: cfg(not(feature = "gpu-tuned")), Autodiff)]
pub trait TimeSteps: burn::backend::Backend {
    /// `x[:, t, :]` for every `t` (see [`time_major`]).
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

mod cpu;
#[cfg(not(feature = "gpu-tuned"))]
pub(crate) mod gpu;
pub(crate) mod reference;

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
            for (a, b) in crate::ops::time_steps(x.clone()).into_iter().zip(narrowed) {
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
            assert!(max_diff(grad(crate::ops::time_steps), grad(reference)) < 1e-5, "gradient, d = {d}");
        }
    }

    /// On wgpu [`crate::ops::stack_steps`] equals burn's `stack`, forward and the gradient of a loss that
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
            let (y1, g1) = run(crate::ops::stack_steps);
            let (y2, g2) = run(|p| Tensor::stack(p, 1));
            assert_eq!(y1.to_data(), y2.to_data(), "forward, time {time}");
            for (t, (a, b)) in g1.into_iter().zip(g2).enumerate() {
                assert!(max_diff(a, b) < 1e-5, "gradient of step {t}, time {time}");
            }
            let unused = crate::ops::stack_steps(
                xs.iter().map(|x| Tensor::from_data(x.to_data(), &ad).require_grad()).collect(),
            );
            assert_eq!(unused.inner().to_data(), Tensor::stack::<3>(xs.clone(), 1).to_data());
        }
    }
}
