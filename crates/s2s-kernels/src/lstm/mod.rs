//! The LSTM's fast kernels: the cell's gate math and the whole layer, on the CPU (`cpu`, with
//! its threads in lockstep, `lockstep`) and on a GPU (`gpu`), reached through
//! [`crate::ops::fast_lstm_step`] and [`crate::ops::fast_lstm_layer`]. The equations they compute
//! are the models' own: the step in `RecurrentCell::step` (the models' `cell.rs`), the padded
//! layer in `run_steps` (the models' `rnn.rs`). How the CPU layer's rate is measured against
//! the machine's best product rate (`s2s bench --lstm-step`): `s2s_train::step_rate`.

pub mod cpu;
#[cfg(not(feature = "gpu-tuned"))]
pub(crate) mod gpu;
pub(crate) mod lockstep;

use burn::tensor::Tensor;

/// A layer kernel's output `[batch, time + 2, hidden]` (`h_t` for every step, then `h_T` and
/// `c_T`) cut into the outputs `[batch, time, hidden]` and the final `(h, c)`.
///
/// `h_T` and `c_T` come through one narrow of both, then narrowed apart: the gradient of a
/// narrow is a zeroed tensor the size of what it narrows (burn's slice backward), and the
/// gradients reaching `out` are added, so each narrow of `out` costs two passes over it.
pub(crate) fn outputs_and_state(out: Tensor<3>) -> (Tensor<3>, Tensor<2>, Tensor<2>) {
    let [batch, rows, hidden] = out.dims();
    let time = rows - 2;
    let last = out.clone().narrow(1, time, 2);
    let state = |i: usize| last.clone().narrow(1, i, 1).reshape([batch, hidden]);
    (out.narrow(1, 0, time), state(0), state(1))
}
