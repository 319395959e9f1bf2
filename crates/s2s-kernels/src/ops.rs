//! The operations the models call: one function per operation, each a `match` on the
//! [`Route`] of its tensors' device — its plain-tensor reference ([`crate::reference`]) under
//! `--kernels reference`, the fused CPU kernels on flex, the cubecl kernels on a GPU, the
//! reference where no kernel applies. The matches are the table of what runs where, and this
//! is the one place that branches on the device; `docs/kernels.md` says why each kernel exists
//! and how it is tested.
//!
//! Every function has the semantics of its reference, to rounding (the kernels sum in another
//! order and use vectorised `exp`/`tanh` approximations; see `docs/kernels.md`).
//!
//! Attention and the LSTM are the exceptions: their equations are the models' own
//! (`scaled_dot_product` in the models' `transformer/mha.rs`; the recurrent decoders' scores in
//! `attention/bahdanau.rs` and `attention/luong.rs`, their masked softmax and context in
//! `attention/mod.rs`; `RecurrentCell::step` in `cell.rs` and the padded loop `run_steps` in
//! `rnn.rs`), and their fast kernels here ([`fast_attention`], [`fast_cached_attention`],
//! [`fused_self_attention`], [`fused_cross_attention`], [`heads_step`]; [`fast_dot_scores`],
//! [`fast_additive_scores`], [`fast_attend`]; [`fast_lstm_step`], [`fast_lstm_layer`]) return
//! `None` where none applies, the model then computing the equation.

use burn::module::Module;
use burn::nn::{Dropout, LayerNorm, Linear};
use burn::tensor::{Device, Int, Tensor};

use crate::cpu::flex_data::is_flex;
use crate::mode;
use crate::reference;

pub use crate::attention::multi_head::{
    Heads, KeyValue, fast_attention, fast_cached_attention, project_kv, project_qkv,
};
pub use crate::attention::step_cache::{SourceRows, StepCache};

/// Which implementation of an operation runs on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `--kernels reference` ([`mode`]): the plain-tensor equations, on any device.
    Reference,
    /// flex, the CPU backend: the fused CPU kernels.
    Cpu,
    /// A cubecl device (wgpu): the GPU kernels.
    Gpu,
    /// A cubecl device under burn's fusion (the `gpu-tuned` feature): its fused-stream tensors
    /// take none of our GPU kernels, so the references run there, fused by burn.
    Fused,
}

/// The [`Route`] of `device` under the current [`mode`].
pub fn route(device: &Device) -> Route {
    if mode::reference() {
        Route::Reference
    } else if is_flex(device) {
        Route::Cpu
    } else if cfg!(feature = "gpu-tuned") {
        Route::Fused
    } else {
        Route::Gpu
    }
}

/// True when `device` is the CPU backend (flex): where a search loop is cheapest a step at a
/// time; on a GPU it batches steps to save round trips.
pub fn is_cpu(device: &Device) -> bool {
    is_flex(device)
}

/// `x W` over the last dimension, as one 2-D product over all leading positions; a few rows
/// (decoder steps) through the CPU's small-product kernel, the weight kept packed.
pub fn matmul_rows<const D: usize>(x: Tensor<D>, w: Tensor<2>) -> Tensor<D> {
    match route(&x.device()) {
        Route::Reference => reference::matmul_rows(x, w),
        Route::Cpu | Route::Gpu | Route::Fused => {
            reference::as_rows(x, w.dims()[1], |x| crate::gemm::small::matmul(x, w))
        }
    }
}

/// [`matmul_rows`] for a `W` computed afresh at every call (weights joined side by side):
/// never packed or kept.
pub fn matmul_rows_fresh<const D: usize>(x: Tensor<D>, w: Tensor<2>) -> Tensor<D> {
    match route(&x.device()) {
        Route::Reference => reference::matmul_rows(x, w),
        Route::Cpu | Route::Gpu | Route::Fused => {
            reference::as_rows(x, w.dims()[1], |x| crate::gemm::small::matmul_fresh(x, w))
        }
    }
}

