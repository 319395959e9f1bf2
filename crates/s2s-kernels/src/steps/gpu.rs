//! The GPU's time-major steps and its grouped stack (see the module doc of [`crate::steps`]).

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

/// `[batch, time, d]` from `time` steps `[batch, d]` (at least one), written [`super::GROUP`] steps
/// a launch (see the module doc of [`crate::steps`]).
pub fn stack_groups(parts: Vec<burn::tensor::Tensor<2>>) -> burn::tensor::Tensor<3> {
    use burn::tensor::Tensor;
    let time = parts.len();
    let mut acc: Option<Tensor<3>> = None;
    for (g, group) in parts.chunks(super::GROUP).enumerate() {
        // Slots past the group's end repeat its first step; the kernel reads none of them.
        let p = |i: usize| group.get(i).unwrap_or(&group[0]).clone().into_dispatch();
        // The first group allocates the output; its `acc` slot is a placeholder.
        let a = acc.take().map_or_else(|| p(0), Tensor::into_dispatch);
        let out = <burn::backend::Dispatch as GpuSteps>::gpu_stack_group(
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
            g * super::GROUP,
            group.len(),
        );
        acc = Some(Tensor::from_dispatch(out));
    }
    acc.expect("at least one group")
}

/// The stacking as a burn backend extension (cubecl runtimes without fusion).
#[backend_extension(Cube, Autodiff)]
pub trait GpuSteps: burn::backend::Backend {
    /// `acc` (`[batch, time, d]`) with the first `count` of `p0`…`p7` (`[batch, d]`; the
    /// extension routes no arrays) written at steps `first..first + count`; a fresh output
    /// when `first` is 0 (`acc` then unused). See [`stack_groups`].
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
        // The first group's `acc` is a placeholder (see `stack_groups`).
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
