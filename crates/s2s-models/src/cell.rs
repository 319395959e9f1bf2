//! Recurrent cells shared by every RNN model: LSTM (default), GRU and a plain tanh RNN.
//!
//! Each cell keeps its weights fused: one `W_x` for all gates' input projections (so a whole
//! sequence is projected by one matmul before the time loop) and one `W_h` for all gates'
//! recurrent projections (one matmul per step).
//!
//! - LSTM (Hochreiter & Schmidhuber, 1997; gates as in PyTorch):
//!   `[i f g o] = x W_x + h W_h + b`; `c' = σ(f)⊙c + σ(i)⊙tanh(g)`; `h' = σ(o)⊙tanh(c')`
//!   ([`RecurrentCell::step`]; a fused kernel where one runs, `ops::fast_lstm_step`)
//! - GRU (Cho et al., 2014): `[r z n]`: `r = σ(x_r + h_r)`, `z = σ(x_z + h_z)`,
//!   `n = tanh(x_n + r⊙(h W_hn + b_hn))`, `h' = (1−z)⊙n + z⊙h`
//! - tanh RNN (Elman, 1990): `h' = tanh(x W_x + h W_h + b)` — the cell whose gradient vanishes.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::tensor::activation::{sigmoid, tanh};
use burn::tensor::{Device, Tensor};
use s2s_kernels::ops;
use serde::{Deserialize, Serialize};

/// Which recurrence a layer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CellKind {
    /// Long short-term memory (4 gates, hidden and cell state).
    #[default]
    Lstm,
    /// Gated recurrent unit (3 gates).
    Gru,
    /// Plain `tanh` recurrence (1 "gate").
    Rnn,
}

impl CellKind {
    /// Gate blocks in the fused projections.
    pub fn gates(self) -> usize {
        match self {
            CellKind::Lstm => 4,
            CellKind::Gru => 3,
            CellKind::Rnn => 1,
        }
    }
}

/// Configuration of a [`RecurrentCell`].
#[derive(Config, Debug)]
pub struct CellConfig {
    /// The recurrence.
    pub kind: CellKind,
    /// Input features per step.
    pub d_input: usize,
    /// Hidden units.
    pub d_hidden: usize,
}

/// A recurrent cell with fused gate weights (see the module doc for the equations).
///
/// # Shapes
/// - projected input (from [`RecurrentCell::project`]): `[..., gates·d_hidden]`
/// - state `h`, `c`: `[batch, d_hidden]`
#[derive(Module, Debug)]
pub struct RecurrentCell {
    /// Input weights of all gates, `[d_input, gates·d_hidden]`.
    pub w_input: Param<Tensor<2>>,
    /// Recurrent weights of all gates, `[d_hidden, gates·d_hidden]`.
    pub w_hidden: Param<Tensor<2>>,
    /// Gate biases, `[gates·d_hidden]`.
    pub bias: Param<Tensor<1>>,
    /// GRU only: the bias of the candidate's recurrent term, `[3·d_hidden]` (`b_h` in PyTorch).
    pub bias_hidden: Option<Param<Tensor<1>>>,
    /// The recurrence.
    #[module(skip)]
    pub kind: CellKind,
    /// Hidden units.
    #[module(skip)]
    pub d_hidden: usize,
}

/// A cell's state after a step.
#[derive(Debug, Clone)]
pub struct CellState {
    /// Hidden state `[batch, d_hidden]`.
    pub h: Tensor<2>,
    /// Memory cell `[batch, d_hidden]` (LSTM only).
    pub c: Option<Tensor<2>>,
}

impl CellState {
    /// A zero state for `batch` rows.
    pub fn zeros(kind: CellKind, batch: usize, d_hidden: usize, device: &Device) -> Self {
        let h = Tensor::zeros([batch, d_hidden], device);
        let c = (kind == CellKind::Lstm).then(|| h.clone());
        Self { h, c }
    }