/// `x W + b` over the last dimension: while decoding on the CPU the bias is added inside the
/// product; while training on a GPU a node whose gradients a decoder loop can defer
/// ([`for_steps`]).
pub fn affine_rows<const D: usize>(x: Tensor<D>, w: Tensor<2>, b: Tensor<1>) -> Tensor<D> {
    let d_out = w.dims()[1];
    match route(&x.device()) {
        Route::Reference => reference::affine_rows(x, w, b),
        _ if x.is_autodiff() => reference::as_rows(x, d_out, |x| {
            crate::gemm::small::add_bias(crate::gemm::small::matmul(x, w), b)
        }),
        Route::Cpu | Route::Gpu | Route::Fused => {
            reference::as_rows(x, d_out, |x| crate::gemm::small::add_matmul(b.unsqueeze::<2>(), x, w))
        }
    }
}

/// A `Linear` layer, `x W + b`, through [`affine_rows`] / [`matmul_rows`].
pub fn linear<const D: usize>(layer: &Linear, x: Tensor<D>) -> Tensor<D> {
    match &layer.bias {
        Some(b) => affine_rows(x, layer.weight.val(), b.val()),
        None => matmul_rows(x, layer.weight.val()),
    }
}

/// Above this many rows (`batch × time`) [`linears`] makes its projections one product.
pub const CAT_MIN_ROWS: usize = 1024;

/// Several `Linear` layers of one input `x` `[batch, t, d_in]` (`W^Q`, `W^K`, `W^V`): their
/// outputs, and, when one product made them, that product `[batch, t, n·d_out]` (the outputs
/// are views of it). Above [`CAT_MIN_ROWS`] rows the weights go side by side into one
/// `[rows, d_in] × [d_in, n·d_out]` product (fewer, larger products; the parameters stay
/// separate). Fewer rows (decoder steps) take one product per weight, so each weight stays
/// packed between steps (a concatenation would be a new weight every step).
pub fn linears<const N: usize>(x: Tensor<3>, layers: [&Linear; N]) -> ([Tensor<3>; N], Option<Tensor<3>>) {
    let [b, t, _] = x.dims();
    if b * t <= CAT_MIN_ROWS || N == 0 {
        return (layers.map(|l| linear(l, x.clone())), None);
    }
    let d = layers[0].weight.dims()[1];
    let bias =
        |l: &Linear| l.bias.as_ref().map(|b| b.val()).unwrap_or_else(|| Tensor::zeros([d], &x.device()));
    // `[W^Q | W^K | W^V]` and their biases side by side.
    let w = cat_columns(layers.iter().map(|l| l.weight.val()).collect());
    let bias = cat_columns(layers.iter().map(|l| bias(l).unsqueeze::<2>()).collect()).reshape([N * d]);
    // The side-by-side weight is new at every call: nothing to keep packed.
    let y = matmul_rows_fresh(x, w) + bias.unsqueeze::<3>(); // [B, T, N·d]
    (std::array::from_fn(|i| y.clone().narrow(2, i * d, d)), Some(y))
}

/// `base + x W` (`base` `[rows, d_out]` or `[1, d_out]`): while decoding on the CPU the
/// addition happens inside the product.
pub fn add_matmul(base: Tensor<2>, x: Tensor<2>, w: Tensor<2>) -> Tensor<2> {
    match route(&x.device()) {
        Route::Reference => reference::add_matmul(base, x, w),
        Route::Cpu | Route::Gpu | Route::Fused => crate::gemm::small::add_matmul(base, x, w),
    }
}

/// `[a | b | …]` along the last axis of 2-D tensors with the same rows; on a GPU two or three
/// parts in one launch each way.
pub fn cat_columns(mut parts: Vec<Tensor<2>>) -> Tensor<2> {
    if parts.len() == 1 {
        return parts.remove(0);
    }
    match route(&parts[0].device()) {
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu if matches!(parts.len(), 2 | 3) => crate::gpu::cat::cat_columns(parts),
        _ => reference::cat_columns(parts),
    }
}

