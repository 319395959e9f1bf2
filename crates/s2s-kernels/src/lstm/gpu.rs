//! The LSTM cell's gate math as two cubecl kernels (wgpu), forward and backward: the GPU
//! counterpart of [`crate::lstm::cpu`]'s CPU kernel, with the same equations
//! (Hochreiter & Schmidhuber, 1997; the backward pass as in that module's doc):
//!
//! `c' = σ(f)⊙c + σ(i)⊙tanh(g)`, `h' = σ(o)⊙tanh(c')`
//!
//! On a GPU through wgpu a recurrent step is bound by the host time of each tensor operation
//! (~28 µs on an H100), not by arithmetic: composed from tensor operations the gate math is
//! ~12 operations forward and more backward, per layer and step. Here it is one launch each
//! way, registered with burn's autodiff as two nodes, `h'` and its child `c'` (see
//! [`GpuLstmGates::gpu_lstm_gates`]), the activations recomputed in backward as on the CPU.
//! The step kernel adds the gates' two parts (`xw + h W_h`) itself, and its backward hands
//! both parts the gates' gradient; the per-step product stays burn's `matmul`. This is what
//! step-by-step use runs (`decode_step`, the attention decoders). Not with burn's fusion
//! (`gpu-tuned`), whose fused-stream tensors this does not take: that build keeps the
//! composed form.
//!
//! A whole layer over a sequence ([`lstm_layer`], what the encoders and the `lstm` model's
//! decoder run) is one autodiff node whose loop launches two kernels a step each way: forward
//! the product `h W_h` and a step kernel (gates, state update, padding mask, and the output
//! and what the backward needs written in place into whole-sequence buffers); backward a step
//! kernel and the product `∂gates W_hᵀ`, then `∂W_h` as one product over all steps. Run
//! step by step through the composed cell, autodiff records each step's slices, products and
//! masks, and its backward zero-fills and adds a sequence-sized gradient for every step's
//! slice (`Full`, `SliceAssign`, `Add`: ~11 of the ~22 launches a layer-step): the `lstm`
//! bench model's training step took 2,172 launches that way and takes 613 with this node
//! (cubecl's kernel log; docs/benchmarks.md). The layer's kernels write outputs, saved values
//! and gradients in place into whole-sequence buffers at the step's offset, so autodiff
//! records no per-step slice.
//!
//! Not built: fewer launches a layer-step would need the recurrent product inside the step
//! kernel (a persistent kernel), whose grid-wide wait Vulkan does not promise to honour.
//!
//! # Shapes
//! - gates: `[batch, 4·hidden]`, `c`: `[batch, hidden]` → `h'`, `c'`: `[batch, hidden]`
//! - layer: `xw` `[batch, time, 4·hidden]`, `W_h` `[hidden, 4·hidden]`, `h0`, `c0`
//!   `[batch, hidden]`, keep `[batch, time]` → `[outputs | h_T | c_T]` `[batch, time + 2, hidden]`

use std::sync::Arc;

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::ops::FloatTensorOps;
use burn::backend::{Dispatch, backend_extension, tensor::FloatTensor};
use burn::tensor::{DType, Shape, Slice, Tensor};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::cube;
use cubecl::prelude::*;

use crate::gpu::launch::{empty, launch_dims};
use crate::gpu::second_output::{SecondGrad, second_output};
use crate::own_backward::WithBackward;

/// The gate math as a burn backend extension (cubecl runtimes without fusion).
#[backend_extension(Cube, Autodiff)]
pub trait GpuLstmGates: burn::backend::Backend {
    /// `(h', c')` (each `[batch, hidden]`) from the gates' two parts `xw` and `hw` (each
    /// `[batch, 4·hidden]`, added inside the kernel: the input's and the state's projections)
    /// and `c`.
    ///
    /// With autodiff these are two nodes, `c'` a child of `h'` (`gpu::second_output`, whose doc
    /// says why and what it asks: `h'` reaches the loss wherever `c'` does, as in any LSTM
    /// recurrence); the `h'` node's backward computes all inputs' gradients in one launch.
    fn gpu_lstm_gates(
        xw: FloatTensor<Self>,
        hw: FloatTensor<Self>,
        c: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// A whole LSTM layer in one direction (see [`lstm_layer`]): `[outputs | h_T | c_T]`,
    /// `[batch, time + 2, hidden]`.
    fn gpu_lstm_layer(
        xw: FloatTensor<Self>,
        w_hidden: FloatTensor<Self>,
        h0: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        keep: FloatTensor<Self>,
        reverse: bool,
    ) -> FloatTensor<Self>;
}

#[cube]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + f32::exp(-x))
}

