//! Multi-head attention's projections and keys and values as the models call them (Vaswani et
//! al., 2017, §3.2.2): `Q = x W^Q`, `K = x W^K`, `V = x W^V`, the keys and values a decoder keeps
//! ([`KeyValue`]), and the fast kernels that compute every head's `softmax(s·QKᵀ + M) V` where
//! one applies:
//! - self-attention whose `[Q | K | V]` came from one product ([`crate::ops::linears`], above
//!   [`crate::ops::CAT_MIN_ROWS`] rows): one fused kernel over all heads
//!   ([`crate::ops::fused_self_attention`]);
//! - one query position per row while decoding: the step kernel that reads the keys and
//!   values where they lie ([`crate::ops::heads_step`]; the self-attention cache's own,
//!   [`StepCache::attend`]);
//! - cross-attention to keys and values from one product: the fused kernel
//!   ([`crate::ops::fused_cross_attention`]).
//!
//! Elsewhere — and under `--kernels reference` — [`fast_attention`] and
//! [`fast_cached_attention`] return `None` and the model computes the equation itself in plain
//! tensor operations (`scaled_dot_product` in the models' `transformer/mha.rs`, which holds
//! these kernels to it and to PyTorch in its tests).
//!
//! A decoder step projects `Q`, `K` and `V` with the three weights separately, so each stays
//! in the packed-weight cache (`gemm::small`); above `CAT_MIN_ROWS` rows one product by
//! `[W^Q | W^K | W^V]`, joined at each call, is cheaper.

use burn::nn::{Dropout, Linear};
use burn::tensor::{Int, Tensor};

use crate::attention::step_cache::StepCache;
use crate::ops;

/// How the heads attend: how many, the scale of the scores (`1/√d_k`, the paper's; 1 for the
/// unscaled teaching ablation), and the dropout on the weights.
#[derive(Debug, Clone, Copy)]
pub struct Heads<'a> {
    /// Heads `h`.
    pub count: usize,
    /// The scores' scale `s` in `softmax(s·QKᵀ + M)`.
    pub scale: f32,
    /// Dropout on the attention weights.
    pub dropout: &'a Dropout,
}

/// The product a [`KeyValue`]'s keys and values are views of, when one product made them.
#[derive(Debug, Clone)]
enum Packed {
    /// `[K | V]` `[rows, t, 2·d_model]`: what the fused cross-attention reads.
    Kv(Tensor<3>),
    /// `[Q | K | V]` `[rows, t, 3·d_model]`: what the fused self-attention reads.
    Qkv(Tensor<3>),
}

impl Packed {
    /// Its keys (`value` false) or values, split into `heads` `[rows, heads, t, d_k]`.
    fn heads(&self, value: bool, heads: usize) -> Tensor<4> {
        let (t, parts) = match self {
            Packed::Kv(t) => (t, 2),
            Packed::Qkv(t) => (t, 3),
        };
        let d = t.dims()[2] / parts;
        // `K` is the second-to-last block, `V` the last.
        let block = parts - 2 + usize::from(value);
        heads_of(t.clone(), block * d, heads, d / heads)
    }

    fn select(self, indices: &Tensor<1, Int>) -> Packed {
        match self {
            Packed::Kv(t) => Packed::Kv(t.select(0, indices.clone())),
            Packed::Qkv(t) => Packed::Qkv(t.select(0, indices.clone())),
        }
    }
}

/// Projected keys and values, split into heads: the encoder memory's for cross-attention, or a
/// step's own before it joins the self-attention cache ([`StepCache`]).
///
/// Where one product made them ([`Packed`]), the fused kernels read that product and the
/// heads are split only if something asks for them ([`keys`](Self::keys)): splitting copies
/// (a view of columns cannot be reshaped in place), 5 % of a Transformer's encoder pass while
/// decoding, for heads the fused kernels never read.
///
/// # Shapes
/// - keys, values: `[rows, heads, t, d_k]`
#[derive(Debug, Clone)]
pub struct KeyValue {
    store: Store,
    heads: usize,
    len: usize,
}

/// Where a [`KeyValue`]'s keys and values are.
#[derive(Debug, Clone)]
enum Store {
    /// Split into heads, `[rows, heads, t, d_k]` each.
    Heads(Tensor<4>, Tensor<4>),
    /// Columns of one product, split when asked for.
    Packed(Packed),
}