/// `[a | b | …]` along the last axis of `[batch, time, dᵢ]` tensors, joined as rows by
/// [`cat_columns`].
pub fn cat_features(mut parts: Vec<Tensor<3>>) -> Tensor<3> {
    if parts.len() == 1 {
        return parts.remove(0);
    }
    if route(&parts[0].device()) == Route::Reference {
        return reference::cat_features(parts);
    }
    let [batch, time, _] = parts[0].dims();
    let rows: Vec<Tensor<2>> = parts
        .into_iter()
        .map(|p| {
            let d = p.dims()[2];
            p.reshape([batch * time, d])
        })
        .collect();
    let joined = cat_columns(rows);
    let d = joined.dims()[1];
    joined.reshape([batch, time, d])
}

/// `tanh(x)`: a vectorised kernel on the CPU, one launch each way on a GPU.
pub fn tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    match route(&x.device()) {
        Route::Cpu | Route::Gpu => crate::tanh::tanh(x),
        Route::Reference | Route::Fused => reference::tanh(x),
    }
}

/// `softmax` over the last dimension: one fused pass per row on the CPU.
pub fn softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    match route(&x.device()) {
        Route::Cpu => crate::softmax::cpu::softmax(x),
        Route::Reference | Route::Gpu | Route::Fused => reference::softmax(x),
    }
}

/// `log_softmax` over the last dimension: one fused pass per row on the CPU.
pub fn log_softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    match route(&x.device()) {
        Route::Cpu => crate::softmax::cpu::log_softmax(x),
        Route::Reference | Route::Gpu | Route::Fused => reference::log_softmax(x),
    }
}

/// Each row's best token (the first of equal scores, as f32: ids are exact below 2²⁴) and its
/// log-probability, `[rows, 2]`, left on the device: one pass per row on the CPU, one launch
/// on a GPU (without autodiff).
pub fn best_log_prob_pairs(logits: Tensor<2>) -> Tensor<2> {
    match route(&logits.device()) {
        Route::Cpu | Route::Gpu if !logits.is_autodiff() => crate::softmax::cpu::best_log_prob_pairs(logits),
        _ => reference::best_log_prob_pairs(logits),
    }
}

/// [`best_log_prob_pairs`] read back to the host: (best tokens, their log-probabilities).
pub fn best_log_probs(logits: Tensor<2>) -> (Vec<i64>, Vec<f32>) {
    let v = best_log_prob_pairs(logits).into_data().convert::<f32>().try_to_vec::<f32>().unwrap_or_default();
    v.chunks_exact(2).map(|p| (p[0] as i64, p[1])).unzip()
}

/// One LSTM step through a fused kernel: from `xw = x W_x + b` (`[batch, 4·hidden]`), `h`,
/// `W_h` and `c`, the gates `[i f g o] = xw + h W_h`, then `c' = σ(f)⊙c + σ(i)⊙tanh(g)`,
/// `h' = σ(o)⊙tanh(c')` → `(h', c')`. On the CPU one fused pass after the product; on a GPU one
/// kernel that also adds the two parts. `None` where no kernel runs (`--kernels reference`,
/// burn's fusion): the caller computes the equation (`RecurrentCell::step` in the models'
/// `cell.rs`).
pub fn fast_lstm_step(
    xw: Tensor<2>,
    h: Tensor<2>,
    w_hidden: Tensor<2>,
    c: Tensor<2>,
) -> Option<(Tensor<2>, Tensor<2>)> {
    match route(&xw.device()) {
        Route::Cpu => Some(crate::lstm::cpu::lstm_gates(crate::gemm::small::add_matmul(xw, h, w_hidden), c)),
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu => Some(crate::lstm::gpu::lstm_gates(xw, crate::gemm::small::matmul(h, w_hidden), c)),
        _ => None,
    }
}

