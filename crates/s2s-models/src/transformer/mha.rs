//! Multi-head scaled dot-product attention (Vaswani et al., 2017, §3.2.1–3.2.2):
//! `Attention(Q, K, V) = softmax(QKᵀ / √d_k) V` ([`scaled_dot_product`]), `d_k = d_model / h`,
//! each head on its own projections, `MultiHead(Q, K, V) = Concat(head₁, …, head_h) W^O`
//! ([`MultiHeadAttention`]).
//!
//! [`scaled_dot_product`] is the equation in plain tensor operations: it runs under `--kernels
//! reference` and wherever no fast kernel applies. Where one does — one fused kernel for all
//! heads when the projections came from one product, a decoding step's kernel for one query
//! position — the kernels crate computes the same (`s2s_kernels::ops::fast_attention`,
//! `fast_cached_attention`, which return `None` elsewhere); the tests below hold the two equal.
//!
//! Three uses, one entry point ([`MultiHeadAttention::forward`]), by where the keys and values
//! come from ([`KeySource`]): self-attention, a decoder's self-attention to the positions it
//! has seen (its cache), and cross-attention to the encoder memory (whose keys and values
//! [`MultiHeadAttention::memory`] projects once per sentence). Each gives its weights too.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Dropout, DropoutConfig, Initializer, Linear, LinearConfig};
use burn::tensor::{Device, Int, Tensor};
use s2s_kernels::ops::{self, Heads, StepCache};

pub use s2s_kernels::ops::KeyValue;

/// Scaled dot-product attention (eq. 1) of every head at once: `softmax(QKᵀ / √d_k + mask) V`,
/// dropout on the weights. `scaled = false` leaves out the division (the unscaled ablation,
/// `softmax(QKᵀ + mask) V`). `mask` is additive: 0 where a key may be read, −∞ where not.
/// The softmax and the dropout are the kernels crate's (one pass a row on the CPU; burn's
/// operations under `--kernels reference`).
///
/// # Shapes
/// - `q` `[batch, heads, t_q, d_k]`; `k`, `v` `[batch, heads, t_k, d_k]`; `mask`
///   broadcastable to `[batch, heads, t_q, t_k]`
/// - returns the heads side by side `[batch, t_q, heads·d_k]` and the weights
///   `[batch, heads, t_q, t_k]`
pub fn scaled_dot_product(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    mask: Option<&Tensor<4>>,
    scaled: bool,
    dropout: &Dropout,
) -> (Tensor<3>, Tensor<4>) {
    let [batch, heads, t_q, d_k] = q.dims();
    let t_k = k.dims()[2];
    let mut scores = q.matmul(k.swap_dims(2, 3)); // QKᵀ: [batch, heads, t_q, t_k]
    if scaled {
        scores = scores / (d_k as f32).sqrt();
    }
    if let Some(m) = mask {
        scores = scores + m.clone().expand([batch, heads, t_q, t_k]);
    }
    let weights = ops::softmax(scores);
    let out = ops::dropout(dropout, weights.clone()).matmul(v); // [batch, heads, t_q, d_k]
    (out.swap_dims(1, 2).reshape([batch, t_q, heads * d_k]), weights)
}

/// `[batch, t, d_model]` → `[batch, heads, t, d_k]`: each head's columns.
fn split_heads(x: Tensor<3>, heads: usize) -> Tensor<4> {
    let [batch, t, d_model] = x.dims();
    x.reshape([batch, t, heads, d_model / heads]).swap_dims(1, 2)
}

/// Configuration of [`MultiHeadAttention`].
#[derive(Config, Debug)]
pub struct MultiHeadAttentionConfig {
    /// Model width `d_model`.
    pub d_model: usize,
    /// Heads `h` (must divide `d_model`).
    pub heads: usize,
    /// Dropout on the attention weights.
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Scores divided by √d_k, as in the paper. Off is a teaching ablation: the unscaled
    /// `softmax(QKᵀ) V`, whose scores have variance ≈ d_k at initialisation.
    #[config(default = true)]
    pub scaled: bool,
}