/// One unit's activations `σ(i)`, `σ(f)`, `tanh(g)`, `σ(o)`, and where its gates sit (`at`).
#[derive(CubeType)]
struct Unit {
    i: f32,
    f: f32,
    g: f32,
    o: f32,
    at: usize,
}

/// Unit `u` = `(row, j)` of a `[batch, hidden]` state, its gates `xw + hw`.
#[cube]
fn unit(xw: &[f32], hw: &[f32], u: usize, h: usize) -> Unit {
    let (row, j) = (u / h, u % h);
    let at = row * 4 * h + j;
    Unit {
        i: sigmoid(xw[at] + hw[at]),
        f: sigmoid(xw[at + h] + hw[at + h]),
        g: f32::tanh(xw[at + 2 * h] + hw[at + 2 * h]),
        o: sigmoid(xw[at + 3 * h] + hw[at + 3 * h]),
        at,
    }
}

/// One unit per thread: `h'` and `c'`, each `[batch, hidden]`.
#[cube(launch)]
fn gates_forward(xw: &[f32], hw: &[f32], c: &[f32], h_out: &mut [f32], c_out: &mut [f32], hidden: u32) {
    let n = ABSOLUTE_POS;
    if n < c.len() {
        let u = unit(xw, hw, n, hidden as usize);
        let c2 = u.f * c[n] + u.i * u.g;
        h_out[n] = u.o * f32::tanh(c2);
        c_out[n] = c2;
    }
}

/// One unit per thread: `∂gates` and `∂c` from `∂h'` and `∂c'` (zero without `has_dc`, when
/// `c'` reached no loss; `dc` is then not read), the activations recomputed.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn gates_backward(
    xw: &[f32],
    hw: &[f32],
    c: &[f32],
    dh: &[f32],
    dc: &[f32],
    d_gates: &mut [f32],
    d_c: &mut [f32],
    hidden: u32,
    #[comptime] has_dc: bool,
) {
    let n = ABSOLUTE_POS;
    if n < c.len() {
        let h = hidden as usize;
        let u = unit(xw, hw, n, h);
        let c_prev = c[n];
        let t = f32::tanh(u.f * c_prev + u.i * u.g);
        let dh = dh[n];
        let mut dc_in = 0.0f32;
        if has_dc {
            dc_in = dc[n];
        }
        let dc = dc_in + dh * u.o * (1.0 - t * t);
        d_gates[u.at] = dc * u.g * u.i * (1.0 - u.i);
        d_gates[u.at + h] = dc * c_prev * u.f * (1.0 - u.f);
        d_gates[u.at + 2 * h] = dc * u.i * (1.0 - u.g * u.g);
        d_gates[u.at + 3 * h] = dh * t * u.o * (1.0 - u.o);
        d_c[n] = dc * u.f;
    }
}

