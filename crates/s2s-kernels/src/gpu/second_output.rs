//! A GPU kernel's second output as an autodiff node of its own.
//!
//! burn's autodiff node has one output. A kernel that writes two (the LSTM step's `h'` and
//! `c'`, the RNN attention's context and weights) used to return them side by side and
//! narrow them: each narrow's backward zero-filled and slice-assigned the whole output's
//! gradient, an add joined the two, and forward copied each strided half. Here each output
//! has its own buffer, and the second output is a child node of the first whose backward
//! registers nothing and leaves its gradient in a [`SecondGrad`] slot, which the first
//! node's backward takes (burn runs a node's children first). So the first
//! output must reach the loss wherever the second does, or its backward finds no gradient:
//! true of any LSTM recurrence (`c'` reaches the loss only through the next step's gates,
//! which read `h'`) and of the attention here (no loss reads the weights). The tests of the
//! kernels that use it cover the second output reaching no loss.

use std::sync::{Arc, Mutex};

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::tensor::FloatTensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;

/// Where the second output's backward leaves its gradient for the first output's.
#[derive(Debug, Default)]
pub(crate) struct SecondGrad(Mutex<Option<CubeTensor>>);

impl SecondGrad {
    /// The second output's gradient, if it reached a loss.
    pub(crate) fn take(&self) -> Option<CubeTensor> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// `second` as a child node of `first`, its gradient left in `slot` (see the module doc).
pub(crate) fn second_output<C: CheckpointStrategy>(
    first: &FloatTensor<Autodiff<CubeBackend, C>>,
    slot: Arc<SecondGrad>,
    second: CubeTensor,
) -> FloatTensor<Autodiff<CubeBackend, C>> {
    #[derive(Debug)]
    struct SecondBackward;

    impl Backward<CubeBackend, 1> for SecondBackward {
        type State = Arc<SecondGrad>;

        fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            // Registers nothing: the first output's node takes the gradient from the slot.
            let grad = grads.consume::<CubeBackend>(&ops.node);
            *ops.state.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(grad);
        }
    }

    match SecondBackward.prepare::<C>([first.node()]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish(slot, second),
        OpsKind::UnTracked(prep) => prep.finish(second),
    }
}