/// Multi-head attention with separate `W^Q`, `W^K`, `W^V`, `W^O` (biases included, as in
/// PyTorch's `nn.MultiheadAttention`).
///
/// # Shapes
/// - input `[batch, t, d_model]`, keys/values `[batch, heads, t_k, d_k]`, additive mask
///   broadcastable to `[batch, heads, t, t_k]` → output `[batch, t, d_model]`, weights
///   `[batch, heads, t, t_k]`
#[derive(Module, Debug)]
pub struct MultiHeadAttention {
    /// `W^Q`.
    pub query: Linear,
    /// `W^K`.
    pub key: Linear,
    /// `W^V`.
    pub value: Linear,
    /// `W^O`.
    pub output: Linear,
    /// Dropout on the weights.
    pub dropout: Dropout,
    /// Heads.
    #[module(skip)]
    pub heads: usize,
    /// Whether scores are divided by √d_k ([`MultiHeadAttentionConfig::scaled`]).
    #[module(skip)]
    pub scaled: bool,
}

impl MultiHeadAttentionConfig {
    /// Initialises (Xavier-uniform weights, zero biases); errors when `heads` does not divide
    /// `d_model`.
    pub fn init(&self, device: &Device) -> Result<MultiHeadAttention, crate::ModelError> {
        if self.heads == 0 || !self.d_model.is_multiple_of(self.heads) {
            return Err(crate::ModelError::Heads { heads: self.heads, d_model: self.d_model });
        }
        let linear = || {
            LinearConfig::new(self.d_model, self.d_model)
                .with_initializer(Initializer::XavierUniform { gain: 1.0 })
                .init(device)
        };
        let zero_bias = |mut l: Linear| {
            l.bias = Some(Param::from_tensor(Tensor::zeros([self.d_model], device)));
            l
        };
        Ok(MultiHeadAttention {
            query: zero_bias(linear()),
            key: zero_bias(linear()),
            value: zero_bias(linear()),
            output: zero_bias(linear()),
            dropout: DropoutConfig::new(self.dropout).init(),
            heads: self.heads,
            scaled: self.scaled,
        })
    }
}

/// Where [`MultiHeadAttention::forward`]'s keys and values come from.
// Moved once into each call: boxing the cache would allocate at every decoding step.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum KeySource<'a> {
    /// The input itself: self-attention, `MultiHead(x, x, x)`.
    Input,
    /// The input and the positions before it, whose keys and values `cache` holds (a
    /// decoding step); the input's keys and values join it.
    Cached(StepCache),
    /// The encoder memory's keys and values (from [`MultiHeadAttention::memory`]):
    /// cross-attention, `MultiHead(x, m, m)`. Row `r` of the input reads row `rows[r]` of the
    /// memory and of the mask (`None`: row `r`; the decoder's beams reading one copy of their
    /// sentence's memory).
    Memory(&'a KeyValue, Option<&'a Tensor<1, Int>>),
}

/// What [`MultiHeadAttention::forward`] gives: the output, the weights, and the
/// self-attention keys and values a decoder continues from.
#[derive(Debug, Clone)]
pub struct Attended {
    /// `Concat(head₁, …, head_h) W^O`, `[rows, t, d_model]`.
    pub output: Tensor<3>,
    /// The attention weights `[rows, heads, t, t_k]` (where a fused kernel computed them, they
    /// carry no gradient: they are for showing).
    pub weights: Tensor<4>,
    /// The self-attention keys and values ([`SelfKeys::into_cache`]).
    pub keys: SelfKeys,
}

/// The self-attention keys and values [`Attended`] keeps.
#[derive(Debug, Clone)]
pub enum SelfKeys {
    /// The input's ([`KeySource::Input`]).
    Input(KeyValue),
    /// The cache with the input's appended ([`KeySource::Cached`]).
    Cache(StepCache),
    /// None kept: the call was cross-attention ([`KeySource::Memory`]), whose keys are the
    /// memory's, projected once.
    NotKept,
}

impl SelfKeys {
    /// The decoder's self-attention cache after the call: the cache with the input's keys and
    /// values appended, or one started from the input's; `None` for cross-attention.
    pub fn into_cache(self) -> Option<StepCache> {
        match self {
            SelfKeys::Input(kv) => Some(StepCache::new(kv.keys(), kv.values())),
            SelfKeys::Cache(cache) => Some(cache),
            SelfKeys::NotKept => None,
        }
    }
}

