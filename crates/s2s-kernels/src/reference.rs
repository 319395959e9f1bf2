//! The references: every operation of [`crate::ops`] as its equation in plain burn tensor
//! operations, calling no kernel of this crate. They define what the kernels compute — the
//! tests hold each kernel equal to its reference, values and gradients, on the CPU and on
//! wgpu — and they run whole models under `--kernels reference` (`S2S_KERNELS=reference`).
//!
//! Dropout is the one place where a reference reads something of the kernels': the mask. A
//! reference draws the same seed from the same source and builds the same mask on the host
//! ([`crate::dropout::mask::mask`] on the CPU, the GPU kernels' hash elsewhere), then multiplies, so
//! a model trained on the references draws the masks it would draw on the kernels.

use burn::module::Module;
use burn::nn::{Dropout, LayerNorm, Linear};
use burn::tensor::activation::{
    log_softmax as burn_log_softmax, relu, sigmoid, softmax as burn_softmax, tanh as burn_tanh,
};
use burn::tensor::{Int, Tensor, TensorData};

/// `f` on `x` seen as `[rows, d_in]` (every leading dimension one row), its `[rows, d_out]`
/// result given `x`'s leading dimensions back.
pub fn as_rows<const D: usize>(
    x: Tensor<D>,
    d_out: usize,
    f: impl FnOnce(Tensor<2>) -> Tensor<2>,
) -> Tensor<D> {
    let mut dims = x.dims();
    let d_in = dims[D - 1];
    let rows = dims[..D - 1].iter().product::<usize>();
    dims[D - 1] = d_out;
    f(x.reshape([rows, d_in])).reshape(dims)
}

/// `x W` over the last dimension.
pub fn matmul_rows<const D: usize>(x: Tensor<D>, w: Tensor<2>) -> Tensor<D> {
    as_rows(x, w.dims()[1], |x| x.matmul(w))
}

/// `x W + b` over the last dimension.
pub fn affine_rows<const D: usize>(x: Tensor<D>, w: Tensor<2>, b: Tensor<1>) -> Tensor<D> {
    as_rows(x, w.dims()[1], |x| x.matmul(w) + b.unsqueeze::<2>())
}

/// A `Linear` layer: `x W + b`.
pub fn linear<const D: usize>(layer: &Linear, x: Tensor<D>) -> Tensor<D> {
    match &layer.bias {
        Some(b) => affine_rows(x, layer.weight.val(), b.val()),
        None => matmul_rows(x, layer.weight.val()),
    }
}

/// `base + x W` (`base` `[rows, d_out]` or `[1, d_out]`).
pub fn add_matmul(base: Tensor<2>, x: Tensor<2>, w: Tensor<2>) -> Tensor<2> {
    base + x.matmul(w)
}

/// `[a | b | …]` along the last axis.
pub fn cat_columns(parts: Vec<Tensor<2>>) -> Tensor<2> {
    Tensor::cat(parts, 1)
}

/// `[a | b | …]` along the last axis of `[batch, time, dᵢ]` tensors.
pub fn cat_features(parts: Vec<Tensor<3>>) -> Tensor<3> {
    Tensor::cat(parts, 2)
}

/// `tanh(x)`.
pub fn tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    burn_tanh(x)
}

/// `softmax` over the last dimension: `exp(xᵢ − max) / Σⱼ exp(xⱼ − max)`.
pub fn softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    burn_softmax(x, D - 1)
}

/// `log_softmax` over the last dimension.
pub fn log_softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    burn_log_softmax(x, D - 1)
}

/// Each row's best token (the first of equal scores, as f32) and its log-probability,
/// `[rows, 2]`.
pub fn best_log_prob_pairs(logits: Tensor<2>) -> Tensor<2> {
    let (best, ids) = log_softmax(logits).max_dim_with_indices(1); // [N, 1] each
    Tensor::cat(vec![ids.float(), best], 1)
}

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

/// Dot scores (Luong et al., 2015, eq. 8): `e[b, j] = keys[b, j, :] · q[b, :]`.
pub fn dot_scores(q: Tensor<2>, keys: &Tensor<3>) -> Tensor<2> {
    (keys.clone() * q.unsqueeze_dim::<3>(1)).sum_dim(2).squeeze_dim::<2>(2)
}

