//! The gradient of a weight that every decoder step multiplies, computed once per backward pass
//! as one product over all steps (issue 12).
//!
//! A decoder loop multiplies the same weight at every step: `h_{t−1} W_h` in each LSTM layer,
//! Luong's `W_c [cₜ; sₜ]`, Bahdanau's `W₂ s_{t−1}`. Backward through each step product computes
//! that step's `∂W = x_tᵀ ∂y_t`, a `[d_in, batch] × [batch, d_out]` product (64 rows in the
//! benchmark) that writes the whole `[d_in, d_out]` gradient, and burn adds it to the sum of
//! the steps before: per weight and step a fresh 4 MiB buffer written twice. The sum is one
//! product, `∂W = Σ_t x_tᵀ ∂y_t = Xᵀ ∂Y` with the steps' rows stacked, `k = steps·batch` deep —
//! the shape `gemm` runs fastest.
//!
//! [`defer_grad`] wraps a weight in an identity operation whose backward runs after every step
//! that used it (burn runs backward steps deepest first, and each user is deeper than its
//! input). The step products of [`crate::small_matmul`] find the wrapped weight's node in a
//! registry of live wrappers, keep `(x_t, ∂y_t)` instead of multiplying, and the wrapper's
//! backward multiplies them all at once and adds whatever other operations contributed.
//! A wrapper's record lives as long as its graph does (the registry holds weak references).
//! On other backends, and without autodiff, [`defer_grad`] returns the weight unchanged.

use std::sync::{Arc, Mutex, Weak};

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::ops::FloatTensorOps;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{Tensor, TensorData};

use crate::flex_data::f32s;

/// What the step products of one wrapped weight leave for its backward: each step's input
/// `x_t` and output gradient `∂y_t`, and whether a placeholder gradient was registered for
/// the wrapper (its backward consumes one).
#[derive(Debug, Default)]
pub(crate) struct Stash {
    parts: Mutex<(Vec<(FlexTensor, FlexTensor)>, bool)>,
}

impl Stash {
    /// Keeps one step's `x` (`[rows, d_in]`) and `∂y` (`[rows, d_out]`). The first call
    /// registers a zero gradient for the wrapper `node`, which its backward replaces.
    pub(crate) fn push(&self, x: FlexTensor, dy: FlexTensor, node: NodeId, grads: &mut Gradients) {
        let mut parts = self.parts.lock().unwrap_or_else(|e| e.into_inner());
        if !parts.1 {
            let [d_in, d_out] = [x.layout().shape().dims::<2>()[1], dy.layout().shape().dims::<2>()[1]];
            grads.register::<Flex>(node, FlexTensor::from_data(TensorData::zeros::<f32, _>([d_in, d_out])));
            parts.1 = true;
        }
        parts.0.push((x, dy));
    }

    /// `Σ x_tᵀ ∂y_t` as one product, or `None` when no step kept anything.
    fn product(&self) -> Option<FlexTensor> {
        let parts = std::mem::take(&mut self.parts.lock().unwrap_or_else(|e| e.into_inner()).0);
        let (x0, dy0) = parts.first()?;
        let (d_in, d_out) = (x0.layout().shape().dims::<2>()[1], dy0.layout().shape().dims::<2>()[1]);
        let rows: usize = parts.iter().map(|(x, _)| x.layout().shape().dims::<2>()[0]).sum();
        let mut xs = Vec::with_capacity(rows * d_in);
        let mut dys = Vec::with_capacity(rows * d_out);
        for (x, dy) in &parts {
            xs.extend_from_slice(&f32s(x));
            dys.extend_from_slice(&f32s(dy));
        }
        let x = FlexTensor::from_data(TensorData::new(xs, [rows, d_in]));
        let dy = FlexTensor::from_data(TensorData::new(dys, [rows, d_out]));
        Some(crate::small_matmul::matmul_2d(&Flex::float_transpose(x), &dy))
    }
}

