//! An operation with a backward of its own, on any backend: what every kernel's autodiff
//! needs — track the inputs, keep what the backward reads, hand each input that needs one its
//! gradient — written once, for the CPU kernels (flex) and the GPU kernels (cubecl) alike. A
//! kernel gives its forward and its backward as two functions;
//! [`WithBackward::with_backward`] (or `with_deferrable_backward`, inside a decoder loop) does
//! the rest. burn's own operations write a `Backward` type each (burn-autodiff's `ops/`).

use std::fmt;
use std::sync::Arc;

use burn::backend::Backend;
use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, NodeGuard, Ops, OpsKind};
use burn::backend::tensor::FloatTensor;

use crate::gemm::deferred_grad::{Deferrable, Part, Stash, keep, stash_of};

/// A backward: from what the forward kept and the output's gradient, the gradient of each
/// input — `None` where `needed[i]` is false (that input is a constant) and for any other
/// input it declines to compute.
pub(crate) type BackwardFn<B, S, const N: usize> =
    fn(S, FloatTensor<B>, [bool; N]) -> [Option<FloatTensor<B>>; N];

/// A backward whose gradients may wait for a decoder's last step: for each input, the part
/// of its gradient this step gives ([`Part`]: a tensor of its shape, or a product or row sums
/// that a deferred weight's wrapper sums once over all steps, `gemm::deferred_grad`).
pub(crate) type DeferrableFn<B, S, const N: usize> =
    fn(S, FloatTensor<B>, [bool; N]) -> [Option<Part<FloatTensor<B>>>; N];

/// Each input's stash where its gradient waits (`None`: registered at once).
type Stashes<B, const N: usize> = [Option<Arc<Stash<FloatTensor<B>>>>; N];

/// The graph node of a [`WithBackward::with_backward`] operation.
struct OwnBackward<B: Backend, S, const N: usize>(BackwardFn<B, S, N>);

impl<B: Backend, S, const N: usize> fmt::Debug for OwnBackward<B, S, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnBackward")
    }
}

impl<B, S, const N: usize> Backward<B, N> for OwnBackward<B, S, N>
where
    B: Backend,
    S: Clone + Send + fmt::Debug + 'static,
{
    type State = S;

    fn backward(self, ops: Ops<S, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        let needed = ops.parents.each_ref().map(Option::is_some);
        let gradients = (self.0)(ops.state, dy, needed);
        for (node, gradient) in ops.parents.into_iter().zip(gradients) {
            if let (Some(node), Some(gradient)) = (node, gradient) {
                grads.register::<B>(node.id, gradient);
            }
        }
    }
}

/// The graph node of a [`WithBackward::with_deferrable_backward`] operation.
struct DeferrableBackward<B: Backend, S, const N: usize>(DeferrableFn<B, S, N>);

impl<B: Backend, S, const N: usize> fmt::Debug for DeferrableBackward<B, S, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DeferrableBackward")
    }
}

impl<B, S, const N: usize> Backward<B, N> for DeferrableBackward<B, S, N>
where
    B: Deferrable,
    S: Clone + Send + fmt::Debug + 'static,
{
    type State = (S, Stashes<B, N>);

    fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        let needed = ops.parents.each_ref().map(Option::is_some);
        let (state, stashes) = ops.state;
        let parts = (self.0)(state, dy, needed);
        for ((node, part), stash) in ops.parents.into_iter().zip(parts).zip(stashes) {
            if let (Some(node), Some(part)) = (node, part) {
                keep::<B>(stash, part, node.id, grads);
            }
        }
    }
}

/// An autodiff backend's operations with a backward of their own: `Self::with_backward` in a
/// kernel's `impl … for Autodiff<Flex, C>` (or `Autodiff<CubeBackend, C>`).
pub(crate) trait WithBackward: Backend {
    /// The backend the kernels run on.
    type Inner: Backend;