/// Additive scores (Bahdanau et al., 2015, eq. 6): `e[b, j] = vᵀ tanh(keys[b, j, :] + q[b, :])`,
/// `v` `[d, 1]`.
pub fn additive_scores(q: Tensor<2>, keys: &Tensor<3>, v: Tensor<2>) -> Tensor<2> {
    let [b, s, a] = keys.dims();
    burn_tanh(keys.clone() + q.unsqueeze_dim::<3>(1)).reshape([b * s, a]).matmul(v).reshape([b, s])
}

/// The context (Bahdanau et al., 2015, eq. 5): `c[b, :] = Σⱼ α[b, j] values[b, j, :]`.
pub fn weighted_sum(weights: Tensor<2>, values: &Tensor<3>) -> Tensor<2> {
    (weights.unsqueeze_dim::<3>(2) * values.clone()).sum_dim(1).squeeze_dim::<2>(1)
}

/// `α = softmax(e + mask)`, `c = Σⱼ αⱼ hⱼ`: (context `[batch, d]`, weights `[batch, src]`);
/// `key_mask` is 0 on real positions and `−∞` on padding.
pub fn attend(scores: Tensor<2>, values: &Tensor<3>, key_mask: &Tensor<2>) -> (Tensor<2>, Tensor<2>) {
    let weights = softmax(scores + key_mask.clone());
    (weighted_sum(weights.clone(), values), weights)
}

/// Layer normalisation (Ba et al., 2016): `γ ⊙ (x − μ) / √(σ² + ε) + β` over the last
/// dimension (burn's `LayerNorm`).
pub fn layer_norm<const D: usize>(norm: &LayerNorm, x: Tensor<D>) -> Tensor<D> {
    norm.forward(x)
}

/// Dropout (Srivastava et al., 2014): `x ⊙ m / (1 − p)`, `m ~ Bernoulli(1 − p)`, while
/// training; `x` otherwise. The mask is the kernels' (see the module doc).
pub fn dropout<const D: usize>(d: &Dropout, x: Tensor<D>) -> Tensor<D> {
    let device = x.device();
    if !crate::dropout::drops(d, &device) {
        return d.forward(x);
    }
    let keep = 1.0 - d.prob as f32;
    let seed = crate::dropout::draw_seed(&device);
    let shape = x.shape();
    let mask = crate::dropout::host_mask(&device, seed, shape.num_elements(), keep);
    x * Tensor::<D>::from_data(TensorData::new(mask, shape), &device)
}

/// `dropout(relu(x))`.
pub fn relu_dropout<const D: usize>(d: &Dropout, x: Tensor<D>) -> Tensor<D> {
    dropout(d, relu(x))
}

/// `x + dropout(y)` (a residual connection).
pub fn add_dropout<const D: usize>(d: &Dropout, x: Tensor<D>, y: Tensor<D>) -> Tensor<D> {
    x + dropout(d, y)
}

/// `[b, t, width]` columns `offset..offset + heads·d_k` as `[b, heads, t, d_k]`.
pub fn heads_of(x: Tensor<3>, offset: usize, heads: usize, d_k: usize) -> Tensor<4> {
    let [b, t, _] = x.dims();
    x.narrow(2, offset, heads * d_k).reshape([b, t, heads, d_k]).swap_dims(1, 2)
}

/// Scaled dot-product attention over heads (Vaswani et al., 2017, eq. 1):
/// `softmax(QKᵀ / √d_k + mask) V`, dropout on the weights. `q` `[b, h, t_q, d_k]`, `k`, `v`
/// `[b, h, t_k, d_k]`, `mask` additive, broadcastable to `[b, h, t_q, t_k]`. Returns the
/// heads side by side `[b, t_q, h·d_k]` and the weights `[b, h, t_q, t_k]`.
pub fn scaled_dot_product(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    mask: Option<&Tensor<4>>,
    d: &Dropout,
) -> (Tensor<3>, Tensor<4>) {
    attention_with(q, k, v, mask, softmax, |w| dropout(d, w))
}

/// [`scaled_dot_product`] with its softmax and its dropout on the weights given: the equation
/// once, for the reference and for `ops` (which passes its kernels).
pub fn attention_with(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    mask: Option<&Tensor<4>>,
    softmax: impl FnOnce(Tensor<4>) -> Tensor<4>,
    dropout: impl FnOnce(Tensor<4>) -> Tensor<4>,
) -> (Tensor<3>, Tensor<4>) {
    let [b, h, tq, dk] = q.dims();
    let tk = k.dims()[2];
    let mut scores = q.matmul(k.swap_dims(2, 3)) / (dk as f32).sqrt(); // [B, h, Tq, Tk]
    if let Some(m) = mask {
        scores = scores + m.clone().expand([b, h, tq, tk]);
    }
    let weights = softmax(scores);
    let out = dropout(weights.clone()).matmul(v); // [B, h, Tq, dk]
    (out.swap_dims(1, 2).reshape([b, tq, h * dk]), weights)
}