impl MultiHeadAttention {
    /// `MultiHead(x, K, V)` of `x` `[rows, t, d_model]` to the keys and values of `source`,
    /// under the additive `mask` (0 or −∞; a padding or causal mask, broadcast over heads).
    pub fn forward(&self, x: Tensor<3>, source: KeySource<'_>, mask: Option<&Tensor<4>>) -> Attended {
        let projections = [&self.query, &self.key, &self.value];
        let (heads, weights, keys) = match source {
            KeySource::Input => {
                // Q = x W^Q, K = x W^K, V = x W^V
                let (q, kv) = ops::project_qkv(x, projections, self.heads);
                // head_i = softmax(Q_i K_iᵀ / √d_k + mask) V_i, side by side: [rows, t, d_model]
                let (heads, weights) = self.attend(q, &kv, mask, None);
                (heads, weights, SelfKeys::Input(kv))
            }
            KeySource::Cached(cache) => {
                // Q = x W^Q; the input's K = x W^K, V = x W^V join the cache
                let (q, new) = ops::project_qkv(x, projections, self.heads);
                let cache = cache.append(new.keys(), new.values());
                // head_i over every cached position
                let (heads, weights) = self.attend_cached(q, &cache, mask);
                (heads, weights, SelfKeys::Cache(cache))
            }
            KeySource::Memory(memory, rows) => {
                // Q = x W^Q; K, V projected from the memory once
                let q = ops::linear(&self.query, x);
                let (heads, weights) = self.attend(q, memory, mask, rows);
                (heads, weights, SelfKeys::NotKept)
            }
        };
        // Concat(head_1, …, head_h) W^O
        Attended { output: ops::linear(&self.output, heads), weights, keys }
    }

    /// The encoder memory's keys and values, `K = m W^K`, `V = m W^V` of `m`
    /// `[batch, src, d_model]`: projected once, read by every decoding step
    /// ([`KeySource::Memory`]).
    pub fn memory(&self, m: Tensor<3>) -> KeyValue {
        ops::project_kv(m, [&self.key, &self.value], self.heads)
    }

    /// `head_i = Attention(Q_i, K_i, V_i)` of projected queries `q` `[rows, t, d_model]` to
    /// `kv`, row `r` reading row `rows[r]` of `kv` and `mask` (`None`: row `r`): the heads side
    /// by side `[rows, t, d_model]` and the weights `[rows, heads, t, t_k]` — from a fast
    /// kernel where one applies, else [`scaled_dot_product`].
    fn attend(
        &self,
        q: Tensor<3>,
        kv: &KeyValue,
        mask: Option<&Tensor<4>>,
        rows: Option<&Tensor<1, Int>>,
    ) -> (Tensor<3>, Tensor<4>) {
        ops::fast_attention(&q, kv, mask, rows, self.fast()).unwrap_or_else(|| {
            let (kv, mask) = match rows {
                Some(r) => (kv.clone().select(r), mask.map(|m| m.clone().select(0, r.clone()))),
                None => (kv.clone(), mask.cloned()),
            };
            let q = split_heads(q, self.heads);
            scaled_dot_product(q, kv.keys(), kv.values(), mask.as_ref(), self.scaled, &self.dropout)
        })
    }

    /// [`MultiHeadAttention::attend`] to a decoder's cache (the new positions already in it).
    fn attend_cached(
        &self,
        q: Tensor<3>,
        cache: &StepCache,
        mask: Option<&Tensor<4>>,
    ) -> (Tensor<3>, Tensor<4>) {
        ops::fast_cached_attention(&q, cache, mask, self.fast()).unwrap_or_else(|| {
            let q = split_heads(q, self.heads);
            scaled_dot_product(q, cache.keys(), cache.values(), mask, self.scaled, &self.dropout)
        })
    }

    /// How the fast kernels attend: the heads, the scores' scale (`1/√d_k`, or 1 unscaled:
    /// what [`scaled_dot_product`] divides by) and the dropout.
    fn fast(&self) -> Heads<'_> {
        let d_k = self.query.weight.dims()[1] / self.heads;
        let scale = if self.scaled { 1.0 / (d_k as f32).sqrt() } else { 1.0 };
        Heads { count: self.heads, scale, dropout: &self.dropout }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::gradcheck;
    use burn::tensor::{Distribution, TensorData};

    /// Cross-attention of `q` to `memory` through `m`: the output and the weights.
    fn cross(
        m: &MultiHeadAttention,
        q: Tensor<3>,
        memory: Tensor<3>,
        mask: Option<&Tensor<4>>,
    ) -> (Tensor<3>, Tensor<4>) {
        let a = m.forward(q, KeySource::Memory(&m.memory(memory), None), mask);
        (a.output, a.weights)
    }

