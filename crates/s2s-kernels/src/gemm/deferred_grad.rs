//! The gradient of a weight that every decoder step multiplies, computed once per backward pass
//! as one product over all steps.
//!
//! A decoder loop multiplies the same weight at every step: `h_{t−1} W_h` in each LSTM layer,
//! Luong's `W_c [cₜ; sₜ]`, Bahdanau's `W₂ s_{t−1}`. Backward through each step product computes
//! that step's `∂W = x_tᵀ ∂y_t`, a `[d_in, batch] × [batch, d_out]` product (64 rows in the
//! benchmark) that writes the whole `[d_in, d_out]` gradient, and burn adds it to the sum of
//! the steps before: per weight and step a fresh 4 MiB buffer written twice. The sum is one
//! product, `∂W = Σ_t x_tᵀ ∂y_t = Xᵀ ∂Y` with the steps' rows stacked, `k = steps·batch` deep —
//! the shape `gemm` runs fastest. On a GPU, where a step is bound by launches (~28 µs of host
//! time each through wgpu on an H100), it also takes the two launches a weight and
//! step (the product and the add) down to four a weight for all steps: the two stacks (one
//! launch each, [`gpu`]), the product, and the add to what other users contributed.
//!
//! [`defer_grad`] wraps a weight in an identity operation whose backward runs after every step
//! that used it (burn runs backward steps deepest first, and each user is deeper than its
//! input). The step products of [`crate::gemm::small`] find the wrapped weight's node in a
//! registry of live wrappers, keep `(x_t, ∂y_t)` instead of multiplying, and the wrapper's
//! backward multiplies them all at once and adds whatever other operations contributed.
//! The attention RNNs run their teacher-forced decoder loop on a copy of the decoder,
//! attention and `W_c` whose parameters pass through [`defer_grad`] ([`for_steps`]). The
//! registry of live wrappers is keyed by autodiff node and holds weak references, so a
//! wrapper's record lives as long as its graph does and a graph dropped without a backward
//! leaves nothing behind. On flex and on cubecl devices (not under burn's fusion,
//! `gpu-tuned`); elsewhere, and without autodiff, [`defer_grad`] returns the weight unchanged.
//!
//! On a cubecl device the step product is a node of its own (`gemm::small`'s `gpu` module)
//! that keeps `(x_t, ∂y_t)` in the wrapped weight's stash instead of computing `x_tᵀ ∂y_t` and
//! adding it; the wrapper's backward stacks all steps' rows with one launch each (a kernel
//! over a `Sequence` of the parts) and multiplies once. A GPU defers more than flex:
//!
//! - biases, the same way ([`crate::gemm::small::add_bias`], the node the models'
//!   `cell::affine_rows` uses while training on a GPU): the steps' `∂y` summed once by rows
//!   instead of a row sum and an add a step;
//! - tensors every step reads whole: the encoder memory (the attention's values), the
//!   projected keys and Bahdanau's `v`. The attention kernels' backward (`attention::rnn_gpu`) keeps
//!   their gradients in the stash, and the wrapper sums them in one stacking launch and one
//!   sum, where burn added them step by step. `AttentionRnn::forward` wraps memory and keys;
//!   flex ignores those wrappers (nothing there keeps such parts).
//!
//! A stash holds parts of one kind (`Part`: a product, row sums, or a whole gradient).

use std::any::Any;
use std::sync::{Arc, Mutex, Weak};

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::ops::FloatTensorOps;
use burn::backend::{Backend, Dispatch, Flex, TensorMetadata, backend_extension, tensor::FloatTensor};
use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{FloatDType, Shape, Tensor, TensorData};

use crate::cpu::flex_data::f32s;

/// A backend whose step products can defer their weight gradient: how it stacks the steps'
/// rows and multiplies.
pub(crate) trait Deferrable: Backend {
    /// `[Σ rows, d]` from equal-width `[rows, d]` parts, in order.
    fn stack_rows(parts: Vec<FloatTensor<Self>>) -> FloatTensor<Self>;