/// `[Q | K | V]` (`[b, t, 3·d_model]`) split into heads: each `[b, heads, t, d_k]`.
pub fn split_qkv(qkv: Tensor<3>, heads: usize) -> [Tensor<4>; 3] {
    let dm = qkv.dims()[2] / 3;
    std::array::from_fn(|i| heads_of(qkv.clone(), i * dm, heads, dm / heads))
}

/// Projected queries `q` (`[b, t_q, d_model]`) and `[K | V]` (`[b, t_k, 2·d_model]`) split into
/// heads: `[b, heads, t, d_k]` each.
pub fn split_q_kv(q: Tensor<3>, kv: Tensor<3>, heads: usize) -> [Tensor<4>; 3] {
    let dm = q.dims()[2];
    let dk = dm / heads;
    [heads_of(q, 0, heads, dk), heads_of(kv.clone(), 0, heads, dk), heads_of(kv, dm, heads, dk)]
}

/// Self-attention from `[Q | K | V]` (`[b, t, 3·d_model]`): the heads side by side
/// `[b, t, d_model]` (before `W^O`).
pub fn self_attention(qkv: Tensor<3>, mask: &Tensor<4>, heads: usize, d: &Dropout) -> Tensor<3> {
    let [q, k, v] = split_qkv(qkv, heads);
    scaled_dot_product(q, k, v, Some(mask), d).0
}

/// Attention from `q` (`[b, t_q, d_model]`, projected) to `[K | V]` (`[b, t_k, 2·d_model]`):
/// (heads side by side `[b, t_q, d_model]`, weights `[b, heads, t_q, t_k]`).
pub fn cross_attention(
    q: Tensor<3>,
    kv: Tensor<3>,
    mask: &Tensor<4>,
    heads: usize,
    d: &Dropout,
) -> (Tensor<3>, Tensor<4>) {
    let [q, k, v] = split_q_kv(q, kv, heads);
    scaled_dot_product(q, k, v, Some(mask), d)
}

/// `x[:, t, :]` for every step `t` of `x` (`[batch, time, d]`).
pub fn time_steps(x: Tensor<3>) -> Vec<Tensor<2>> {
    let time = x.dims()[1];
    (0..time).map(|t| x.clone().narrow(1, t, 1).squeeze_dim::<2>(1)).collect()
}

/// `[batch, time, d]` from `time` steps `[batch, d]`.
pub fn stack_steps(parts: Vec<Tensor<2>>) -> Tensor<3> {
    Tensor::stack(parts, 1)
}

/// A module used at every step of a decoder loop, as it is (the kernels defer its weight
/// gradients; autodiff sums them step by step here).
pub fn for_steps<M: Module>(module: &M) -> M {
    module.clone()
}

/// Label-smoothed cross-entropy (Szegedy et al., 2016; as in fairseq) summed over real target
/// tokens: `ℓₜ = (1 − ε)·(−log p(yₜ)) + ε·(1/V)·Σᵥ(−log p(v))`. `logits` `[batch, tgt, vocab]`,
/// `targets` `[batch, tgt]`, `keep` `[batch, tgt]` (1 on real tokens). Returns
/// (Σ smoothed loss, Σ −log p(yₜ)).
pub fn label_smoothed_xent(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    keep: &Tensor<2>,
    epsilon: f64,
) -> (Tensor<1>, Tensor<1>) {
    let vocab = logits.dims()[2];
    let logp = log_softmax(logits); // [B, T, V]
    let nll = logp.clone().gather(2, targets.unsqueeze_dim::<3>(2)).squeeze_dim::<2>(2).neg(); // [B, T]
    let nll = nll * keep.clone();
    let nll_sum = crate::ops::sum_all(nll.clone());
    if epsilon == 0.0 {
        return (nll_sum.clone(), nll_sum);
    }
    let uniform = logp.sum_dim(2).squeeze_dim::<2>(2).neg().div_scalar(vocab as f64) * keep.clone(); // [B, T]
    let smoothed = nll.mul_scalar(1.0 - epsilon) + uniform.mul_scalar(epsilon);
    (crate::ops::sum_all(smoothed), nll_sum)
}