    fn wave(n: usize, k: f32) -> Vec<f32> {
        (0..n).map(|i| ((i as f32 + 1.0) * k).sin() * 0.5).collect()
    }

    /// Sets `W` (burn layout `[in, out]`) and `b` from `wave`.
    fn set(l: &mut Linear, d: usize, kw: f32, kb: f32, device: &Device) {
        l.weight = Param::from_tensor(Tensor::from_data(TensorData::new(wave(d * d, kw), [d, d]), device));
        l.bias = Some(Param::from_tensor(Tensor::from_data(TensorData::new(wave(d, kb), [d]), device)));
    }

    /// Golden values from PyTorch 2.15 with the same weights (PyTorch stores `W` as `[out, in]`,
    /// hence the transposes):
    /// ```python
    /// import torch, math
    /// wave = lambda n, k: torch.tensor([math.sin((i + 1) * k) * 0.5 for i in range(n)])
    /// d, h = 4, 2
    /// m = torch.nn.MultiheadAttention(d, h, batch_first=True)
    /// with torch.no_grad():
    ///     m.in_proj_weight.copy_(torch.cat([wave(16, k).view(4, 4).t() for k in (.7, 1.3, 2.1)]))
    ///     m.in_proj_bias.copy_(torch.cat([wave(4, k) for k in (.3, .5, .9)]))
    ///     m.out_proj.weight.copy_(wave(16, 1.7).view(4, 4).t()); m.out_proj.bias.copy_(wave(4, 1.1))
    /// q = wave(8, 0.37).view(1, 2, 4); kv = wave(12, 0.61).view(1, 3, 4)
    /// out, w = m(q, kv, kv, key_padding_mask=torch.tensor([[False, False, True]]),
    ///            average_attn_weights=False)
    /// print(out.flatten().tolist(), w.flatten().tolist())
    /// ```
    #[test]
    fn golden_values_from_pytorch() {
        let dev = Device::flex();
        let mut m = MultiHeadAttentionConfig::new(4, 2).with_dropout(0.0).init(&dev).unwrap();
        set(&mut m.query, 4, 0.7, 0.3, &dev);
        set(&mut m.key, 4, 1.3, 0.5, &dev);
        set(&mut m.value, 4, 2.1, 0.9, &dev);
        set(&mut m.output, 4, 1.7, 1.1, &dev);
        let q = Tensor::<3>::from_data(TensorData::new(wave(8, 0.37), [1, 2, 4]), &dev);
        let kv = Tensor::<3>::from_data(TensorData::new(wave(12, 0.61), [1, 3, 4]), &dev);
        let mask =
            Tensor::<4>::from_data(TensorData::new(vec![0.0, 0.0, f32::NEG_INFINITY], [1, 1, 1, 3]), &dev);
        let (out, w) = cross(&m, q, kv, Some(&mask));
        let out: Vec<f32> = out.into_data().try_to_vec::<f32>().unwrap();
        let w: Vec<f32> = w.into_data().try_to_vec::<f32>().unwrap();
        let want_out =
            [0.8795114, 0.1855694, -0.4564295, -0.15983, 0.8792427, 0.1847451, -0.4559483, -0.1591298];
        let want_w = [
            0.4962856, 0.5037144, 0.0, 0.5032523, 0.4967478, 0.0, 0.5415301, 0.4584699, 0.0, 0.5663713,
            0.4336286, 0.0,
        ];
        assert!(out.iter().zip(want_out).all(|(a, b)| (a - b).abs() < 1e-5), "{out:?}");
        assert!(w.iter().zip(want_w).all(|(a, b)| (a - b).abs() < 1e-5), "{w:?}");
        assert!(w.iter().skip(2).step_by(3).all(|&x| x == 0.0), "padded key must get exactly 0: {w:?}");
    }