    /// `aᵀ b` (`[k, m]ᵀ × [k, n]`): a weight's gradient from inputs and output gradients.
    fn transposed_product(a: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self>;
}

impl Deferrable for Flex {
    fn stack_rows(parts: Vec<FlexTensor>) -> FlexTensor {
        let d = parts[0].shape().dims::<2>()[1];
        let rows: usize = parts.iter().map(|p| p.shape().dims::<2>()[0]).sum();
        let mut all = Vec::with_capacity(rows * d);
        for p in &parts {
            assert_eq!(p.shape().dims::<2>()[1], d, "stack_rows: the parts' widths differ");
            all.extend_from_slice(&f32s(p));
        }
        FlexTensor::from_data(TensorData::new(all, [rows, d]))
    }

    fn transposed_product(a: FlexTensor, b: FlexTensor) -> FlexTensor {
        crate::gemm::flex::matmul_2d(&Flex::float_transpose(a), &b)
    }
}

/// One step's contribution to a wrapped tensor's gradient.
#[derive(Debug)]
#[cfg_attr(feature = "gpu-tuned", allow(dead_code))] // Only the GPU kernels keep the last two.
pub(crate) enum Part<T> {
    /// A product's input `x_t` (`[rows, d_in]`) and output gradient `∂y_t` (`[rows, d_out]`):
    /// the wrapped tensor is the weight, its gradient `Σ_t x_tᵀ ∂y_t`.
    Product(T, T),
    /// A bias's `∂y_t` (`[rows, d_out]`): its gradient `Σ_t Σ_rows ∂y_t`.
    RowSums(T),
    /// A gradient of the wrapped tensor's own shape (the encoder's memory, read at every
    /// step): the gradient is their sum.
    Whole(T),
}

/// What the steps leave for a wrapper's backward (`T`: the backend's tensor), all parts of
/// one kind, and whether a placeholder gradient was registered for the wrapper (its backward
/// consumes one).
#[derive(Debug)]
pub(crate) struct Stash<T> {
    parts: Mutex<(Vec<Part<T>>, bool)>,
}

impl<T> Default for Stash<T> {
    fn default() -> Self {
        Stash { parts: Mutex::new((Vec::new(), false)) }
    }
}

impl<T: TensorMetadata> Stash<T> {
    /// Keeps one step's part. The first call registers a zero gradient of the wrapped
    /// tensor's shape for the wrapper `node`, which its backward replaces.
    pub(crate) fn push<B>(&self, part: Part<T>, node: NodeId, grads: &mut Gradients)
    where
        B: Backend<FloatTensorPrimitive = T, Device = T::Device>,
    {
        let mut parts = self.parts.lock().unwrap_or_else(|e| e.into_inner());
        if !parts.1 {
            let (shape, device) = match &part {
                Part::Product(x, dy) => {
                    (Shape::from([x.shape().dims::<2>()[1], dy.shape().dims::<2>()[1]]), dy.device())
                }
                Part::RowSums(dy) => (Shape::from([dy.shape().dims::<2>()[1]]), dy.device()),
                Part::Whole(g) => (g.shape(), g.device()),
            };
            grads.register::<B>(node, B::float_zeros(shape, &device, FloatDType::F32));
            parts.1 = true;
        }
        assert!(
            parts.0.first().is_none_or(|p| std::mem::discriminant(p) == std::mem::discriminant(&part)),
            "deferred_grad: one wrapper given parts of two kinds"
        );
        parts.0.push(part);
    }

