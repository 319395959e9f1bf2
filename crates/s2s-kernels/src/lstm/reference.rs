//! The LSTM cell, step and layer, as equations in plain burn tensor operations: what this
//! folder's kernels compute, and what runs under `--kernels reference` (see
//! [`crate::reference`]).

use burn::tensor::Tensor;
use burn::tensor::activation::{sigmoid, tanh as burn_tanh};

/// The LSTM cell (Hochreiter & Schmidhuber, 1997; gate order as in PyTorch) from its
/// pre-activation gates `[i f g o]` (`[batch, 4·hidden]`) and `c`:
/// `c' = σ(f)⊙c + σ(i)⊙tanh(g)`, `h' = σ(o)⊙tanh(c')`. Returns `(h', c')`.
pub fn lstm_gates(gates: Tensor<2>, c: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
    let h = c.dims()[1];
    let i = sigmoid(gates.clone().narrow(1, 0, h));
    let f = sigmoid(gates.clone().narrow(1, h, h));
    let g = burn_tanh(gates.clone().narrow(1, 2 * h, h));
    let o = sigmoid(gates.narrow(1, 3 * h, h));
    let c = f * c + i * g;
    (o * burn_tanh(c.clone()), c)
}

/// One LSTM step from the projected input `xw = x W_x + b`: gates `xw + h W_h`, then
/// [`lstm_gates`].
pub fn lstm_step(xw: Tensor<2>, h: Tensor<2>, w_hidden: Tensor<2>, c: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
    lstm_gates(xw + h.matmul(w_hidden), c)
}

/// One direction of an LSTM layer over a padded sequence, step by step with [`lstm_step`]:
/// `xw` `[batch, time, 4·hidden]` (projected inputs, bias included), `keep` `[batch, time]`
/// (1 on real tokens). A padded step keeps the state and outputs zeros; the first `dense`
/// steps are real in every row. Returns (outputs `[batch, time, hidden]`, final `h`, `c`).
pub fn lstm_layer(
    xw: Tensor<3>,
    w_hidden: Tensor<2>,
    h0: Tensor<2>,
    c0: Tensor<2>,
    keep: Tensor<2>,
    dense: usize,
    reverse: bool,
) -> (Tensor<3>, Tensor<2>, Tensor<2>) {
    let time = xw.dims()[1];
    let (mut h, mut c) = (h0, c0);
    let mut outs: Vec<Option<Tensor<2>>> = vec![None; time];
    let order: Vec<usize> = if reverse { (0..time).rev().collect() } else { (0..time).collect() };
    for t in order {
        let x_t = xw.clone().narrow(1, t, 1).squeeze_dim::<2>(1); // [B, 4H]
        let (h_new, c_new) = lstm_step(x_t, h.clone(), w_hidden.clone(), c.clone());
        if t < dense {
            (h, c) = (h_new, c_new);
            outs[t] = Some(h.clone());
        } else {
            let k = keep.clone().narrow(1, t, 1); // [B, 1]
            let mix = |new: Tensor<2>, old: Tensor<2>| old.clone() + (new - old) * k.clone();
            (h, c) = (mix(h_new, h), mix(c_new, c));
            outs[t] = Some(h.clone() * k);
        }
    }
    let outs: Vec<Tensor<2>> = outs.into_iter().map(|o| o.expect("every step ran")).collect();
    (Tensor::stack(outs, 1), h, c)
}
