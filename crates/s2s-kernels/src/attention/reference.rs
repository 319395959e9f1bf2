//! Attention: the recurrent decoders' scores and context, and scaled dot-product attention over
//! heads, as equations in plain burn tensor operations: what this folder's kernels compute, and
//! what runs under `--kernels reference` (see [`crate::reference`]).

use crate::dropout::reference::dropout;
use crate::softmax::reference::softmax;
use burn::nn::Dropout;
use burn::tensor::Tensor;
use burn::tensor::activation::tanh as burn_tanh;

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