    /// What the steps kept, taken out.
    fn take(&self) -> Vec<Part<T>> {
        std::mem::take(&mut self.parts.lock().unwrap_or_else(|e| e.into_inner()).0)
    }
}

/// What `stash` kept, summed over the steps in one product or sum: `Σ x_tᵀ ∂y_t` (one
/// product over the stacked rows), the column sums of all `∂y_t` (`[1, d_out]`), or the sum
/// of whole gradients (`[1, n]`); the wrapper reshapes it to its own shape. `None` when no
/// step kept anything.
fn product<B: Deferrable>(stash: &Stash<FloatTensor<B>>) -> Option<FloatTensor<B>> {
    let parts = stash.take();
    let first = parts.first()?;
    Some(match first {
        Part::Product(..) => {
            let (xs, dys): (Vec<_>, Vec<_>) = parts
                .into_iter()
                .map(|p| match p {
                    Part::Product(x, dy) => (x, dy),
                    _ => unreachable!("one kind a stash"),
                })
                .unzip();
            B::transposed_product(B::stack_rows(xs), B::stack_rows(dys))
        }
        Part::RowSums(_) | Part::Whole(_) => {
            let rows: Vec<_> = parts
                .into_iter()
                .map(|p| match p {
                    Part::RowSums(dy) => dy,
                    // `[1, n]`: one row a step.
                    Part::Whole(g) => {
                        let n = g.shape().num_elements();
                        B::float_reshape(g, Shape::from([1, n]))
                    }
                    Part::Product(..) => unreachable!("one kind a stash"),
                })
                .collect();
            B::float_sum_dim(B::stack_rows(rows), 0)
        }
    })
}

/// One part's gradient on its own, for a tensor that is not deferred: `xᵀ ∂y`, the column
/// sums (`[d_out]`), or the gradient itself.
fn alone<B: Deferrable>(part: Part<FloatTensor<B>>) -> FloatTensor<B> {
    match part {
        Part::Product(x, dy) => B::transposed_product(x, dy),
        Part::RowSums(dy) => {
            let d_out = dy.shape().dims::<2>()[1];
            B::float_reshape(B::float_sum_dim(dy, 0), Shape::from([d_out]))
        }
        Part::Whole(g) => g,
    }
}

/// A step's contribution to `node`'s gradient: kept in the wrapper's `stash` when the tensor
/// is deferred (summed with the other steps' by the wrapper's backward), else registered now.
pub(crate) fn keep<B: Deferrable>(
    stash: Option<Arc<Stash<FloatTensor<B>>>>,
    part: Part<FloatTensor<B>>,
    node: NodeId,
    grads: &mut Gradients,
) {
    match stash {
        Some(stash) => stash.push::<B>(part, node, grads),
        None => grads.register::<B>(node, alone::<B>(part)),
    }
}

/// Live wrappers: the wrapper's node and its stash (a `Stash` of its backend's tensors; weak:
/// the graph owns it).
static LIVE: Mutex<Vec<(NodeId, Weak<dyn Any + Send + Sync>)>> = Mutex::new(Vec::new());

/// The stash of the live wrapper whose output is node `id`, if `id` is one.
pub(crate) fn stash_of<B: Backend>(id: NodeId) -> Option<Arc<Stash<FloatTensor<B>>>> {
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    let stash = live.iter().find(|(n, _)| *n == id).and_then(|(_, s)| s.upgrade())?;
    stash.downcast().ok()
}

/// The wrapper as a burn backend extension (flex, and cubecl without fusion).
#[backend_extension(Flex, Cube: cfg(not(feature = "gpu-tuned")), Autodiff)]
pub trait DeferGrad: burn::backend::Backend {
    /// `w` itself; with autodiff, an identity whose backward computes the step products'
    /// weight gradient at once.
    fn defer_grad(w: FloatTensor<Self>) -> FloatTensor<Self>;
}

impl DeferGrad for Flex {
    fn defer_grad(w: FlexTensor) -> FlexTensor {
        w
    }
}

impl<B: Deferrable, C: CheckpointStrategy> DeferGrad for Autodiff<B, C>
where
    FloatTensor<B>: Send + Sync,
{
    fn defer_grad(w: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct DeferGradBackward;

        impl<B: Deferrable> Backward<B, 1> for DeferGradBackward
        where
            FloatTensor<B>: Send + Sync,
        {
            type State = Arc<Stash<FloatTensor<B>>>;

            fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                let [node] = ops.parents;
                // Other users' contributions, or the zero placeholder of the step products.
                let grad = grads.consume::<B>(&ops.node);
                if let Some(node) = node {
                    let grad = match product::<B>(&ops.state) {
                        Some(steps) => {
                            let shape = grad.shape();
                            B::float_add(grad, B::float_reshape(steps, shape))
                        }
                        None => grad,
                    };
                    grads.register::<B>(node.id, grad);
                }
            }
        }

        let (w, node) = w.into_parts();
        match DeferGradBackward.prepare::<C>([node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let stash = Arc::new(Stash::<FloatTensor<B>>::default());
                let out = prep.finish(stash.clone(), w);
                let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
                live.retain(|(_, s)| s.strong_count() > 0);
                let weak: Weak<dyn Any + Send + Sync> =
                    Arc::downgrade(&(stash as Arc<dyn Any + Send + Sync>));
                live.push((out.id(), weak));
                out
            }
            OpsKind::UnTracked(prep) => prep.finish(w),
        }
    }
}