/// One direction of an LSTM layer over a padded sequence as one kernel: `xw`
/// `[batch, time, 4·hidden]` (projected inputs, bias included), `W_h`, the initial `h0`, `c0`
/// and `keep` `[batch, time]` (1 on real tokens; the first `dense` steps are real in every
/// row). A padded step keeps the state and outputs zeros. Returns (outputs
/// `[batch, time, hidden]`, final `h`, `c`). On the CPU one kernel for the whole layer (its own
/// backward), on a GPU one step kernel a step. `None` where no kernel runs (`--kernels
/// reference`, burn's fusion, an empty sequence): the caller runs the step in a loop
/// (`run_steps` in the models' `rnn.rs`).
pub fn fast_lstm_layer(
    xw: Tensor<3>,
    w_hidden: Tensor<2>,
    h0: Tensor<2>,
    c0: Tensor<2>,
    keep: Tensor<2>,
    dense: usize,
    reverse: bool,
) -> Option<(Tensor<3>, Tensor<2>, Tensor<2>)> {
    if xw.dims()[1] == 0 {
        return None;
    }
    match route(&xw.device()) {
        Route::Cpu => Some(crate::lstm::cpu::lstm_layer(xw, w_hidden, h0, c0, keep, dense, reverse)),
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu => Some(crate::lstm::gpu::lstm_layer(xw, w_hidden, h0, c0, keep, reverse)),
        _ => None,
    }
}

/// Luong's dot (and general, low-rank) scores `e[b, j] = keys[b, j, :] · q[b, :]` through a
/// kernel: one pass per sentence on the CPU while decoding (flex without autodiff), one launch
/// each way on a GPU. `None` where none applies (`--kernels reference`, autodiff on the CPU,
/// burn's fusion): the caller computes the equation (`dot_scores` in the models'
/// `attention/luong.rs`).
pub fn fast_dot_scores(q: &Tensor<2>, keys: &Tensor<3>) -> Option<Tensor<2>> {
    match route(&q.device()) {
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu => Some(crate::attention::rnn_gpu::dot_scores(q.clone(), keys)),
        Route::Cpu if crate::attention::step::runs(q) => crate::attention::step::dot_scores(q.clone(), keys),
        _ => None,
    }
}

/// Bahdanau's additive scores `e[b, j] = vᵀ tanh(keys[b, j, :] + q[b, :])` (`v` `[d, 1]`)
/// through a kernel: one pass per sentence on the CPU while decoding (flex without autodiff),
/// one launch forward on a GPU. `None` where none applies: the caller computes the equation
/// (`additive_scores` in the models' `attention/bahdanau.rs`, whose `tanh` is [`tanh`]).
pub fn fast_additive_scores(q: &Tensor<2>, keys: &Tensor<3>, v: &Tensor<2>) -> Option<Tensor<2>> {
    match route(&q.device()) {
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu => Some(crate::attention::rnn_gpu::additive_scores(q.clone(), keys, v.clone())),
        Route::Cpu if crate::attention::step::runs(q) => {
            crate::attention::step::additive_scores(q.clone(), keys, v.clone())
        }
        _ => None,
    }
}

/// The masked softmax of `scores` `[batch, src]` (`key_mask` additive: 0 on real positions,
/// `−∞` on padding) and the context, `Σⱼ αⱼ values[:, j, :]`, through kernels: (context
/// `[batch, d]`, weights `[batch, src]`). On the CPU while decoding (flex without autodiff)
/// [`softmax`] and one pass per sentence for the sum; on a GPU the mask, softmax and sum as
/// kernels with no launch of the mask's own. `None` where none applies: the caller computes
/// the equation (`attend` in the models' `attention/mod.rs`).
pub fn fast_attend(
    scores: &Tensor<2>,
    values: &Tensor<3>,
    key_mask: &Tensor<2>,
) -> Option<(Tensor<2>, Tensor<2>)> {
    match route(&scores.device()) {
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu => Some(crate::attention::rnn_gpu::attend(scores.clone(), key_mask, values)),
        Route::Cpu if crate::attention::step::runs(scores) => {
            let weights = softmax(scores.clone() + key_mask.clone());
            let context = crate::attention::step::weighted_sum(weights.clone(), values)?;
            Some((context, weights))
        }
        _ => None,
    }
}

