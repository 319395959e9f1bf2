//! Multi-layer (optionally bidirectional) recurrent networks over padded batches.
//!
//! Padding never changes a state: at a padded step the state is carried over unchanged
//! ([`CellState::masked`], in the one padded loop, [`run_steps`]), so a row's final state is
//! its state after its last real token, whatever the batch's padded length; outputs at padded
//! steps are zero. The backward direction starts from a zero state and, running right to
//! left, meets the padding first — which leaves the zero state as it is — so it too starts at
//! the last real token.
//! Dropout is applied between layers (not after the last), as in PyTorch's `nn.LSTM`.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig};
use burn::tensor::{Device, Tensor};

use crate::cell::{CellConfig, CellKind, CellState, RecurrentCell};
use s2s_kernels::ops;

/// Configuration of a [`StackedRnn`].
#[derive(Config, Debug)]
pub struct StackedRnnConfig {
    /// The recurrence of every layer.
    pub cell: CellKind,
    /// Input features.
    pub d_input: usize,
    /// Hidden units per direction.
    pub d_hidden: usize,
    /// Stacked layers.
    #[config(default = 1)]
    pub layers: usize,
    /// Run a second, right-to-left direction and concatenate (`[batch, time, 2·d_hidden]`).
    #[config(default = false)]
    pub bidirectional: bool,
    /// Dropout between layers.
    #[config(default = 0.0)]
    pub dropout: f64,
}

/// A stack of recurrent layers.
///
/// # Shapes
/// - input: `[batch, time, d_input]`, keep mask `[batch, time]` (1 on real tokens)
/// - output: `[batch, time, dirs·d_hidden]`
/// - final states: `layers·dirs` [`CellState`]s of `[batch, d_hidden]`, ordered
///   layer 0 forward, layer 0 backward, layer 1 forward, …
#[derive(Module, Debug)]
pub struct StackedRnn {
    /// Left-to-right cells, one per layer.
    pub forward_cells: Vec<RecurrentCell>,
    /// Right-to-left cells (empty unless bidirectional).
    pub backward_cells: Vec<RecurrentCell>,
    /// Dropout between layers.
    pub dropout: Dropout,
}

impl StackedRnnConfig {
    /// The encoder of a seq2seq model whose decoder state has `hidden` units: a bidirectional
    /// encoder gets `hidden / 2` per direction so the concatenation is `hidden`. Refuses an odd
    /// `hidden` with two directions and a dropout outside `[0, 1)` (which burn would panic on).
    pub fn encoder(
        cell: CellKind,
        d_input: usize,
        hidden: usize,
        layers: usize,
        bidirectional: bool,
        dropout: f64,
    ) -> Result<Self, crate::ModelError> {
        if !(0.0..1.0).contains(&dropout) {
            return Err(crate::ModelError::Probability { name: "dropout", value: dropout });
        }
        if bidirectional && hidden % 2 != 0 {
            return Err(crate::ModelError::OddBidirectional(hidden));
        }
        let per_direction = if bidirectional { hidden / 2 } else { hidden };
        Ok(Self::new(cell, d_input, per_direction)
            .with_layers(layers)
            .with_bidirectional(bidirectional)
            .with_dropout(dropout))
    }

    /// Initialises the layers.
    pub fn init(&self, device: &Device) -> StackedRnn {
        let dirs = if self.bidirectional { 2 } else { 1 };
        let layer = |l: usize| {
            let d_in = if l == 0 { self.d_input } else { dirs * self.d_hidden };
            CellConfig::new(self.cell, d_in, self.d_hidden).init(device)
        };
        StackedRnn {
            forward_cells: (0..self.layers).map(layer).collect(),
            backward_cells: if self.bidirectional {
                (0..self.layers).map(layer).collect()
            } else {
                Vec::new()
            },
            dropout: DropoutConfig::new(self.dropout).init(),
        }
    }
}

impl StackedRnn {
    /// Directions (1 or 2).
    pub fn directions(&self) -> usize {
        if self.backward_cells.is_empty() { 1 } else { 2 }
    }

    /// Layers.
    pub fn layers(&self) -> usize {
        self.forward_cells.len()
    }

    /// Hidden units per direction.
    pub fn d_hidden(&self) -> usize {
        self.forward_cells[0].d_hidden
    }

    /// The recurrence.
    pub fn kind(&self) -> CellKind {
        self.forward_cells[0].kind
    }