/// Unit `u` = `(row, j)` of the layer at time `t`: its pre-activation gates are `hw`'s (the
/// step's product `h W_h`, `[batch, 4·hidden]`) plus `xw`'s (`[batch, time, 4·hidden]`).
/// Saves `[gates | c_prev | h_prev]` at `saved[row, t]` (`[batch, time, 6·hidden]`), writes
/// the output `keep·h'` at `out[row, t]` (`[batch, time + 2, hidden]`) and the next state
/// (`h'`, `c'`, or the previous state where `keep` is 0) to `h_next`, `c_next`, and at the
/// last step also to `out[row, time]` and `out[row, time + 1]`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn layer_step_forward(
    hw: &[f32],
    xw: &[f32],
    h_prev: &[f32],
    c_prev: &[f32],
    keep: &[f32],
    saved: &mut [f32],
    out: &mut [f32],
    h_next: &mut [f32],
    c_next: &mut [f32],
    hidden: u32,
    time: u32,
    t: u32,
    last: u32,
) {
    let n = ABSOLUTE_POS;
    if n < c_prev.len() {
        let (h, time, t) = (hidden as usize, time as usize, t as usize);
        let (row, j) = (n / h, n % h);
        let at = row * time + t;
        let k = keep[at];
        let (g_in, g_sv) = (row * 4 * h + j, at * 4 * h + j);
        let sv = at * 6 * h + j;
        let mut pre = Array::<f32>::new(4usize);
        #[unroll]
        for q in 0..4usize {
            pre[q] = hw[g_in + q * h] + xw[g_sv + q * h];
            saved[sv + q * h] = pre[q];
        }
        let (hp, cp) = (h_prev[n], c_prev[n]);
        saved[sv + 4 * h] = cp;
        saved[sv + 5 * h] = hp;
        let c2 = sigmoid(pre[1]) * cp + sigmoid(pre[0]) * f32::tanh(pre[2]);
        let h2 = sigmoid(pre[3]) * f32::tanh(c2);
        let (hn, cn) = (k * h2 + (1.0 - k) * hp, k * c2 + (1.0 - k) * cp);
        let o = (row * (time + 2) + t) * h + j;
        out[o] = k * h2;
        h_next[n] = hn;
        c_next[n] = cn;
        if last != 0 {
            let end = (row * (time + 2) + time) * h + j;
            out[end] = hn;
            out[end + h] = cn;
        }
    }
}

/// The backward of [`layer_step_forward`] for unit `(row, j)` at time `t`, from the gradient
/// `grad` of the layer's output (`[batch, time + 2, hidden]`) and what flows back from the
/// later step: `dh_mm` (its `∂gates W_hᵀ`) and `carry` `[∂h pass-through | ∂c]`
/// (`[batch, 2·hidden]`); at the first backward step (`first`) those are `grad`'s `∂h_T`
/// and `∂c_T` instead. Writes `∂gates` to `d_xw[row, t]` and to `d_gates` (`[batch,
/// 4·hidden]`, this step's product operand), and the carry for the step before.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn layer_step_backward(
    saved: &[f32],
    keep: &[f32],
    grad: &[f32],
    dh_mm: &[f32],
    carry: &[f32],
    d_xw: &mut [f32],
    d_gates: &mut [f32],
    carry_out: &mut [f32],
    hidden: u32,
    time: u32,
    t: u32,
    first: u32,
) {
    let n = ABSOLUTE_POS;
    if n < d_gates.len() / 4 {
        let (h, time, t) = (hidden as usize, time as usize, t as usize);
        let (row, j) = (n / h, n % h);
        let at = row * time + t;
        let k = keep[at];
        // (The placeholders read at the first step are in bounds; `select` drops what they hold.)
        let end = (row * (time + 2) + time) * h + j;
        let dh_in = select(first != 0, grad[end], dh_mm[n] + carry[row * 2 * h + j]);
        let dc_in = select(first != 0, grad[end + h], carry[row * 2 * h + h + j]);
        let g_h = dh_in + k * grad[(row * (time + 2) + t) * h + j];
        let (dh, dc_new) = (k * g_h, k * dc_in);
        let sv = at * 6 * h + j;
        let (i, f) = (sigmoid(saved[sv]), sigmoid(saved[sv + h]));
        let (g, o) = (f32::tanh(saved[sv + 2 * h]), sigmoid(saved[sv + 3 * h]));
        let cp = saved[sv + 4 * h];
        let tc = f32::tanh(f * cp + i * g);
        let dc = dc_new + dh * o * (1.0 - tc * tc);
        let mut dg = Array::<f32>::new(4usize);
        dg[0] = dc * g * i * (1.0 - i);
        dg[1] = dc * cp * f * (1.0 - f);
        dg[2] = dc * i * (1.0 - g * g);
        dg[3] = dh * tc * o * (1.0 - o);
        let (x_at, g_at) = (at * 4 * h + j, row * 4 * h + j);
        #[unroll]
        for q in 0..4usize {
            d_xw[x_at + q * h] = dg[q];
            d_gates[g_at + q * h] = dg[q];
        }
        carry_out[row * 2 * h + j] = (1.0 - k) * g_h;
        carry_out[row * 2 * h + h + j] = (1.0 - k) * dc_in + dc * f;
    }
}