/// Layer normalisation over the last dimension: one fused pass per row (and its own
/// backward) on the CPU and on a GPU.
pub fn layer_norm<const D: usize>(norm: &LayerNorm, x: Tensor<D>) -> Tensor<D> {
    match route(&x.device()) {
        Route::Cpu => crate::layer_norm::cpu::layer_norm(norm, x),
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu => crate::layer_norm::gpu::layer_norm(norm, x),
        _ => reference::layer_norm(norm, x),
    }
}

/// Dropout with `d`'s probability: a counter-based mask, one multiplication, on the CPU; one
/// kernel each way on a GPU.
pub fn dropout<const D: usize>(d: &Dropout, x: Tensor<D>) -> Tensor<D> {
    match route(&x.device()) {
        Route::Reference => reference::dropout(d, x),
        Route::Cpu | Route::Gpu | Route::Fused => crate::dropout::forward(d, x),
    }
}

/// `dropout(relu(x))`: one kernel each way on a GPU.
pub fn relu_dropout<const D: usize>(d: &Dropout, x: Tensor<D>) -> Tensor<D> {
    match route(&x.device()) {
        Route::Reference => reference::relu_dropout(d, x),
        Route::Cpu | Route::Gpu | Route::Fused => crate::dropout::relu_then(d, x),
    }
}

/// `x + dropout(y)` (a residual connection): one kernel each way on a GPU.
pub fn add_dropout<const D: usize>(d: &Dropout, x: Tensor<D>, y: Tensor<D>) -> Tensor<D> {
    match route(&x.device()) {
        Route::Reference => reference::add_dropout(d, x, y),
        Route::Cpu | Route::Gpu | Route::Fused => crate::dropout::add_then(d, x, y),
    }
}

/// Restarts this thread's stream of dropout seeds (the trainer calls it before each step
/// and each part of a step, so a resumed run draws the masks of an uninterrupted one).
pub fn reseed(seed: u64) {
    crate::dropout::reseed(seed)
}

/// True when the fused attention kernels run on `device` (for some mask shapes: see
/// [`fused_self_attention`]).
pub(crate) fn fused_attention_runs(device: &Device) -> bool {
    matches!(route(device), Route::Cpu | Route::Gpu)
}

/// True when the fused attention kernels run on `device` with this mask shape.
fn attention_kernels(device: &Device, mask: &Tensor<4>, batch: usize, tq: usize, tk: usize) -> bool {
    fused_attention_runs(device) && crate::attention::fused::mask_fits(mask.dims(), batch, tq, tk)
}

/// The fused kernels' dropout on the attention weights: the mask's seed and the share kept.
fn attention_dropout(d: &Dropout, device: &Device) -> (u64, f32) {
    if crate::dropout::drops(d, device) {
        (crate::dropout::draw_seed(device), 1.0 - d.prob as f32)
    } else {
        (0, 1.0)
    }
}

/// Multi-head self-attention from `[Q | K | V]` (`[b, t, 3·d_model]`), `softmax(s·QKᵀ + M) V`
/// with the scale `s` given (`1/√d_k`, or 1 unscaled) and dropout on the weights: one kernel
/// over all heads (and its own backward) on the CPU and on a GPU → (the heads side by side
/// `[b, t, d_model]`, before `W^O`; the weights `[b, heads, t, t]`, which carry no gradient).
/// `None` where the kernel does not run (`--kernels reference`, burn's fusion, a mask not
/// `[b or 1, 1, t or 1, t]`): the caller computes the equation.
pub fn fused_self_attention(
    qkv: Tensor<3>,
    mask: &Tensor<4>,
    heads: usize,
    scale: f32,
    d: &Dropout,
) -> Option<(Tensor<3>, Tensor<4>)> {
    let [b, t, _] = qkv.dims();
    let device = qkv.device();
    if !attention_kernels(&device, mask, b, t, t) {
        return None;
    }
    let drop = attention_dropout(d, &device);
    Some(crate::attention::fused::self_attention(qkv, mask, heads, scale, drop))
}