    /// The fused self-attention on wgpu (lavapipe where there is no GPU) — `[W^Q | W^K | W^V]`
    /// joined by `gpu::cat`, the attention kernels — equals flex's: the output and the
    /// gradients of the three projections' weights and biases.
    #[test]
    fn fused_self_attention_on_wgpu_equals_flex() {
        let Some(plain) = s2s_kernels::testing::wgpu_or_skip() else { return };
        let cpu = Device::flex().autodiff();
        cpu.seed(21);
        let m = MultiHeadAttentionConfig::new(8, 2).with_dropout(0.0).init(&cpu).unwrap();
        // Above 1,024 rows `[Q | K | V]` comes from one product: the fused path.
        let (b, t) = (33, 32);
        let x = Tensor::<3>::random([b, t, 8], Distribution::Normal(0.0, 1.0), &cpu);
        let r = Tensor::<3>::random([b, t, 8], Distribution::Normal(0.0, 1.0), &cpu);
        let run = |d: &Device| {
            let m = m.clone().fork(d);
            let on = |t: &Tensor<3>| Tensor::<3>::from_data(t.to_data(), d);
            let mask = Tensor::<4>::zeros([b, 1, 1, t], d);
            let out = m.forward(on(&x), KeySource::Input, Some(&mask)).output;
            let g = (out.clone() * on(&r)).sum().backward();
            let mut values = vec![out.inner().into_data().convert::<f32>().try_to_vec::<f32>().unwrap()];
            for l in [&m.query, &m.key, &m.value] {
                let w = l.weight.val().grad(&g).unwrap();
                values.push(w.into_data().convert::<f32>().try_to_vec::<f32>().unwrap());
                let b = l.bias.as_ref().unwrap().val().grad(&g).unwrap();
                values.push(b.into_data().convert::<f32>().try_to_vec::<f32>().unwrap());
            }
            values
        };
        let (want, got) = (run(&cpu), run(&plain.autodiff()));
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            let worst = w.iter().zip(g).map(|(a, b)| (a - b).abs() / a.abs().max(1.0)).fold(0f32, f32::max);
            assert!(worst < 1e-4, "value {i} (0: output; then ∂W, ∂b of Q, K, V): off by {worst}");
        }
    }

    /// Training on wgpu (lavapipe where there is no GPU), the fused self-attention applies
    /// its dropout: the output changes with it, and reseeding the host's stream draws the same
    /// mask again.
    #[test]
    fn attention_dropout_reaches_the_gpu_kernels() {
        let Some(plain) = s2s_kernels::testing::wgpu_or_skip() else { return };
        let d = plain.autodiff();
        let m = MultiHeadAttentionConfig::new(8, 2).with_dropout(0.5).init(&d).unwrap();
        // Above 1,024 rows `[Q | K | V]` comes from one product: the fused path.
        let (b, t) = (33, 32);
        let x = Tensor::<3>::random([b, t, 8], Distribution::Normal(0.0, 1.0), &d);
        let mask = Tensor::<4>::zeros([b, 1, 1, t], &d);
        let run = |m: &MultiHeadAttention| {
            s2s_kernels::ops::reseed(3);
            m.forward(x.clone(), KeySource::Input, Some(&mask)).output
        };
        assert_eq!(run(&m).to_data(), run(&m).to_data(), "the same seed, the same mask");
        let off = MultiHeadAttention { dropout: burn::nn::DropoutConfig::new(0.0).init(), ..m.clone() };
        assert!(crate::test_support::max_diff(run(&m), run(&off)) > 1e-2, "dropout changes the output");
    }

    /// An additive padding mask `[batch, 1, 1, t]`: sentence `b` keeps its first
    /// `t − (b mod 3)` positions.
    fn padding(batch: usize, t: usize, d: &Device) -> Tensor<4> {
        let v: Vec<f32> = (0..batch)
            .flat_map(|b| (0..t).map(move |j| if j + b % 3 >= t { f32::NEG_INFINITY } else { 0.0 }))
            .collect();
        Tensor::from_data(TensorData::new(v, [batch, 1, 1, t]), d)
    }

    /// Self- and cross-attention (one product for `[Q | K | V]`, so the fused kernels run)
    /// give with the kernels what they give with the references (`s2s_kernels::mode`):
    /// output, weights, and the gradients of the inputs and of all four projections; and
    /// while decoding (no autodiff) too, padded keys getting exactly 0.
    #[test]
    fn kernels_and_references_agree() {
        use s2s_kernels::mode::{Kernels, with};
        let ad = Device::flex().autodiff();
        ad.seed(22);
        // 9 × 120 rows: over ops::CAT_MIN_ROWS, so [Q | K | V] is one product.
        let (batch, t, tq, d_model, heads) = (9, 120, 7, 16, 4);
        let m = MultiHeadAttentionConfig::new(d_model, heads).with_dropout(0.0).init(&ad).unwrap();
        let x = Tensor::<3>::random([batch, t, d_model], Distribution::Normal(0.0, 1.0), &ad).require_grad();
        let query =
            Tensor::<3>::random([batch, tq, d_model], Distribution::Normal(0.0, 1.0), &ad).require_grad();
        let r = Tensor::<3>::random([batch, t, d_model], Distribution::Normal(0.0, 1.0), &ad);
        let rq = Tensor::<3>::random([batch, tq, d_model], Distribution::Normal(0.0, 1.0), &ad);
        let mask = padding(batch, t, &ad);
        let grads = |g: &burn::tensor::Gradients, inputs: &[&Tensor<3>]| {
            let mut out: Vec<Tensor<1>> =
                inputs.iter().map(|x| x.grad(g).expect("∂input").flatten(0, 2)).collect();
            for l in [&m.query, &m.key, &m.value, &m.output] {
                out.push(l.weight.grad(g).expect("∂W").flatten(0, 1));
                out.push(l.bias.as_ref().unwrap().grad(g).expect("∂b"));
            }
            out
        };
        let self_run = |k: Kernels| {
            with(k, || {
                let out = m.forward(x.clone(), KeySource::Input, Some(&mask)).output;
                let g = (out.clone() * r.clone()).sum().backward();
                (out.inner(), grads(&g, &[&x]))
            })
        };
        let ((y1, g1), (y2, g2)) = (self_run(Kernels::Fast), self_run(Kernels::Reference));
        assert!(crate::test_support::max_diff(y1, y2) < 1e-5, "self: output");
        for (i, (a, b)) in g1.into_iter().zip(g2).enumerate() {
            assert!(crate::test_support::max_diff(a.inner(), b.inner()) < 1e-4, "self: gradient {i}");
        }
        let cross_run = |k: Kernels| {
            with(k, || {
                let (out, w) = cross(&m, query.clone(), x.clone(), Some(&mask));
                let g = (out.clone() * rq.clone()).sum().backward();
                (out.inner(), w.inner(), grads(&g, &[&query, &x]))
            })
        };
        let ((y1, w1, g1), (y2, w2, g2)) = (cross_run(Kernels::Fast), cross_run(Kernels::Reference));
        assert!(crate::test_support::max_diff(y1, y2) < 1e-5, "cross: output");
        assert!(crate::test_support::max_diff(w1, w2) < 1e-6, "cross: weights");
        for (i, (a, b)) in g1.into_iter().zip(g2).enumerate() {
            assert!(crate::test_support::max_diff(a.inner(), b.inner()) < 1e-4, "cross: gradient {i}");
        }
        // Decoding: no autodiff.
        let d = Device::flex();
        let m = m.valid();
        let memory = Tensor::<3>::from_data(x.inner().to_data(), &d);
        let q1 = Tensor::<3>::from_data(query.inner().narrow(1, 0, 1).to_data(), &d);
        let mask = padding(batch, t, &d);
        let decode = |k: Kernels| with(k, || cross(&m, q1.clone(), memory.clone(), Some(&mask)));
        let ((y1, w1), (y2, w2)) = (decode(Kernels::Fast), decode(Kernels::Reference));
        assert!(crate::test_support::max_diff(y1, y2) < 1e-5, "decoding: output");
        assert!(crate::test_support::max_diff(w1.clone(), w2) < 1e-6, "decoding: weights");
        let w: Vec<f32> = w1.into_data().try_to_vec::<f32>().unwrap();
        for (row, v) in w.chunks(t).enumerate() {
            let b = row / heads;
            assert!(v[t - b % 3..].iter().all(|&x| x == 0.0), "padded keys of sentence {b} get exactly 0");
        }
    }

    /// The plain equation, [`scaled_dot_product`], gives what the fast kernels give where they
    /// apply, scaled and unscaled: the fused self- and cross-attention (output, weights, and
    /// the gradients of the inputs and projections), and while decoding (no autodiff) the step
    /// kernels on the memory (rows reading their sentence's row) and on the self-attention
    /// cache.
    #[test]
    fn the_plain_equation_equals_the_fast_kernels() {
        let ad = Device::flex().autodiff();
        ad.seed(23);
        // 9 × 120 rows: over ops::CAT_MIN_ROWS, so [Q | K | V] and [K | V] are one product each.
        let (batch, t, tq, d_model, heads) = (9, 120, 7, 16, 4);
        let normal = Distribution::Normal(0.0, 1.0);
        let x = Tensor::<3>::random([batch, t, d_model], normal, &ad);
        let query = Tensor::<3>::random([batch, tq, d_model], normal, &ad);
        let r = Tensor::<3>::random([batch, t, d_model], normal, &ad);
        let rq = Tensor::<3>::random([batch, tq, d_model], normal, &ad);
        let mask = padding(batch, t, &ad);
        let close = |a: Tensor<3>, b: Tensor<3>, tol: f32| crate::test_support::max_diff(a, b) < tol;
        for scaled in [true, false] {
            let m = MultiHeadAttentionConfig::new(d_model, heads)
                .with_dropout(0.0)
                .with_scaled(scaled)
                .init(&ad)
                .unwrap();
            let plain = |q: Tensor<3>, kv: &KeyValue| {
                scaled_dot_product(
                    split_heads(q, heads),
                    kv.keys(),
                    kv.values(),
                    Some(&mask),
                    scaled,
                    &m.dropout,
                )
            };
            // Self-attention: the fused kernel reads [Q | K | V].
            let self_run = |fast: bool| {
                let x = x.clone().require_grad();
                let (q, kv) = ops::project_qkv(x.clone(), [&m.query, &m.key, &m.value], heads);
                let (out, w) = if fast {
                    ops::fast_attention(&q, &kv, Some(&mask), None, m.fast()).expect("the fused kernel runs")
                } else {
                    plain(q, &kv)
                };
                let g = (out.clone() * r.clone()).sum().backward();
                (out.inner(), w.inner(), x.grad(&g).expect("∂x"), m.query.weight.grad(&g).expect("∂W^Q"))
            };
            let ((y1, w1, gx1, gw1), (y2, w2, gx2, gw2)) = (self_run(true), self_run(false));
            assert!(close(y1, y2, 1e-5), "self, scaled {scaled}: output");
            assert!(crate::test_support::max_diff(w1, w2) < 1e-6, "self, scaled {scaled}: weights");
            assert!(close(gx1, gx2, 1e-4), "self, scaled {scaled}: ∂x");
            assert!(crate::test_support::max_diff(gw1, gw2) < 1e-4, "self, scaled {scaled}: ∂W^Q");
            // Cross-attention: the fused kernel reads [K | V].
            let cross_run = |fast: bool| {
                let (x, query) = (x.clone().require_grad(), query.clone().require_grad());
                let kv = m.memory(x.clone());
                let q = ops::linear(&m.query, query.clone());
                let (out, w) = if fast {
                    ops::fast_attention(&q, &kv, Some(&mask), None, m.fast()).expect("the fused kernel runs")
                } else {
                    plain(q, &kv)
                };
                let g = (out.clone() * rq.clone()).sum().backward();
                (out.inner(), w.inner(), x.grad(&g).expect("∂memory"), query.grad(&g).expect("∂query"))
            };
            let ((y1, w1, gm1, gq1), (y2, w2, gm2, gq2)) = (cross_run(true), cross_run(false));
            assert!(close(y1, y2, 1e-5), "cross, scaled {scaled}: output");
            assert!(crate::test_support::max_diff(w1, w2) < 1e-6, "cross, scaled {scaled}: weights");
            assert!(close(gm1, gm2, 1e-4), "cross, scaled {scaled}: ∂memory");
            assert!(close(gq1, gq2, 1e-4), "cross, scaled {scaled}: ∂query");
            // Decoding: one query position per row, no autodiff.
            let d = Device::flex();
            let m = m.valid();
            let memory = m.memory(Tensor::from_data(x.to_data(), &d));
            let q1 =
                ops::linear(&m.query, Tensor::<3>::from_data(query.clone().narrow(1, 0, 1).to_data(), &d));
            let mask = padding(batch, t, &d);
            // Beams: row r reads its sentence's row r / 2 of the memory and the mask.
            let sentence: Vec<i64> = (0..batch as i64).map(|r| r / 2).collect();
            let rows = Tensor::<1, Int>::from_data(TensorData::new(sentence, [batch]), &d);
            let (y1, w1) = ops::fast_attention(&q1, &memory, Some(&mask), Some(&rows), m.fast())
                .expect("the step kernel runs");
            let (picked, mask) = (memory.clone().select(&rows), mask.select(0, rows.clone()));
            let q = split_heads(q1.clone(), heads);
            let (y2, w2) =
                scaled_dot_product(q, picked.keys(), picked.values(), Some(&mask), scaled, &m.dropout);
            assert!(close(y1, y2, 1e-5), "decoding, scaled {scaled}: output");
            assert!(crate::test_support::max_diff(w1, w2) < 1e-6, "decoding, scaled {scaled}: weights");
            let cache = StepCache::new(picked.keys(), picked.values());
            let (y1, w1) =
                ops::fast_cached_attention(&q1, &cache, None, m.fast()).expect("the cache's kernel runs");
            let q = split_heads(q1, heads);
            let (y2, w2) = scaled_dot_product(q, cache.keys(), cache.values(), None, scaled, &m.dropout);
            assert!(close(y1, y2, 1e-5), "the cache, scaled {scaled}: output");
            assert!(crate::test_support::max_diff(w1, w2) < 1e-6, "the cache, scaled {scaled}: weights");
        }
    }

    /// `scaled = false` is `softmax(QKᵀ) V`: the same as a scaled module whose `W^Q` and
    /// query bias are `√d_k` times larger, through every attention path (the fused
    /// self-attention's rows, cross-attention, a decoding step), and not the scaled module's.
    #[test]
    fn unscaled_attention_is_the_plain_dot_product() {
        let d = Device::flex();
        d.seed(5);
        // 9 × 120 rows: over ops::CAT_MIN_ROWS, where the scaled module fuses [Q | K | V].
        let (batch, t, d_model, heads) = (9, 120, 16, 4);
        let unscaled = MultiHeadAttentionConfig::new(d_model, heads)
            .with_dropout(0.0)
            .with_scaled(false)
            .init(&d)
            .unwrap();
        let mut wide = unscaled.clone();
        wide.scaled = true;
        let sqrt_dk = ((d_model / heads) as f32).sqrt();
        wide.query.weight = Param::from_tensor(unscaled.query.weight.val() * sqrt_dk);
        wide.query.bias = unscaled.query.bias.as_ref().map(|b| Param::from_tensor(b.val() * sqrt_dk));
        let mut plain = unscaled.clone();
        plain.scaled = true;
        let x = Tensor::<3>::random([batch, t, d_model], Distribution::Normal(0.0, 1.0), &d);
        let mask = padding(batch, t, &d);
        let close = |a: Tensor<3>, b: Tensor<3>| crate::test_support::max_diff(a, b) < 1e-4;
        let self_out = |m: &MultiHeadAttention| m.forward(x.clone(), KeySource::Input, Some(&mask)).output;
        assert!(close(self_out(&unscaled), self_out(&wide)), "self-attention");
        assert!(!close(self_out(&unscaled), self_out(&plain)), "the switch changes nothing");
        let q = x.clone().narrow(1, 0, 3);
        let to_memory = |m: &MultiHeadAttention| cross(m, q.clone(), x.clone(), Some(&mask));
        let ((a, wa), (b, wb)) = (to_memory(&unscaled), to_memory(&wide));
        assert!(close(a, b), "cross-attention");
        assert!(crate::test_support::max_diff(wa, wb) < 1e-5, "cross-attention weights");
        let step = |m: &MultiHeadAttention| cross(m, q.clone().narrow(1, 0, 1), x.clone(), Some(&mask)).0;
        assert!(close(step(&unscaled), step(&wide)), "a decoding step");
    }

    #[test]
    fn refuses_heads_that_do_not_divide() {
        assert!(MultiHeadAttentionConfig::new(6, 4).init(&Device::flex()).is_err());
    }

    #[test]
    fn gradients_match_central_differences() {
        let d = Device::flex().autodiff();
        let m = MultiHeadAttentionConfig::new(4, 2).with_dropout(0.0).init(&d).unwrap();
        let q = Tensor::<3>::random([2, 2, 4], Distribution::Normal(0.0, 1.0), &d);
        let kv = Tensor::<3>::random([2, 3, 4], Distribution::Normal(0.0, 1.0), &d);
        let r = Tensor::<3>::random([2, 2, 4], Distribution::Normal(0.0, 1.0), &d);
        gradcheck::check(m, |m: &MultiHeadAttention| {
            let (out, _) = cross(m, q.clone(), kv.clone(), None);
            (out * r.clone()).sum()
        });
    }
}
