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
use burn::optim::GradientsParams;
use burn::tensor::{Device, Int, Tensor};

use crate::mode;
use crate::reference;

pub use crate::attention::multi_head::{
    Heads, KeyValue, fast_attention, fast_cached_attention, project_kv, project_qkv,
};
pub use crate::attention::step_cache::{SourceRows, StepCache};
pub use crate::device::{Route, adapter_name, constant, has_f16_products, is_cpu, route, sum_all};
use crate::device::{draw_dropout_seed, module_route};

/// `x W` over the last dimension, as one 2-D product over all leading positions; a few rows
/// (decoder steps) through the CPU's small-product kernel, the weight kept packed.
pub fn matmul_rows<const D: usize>(x: Tensor<D>, w: Tensor<2>) -> Tensor<D> {
    match route(&x.device()) {
        Route::Reference => reference::matmul_rows(x, w),
        Route::Cpu | Route::Gpu | Route::Fused => reference::as_rows(x, w.dims()[1], |x| product(x, w, true)),
    }
}

/// [`matmul_rows`] for a `W` computed afresh at every call (weights joined side by side):
/// never packed or kept.
pub fn matmul_rows_fresh<const D: usize>(x: Tensor<D>, w: Tensor<2>) -> Tensor<D> {
    match route(&x.device()) {
        Route::Reference => reference::matmul_rows(x, w),
        Route::Cpu | Route::Gpu | Route::Fused => {
            reference::as_rows(x, w.dims()[1], |x| product(x, w, false))
        }
    }
}

/// `x W` of 2-D tensors off the references (`reuse`: `W` is a weight, kept packed while
/// decoding on the CPU): the CPU's small-product kernels ([`crate::gemm::small`]); on a GPU
/// the kernel [`crate::gemm::table`] chooses for the shape, f16 operands under mixed precision
/// ([`mode::half_products`]), as a node of its own while training so that a deferred weight's
/// gradient waits for all steps.
fn product(x: Tensor<2>, w: Tensor<2>, reuse: bool) -> Tensor<2> {
    match route(&x.device()) {
        Route::Cpu => crate::gemm::small::matmul(x, w, reuse),
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu if mode::half_products() => crate::gemm::small::gpu_half_matmul(x, w),
        _ if mode::half_products() => crate::gemm::small::half_product(x, w),
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu => crate::gemm::small::matmul(x, w, false),
        _ => x.matmul(w),
    }
}