    /// Keeps `self` where `keep` is 1 and `old` where it is 0 (`keep`: `[batch, 1]`): padded
    /// steps leave the state unchanged ([`keep_or_old`] on `h` and on `c`).
    pub fn masked(self, old: &CellState, keep: &Tensor<2>) -> Self {
        Self {
            h: keep_or_old(self.h, &old.h, keep),
            c: match (self.c, &old.c) {
                (Some(new), Some(old)) => Some(keep_or_old(new, old, keep)),
                (c, _) => c,
            },
        }
    }
}

/// The padding mask on a state: `new` where `keep` is 1, `old` where it is 0,
/// `old + (new − old)⊙keep`.
///
/// # Shapes
/// - `new`, `old`: `[batch, d_hidden]`; `keep`: `[batch, 1]`
pub fn keep_or_old(new: Tensor<2>, old: &Tensor<2>, keep: &Tensor<2>) -> Tensor<2> {
    old.clone() + (new - old.clone()) * keep.clone()
}

impl CellConfig {
    /// Initialises weights from `U(−1/√d_hidden, 1/√d_hidden)`, as PyTorch's RNN modules do.
    pub fn init(&self, device: &Device) -> RecurrentCell {
        let g = self.kind.gates() * self.d_hidden;
        let bound = 1.0 / (self.d_hidden as f64).sqrt();
        let init = Initializer::Uniform { min: -bound, max: bound };
        RecurrentCell {
            w_input: init.init([self.d_input, g], device),
            w_hidden: init.init([self.d_hidden, g], device),
            bias: init.init([g], device),
            bias_hidden: (self.kind == CellKind::Gru).then(|| init.init([g], device)),
            kind: self.kind,
            d_hidden: self.d_hidden,
        }
    }
}