/// `w` with its step products' gradient deferred (see the module doc): flex and cubecl
/// without fusion ([`crate::ops::defer_grad`] chooses).
pub fn defer_grad<const D: usize>(w: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as DeferGrad>::defer_grad(w.into_dispatch()))
}

/// A copy of `module` whose parameters go through [`defer_grad`]: what a decoder loop runs at
/// every step of a teacher-forced forward pass. Gradients reach the original parameters.
pub fn for_steps<M: Module>(module: &M) -> M {
    struct Defer;
    impl ModuleMapper for Defer {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            param.map(defer_grad)
        }
    }
    module.clone().map(&mut Defer)
}

/// The GPU side: the wrapper without autodiff, and the steps' rows stacked by one kernel
/// launch (burn's `cat` writes each part with a slice-assign of its own: a launch a step).
#[cfg(not(feature = "gpu-tuned"))]
mod gpu {
    use burn::tensor::DType;
    use burn_cubecl::CubeBackend;
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::tensor::CubeTensor;
    use cubecl::cube;
    use cubecl::prelude::*;

    use crate::gpu::launch as cube_launch;

    /// Thread `i` copies elements `i`, `i + stride`, … of each part `s` (all `n` elements
    /// long) to `out[(first + s)·n + …]`.
    #[cube(launch)]
    fn stack_parts(parts: &Sequence<Box<[f32]>>, out: &mut [f32], n: u32, first: u32, stride: u32) {
        let i = ABSOLUTE_POS;
        let (n, stride) = (n as usize, stride as usize);
        if i < stride {
            #[unroll]
            for s in 0..parts.len() {
                let part = parts.index(s);
                let base = (first as usize + s) * n;
                for j in 0..(n + stride - 1) / stride {
                    let e = i + j * stride;
                    if e < n {
                        out[base + e] = part[e];
                    }
                }
            }
        }
    }

    impl super::DeferGrad for CubeBackend {
        fn defer_grad(w: CubeTensor) -> CubeTensor {
            w
        }
    }

    impl super::Deferrable for CubeBackend {
        fn stack_rows(parts: Vec<CubeTensor>) -> CubeTensor {
            let shape = |t: &CubeTensor| {
                let s = t.meta.shape();
                assert!(
                    s.num_dims() == 2 && t.dtype == DType::F32,
                    "stack_rows: the parts are not f32 matrices"
                );
                [s[0], s[1]]
            };
            let [rows, d] = shape(&parts[0]);
            assert!(parts.iter().all(|p| shape(p) == [rows, d]), "stack_rows: the parts' shapes differ");
            let parts: Vec<CubeTensor> = parts.into_iter().map(into_contiguous).collect();
            let out = cube_launch::empty(&parts[0], [parts.len() * rows, d]);
            // One buffer a part; the kernel unrolls a loop over at most 64.
            let per = cube_launch::per_launch(&out, 1, 64);
            let (count, dim, stride) = cube_launch::strided(&out, rows * d);
            for (c, chunk) in parts.chunks(per).enumerate() {
                stack_parts::launch(
                    &out.client.clone(),
                    count.clone(),
                    dim,
                    cube_launch::buffers(chunk),
                    out.clone().into_buffer_arg(),
                    (rows * d) as u32,
                    (c * per) as u32,
                    stride,
                );
            }
            out
        }