/// Attention of one query position per row while decoding: `q` `[rows, heads·d_k]` to
/// `keys`/`values` (`[held, heads, len, d_k]` or `[held, len, heads·d_k]`, read in place)
/// under the additive `mask` `[held or 1, len]`, row `r` reading row `source[r]` of them
/// (`None`: row `r`): (output `[rows, heads·d_k]`, weights
/// `[rows, heads, len]`) from one CPU kernel ([`crate::attention::step::heads_step`]), the
/// scores times `scale`; `None` where it does not run (a GPU, autodiff, `--kernels
/// reference`): the caller computes the equation.
pub fn heads_step<const D: usize>(
    q: Tensor<2>,
    keys: Tensor<D>,
    values: Tensor<D>,
    mask: Tensor<2>,
    source: Option<Tensor<1>>,
    heads: usize,
    scale: f32,
) -> Option<(Tensor<2>, Tensor<3>)> {
    if !heads_step_runs(&q.device()) {
        return None;
    }
    crate::attention::step::heads_step(q, keys, values, mask, source, heads, scale)
}

/// True when [`heads_step`] runs its kernel on `device` (flex without autodiff, fast kernels).
pub fn heads_step_runs(device: &Device) -> bool {
    route(device) == Route::Cpu && !device.is_autodiff()
}

/// Multi-head attention from projected queries `q` (`[b, t_q, d_model]`) to `[K | V]`
/// (`[b, t_k, 2·d_model]`), as [`fused_self_attention`]: (the heads side by side
/// `[b, t_q, d_model]`, the weights `[b, heads, t_q, t_k]`), or `None` where the kernel does
/// not run.
pub fn fused_cross_attention(
    q: Tensor<3>,
    kv: Tensor<3>,
    mask: &Tensor<4>,
    heads: usize,
    scale: f32,
    d: &Dropout,
) -> Option<(Tensor<3>, Tensor<4>)> {
    let [b, tq, _] = q.dims();
    let tk = kv.dims()[1];
    let device = q.device();
    if !attention_kernels(&device, mask, b, tq, tk) {
        return None;
    }
    let drop = attention_dropout(d, &device);
    Some(crate::attention::fused::cross_attention(q, kv, mask, heads, scale, drop))
}

/// `x[:, t, :]` for every step `t` of `x` (`[batch, time, d]`); on a GPU one gradient write a
/// step.
pub fn time_steps(x: Tensor<3>) -> Vec<Tensor<2>> {
    match route(&x.device()) {
        Route::Reference => reference::time_steps(x),
        Route::Cpu | Route::Gpu | Route::Fused => crate::gpu::steps::time_steps(x),
    }
}

/// `[batch, time, d]` from `time` steps `[batch, d]` (at least one); on a GPU eight steps a
/// launch.
pub fn stack_steps(parts: Vec<Tensor<2>>) -> Tensor<3> {
    match route(&parts[0].device()) {
        Route::Reference => reference::stack_steps(parts),
        Route::Cpu | Route::Gpu | Route::Fused => crate::gpu::steps::stack_steps(parts),
    }
}

/// A recurrence unrolled over the time axis of `inputs` (`[batch, time, d]`, teacher forcing):
/// `step` runs on each step's slice `[batch, d]` in order, and each part it returns (`[batch,
/// d_i]`, as many every step) is stacked over the steps, `[batch, time, d_i]`, in the order
/// returned. On a GPU the slices and the stacks are a few launches ([`time_steps`],
/// [`stack_steps`]).
pub fn unroll(inputs: Tensor<3>, mut step: impl FnMut(Tensor<2>) -> Vec<Tensor<2>>) -> Vec<Tensor<3>> {
    let mut parts: Vec<Vec<Tensor<2>>> = Vec::new();
    for x in time_steps(inputs) {
        let out = step(x);
        parts.resize_with(out.len(), Vec::new);
        for (all, part) in parts.iter_mut().zip(out) {
            all.push(part);
        }
    }
    parts.into_iter().map(stack_steps).collect()
}