impl RecurrentCell {
    /// Input projection of every step at once, bias included: `x W_x + b`.
    pub fn project<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        ops::affine_rows(x, self.w_input.val(), self.bias.val())
    }

    /// The projection of the first part of a concatenated input, bias included:
    /// `x_a W_x[..d_a] + b` (`d_a` = `x_a`'s features). Projecting `[x_a; x_b]` equals
    /// `project_first(x_a) + x_b W_x[d_a..]` ([`Self::input_rows`]) — no concat, and the part
    /// that does not depend on the step can be projected for every step at once. While
    /// decoding the bias is added inside the product ([`ops::affine_rows`]).
    pub fn project_first<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let d = x.dims()[D - 1];
        ops::affine_rows(x, self.input_rows(0, d), self.bias.val())
    }

    /// The rows `first_row..first_row + rows` of `W_x`: the weight of one part of a
    /// concatenated input (see [`Self::project_first`]), `[rows, gates·d_hidden]`.
    pub fn input_rows(&self, first_row: usize, rows: usize) -> Tensor<2> {
        self.w_input.val().narrow(0, first_row, rows)
    }

    /// One step of the recurrence (the equations of the module doc) from an already projected
    /// input `xw = x W_x + b`. The LSTM runs a fused kernel where one applies
    /// (`ops::fast_lstm_step`, tested equal to the equations below, values and gradients); the
    /// equations run under `--kernels reference` and wherever no kernel applies.
    ///
    /// # Shapes
    /// - `xw`: `[batch, gates·d_hidden]`, the gates side by side (`[i f g o]`, `[r z n]`)
    /// - state `h`, `c` and the new state: `[batch, d_hidden]`
    pub fn step(&self, xw: Tensor<2>, state: &CellState) -> CellState {
        let h = self.d_hidden;
        let hw = || ops::matmul_rows(state.h.clone(), self.w_hidden.val()); // h W_h: [B, G·H]
        match self.kind {
            CellKind::Lstm => {
                let c = state.c.clone().expect("LSTM state has a memory cell"); // [B, H]
                let fast = ops::fast_lstm_step(xw.clone(), state.h.clone(), self.w_hidden.val(), c.clone());
                let (h, c) = fast.unwrap_or_else(|| {
                    let gates = xw + hw(); // x W_x + b + h W_h: [B, 4H]
                    let gate = |k: usize| gates.clone().narrow(1, k * h, h); // [B, H]
                    let i = sigmoid(gate(0)); // input gate
                    let f = sigmoid(gate(1)); // forget gate
                    let g = tanh(gate(2)); // candidate
                    let o = sigmoid(gate(3)); // output gate
                    let c = f * c + i * g; // c' = f⊙c + i⊙g
                    (o * tanh(c.clone()), c) // h' = o⊙tanh(c')
                });
                CellState { h, c: Some(c) }
            }
            CellKind::Gru => {
                let hw = hw() + self.bias_hidden.as_ref().expect("GRU has b_h").val().unsqueeze::<2>();
                let r = sigmoid(xw.clone().narrow(1, 0, h) + hw.clone().narrow(1, 0, h));
                let z = sigmoid(xw.clone().narrow(1, h, h) + hw.clone().narrow(1, h, h));
                let n = tanh(xw.narrow(1, 2 * h, h) + r * hw.narrow(1, 2 * h, h));
                let one_minus_z = z.clone().neg().add_scalar(1.0);
                CellState { h: one_minus_z * n + z * state.h.clone(), c: None }
            }
            CellKind::Rnn => CellState { h: tanh(xw + hw()), c: None },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::TensorData;

    fn tensor<const D: usize>(v: Vec<f32>, shape: [usize; D], d: &Device) -> Tensor<D> {
        Tensor::from_data(TensorData::new(v, shape), d)
    }

    /// A scalar reference of the three recurrences, written from the equations in the module
    /// doc (PyTorch's gate order and bias placement), on fixed weights.
    fn reference(
        kind: CellKind,
        x: &[f32],
        h: &[f32],
        c: &[f32],
        wx: &[f32],
        wh: &[f32],
        b: &[f32],
        bh: &[f32],
    ) -> (Vec<f32>, Vec<f32>) {
        let (din, dh, g) = (x.len(), h.len(), kind.gates() * h.len());
        let xw: Vec<f32> =
            (0..g).map(|j| (0..din).map(|k| x[k] * wx[k * g + j]).sum::<f32>() + b[j]).collect();
        let hw: Vec<f32> = (0..g).map(|j| (0..dh).map(|k| h[k] * wh[k * g + j]).sum::<f32>()).collect();
        let s = |v: f32| 1.0 / (1.0 + (-v).exp());
        match kind {
            CellKind::Lstm => {
                let mut hn = vec![0.0; dh];
                let mut cn = vec![0.0; dh];
                for u in 0..dh {
                    let a = |k: usize| xw[k * dh + u] + hw[k * dh + u];
                    cn[u] = s(a(1)) * c[u] + s(a(0)) * a(2).tanh();
                    hn[u] = s(a(3)) * cn[u].tanh();
                }
                (hn, cn)
            }
            CellKind::Gru => {
                let hn = (0..dh)
                    .map(|u| {
                        let hb = |k: usize| hw[k * dh + u] + bh[k * dh + u];
                        let r = s(xw[u] + hb(0));
                        let z = s(xw[dh + u] + hb(1));
                        let n = (xw[2 * dh + u] + r * hb(2)).tanh();
                        (1.0 - z) * n + z * h[u]
                    })
                    .collect();
                (hn, vec![])
            }
            CellKind::Rnn => ((0..dh).map(|u| (xw[u] + hw[u]).tanh()).collect(), vec![]),
        }
    }

    #[test]
    fn every_cell_matches_the_scalar_reference() {
        let d = Device::flex();
        for kind in [CellKind::Lstm, CellKind::Gru, CellKind::Rnn] {
            let (din, dh) = (3, 2);
            let g = kind.gates() * dh;
            let wave =
                |n: usize, k: f32| (0..n).map(|i| ((i as f32 + 1.0) * k).sin() * 0.5).collect::<Vec<f32>>();
            let (wx, wh, b, bh) = (wave(din * g, 0.7), wave(dh * g, 1.3), wave(g, 2.1), wave(g, 0.4));
            let mut cell = CellConfig::new(kind, din, dh).init(&d);
            cell.w_input = Param::from_tensor(tensor(wx.clone(), [din, g], &d));
            cell.w_hidden = Param::from_tensor(tensor(wh.clone(), [dh, g], &d));
            cell.bias = Param::from_tensor(tensor(b.clone(), [g], &d));
            if kind == CellKind::Gru {
                cell.bias_hidden = Some(Param::from_tensor(tensor(bh.clone(), [g], &d)));
            }
            let (x, h, c) = (vec![1.0, -0.5, 0.25], vec![0.3, -0.2], vec![0.1, 0.4]);
            let state = CellState {
                h: tensor(h.clone(), [1, dh], &d),
                c: (kind == CellKind::Lstm).then(|| tensor(c.clone(), [1, dh], &d)),
            };
            let out = cell.step(cell.project(tensor(x.clone(), [1, din], &d)), &state);
            let (want_h, want_c) = reference(kind, &x, &h, &c, &wx, &wh, &b, &bh);
            let got_h: Vec<f32> = out.h.into_data().try_to_vec::<f32>().unwrap();
            for (a, b) in got_h.iter().zip(&want_h) {
                assert!((a - b).abs() < 1e-6, "{kind:?}: h {got_h:?} vs {want_h:?}");
            }
            if let Some(cc) = out.c {
                let got_c: Vec<f32> = cc.into_data().try_to_vec::<f32>().unwrap();
                for (a, b) in got_c.iter().zip(&want_c) {
                    assert!((a - b).abs() < 1e-6, "{kind:?}: c {got_c:?} vs {want_c:?}");
                }
            }
        }
    }

    /// The same weights as `every_cell_matches_the_scalar_reference`, through PyTorch 2.15:
    /// ```python
    /// import torch, math
    /// wave = lambda n, k: [math.sin((i + 1) * k) * 0.5 for i in range(n)]
    /// x, h, c = torch.tensor([[1., -.5, .25]]), torch.tensor([[.3, -.2]]), torch.tensor([[.1, .4]])
    /// for cls, G in [(torch.nn.LSTMCell, 4), (torch.nn.GRUCell, 3)]:
    ///     cell = cls(3, 2); g = 2 * G
    ///     with torch.no_grad():
    ///         cell.weight_ih.copy_(torch.tensor(wave(3 * g, .7)).view(3, g).t())
    ///         cell.weight_hh.copy_(torch.tensor(wave(2 * g, 1.3)).view(2, g).t())
    ///         cell.bias_ih.copy_(torch.tensor(wave(g, 2.1)))
    ///         cell.bias_hh.copy_(torch.tensor(wave(g, .4)) if G == 3 else torch.zeros(g))
    ///         print(cell(x, (h, c)) if G == 4 else cell(x, h))
    /// ```
    #[test]
    fn golden_values_from_pytorch() {
        let d = Device::flex();
        let wave =
            |n: usize, k: f32| (0..n).map(|i| ((i as f32 + 1.0) * k).sin() * 0.5).collect::<Vec<f32>>();
        for (kind, want_h, want_c) in [
            (CellKind::Lstm, [-0.1308086f32, 0.0587118], Some([-0.2556522f32, 0.1975992])),
            (CellKind::Gru, [0.0271786, -0.2351952], None),
        ] {
            let g = kind.gates() * 2;
            let mut cell = CellConfig::new(kind, 3, 2).init(&d);
            cell.w_input = Param::from_tensor(tensor(wave(3 * g, 0.7), [3, g], &d));
            cell.w_hidden = Param::from_tensor(tensor(wave(2 * g, 1.3), [2, g], &d));
            cell.bias = Param::from_tensor(tensor(wave(g, 2.1), [g], &d));
            if kind == CellKind::Gru {
                cell.bias_hidden = Some(Param::from_tensor(tensor(wave(g, 0.4), [g], &d)));
            }
            let state = CellState {
                h: tensor(vec![0.3, -0.2], [1, 2], &d),
                c: want_c.map(|_| tensor(vec![0.1, 0.4], [1, 2], &d)),
            };
            let out = cell.step(cell.project(tensor(vec![1.0, -0.5, 0.25], [1, 3], &d)), &state);
            let h: Vec<f32> = out.h.into_data().try_to_vec::<f32>().unwrap();
            assert!(h.iter().zip(want_h).all(|(a, b)| (a - b).abs() < 1e-6), "{kind:?}: {h:?}");
            if let (Some(c), Some(want)) = (out.c, want_c) {
                let c: Vec<f32> = c.into_data().try_to_vec::<f32>().unwrap();
                assert!(c.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6), "{kind:?}: {c:?}");
            }
        }
    }

    /// The fused LSTM step kernel (`ops::fast_lstm_step`) equals the equations of
    /// [`RecurrentCell::step`] (`--kernels reference`): `h'`, `c'` and the gradients of a random
    /// linear function of them with respect to `xw`, `h`, `c` and `W_h`, on flex and on wgpu
    /// (lavapipe where there is no GPU), and without autodiff (decoding).
    #[test]
    fn fused_lstm_step_equals_the_equations() {
        use burn::tensor::Distribution;
        use s2s_kernels::mode::{Kernels, with};
        let gpu = s2s_kernels::testing::wgpu_or_skip();
        for plain in std::iter::once(Device::flex()).chain(gpu) {
            let d = plain.clone().autodiff();
            let (b, h) = (3, 37);
            let normal = |dims: [usize; 2]| Tensor::<2>::random(dims, Distribution::Normal(0.0, 1.0), &d);
            let mut cell = CellConfig::new(CellKind::Lstm, 5, h).init(&d);
            let (xw, h0, c0, probe_h, probe_c) =
                (normal([b, 4 * h]), normal([b, h]), normal([b, h]), normal([b, h]), normal([b, h]));
            cell.w_hidden = Param::from_tensor(normal([h, 4 * h]).mul_scalar(0.3));
            let mut decoding = CellConfig::new(CellKind::Lstm, 5, h).init(&plain);
            decoding.w_hidden = Param::from_tensor(cell.w_hidden.val().inner());
            let run = |k: Kernels| {
                with(k, || {
                    let (xw, h0, c0) =
                        (xw.clone().require_grad(), h0.clone().require_grad(), c0.clone().require_grad());
                    let state = CellState { h: h0.clone(), c: Some(c0.clone()) };
                    let out = cell.step(xw.clone(), &state);
                    let c1 = out.c.expect("c'");
                    let loss = (out.h.clone() * probe_h.clone()).sum() + (c1.clone() * probe_c.clone()).sum();
                    let g = loss.backward();
                    let grad = |t: Option<Tensor<2>>| t.expect("gradient");
                    let values = [out.h.inner(), c1.inner()];
                    let grads = [
                        grad(xw.grad(&g)),
                        grad(h0.grad(&g)),
                        grad(c0.grad(&g)),
                        grad(cell.w_hidden.val().grad(&g)),
                    ];
                    // Without autodiff: the decoding path.
                    let (xw, h0, c0) = (xw.inner(), h0.inner(), c0.inner());
                    let out = decoding.step(xw, &CellState { h: h0, c: Some(c0) });
                    (values, grads, [out.h, out.c.expect("c'")])
                })
            };
            let (fast, equations) = (run(Kernels::Fast), run(Kernels::Reference));
            for (i, (a, e)) in fast.0.into_iter().zip(equations.0).enumerate() {
                assert!(max_diff(a, e) < 1e-5, "{plain:?}: value {i}");
            }
            for (i, (a, e)) in fast.1.into_iter().zip(equations.1).enumerate() {
                assert!(max_diff(a, e) < 1e-4, "{plain:?}: gradient {i}");
            }
            for (i, (a, e)) in fast.2.into_iter().zip(equations.2).enumerate() {
                assert!(max_diff(a, e) < 1e-5, "{plain:?}: decoding value {i}");
            }
        }
    }

    #[test]
    fn masked_state_keeps_old_rows() {
        let d = Device::flex();
        let old = CellState::zeros(CellKind::Lstm, 2, 3, &d);
        let new = CellState { h: Tensor::ones([2, 3], &d), c: Some(Tensor::ones([2, 3], &d)) };
        let keep = tensor(vec![1.0, 0.0], [2, 1], &d);
        let m = new.masked(&old, &keep);
        let h: Vec<f32> = m.h.into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(h, vec![1.0, 1.0, 1.0, 0.0, 0.0, 0.0]);
    }
}