/// Live wrappers: the wrapper's node and its stash (weak: the graph owns it).
static LIVE: Mutex<Vec<(NodeId, Weak<Stash>)>> = Mutex::new(Vec::new());

/// The stash of the live wrapper whose output is node `id`, if `id` is one.
pub(crate) fn stash_of(id: NodeId) -> Option<Arc<Stash>> {
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.iter().find(|(n, _)| *n == id).and_then(|(_, s)| s.upgrade())
}

/// The wrapper as a burn backend extension (flex only).
#[backend_extension(Flex, Autodiff)]
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

impl<C: CheckpointStrategy> DeferGrad for Autodiff<Flex, C> {
    fn defer_grad(w: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct DeferGradBackward;

        impl Backward<Flex, 1> for DeferGradBackward {
            type State = Arc<Stash>;

            fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                let [node] = ops.parents;
                // Other users' contributions, or the zero placeholder of the step products.
                let grad = grads.consume::<Flex>(&ops.node);
                if let Some(node) = node {
                    let grad = match ops.state.product() {
                        Some(steps) => Flex::float_add(grad, steps),
                        None => grad,
                    };
                    grads.register::<Flex>(node.id, grad);
                }
            }
        }

        let (w, node) = w.into_parts();
        match DeferGradBackward.prepare::<C>([node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let stash = Arc::new(Stash::default());
                let out = prep.finish(stash.clone(), w);
                let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
                live.retain(|(_, s)| s.strong_count() > 0);
                live.push((out.id(), Arc::downgrade(&stash)));
                out
            }
            OpsKind::UnTracked(prep) => prep.finish(w),
        }
    }
}

/// `w` with its step products' gradient deferred (see the module doc); `w` itself on devices
/// other than flex.
pub fn defer_grad<const D: usize>(w: Tensor<D>) -> Tensor<D> {
    if crate::flex_data::is_flex(&w.device()) {
        Tensor::from_dispatch(<Dispatch as DeferGrad>::defer_grad(w.into_dispatch()))
    } else {
        w
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::{Device, Distribution};

    /// A five-step recurrence `h_t = tanh(h_{t−1} W + x_t U)`, with `W` also used once in an
    /// ordinary product: the same value and gradients whether `W` is deferred or not.
    #[test]
    fn deferred_gradient_equals_per_step_gradients() {
        let d = Device::flex().autodiff();
        d.seed(9);
        let (b, k) = (6, 40);
        let w = Tensor::<2>::random([k, k], Distribution::Normal(0.0, 0.3), &d).require_grad();
        let u = Tensor::<2>::random([k, k], Distribution::Normal(0.0, 0.3), &d).require_grad();
        let xs: Vec<Tensor<2>> =
            (0..5).map(|_| Tensor::random([b, k], Distribution::Normal(0.0, 1.0), &d)).collect();
        let big = Tensor::<2>::random([300, k], Distribution::Normal(0.0, 1.0), &d);
        let run = |defer: bool| {
            let ws = if defer { defer_grad(w.clone()) } else { w.clone() };
            let mut h = Tensor::<2>::zeros([b, k], &d);
            for x in &xs {
                let pre = crate::small_matmul::matmul(h, ws.clone())
                    + crate::small_matmul::matmul(x.clone(), u.clone());
                h = crate::fused_tanh::tanh(pre);
            }
            let loss = h.sum() + big.clone().matmul(ws).mean();
            let grads = loss.clone().backward();
            (loss.inner(), w.grad(&grads).expect("∂W"), u.grad(&grads).expect("∂U"))
        };
        let (l1, w1, u1) = run(true);
        let (l2, w2, u2) = run(false);
        assert!(max_diff(l1, l2) < 1e-5);
        assert!(max_diff(w1, w2) < 1e-4, "∂W");
        assert!(max_diff(u1, u2) < 1e-4, "∂U");
        let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        let kept = |s: &Weak<Stash>| s.upgrade().map_or(0, |s| s.parts.lock().unwrap().0.len());
        assert!(live.iter().all(|(_, s)| kept(s) == 0), "backward used up what the steps kept");
    }
}