impl KeyValue {
    /// Keys and values `[rows, heads, t, d_k]`.
    pub fn new(k: Tensor<4>, v: Tensor<4>) -> Self {
        let [_, heads, len, _] = k.dims();
        Self { store: Store::Heads(k, v), heads, len }
    }

    /// `k`, `v` `[rows, t, d_model]` (views of `packed`, where one product made them) in
    /// `heads`: split at once, or, with `packed`, when asked for.
    fn projected(k: Tensor<3>, v: Tensor<3>, heads: usize, packed: Option<Packed>) -> Self {
        let len = k.dims()[1];
        let store = match packed {
            Some(p) => Store::Packed(p),
            None => Store::Heads(split(k, heads), split(v, heads)),
        };
        Self { store, heads, len }
    }

    /// The product the keys and values are views of, if one made them.
    fn packed(&self) -> Option<&Packed> {
        match &self.store {
            Store::Packed(p) => Some(p),
            Store::Heads(..) => None,
        }
    }

    /// Positions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True without positions.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keys `[rows, heads, t, d_k]`.
    pub fn keys(&self) -> Tensor<4> {
        match &self.store {
            Store::Heads(k, _) => k.clone(),
            Store::Packed(p) => p.heads(false, self.heads),
        }
    }

    /// Values `[rows, heads, t, d_k]`.
    pub fn values(&self) -> Tensor<4> {
        match &self.store {
            Store::Heads(_, v) => v.clone(),
            Store::Packed(p) => p.heads(true, self.heads),
        }
    }

    /// Rows `indices` (beam search's reordering).
    pub fn select(self, indices: &Tensor<1, Int>) -> KeyValue {
        let store = match self.store {
            Store::Heads(k, v) => Store::Heads(k.select(0, indices.clone()), v.select(0, indices.clone())),
            Store::Packed(p) => Store::Packed(p.select(indices)),
        };
        KeyValue { store, ..self }
    }
}

/// `[b, t, width]` columns `offset..offset + heads·d_k` as `[b, heads, t, d_k]`.
fn heads_of(x: Tensor<3>, offset: usize, heads: usize, d_k: usize) -> Tensor<4> {
    let [b, t, _] = x.dims();
    x.narrow(2, offset, heads * d_k).reshape([b, t, heads, d_k]).swap_dims(1, 2)
}

/// `[b, t, d]` → `[b, h, t, d/h]`.
fn split(x: Tensor<3>, heads: usize) -> Tensor<4> {
    let d = x.dims()[2];
    heads_of(x, 0, heads, d / heads)
}

/// `Q = x W^Q`, `K = x W^K`, `V = x W^V` of `x` `[batch, t, d_model]`: the queries
/// `[batch, t, d_model]` and the keys and values split into `heads`.
pub fn project_qkv(x: Tensor<3>, [wq, wk, wv]: [&Linear; 3], heads: usize) -> (Tensor<3>, KeyValue) {
    let ([q, k, v], packed) = ops::linears(x, [wq, wk, wv]);
    (q, KeyValue::projected(k, v, heads, packed.map(Packed::Qkv)))
}

/// `K = m W^K`, `V = m W^V` of the encoder memory `m` `[batch, src, d_model]`, split into
/// `heads`, projected once for every decoding step.
pub fn project_kv(m: Tensor<3>, [wk, wv]: [&Linear; 2], heads: usize) -> KeyValue {
    let ([k, v], packed) = ops::linears(m, [wk, wv]);
    KeyValue::projected(k, v, heads, packed.map(Packed::Kv))
}