    /// Runs every layer over a whole padded sequence. `init` gives per-layer (forward
    /// direction) initial states; `None` starts from zeros. `dense` is how many leading
    /// positions are real in every row (the shortest length): those steps skip the padding
    /// mask, which only the positions after them need.
    pub fn forward(
        &self,
        x: Tensor<3>,
        keep: &Tensor<2>,
        dense: usize,
        init: Option<Vec<CellState>>,
    ) -> (Tensor<3>, Vec<CellState>) {
        let [batch, time, _] = x.dims();
        let device = x.device();
        // Per-step keep masks, [batch, 1] each, built once for all layers.
        let keeps: Vec<Tensor<2>> = (0..time).map(|t| keep.clone().narrow(1, t, 1)).collect();
        let mut init = init.map(|v| v.into_iter());
        let mut input = x;
        let mut finals = Vec::with_capacity(self.layers() * self.directions());
        for l in 0..self.layers() {
            if l > 0 {
                input = ops::dropout(&self.dropout, input);
            }
            let cell = &self.forward_cells[l];
            let start = init
                .as_mut()
                .and_then(|it| it.next())
                .unwrap_or_else(|| CellState::zeros(cell.kind, batch, cell.d_hidden, &device));
            let (out_f, fin_f) = run(cell, cell.project(input.clone()), keep, &keeps, dense, start, false);
            finals.push(fin_f);
            input = match self.backward_cells.get(l) {
                Some(back) => {
                    let zero = CellState::zeros(back.kind, batch, back.d_hidden, &device);
                    let (out_b, fin_b) = run(back, back.project(input), keep, &keeps, dense, zero, true);
                    finals.push(fin_b);
                    Tensor::cat(vec![out_f, out_b], 2)
                }
                None => out_f,
            };
        }
        (input, finals)
    }

    /// One decoder step through every layer (forward direction only): `xw0` is layer 0's
    /// projected input `[batch, gates·d_hidden]`. Returns the top layer's `h` and the new states.
    pub fn step(&self, xw0: Tensor<2>, states: &[CellState]) -> (Tensor<2>, Vec<CellState>) {
        let mut out = Vec::with_capacity(states.len());
        let mut xw = xw0;
        for (l, cell) in self.forward_cells.iter().enumerate() {
            if l > 0 {
                let below: &CellState = &out[l - 1];
                xw = cell.project(ops::dropout(&self.dropout, below.h.clone()));
            }
            out.push(cell.step(xw.clone(), &states[l]));
        }
        let top = out.last().expect("at least one layer").h.clone();
        (top, out)
    }
}

/// One direction of one layer over the whole sequence: an LSTM layer as one fused kernel where
/// one runs ([`ops::fast_lstm_layer`], tested equal to [`run_steps`]), else [`run_steps`].
fn run(
    cell: &RecurrentCell,
    xw: Tensor<3>,
    keep: &Tensor<2>,
    keeps: &[Tensor<2>],
    dense: usize,
    start: CellState,
    reverse: bool,
) -> (Tensor<3>, CellState) {
    if cell.kind == CellKind::Lstm {
        let c0 = start.c.clone().expect("LSTM state has a memory cell");
        let (w_h, h0) = (cell.w_hidden.val(), start.h.clone());
        let fast = ops::fast_lstm_layer(xw.clone(), w_h, h0, c0, keep.clone(), dense, reverse);
        if let Some((out, h, c)) = fast {
            return (out, CellState { h, c: Some(c) });
        }
    }
    run_steps(cell, xw, keeps, dense, start, reverse)
}