        /// `aᵀ b`, in blocks of rows where [`crate::gemm::split_rows::enabled`].
        fn transposed_product(a: CubeTensor, b: CubeTensor) -> CubeTensor {
            let tensor = |t| burn::tensor::Tensor::<2>::from_dispatch(cube_launch::dispatch_of(t));
            let y = crate::gemm::split_rows::transposed_product(tensor(a), tensor(b));
            cube_launch::cube_of(y.into_dispatch()).expect("a product of cubecl tensors stays on cubecl")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::{Device, Distribution};

    /// A recurrence of `steps` steps, `h_t = tanh(h_{t−1} W + b + x_t U)`, with `W` and `b`
    /// also used once outside the loop, on `d`: the same value and gradients whether `W` and
    /// `b` are deferred or not, and nothing left in the stashes afterwards.
    fn check_recurrence(d: Device, steps: usize) {
        d.seed(9);
        let (b, k) = (6, 40);
        let w = Tensor::<2>::random([k, k], Distribution::Normal(0.0, 0.3), &d).require_grad();
        let u = Tensor::<2>::random([k, k], Distribution::Normal(0.0, 0.3), &d).require_grad();
        let bias = Tensor::<1>::random([k], Distribution::Normal(0.0, 0.3), &d).require_grad();
        let xs: Vec<Tensor<2>> =
            (0..steps).map(|_| Tensor::random([b, k], Distribution::Normal(0.0, 1.0), &d)).collect();
        let big = Tensor::<2>::random([300, k], Distribution::Normal(0.0, 1.0), &d);
        let run = |defer: bool| {
            let ws = if defer { defer_grad(w.clone()) } else { w.clone() };
            let bs = if defer { defer_grad(bias.clone()) } else { bias.clone() };
            let mut h = Tensor::<2>::zeros([b, k], &d);
            for x in &xs {
                let pre = crate::ops::affine_rows(h, ws.clone(), bs.clone())
                    + crate::ops::matmul_rows(x.clone(), u.clone());
                h = crate::tanh::tanh(pre);
            }
            let loss = h.sum() + big.clone().matmul(ws).mean() + (bs.clone() * bs).sum();
            let grads = loss.clone().backward();
            let g =
                (w.grad(&grads).expect("∂W"), u.grad(&grads).expect("∂U"), bias.grad(&grads).expect("∂b"));
            (loss.inner(), g)
        };
        let (l1, (w1, u1, b1)) = run(true);
        let (l2, (w2, u2, b2)) = run(false);
        assert!(max_diff(l1, l2) < 1e-5);
        assert!(max_diff(w1, w2) < 1e-4, "∂W");
        assert!(max_diff(u1, u2) < 1e-4, "∂U");
        assert!(max_diff(b1, b2) < 1e-4, "∂b");
    }

    /// The wrapper's sum takes every part the steps kept (`Σ x_tᵀ ∂y_t` over both) and leaves
    /// the stash empty for the next backward pass. (Checked on a stash of its own: the live
    /// registry is shared with the tests running beside this one.)
    #[test]
    fn the_sum_takes_every_part() {
        let t = |v: Vec<f32>, shape: [usize; 2]| FlexTensor::from_data(TensorData::new(v, shape));
        let stash = Stash::<FlexTensor>::default();
        {
            let mut parts = stash.parts.lock().unwrap();
            parts.0.push(Part::Product(t(vec![1.0, 2.0], [1, 2]), t(vec![3.0], [1, 1])));
            parts.0.push(Part::Product(t(vec![4.0, 5.0], [1, 2]), t(vec![6.0], [1, 1])));
        }
        let sum = product::<Flex>(&stash).expect("two parts");
        assert_eq!(f32s(&sum).to_vec(), vec![1.0 * 3.0 + 4.0 * 6.0, 2.0 * 3.0 + 5.0 * 6.0]);
        assert!(stash.take().is_empty(), "the sum took every part");
        assert!(product::<Flex>(&stash).is_none());
    }

    #[test]
    fn deferred_gradient_equals_per_step_gradients() {
        check_recurrence(Device::flex().autodiff(), 5);
    }

    /// The same on wgpu (lavapipe where there is no GPU), with more steps than one stacking
    /// launch takes on lavapipe.
    #[cfg(not(feature = "gpu-tuned"))]
    #[test]
    fn deferred_gradient_equals_per_step_gradients_on_wgpu() {
        let Some(plain) = crate::testing::wgpu_or_skip() else { return };
        check_recurrence(plain.autodiff(), 40);
    }

    /// On wgpu, a memory every step reads whole through the attention kernels (as values, as
    /// the keys of the dot and additive scores) and Bahdanau's `v`, also used outside the
    /// loop: the same gradients whether they are deferred or not.
    #[cfg(not(feature = "gpu-tuned"))]
    #[test]
    fn deferred_whole_gradients_equal_per_step_gradients_on_wgpu() {
        use crate::attention::rnn_gpu::{additive_scores, attend, dot_scores};
        let Some(plain) = crate::testing::wgpu_or_skip() else { return };
        let d = plain.autodiff();
        d.seed(4);
        let (b, s, k, steps) = (3, 5, 7, 30);
        let normal = |dims: Vec<usize>| {
            Tensor::<1>::random([dims.iter().product::<usize>()], Distribution::Normal(0.0, 1.0), &d)
        };
        let memory = normal(vec![b, s, k]).reshape([b, s, k]).require_grad();
        let v = normal(vec![k, 1]).reshape([k, 1]).require_grad();
        let qs: Vec<Tensor<2>> = (0..steps).map(|_| normal(vec![b, k]).reshape([b, k])).collect();
        let rs: Vec<Tensor<2>> = (0..steps).map(|_| normal(vec![b, k]).reshape([b, k])).collect();
        let mask = Tensor::<2>::zeros([b, s], &d);
        let run = |defer: bool| {
            let (mem, vv) = if defer {
                (defer_grad(memory.clone()), defer_grad(v.clone()))
            } else {
                (memory.clone(), v.clone())
            };
            let mut loss = (mem.clone() * mem.clone()).sum() * 0.1 + vv.clone().sum();
            for (q, r) in qs.iter().zip(&rs) {
                let e = additive_scores(q.clone(), &mem, vv.clone()) + dot_scores(q.clone(), &mem);
                let (c, _) = attend(e, &mask, &mem);
                loss = loss + (c * r.clone()).sum();
            }
            let grads = loss.backward();
            (memory.grad(&grads).expect("∂memory"), v.grad(&grads).expect("∂v"))
        };
        let ((m1, v1), (m2, v2)) = (run(true), run(false));
        assert!(max_diff(m1, m2) < 1e-4, "∂memory");
        assert!(max_diff(v1, v2) < 1e-4, "∂v");
    }

    /// On wgpu the stacking kernel equals burn's `cat` of the rows, parts that are views
    /// included, with more parts than one launch takes on lavapipe.
    #[cfg(not(feature = "gpu-tuned"))]
    #[test]
    fn stacked_rows_equal_burns_cat_on_wgpu() {
        let Some(d) = crate::testing::wgpu_or_skip() else { return };
        let big = Tensor::<2>::random([8 * 70, 5], Distribution::Normal(0.0, 1.0), &d);
        let parts: Vec<Tensor<2>> = (0..70).map(|i| big.clone().narrow(0, 8 * i, 8)).collect();
        let ours = <burn_cubecl::CubeBackend as Deferrable>::stack_rows(
            parts
                .iter()
                .map(|p| crate::gpu::launch::cube_of(p.clone().into_dispatch()).expect("cubecl"))
                .collect(),
        );
        let ours = Tensor::<2>::from_dispatch(crate::gpu::launch::dispatch_of(ours));
        assert_eq!(ours.to_data(), Tensor::cat(parts, 0).to_data());
    }
}