/// The heads of projected queries `q` `[rows, t_q, d_model]` attending to `kv`, row `r` to row
/// `rows[r]` of `kv` and of `mask` (`None`: row `r`; beams reading one copy of their
/// sentence's memory), through a fast kernel: the heads side by side `[rows, t_q, d_model]`
/// before `W^O`, and the weights `[rows, heads, t_q, t_k]` (the fused kernels' carry no
/// gradient). `mask` is added to the scores (0 or −∞), broadcast over heads and, where its
/// size is 1, over query positions. `None` where no kernel applies: the caller computes the
/// equation.
pub fn fast_attention(
    q: &Tensor<3>,
    kv: &KeyValue,
    mask: Option<&Tensor<4>>,
    rows: Option<&Tensor<1, Int>>,
    h: Heads,
) -> Option<(Tensor<3>, Tensor<4>)> {
    match kv.packed() {
        // Self-attention from `[Q | K | V]`: the fused kernel reads `Q` there too.
        Some(Packed::Qkv(qkv)) if rows.is_none() => mask
            .and_then(|m| ops::fused_self_attention(qkv.clone(), m, h.count, h.scale, h.dropout))
            .or_else(|| step(q, kv, mask, rows, h)),
        Some(Packed::Kv(packed)) => {
            step(q, kv, mask, rows, h).or_else(|| fused_cross(q, packed, mask?, rows, h))
        }
        _ => step(q, kv, mask, rows, h),
    }
}

/// Cross-attention to `[K | V]` from one product through the fused kernel; with `rows`, the
/// rows' copies of it and of `mask` first (only where the kernel runs: otherwise the caller
/// copies them for the equation).
fn fused_cross(
    q: &Tensor<3>,
    packed: &Tensor<3>,
    mask: &Tensor<4>,
    rows: Option<&Tensor<1, Int>>,
    h: Heads,
) -> Option<(Tensor<3>, Tensor<4>)> {
    let (q, d) = (q.clone(), h.dropout);
    match rows {
        None => ops::fused_cross_attention(q, packed.clone(), mask, h.count, h.scale, d),
        Some(rows) if ops::fused_attention_runs(&q.device()) => {
            let packed = packed.clone().select(0, rows.clone());
            let mask = mask.clone().select(0, rows.clone());
            ops::fused_cross_attention(q, packed, &mask, h.count, h.scale, d)
        }
        Some(_) => None,
    }
}

/// Decoding's case: one query position per row (`q` `[rows, 1, d_model]`) to the keys and
/// values where they lie — `[K | V]` of the memory, or the heads — through one CPU kernel
/// ([`ops::heads_step`]). `None` for several query positions, and where the kernel does not run.
fn step(
    q: &Tensor<3>,
    kv: &KeyValue,
    mask: Option<&Tensor<4>>,
    source: Option<&Tensor<1, Int>>,
    h: Heads,
) -> Option<(Tensor<3>, Tensor<4>)> {
    let [rows, tq, d] = q.dims();
    if tq != 1 {
        return None;
    }
    let (len, heads) = (kv.len, h.count);
    let mask = match mask {
        Some(m) => {
            let [mr, _, mq, mk] = m.dims();
            if mq != 1 || mk != len {
                return None;
            }
            m.clone().reshape([mr, len])
        }
        None => Tensor::zeros([1, len], &q.device()),
    };
    let q = q.clone().reshape([rows, d]);
    let source = source.map(|s| s.clone().float());
    let (out, weights) = match kv.packed() {
        Some(Packed::Kv(p)) => {
            let (k, v) = (p.clone().narrow(2, 0, d), p.clone().narrow(2, d, d));
            ops::heads_step(q, k, v, mask, source, heads, h.scale)?
        }
        _ => ops::heads_step(q, kv.keys(), kv.values(), mask, source, heads, h.scale)?,
    };
    Some((out.reshape([rows, 1, d]), weights.reshape([rows, heads, 1, len])))
}

/// A decoder's self-attention to its cache through the cache's own kernel
/// ([`StepCache::attend`]): the heads of projected queries `q` `[rows, 1, d_model]` (the new
/// position, already appended to `cache`) side by side, and the weights
/// `[rows, heads, 1, len]`. `None` for several query positions or a mask, and where the kernel
/// does not run: the caller computes the equation on the cache's keys and values.
pub fn fast_cached_attention(
    q: &Tensor<3>,
    cache: &StepCache,
    mask: Option<&Tensor<4>>,
    h: Heads,
) -> Option<(Tensor<3>, Tensor<4>)> {
    let [rows, tq, d] = q.dims();
    if tq != 1 || mask.is_some() {
        return None;
    }
    let (out, weights) = cache.attend(q.clone().reshape([rows, d]), h.count, h.scale)?;
    Some((out.reshape([rows, 1, d]), weights.reshape([rows, h.count, 1, cache.len()])))
}