/// `x W + b` over the last dimension: while decoding on the CPU the bias is added inside the
/// product; while training on a GPU a node whose gradients a decoder loop can defer
/// ([`for_steps`]).
pub fn affine_rows<const D: usize>(x: Tensor<D>, w: Tensor<2>, b: Tensor<1>) -> Tensor<D> {
    let d_out = w.dims()[1];
    match route(&x.device()) {
        Route::Reference => reference::affine_rows(x, w, b),
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu if x.is_autodiff() => {
            reference::as_rows(x, d_out, |x| crate::gemm::small::gpu_add_bias(product(x, w, true), b))
        }
        _ if x.is_autodiff() => reference::as_rows(x, d_out, |x| product(x, w, true) + b.unsqueeze::<2>()),
        Route::Cpu | Route::Gpu | Route::Fused => {
            reference::as_rows(x, d_out, |x| add_matmul(b.unsqueeze::<2>(), x, w))
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
    // int8 decoding quantizes each weight once: a side-by-side weight would be new every call.
    if b * t <= CAT_MIN_ROWS || N == 0 || int8_products(&x) {
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

/// Whether `x`'s products by weights take int8 weights: `--quantize int8` in force on this
/// thread ([`mode::quantize`]), while decoding (no autodiff) on the CPU.
fn int8_products<const D: usize>(x: &Tensor<D>) -> bool {
    mode::quantize() == mode::Quantize::Int8 && route(&x.device()) == Route::Cpu && !x.is_autodiff()
}

/// `base + x W` (`base` `[rows, d_out]` or `[1, d_out]`): while decoding on the CPU the
/// addition happens inside the product (the bits of the composed sum).
pub fn add_matmul(base: Tensor<2>, x: Tensor<2>, w: Tensor<2>) -> Tensor<2> {
    match route(&x.device()) {
        Route::Reference => reference::add_matmul(base, x, w),
        Route::Cpu if !x.is_autodiff() => crate::gemm::small::cpu_add_matmul(base, x, w),
        Route::Cpu | Route::Gpu | Route::Fused => base + product(x, w, true),
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
        Route::Cpu | Route::Gpu if !logits.is_autodiff() => crate::softmax::best_log_prob_pairs(logits),
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
        Route::Cpu => Some(crate::lstm::cpu::lstm_gates(add_matmul(xw, h, w_hidden), c)),
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu => Some(crate::lstm::gpu::lstm_gates(xw, product(h, w_hidden, true), c)),
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
/// (`run_steps` in the models' `rnn.rs`); and while decoding with int8 products, whose steps
/// take the int8 `h W_h`.
pub fn fast_lstm_layer(
    xw: Tensor<3>,
    w_hidden: Tensor<2>,
    h0: Tensor<2>,
    c0: Tensor<2>,
    keep: Tensor<2>,
    dense: usize,
    reverse: bool,
) -> Option<(Tensor<3>, Tensor<2>, Tensor<2>)> {
    // int8 decoding: the steps' `h W_h` go through the int8 products (`run_steps`' steps).
    if xw.dims()[1] == 0 || int8_products(&xw) {
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
        Route::Cpu if !q.is_autodiff() => Some(crate::attention::step::dot_scores(q.clone(), keys)),
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
        Route::Cpu if !q.is_autodiff() => {
            Some(crate::attention::step::additive_scores(q.clone(), keys, v.clone()))
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
        Route::Cpu if !scores.is_autodiff() => {
            let weights = softmax(scores.clone() + key_mask.clone());
            Some((crate::attention::step::weighted_sum(weights.clone(), values), weights))
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
/// kernel each way on a GPU; burn's under its fusion. Nothing drawn where nothing drops
/// ([`crate::dropout::drops`]).
pub fn dropout<const D: usize>(d: &Dropout, x: Tensor<D>) -> Tensor<D> {
    let device = x.device();
    match route(&device) {
        Route::Reference => reference::dropout(d, x),
        Route::Cpu if crate::dropout::drops(d, &device) => {
            crate::dropout::cpu_dropout(x, draw_dropout_seed(&device), crate::dropout::keep(d))
        }
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu if crate::dropout::drops(d, &device) => {
            crate::dropout::gpu::dropout(x, draw_dropout_seed(&device), crate::dropout::keep(d))
        }
        _ => d.forward(x),
    }
}

/// `dropout(relu(x))`: one kernel each way on a GPU (a plain ReLU kernel where nothing drops).
pub fn relu_dropout<const D: usize>(d: &Dropout, x: Tensor<D>) -> Tensor<D> {
    let device = x.device();
    match route(&device) {
        Route::Reference => reference::relu_dropout(d, x),
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu => {
            let (seed, keep) = if crate::dropout::drops(d, &device) {
                (draw_dropout_seed(&device), crate::dropout::keep(d))
            } else {
                (0, 1.0)
            };
            crate::dropout::gpu::relu_dropout(x, seed, keep)
        }
        _ => dropout(d, burn::tensor::activation::relu(x)),
    }
}

/// `x + dropout(y)` (a residual connection): one kernel each way on a GPU.
pub fn add_dropout<const D: usize>(d: &Dropout, x: Tensor<D>, y: Tensor<D>) -> Tensor<D> {
    let device = x.device();
    match route(&device) {
        Route::Reference => reference::add_dropout(d, x, y),
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu if crate::dropout::drops(d, &device) => {
            crate::dropout::gpu::add_dropout(x, y, draw_dropout_seed(&device), crate::dropout::keep(d))
        }
        _ => x + dropout(d, y),
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
        (draw_dropout_seed(device), crate::dropout::keep(d))
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
    Some(crate::attention::step::heads_step(q, keys, values, mask, source, heads, scale))
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
        Route::Cpu if x.is_autodiff() => crate::steps::time_major(x),
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu => crate::steps::time_major(x),
        _ => reference::time_steps(x),
    }
}

/// `[batch, time, d]` from `time` steps `[batch, d]` (at least one); on a GPU eight steps a
/// launch.
pub fn stack_steps(parts: Vec<Tensor<2>>) -> Tensor<3> {
    assert!(!parts.is_empty(), "stack_steps: no steps");
    match route(&parts[0].device()) {
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu => crate::steps::gpu::stack_groups(parts),
        _ => reference::stack_steps(parts),
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
/// product where autodiff would add a product a step); `w` itself under the references and
/// burn's fusion.
pub fn defer_grad<const D: usize>(w: Tensor<D>) -> Tensor<D> {
    match route(&w.device()) {
        Route::Reference | Route::Fused => w,
        Route::Cpu | Route::Gpu => crate::gemm::deferred_grad::defer_grad(w),
    }
}

/// A copy of `module` whose parameters go through [`defer_grad`]: what a decoder loop runs at
/// every step of a teacher-forced pass. Gradients reach the original parameters.
pub fn for_steps<M: Module>(module: &M) -> M {
    match module_route(module) {
        Route::Reference | Route::Fused => reference::for_steps(module),
        Route::Cpu | Route::Gpu => crate::gemm::deferred_grad::for_steps(module),
    }
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
pub use crate::optimizer::clip::GradientNorm;
pub use crate::optimizer::in_place::GradientSum;

/// The global L2 norm of `grads` over `module`'s parameters: one pass over every gradient on
/// every thread on the CPU, two launches on a GPU.
pub fn global_norm<M: Module>(module: &M, grads: &GradientsParams) -> f64 {
    global_norm_on(module_route(module), module, grads)
}

/// [`global_norm`] on the parameters' route, found once by the caller.
fn global_norm_on<M: Module>(route: Route, module: &M, grads: &GradientsParams) -> f64 {
    let norm = match route {
        Route::Cpu => crate::optimizer::in_place::global_norm(module, grads),
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu => crate::optimizer::clip::gpu::global_norm(module, grads),
        _ => None,
    };
    norm.unwrap_or_else(|| crate::optimizer::reference::global_norm(module, grads))
}

/// Scales every gradient by `factor`: in place on the CPU, 64 a launch on a GPU.
pub fn scale_grads<M: Module>(module: &M, grads: &mut GradientsParams, factor: f64) {
    scale_grads_on(module_route(module), module, grads, factor)
}

/// [`scale_grads`] on the parameters' route, found once by the caller.
fn scale_grads_on<M: Module>(route: Route, module: &M, grads: &mut GradientsParams, factor: f64) {
    match route {
        Route::Cpu => crate::optimizer::in_place::scale(module, grads, factor),
        #[cfg(not(feature = "gpu-tuned"))]
        Route::Gpu if crate::optimizer::clip::gpu::scale(module, grads, factor as f32) => {}
        _ => crate::optimizer::reference::scale_grads(module, grads, factor),
    }
}

/// Clips to `max_norm` (≤ 0: no clipping) by the global norm (Pascanu et al., 2013: every
/// gradient times `max_norm / ‖g‖₂` when `‖g‖₂ > max_norm`); returns the norm before clipping.
/// On a GPU the norm, the factor `min(1, max_norm / ‖g‖)` and the scaling stay on the device:
/// nothing is read back, so the step can be captured ([`crate::gpu::graph`]) and the factor is
/// computed in f32.
pub fn clip_global_norm<M: Module>(module: &M, grads: &mut GradientsParams, max_norm: f64) -> GradientNorm {
    // The parameters' devices are walked once a step, not once per pass.
    let route = module_route(module);
    #[cfg(not(feature = "gpu-tuned"))]
    if route == Route::Gpu
        && let Some(norm) = crate::optimizer::clip::gpu::clip(module, grads, max_norm as f32)
    {
        return GradientNorm::OnDevice(norm);
    }
    let norm = global_norm_on(route, module, grads);
    if max_norm > 0.0 && norm > max_norm {
        scale_grads_on(route, module, grads, max_norm / norm);
    }
    GradientNorm::Known(norm)
}

/// The `n` best entries of a row on the host (beam search's pick).
pub use crate::softmax::top_k::top;

/// Beam search's pick straight from the logits `[rows, vocab]`: each row's `n` best
/// log-probabilities and their ids (row `r`'s `j`-th best at `r·min(n, vocab) + j`), one pass
/// per row on the CPU without autodiff; `None` elsewhere: the caller normalises and picks.
pub fn top_log_probs(logits: Tensor<2>, n: usize) -> Option<(Vec<f32>, Vec<u32>)> {
    match route(&logits.device()) {
        Route::Cpu if !logits.is_autodiff() => crate::softmax::top_k::top_log_probs(logits, n),
        _ => None,
    }
}