    /// `forward` on the inputs with `backward` as its gradient. `forward` gets the inputs and
    /// whether anything will need a gradient (`keep`); it returns the output and, when `keep`,
    /// what `backward` reads (`None` otherwise, which saves keeping it).
    ///
    /// # Panics
    /// When `forward` returns no state although `keep` was true.
    fn with_backward<S: Clone + Send + fmt::Debug + 'static, const N: usize>(
        inputs: [FloatTensor<Self>; N],
        forward: impl FnOnce([FloatTensor<Self::Inner>; N], bool) -> (FloatTensor<Self::Inner>, Option<S>),
        backward: BackwardFn<Self::Inner, S, N>,
    ) -> FloatTensor<Self>;

    /// [`Self::with_backward`] for an operation inside a decoder loop: the gradient of each
    /// input marked `deferred` that is a deferred tensor (a weight or memory every step reads,
    /// `gemm::deferred_grad`) waits in its wrapper's stash, to be summed once after the last
    /// step; every other gradient is registered at once.
    fn with_deferrable_backward<S: Clone + Send + fmt::Debug + 'static, const N: usize>(
        inputs: [FloatTensor<Self>; N],
        deferred: [bool; N],
        forward: impl FnOnce([FloatTensor<Self::Inner>; N], bool) -> (FloatTensor<Self::Inner>, Option<S>),
        backward: DeferrableFn<Self::Inner, S, N>,
    ) -> FloatTensor<Self>
    where
        Self::Inner: Deferrable;
}

impl<B: Backend, C: CheckpointStrategy> WithBackward for Autodiff<B, C> {
    type Inner = B;

    fn with_backward<S: Clone + Send + fmt::Debug + 'static, const N: usize>(
        inputs: [FloatTensor<Self>; N],
        forward: impl FnOnce([FloatTensor<B>; N], bool) -> (FloatTensor<B>, Option<S>),
        backward: BackwardFn<B, S, N>,
    ) -> FloatTensor<Self> {
        run::<B, C, _, S, N>(OwnBackward(backward), inputs, forward, |state| state)
    }

    fn with_deferrable_backward<S: Clone + Send + fmt::Debug + 'static, const N: usize>(
        inputs: [FloatTensor<Self>; N],
        deferred: [bool; N],
        forward: impl FnOnce([FloatTensor<B>; N], bool) -> (FloatTensor<B>, Option<S>),
        backward: DeferrableFn<B, S, N>,
    ) -> FloatTensor<Self>
    where
        B: Deferrable,
    {
        let stashes: Stashes<B, N> =
            std::array::from_fn(|i| if deferred[i] { stash_of::<B>(inputs[i].id()) } else { None });
        run::<B, C, _, S, N>(DeferrableBackward(backward), inputs, forward, |state| (state, stashes))
    }
}

/// `forward` on the inputs' values as one graph node, `node`; when an input is tracked, what
/// `forward` kept becomes the node's state through `kept`.
fn run<B, C, T, S, const N: usize>(
    node: T,
    inputs: [FloatTensor<Autodiff<B, C>>; N],
    forward: impl FnOnce([FloatTensor<B>; N], bool) -> (FloatTensor<B>, Option<S>),
    kept: impl FnOnce(S) -> T::State,
) -> FloatTensor<Autodiff<B, C>>
where
    B: Backend,
    C: CheckpointStrategy,
    T: Backward<B, N>,
{
    let mut values = Vec::with_capacity(N);
    let nodes: [NodeGuard; N] = inputs.map(|t| {
        let (value, node) = t.into_parts();
        values.push(value);
        node
    });
    let values: [FloatTensor<B>; N] = values.try_into().unwrap_or_else(|_| unreachable!("N values"));
    match node.prepare::<C>(nodes).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let (y, state) = forward(values, true);
            prep.finish(kept(state.expect("a forward kept what its backward reads")), y)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(values, false).0),
    }
}