/// `∂h_0 = dh_mm + carry[.., :hidden]`, `∂c_0 = carry[.., hidden:]` after the last backward step.
#[cube(launch)]
fn layer_finish(dh_mm: &[f32], carry: &[f32], d_h0: &mut [f32], d_c0: &mut [f32], hidden: u32) {
    let n = ABSOLUTE_POS;
    if n < d_h0.len() {
        let h = hidden as usize;
        let (row, j) = (n / h, n % h);
        d_h0[n] = dh_mm[n] + carry[row * 2 * h + j];
        d_c0[n] = carry[row * 2 * h + h + j];
    }
}

/// `[batch, hidden]` of `c` (checked against the gates' parts, each `[batch, 4·hidden]`).
fn units(xw: &CubeTensor, hw: &CubeTensor, c: &CubeTensor) -> [usize; 2] {
    let (xs, hs, cs) = (xw.meta.shape(), hw.meta.shape(), c.meta.shape());
    assert!(
        xs.num_dims() == 2 && cs.num_dims() == 2 && xs[0] == cs[0] && xs[1] == 4 * cs[1] && hs == xs,
        "LSTM gates [B, 4H] (two parts) and cell [B, H] disagree"
    );
    assert!(
        xw.dtype == DType::F32 && hw.dtype == DType::F32 && c.dtype == DType::F32,
        "the LSTM kernels compute in f32"
    );
    [cs[0], cs[1]]
}

fn forward(xw: CubeTensor, hw: CubeTensor, c: CubeTensor) -> (CubeTensor, CubeTensor) {
    let [batch, h] = units(&xw, &hw, &c);
    let (xw, hw, c) = (into_contiguous(xw), into_contiguous(hw), into_contiguous(c));
    let (h_out, c_out) = (empty(&c, [batch, h]), empty(&c, [batch, h]));
    let (count, dim) = launch_dims(&c, batch * h);
    gates_forward::launch(
        &c.client.clone(),
        count,
        dim,
        xw.into_buffer_arg(),
        hw.into_buffer_arg(),
        c.into_buffer_arg(),
        h_out.clone().into_buffer_arg(),
        c_out.clone().into_buffer_arg(),
        h as u32,
    );
    (h_out, c_out)
}

/// `(∂gates, ∂c)` (`∂gates` is both parts' gradient) from `∂h'` and, when `c'` reached the
/// loss, `∂c'`.
fn backward(
    xw: CubeTensor,
    hw: CubeTensor,
    c: CubeTensor,
    dh: CubeTensor,
    dc: Option<CubeTensor>,
) -> (CubeTensor, CubeTensor) {
    let [batch, h] = units(&xw, &hw, &c);
    let (xw, hw, c, dh) = (into_contiguous(xw), into_contiguous(hw), into_contiguous(c), into_contiguous(dh));
    let has_dc = dc.is_some();
    // Without `∂c'` the kernel reads no `dc`; `dh` fills its binding.
    let dc = dc.map_or_else(|| dh.clone(), into_contiguous);
    let (d_gates, d_c) = (empty(&c, [batch, 4 * h]), empty(&c, [batch, h]));
    let (count, dim) = launch_dims(&c, batch * h);
    gates_backward::launch(
        &c.client.clone(),
        count,
        dim,
        xw.into_buffer_arg(),
        hw.into_buffer_arg(),
        c.into_buffer_arg(),
        dh.into_buffer_arg(),
        dc.into_buffer_arg(),
        d_gates.clone().into_buffer_arg(),
        d_c.clone().into_buffer_arg(),
        h as u32,
        has_dc,
    );
    (d_gates, d_c)
}

/// What a layer's backward needs from its forward.
#[derive(Debug, Clone)]
struct LayerSaved {
    /// `[gates | c_prev | h_prev]` per row and time, `[batch, time, 6·hidden]`.
    saved: CubeTensor,
    w_hidden: CubeTensor,
    keep: CubeTensor,
    reverse: bool,
}

type Mm = CubeBackend;