/// The recurrence over a padded sequence, one [`RecurrentCell::step`] at a time, left to right
/// or (`reverse`) right to left: at a padded step the state stays ([`CellState::masked`]) and
/// the output is 0; the first `dense` steps are real in every row and skip the mask. What
/// `--kernels reference` runs, and what the fused LSTM layer is tested against.
///
/// # Shapes
/// - `xw`: `[batch, time, gates·d_hidden]` (`x W_x + b` of every step); `keeps`: `time` masks
///   `[batch, 1]` (1 on real tokens)
/// - returns the outputs `[batch, time, d_hidden]` and the final state
fn run_steps(
    cell: &RecurrentCell,
    xw: Tensor<3>,
    keeps: &[Tensor<2>],
    dense: usize,
    start: CellState,
    reverse: bool,
) -> (Tensor<3>, CellState) {
    let time = keeps.len();
    let mut state = start;
    let mut outs: Vec<Option<Tensor<2>>> = vec![None; time];
    let order: Box<dyn Iterator<Item = usize>> =
        if reverse { Box::new((0..time).rev()) } else { Box::new(0..time) };
    for t in order {
        let x_t = xw.clone().narrow(1, t, 1).squeeze_dim::<2>(1); // [B, G·H]
        if t < dense {
            state = cell.step(x_t, &state);
            outs[t] = Some(state.h.clone());
        } else {
            let new = cell.step(x_t, &state).masked(&state, &keeps[t]);
            outs[t] = Some(new.h.clone() * keeps[t].clone());
            state = new;
        }
    }
    let outs: Vec<Tensor<2>> = outs.into_iter().map(|o| o.expect("every step ran")).collect();
    (ops::stack_steps(outs), state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::{Distribution, TensorData};

    /// A sentence alone and the same sentence padded in a batch give the same outputs and
    /// final states, in both directions and every layer.
    #[test]
    fn padding_never_changes_states_or_outputs() {
        let d = Device::flex();
        d.seed(3);
        for kind in [CellKind::Lstm, CellKind::Gru, CellKind::Rnn] {
            let rnn = StackedRnnConfig::new(kind, 4, 5).with_layers(2).with_bidirectional(true).init(&d);
            let x: Tensor<3> = Tensor::random([2, 6, 4], Distribution::Normal(0.0, 1.0), &d);
            // Row 1 is 3 long; padded positions hold garbage that must not matter.
            let keep = Tensor::<2>::from_data(
                TensorData::new(vec![1f32, 1., 1., 1., 1., 1., 1., 1., 1., 0., 0., 0.], [2, 6]),
                &d,
            );
            let (out, fin) = rnn.forward(x.clone(), &keep, 3, None);
            // Skipping the mask on the dense prefix changes nothing.
            let (masked_everywhere, _) = rnn.forward(x.clone(), &keep, 0, None);
            assert!(
                max_diff(out.clone().reshape([2, 60]), masked_everywhere.reshape([2, 60])) < 1e-6,
                "{kind:?} dense"
            );
            let alone = x.narrow(0, 1, 1).narrow(1, 0, 3);
            let (out1, fin1) = rnn.forward(alone, &Tensor::ones([1, 3], &d), 3, None);
            let padded_row = out.clone().narrow(0, 1, 1).narrow(1, 0, 3).reshape([3, 10]);
            assert!(max_diff(padded_row, out1.reshape([3, 10])) < 1e-5, "{kind:?} outputs");
            let tail: Tensor<2> = out.narrow(0, 1, 1).narrow(1, 3, 3).reshape([3, 10]);
            assert_eq!(tail.abs().max().into_scalar::<f32>(), 0.0, "{kind:?} padded outputs are zero");
            for (a, b) in fin.into_iter().zip(fin1) {
                assert!(max_diff(a.h.narrow(0, 1, 1), b.h) < 1e-5, "{kind:?} final state");
            }
        }
    }

    /// The fused LSTM layer kernel equals the step-by-step loop — with the fused step kernel
    /// and with the equations (`--kernels reference`) — outputs, final states and every
    /// gradient (inputs, weights, bias, initial state), in both directions, with
    /// padding after a dense prefix (and, in the second batch, trailing steps where every row
    /// is padding), whether the units run as one group (1 thread) or as three uneven ones (3
    /// threads; 26 units cut 8/9/9, so packed panels end narrow).
    #[test]
    fn fused_lstm_layer_equals_the_step_by_step_loop() {
        for lengths in [[6usize, 4, 2], [4, 2, 1]] {
            fused_lstm_layer_equals_the_step_by_step_loop_on(&Device::flex(), lengths, &[1, 3]);
        }
    }

    /// The same for the GPU layer (`ops::fast_lstm_layer` on a GPU) on wgpu (lavapipe
    /// where there is no GPU), against the step-by-step loop on the same device.
    #[test]
    fn gpu_lstm_layer_equals_the_step_by_step_loop() {
        let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() else { return };
        for lengths in [[6usize, 4, 2], [4, 2, 1]] {
            fused_lstm_layer_equals_the_step_by_step_loop_on(&gpu, lengths, &[1]);
        }
    }

    fn fused_lstm_layer_equals_the_step_by_step_loop_on(d: &Device, lengths: [usize; 3], threads: &[usize]) {
        let d = d.clone().autodiff();
        d.seed(5);
        let (b, t, n_in, h) = (3, 6, 4, 26);
        let dense = lengths.iter().copied().min().unwrap_or(0);
        let keep_v: Vec<f32> =
            lengths.iter().flat_map(|&len| (0..t).map(move |i| if i < len { 1.0 } else { 0.0 })).collect();
        let keep = Tensor::<2>::from_data(TensorData::new(keep_v, [b, t]), &d);
        let keeps: Vec<Tensor<2>> = (0..t).map(|i| keep.clone().narrow(1, i, 1)).collect();
        let x: Tensor<3> = Tensor::random([b, t, n_in], Distribution::Normal(0.0, 1.0), &d);
        let h0: Tensor<2> = Tensor::random([b, h], Distribution::Normal(0.0, 0.5), &d);
        let c0: Tensor<2> = Tensor::random([b, h], Distribution::Normal(0.0, 0.5), &d);
        let w_out: Tensor<3> = Tensor::random([b, t, h], Distribution::Normal(0.0, 1.0), &d);
        // One set of weights for both runs (other tests draw from the device's generator
        // concurrently, so reseeding would not reproduce them).
        let cell = CellConfig::new(CellKind::Lstm, n_in, h).init(&d);
        for reverse in [false, true] {
            let grads_of = |fused: bool| {
                let cell = cell.clone();
                let (x, h0, c0) =
                    (x.clone().require_grad(), h0.clone().require_grad(), c0.clone().require_grad());
                let start = CellState { h: h0.clone(), c: Some(c0.clone()) };
                let xw = cell.project(x.clone());
                let (out, fin) = if fused {
                    run(&cell, xw, &keep, &keeps, dense, start, reverse)
                } else {
                    run_steps(&cell, xw, &keeps, dense, start, reverse)
                };
                let c_fin = fin.c.clone().expect("c");
                let loss = (out.clone() * w_out.clone()).sum()
                    + fin.h.clone().sum() * 0.5
                    + c_fin.clone().sum() * 0.25;
                let g = loss.backward();
                let grad = |p: Option<Tensor<2>>| p.expect("gradient").reshape([1, -1]);
                (
                    vec![
                        out.inner().reshape([1, -1]),
                        fin.h.inner().reshape([1, -1]),
                        c_fin.inner().reshape([1, -1]),
                    ],
                    vec![
                        grad(x.grad(&g).map(|x| x.reshape([b * t, n_in]))),
                        grad(cell.w_input.val().grad(&g)),
                        grad(cell.w_hidden.val().grad(&g)),
                        grad(cell.bias.val().grad(&g).map(|t| t.reshape([1, 4 * h]))),
                        grad(h0.grad(&g)),
                        grad(c0.grad(&g)),
                    ],
                )
            };
            let steps = grads_of(false);
            let equations =
                s2s_kernels::mode::with(s2s_kernels::mode::Kernels::Reference, || grads_of(false));
            for &threads in threads {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
                let (out_f, grads_f) = pool.install(|| grads_of(true));
                for (loop_, (out_s, grads_s)) in [("steps", &steps), ("equations", &equations)] {
                    for (i, (a, b)) in out_f.iter().zip(out_s).enumerate() {
                        assert!(
                            max_diff(a.clone(), b.clone()) < 1e-5,
                            "{lengths:?}, reverse={reverse}, {threads} threads, {loop_}: output {i} differs"
                        );
                    }
                    for (i, (a, b)) in grads_f.iter().zip(grads_s).enumerate() {
                        assert!(
                            max_diff(a.clone(), b.clone()) < 1e-4,
                            "{lengths:?}, reverse={reverse}, {threads} threads, {loop_}: gradient {i} differs"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn step_equals_forward_for_one_layer_stack() {
        let d = Device::flex();
        d.seed(4);
        let rnn = StackedRnnConfig::new(CellKind::Lstm, 3, 4).with_layers(2).init(&d);
        let x: Tensor<3> = Tensor::random([2, 5, 3], Distribution::Normal(0.0, 1.0), &d);
        let (out, _) = rnn.forward(x.clone(), &Tensor::ones([2, 5], &d), 5, None);
        let mut states: Vec<CellState> = (0..2).map(|_| CellState::zeros(CellKind::Lstm, 2, 4, &d)).collect();
        for t in 0..5 {
            let x_t = x.clone().narrow(1, t, 1).squeeze_dim::<2>(1);
            let (top, s) = rnn.step(rnn.forward_cells[0].project(x_t), &states);
            states = s;
            assert!(max_diff(top, out.clone().narrow(1, t, 1).squeeze_dim::<2>(1)) < 1e-5);
        }
    }
}