/// `w` with the gradients of its uses at every decoder step summed once, after all steps (one
/// product where autodiff would add a product a step); `w` itself under the references.
pub fn defer_grad<const D: usize>(w: Tensor<D>) -> Tensor<D> {
    match route(&w.device()) {
        Route::Reference => w,
        Route::Cpu | Route::Gpu | Route::Fused => crate::gemm::deferred_grad::defer_grad(w),
    }
}

/// A copy of `module` whose parameters go through [`defer_grad`]: what a decoder loop runs at
/// every step of a teacher-forced pass. Gradients reach the original parameters.
pub fn for_steps<M: Module>(module: &M) -> M {
    if mode::reference() {
        return reference::for_steps(module);
    }
    crate::gemm::deferred_grad::for_steps(module)
}

/// The sum of every element, `[1]`. On the CPU, burn's `sum`. On a GPU, a reduction along one
/// axis (`sum_dim`), whose order is fixed: burn's `sum` of a whole tensor adds the partial sums
/// of its workgroups with atomic additions, in whatever order they finish, so the same step
/// could end a few ulps apart from one run to the next (and a replayed training step from the
/// eager one).
pub fn sum_all<const D: usize>(x: Tensor<D>) -> Tensor<1> {
    if is_flex(&x.device()) {
        return x.sum();
    }
    let n = x.shape().num_elements();
    x.reshape([n]).sum_dim(0)
}

/// Label-smoothed cross-entropy summed over real target tokens ([`reference::label_smoothed_xent`]):
/// (Σ smoothed loss, Σ −log p(yₜ)); on the CPU one fused pass over each row of logits.
pub fn label_smoothed_xent(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    keep: &Tensor<2>,
    epsilon: f64,
) -> (Tensor<1>, Tensor<1>) {
    if route(&logits.device()) != Route::Cpu {
        return reference::label_smoothed_xent(logits, targets, keep, epsilon);
    }
    let [batch, tgt, vocab] = logits.dims();
    let rows = crate::loss::cpu::smoothed_xent(
        logits.reshape([batch * tgt, vocab]),
        targets.reshape([batch * tgt]).float(),
        keep.clone().reshape([batch * tgt]),
        epsilon,
    ); // [B·T, 2]
    (rows.clone().narrow(1, 1, 1).sum(), rows.narrow(1, 0, 1).sum())
}

pub use crate::optimizer::adam::{FusedAdam, step as adam_step};
pub use crate::optimizer::clip::{clip_global_norm, global_norm, scale_grads};
pub use crate::optimizer::in_place::GradientSum;
/// Beam search's pick: each row's `n` best log-probabilities straight from the logits (CPU), and
/// the `n` best entries of a row on the host.
pub use crate::softmax::top_k::{top, top_log_probs};

thread_local! {
    /// [`constant`]'s tensors, by key, shape and device.
    static CONSTANTS: std::cell::RefCell<std::collections::HashMap<String, Box<dyn std::any::Any>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// The most tensors [`constant`] keeps a thread (past it the cache starts afresh).
const MAX_CONSTANTS: usize = 4096;

/// A tensor that depends only on `key` and `dims` (positions, a causal mask), built by `build`
/// once per thread and GPU device and shared after; on the CPU (flex) built every time, as
/// cheap as a copy there. On a GPU building it is a host → device write, which a captured
/// step (replayed from a graph, [`crate::gpu::graph`]) may not do, and which costs a transfer a
/// step otherwise.
pub fn constant<const D: usize>(
    key: &str,
    dims: &[usize],
    device: &Device,
    build: impl FnOnce() -> Tensor<D>,
) -> Tensor<D> {
    if is_flex(device) {
        return build();
    }
    let k = format!("{key}{dims:?}@{device:?}");
    if let Some(t) =
        CONSTANTS.with(|c| c.borrow().get(&k).and_then(|t| t.downcast_ref::<Tensor<D>>().cloned()))
    {
        return t;
    }
    let t = build();
    CONSTANTS.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= MAX_CONSTANTS {
            c.clear();
        }
        c.insert(k, Box::new(t.clone()));
    });
    t
}