/// The layer's forward loop (see the module doc): `[outputs | h_T | c_T]` and what the
/// backward needs.
fn layer_forward(
    xw: CubeTensor,
    w_hidden: CubeTensor,
    h0: CubeTensor,
    c0: CubeTensor,
    keep: CubeTensor,
    reverse: bool,
) -> (CubeTensor, LayerSaved) {
    let (xs, ws, ks) = (xw.meta.shape(), w_hidden.meta.shape(), keep.meta.shape());
    assert!(xs.num_dims() == 3 && xs[2] % 4 == 0, "LSTM layer input must be [batch, time, 4·hidden]");
    let (batch, time, h) = (xs[0], xs[1], xs[2] / 4);
    assert!(time > 0, "an LSTM layer needs at least one step");
    assert!(ws.num_dims() == 2 && ws[0] == h && ws[1] == 4 * h, "W_h must be [hidden, 4·hidden]");
    assert!(ks.num_dims() == 2 && ks[0] == batch && ks[1] == time, "keep must be [batch, time]");
    assert!(xw.dtype == DType::F32 && keep.dtype == DType::F32, "the LSTM kernels compute in f32");
    let (xw, w_hidden, keep) = (into_contiguous(xw), into_contiguous(w_hidden), into_contiguous(keep));
    let state = |t: &CubeTensor| {
        let s = t.meta.shape();
        s.num_dims() == 2 && s[0] == batch && s[1] == h && t.dtype == DType::F32
    };
    assert!(state(&h0) && state(&c0), "LSTM layer state must be [batch, hidden] f32");
    let (mut h_prev, mut c_prev) = (into_contiguous(h0), into_contiguous(c0));
    let out = empty(&xw, [batch, time + 2, h]);
    let saved = empty(&xw, [batch, time, 6 * h]);
    let (count, dim) = launch_dims(&xw, batch * h);
    for s in 0..time {
        let t = if reverse { time - 1 - s } else { s };
        let hw = into_contiguous(Mm::float_matmul(h_prev.clone(), w_hidden.clone()));
        let (h_next, c_next) = (empty(&xw, [batch, h]), empty(&xw, [batch, h]));
        layer_step_forward::launch(
            &xw.client.clone(),
            count.clone(),
            dim,
            hw.into_buffer_arg(),
            xw.clone().into_buffer_arg(),
            h_prev.into_buffer_arg(),
            c_prev.into_buffer_arg(),
            keep.clone().into_buffer_arg(),
            saved.clone().into_buffer_arg(),
            out.clone().into_buffer_arg(),
            h_next.clone().into_buffer_arg(),
            c_next.clone().into_buffer_arg(),
            h as u32,
            time as u32,
            t as u32,
            (s + 1 == time) as u32,
        );
        (h_prev, c_prev) = (h_next, c_next);
    }
    (out, LayerSaved { saved, w_hidden, keep, reverse })
}

/// The layer's backward loop from `grad` (`[batch, time + 2, hidden]`): `[∂xw, ∂W_h, ∂h_0, ∂c_0]`.
fn layer_backward(l: LayerSaved, grad: CubeTensor) -> [CubeTensor; 4] {
    let ss = l.saved.meta.shape();
    let (batch, time, h) = (ss[0], ss[1], ss[2] / 6);
    let grad = into_contiguous(grad);
    let w_t = into_contiguous(Mm::float_transpose(l.w_hidden)); // [4H, H]
    let d_xw = empty(&grad, [batch, time, 4 * h]);
    // Placeholders for the first step, which reads ∂h_T and ∂c_T from `grad` instead.
    let (mut dh_mm, mut carry) = (empty(&grad, [batch, h]), empty(&grad, [batch, 2 * h]));
    let (count, dim) = launch_dims(&grad, batch * h);
    for s in (0..time).rev() {
        let t = if l.reverse { time - 1 - s } else { s };
        let (d_gates, carry_out) = (empty(&grad, [batch, 4 * h]), empty(&grad, [batch, 2 * h]));
        layer_step_backward::launch(
            &grad.client.clone(),
            count.clone(),
            dim,
            l.saved.clone().into_buffer_arg(),
            l.keep.clone().into_buffer_arg(),
            grad.clone().into_buffer_arg(),
            dh_mm.into_buffer_arg(),
            carry.into_buffer_arg(),
            d_xw.clone().into_buffer_arg(),
            d_gates.clone().into_buffer_arg(),
            carry_out.clone().into_buffer_arg(),
            h as u32,
            time as u32,
            t as u32,
            (s + 1 == time) as u32,
        );
        dh_mm = into_contiguous(Mm::float_matmul(d_gates, w_t.clone()));
        carry = carry_out;
    }
    let (d_h0, d_c0) = (empty(&grad, [batch, h]), empty(&grad, [batch, h]));
    layer_finish::launch(
        &grad.client.clone(),
        count,
        dim,
        dh_mm.into_buffer_arg(),
        carry.into_buffer_arg(),
        d_h0.clone().into_buffer_arg(),
        d_c0.clone().into_buffer_arg(),
        h as u32,
    );
    // ∂W_h = Σ_t h_prevᵀ ∂gates_t: one product over every row and step.
    let rows = batch * time;
    let saved = Mm::float_reshape(l.saved, Shape::from([rows, 6 * h]));
    let h_prev =
        Mm::float_slice(saved, &[Slice::full(), Slice::new(5 * h as isize, Some(6 * h as isize), 1)]);
    let d_flat = Mm::float_reshape(d_xw.clone(), Shape::from([rows, 4 * h]));
    let d_w = Mm::float_matmul(Mm::float_transpose(into_contiguous(h_prev)), d_flat);
    [d_xw, d_w, d_h0, d_c0]
}

impl GpuLstmGates for CubeBackend {
    fn gpu_lstm_gates(xw: CubeTensor, hw: CubeTensor, c: CubeTensor) -> (CubeTensor, CubeTensor) {
        forward(xw, hw, c)
    }

    fn gpu_lstm_layer(
        xw: CubeTensor,
        w_hidden: CubeTensor,
        h0: CubeTensor,
        c0: CubeTensor,
        keep: CubeTensor,
        reverse: bool,
    ) -> CubeTensor {
        layer_forward(xw, w_hidden, h0, c0, keep, reverse).0
    }
}

impl<C: CheckpointStrategy> GpuLstmGates for Autodiff<CubeBackend, C> {
    fn gpu_lstm_gates(
        xw: FloatTensor<Self>,
        hw: FloatTensor<Self>,
        c: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let mut second = None;
        let h_out = Self::with_backward(
            [xw, hw, c],
            |[xw, hw, c], keep| {
                if !keep {
                    let (h_out, c_out) = forward(xw, hw, c);
                    second = Some((Arc::default(), c_out));
                    return (h_out, None);
                }
                let (h_out, c_out) = forward(xw.clone(), hw.clone(), c.clone());
                let cell = Arc::new(SecondGrad::default());
                second = Some((cell.clone(), c_out));
                // The forward inputs (the activations are recomputed, cheaper than storing
                // four) and where `∂c'` arrives.
                (h_out, Some((xw, hw, c, cell)))
            },
            |(xw, hw, c, cell): (CubeTensor, CubeTensor, CubeTensor, Arc<SecondGrad>), dh, _| {
                let (d_gates, d_c) = backward(xw, hw, c, dh, cell.take());
                // The sum's two parts share its gradient.
                [Some(d_gates.clone()), Some(d_gates), Some(d_c)]
            },
        );
        let (cell, c_out) = second.expect("the forward ran");
        let c_out = second_output::<C>(&h_out, cell, c_out);
        (h_out, c_out)
    }

    fn gpu_lstm_layer(
        xw: FloatTensor<Self>,
        w_hidden: FloatTensor<Self>,
        h0: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        keep: FloatTensor<Self>,
        reverse: bool,
    ) -> FloatTensor<Self> {
        let keep = keep.into_primitive();
        Self::with_backward(
            [xw, w_hidden, h0, c0],
            |[xw, w, h0, c0], track| {
                let (out, saved) = layer_forward(xw, w, h0, c0, keep, reverse);
                (out, track.then_some(saved))
            },
            |saved: LayerSaved, dy, _| layer_backward(saved, dy).map(Some),
        )
    }
}

/// `(h', c')` of an LSTM step from the pre-activation gates `xw + hw` (each part
/// `[batch, 4·hidden]`, added inside the kernel) and `c` `[batch, hidden]` on a cubecl device
/// (not flex; not with `gpu-tuned`).
pub fn lstm_gates(xw: Tensor<2>, hw: Tensor<2>, c: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
    let (h, c) =
        <Dispatch as GpuLstmGates>::gpu_lstm_gates(xw.into_dispatch(), hw.into_dispatch(), c.into_dispatch());
    (Tensor::from_dispatch(h), Tensor::from_dispatch(c))
}

/// One direction of one LSTM layer over a padded batch on a cubecl device (not flex; not with
/// `gpu-tuned`), with the semantics of [`crate::lstm::cpu::lstm_layer`]: `xw = x W_x + b`
/// `[batch, time, 4·hidden]` (`time` ≥ 1), `W_h`, the initial state and `keep`
/// `[batch, time]`; padded steps keep the state and output zeros. Returns the outputs
/// `[batch, time, hidden]` and the final `(h, c)`.
pub fn lstm_layer(
    xw: Tensor<3>,
    w_hidden: Tensor<2>,
    h0: Tensor<2>,
    c0: Tensor<2>,
    keep: Tensor<2>,
    reverse: bool,
) -> (Tensor<3>, Tensor<2>, Tensor<2>) {
    let out = Tensor::<3>::from_dispatch(<Dispatch as GpuLstmGates>::gpu_lstm_layer(
        xw.into_dispatch(),
        w_hidden.into_dispatch(),
        h0.into_dispatch(),
        c0.into_dispatch(),
        keep.into_dispatch(),
        reverse,
    ));
    super::outputs_and_state(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::lstm_gates_equation as lstm_gates_composed;
    use crate::test_support::max_diff;
    use burn::tensor::{Device, Distribution};

    /// The kernels equal the composed tensor operations on wgpu (lavapipe where there is no
    /// GPU), forward and backward (gradients of a random linear function of `h'` and `c'` with
    /// respect to the gates and `c`; and of `h'` alone, where `c'` reaches no loss and the
    /// gates node gets no `∂c'`), and without autodiff (decoding).
    #[test]
    fn kernels_equal_the_composed_operations_on_wgpu() {
        let Some(plain) = crate::testing::wgpu_or_skip() else { return };
        let ad = plain.clone().autodiff();
        for (batch, h) in [(3, 5), (4, 83)] {
            let normal =
                |dims: [usize; 2], d: &Device| Tensor::<2>::random(dims, Distribution::Normal(0.0, 2.0), d);
            let (xw, hw, c) =
                (normal([batch, 4 * h], &plain), normal([batch, 4 * h], &plain), normal([batch, h], &plain));
            let (wh, wc) = (normal([batch, h], &plain), normal([batch, h], &plain));
            let (h1, c1) = lstm_gates(xw.clone(), hw.clone(), c.clone());
            let (h2, c2) = lstm_gates_composed(xw.clone() + hw.clone(), c.clone());
            assert!(max_diff(h1, h2) < 1e-5 && max_diff(c1, c2) < 1e-5, "forward, h = {h}");
            for with_c in [true, false] {
                let grads = |ours: bool| {
                    let on = |t: &Tensor<2>| Tensor::<2>::from_data(t.to_data(), &ad).require_grad();
                    let (x, hh, cc) = (on(&xw), on(&hw), on(&c));
                    let (h_out, c_out) = if ours {
                        lstm_gates(x.clone(), hh.clone(), cc.clone())
                    } else {
                        lstm_gates_composed(x.clone() + hh.clone(), cc.clone())
                    };
                    let on_const = |t: &Tensor<2>| Tensor::<2>::from_data(t.to_data(), &ad);
                    let mut loss = (h_out * on_const(&wh)).sum();
                    if with_c {
                        loss = loss + (c_out * on_const(&wc)).sum();
                    }
                    let gr = loss.backward();
                    (x.grad(&gr).unwrap(), hh.grad(&gr).unwrap(), cc.grad(&gr).unwrap())
                };
                let ((dx1, dh1, dc1), (dx2, dh2, dc2)) = (grads(true), grads(false));
                assert!(max_diff(dx1, dx2) < 1e-5, "d xw, h = {h}, with c' {with_c}");
                assert!(max_diff(dh1, dh2) < 1e-5, "d hw, h = {h}, with c' {with_c}");
                assert!(max_diff(dc1, dc2) < 1e-5, "d c, h = {h}, with c' {with_c}");
            }
        }
    }
}
