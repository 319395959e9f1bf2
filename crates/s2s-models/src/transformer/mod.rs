//! The Transformer encoder-decoder (Vaswani et al., 2017) on the shared seq2seq interface.
//!
//! `x₀ = √d_model · E[y] + PE` (§3.4–3.5), N encoder layers of self-attention and feed-forward,
//! N decoder layers adding causally masked self-attention and cross-attention to the encoder
//! memory, then `p(yₜ) = softmax(W · LayerNorm(x_N))` (the final norm with pre-norm layers).
//! The output projection can reuse the target embedding (`tie_output`, §3.4), and one
//! embedding can serve both sides when the vocabulary is joint (`share_embeddings`).
//!
//! Incremental decoding keeps, per decoder layer, the cross-attention keys/values of the
//! memory (computed once in `encode`) and the self-attention keys/values of every position so
//! far, extended by one position per step; search reorders all of them
//! (`s2s_decode::reorder`).

pub mod layer;
pub mod mha;
pub mod position;

use burn::module::Module;
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig, Linear,
    LinearConfig,
};
use burn::tensor::{Device, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::interface::{Forward, Source, Step};
use layer::{DecoderLayer, EncoderLayer, LayerConfig};
use mha::KeyValue;
use position::sinusoids;
use s2s_kernels::ops;

/// Hyperparameters of the `transformer` kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransformerSpec {
    /// Model width `d_model`.
    pub d_model: usize,
    /// Attention heads.
    pub heads: usize,
    /// Feed-forward inner width.
    pub ffn: usize,
    /// Encoder layers.
    pub enc_layers: usize,
    /// Decoder layers.
    pub dec_layers: usize,
    /// Dropout on embeddings, residuals and inside the feed-forward network.
    pub dropout: f64,
    /// Dropout on attention weights.
    pub attention_dropout: f64,
    /// Pre-norm (true) or the paper's post-norm (false).
    pub pre_norm: bool,
    /// Tie the output projection to the target embedding.
    pub tie_output: bool,
    /// Share source and target embeddings when the vocabulary is joint.
    pub share_embeddings: bool,
    /// Sinusoidal positions added to the embeddings (off: a teaching ablation, the model
    /// cannot see word order).
    pub positions: bool,
    /// Causal self-attention in the decoder (off: a teaching ablation — training reads the
    /// future, decoding cannot).
    pub causal: bool,
    /// Attention scores divided by √d_k (off: a teaching ablation, the unscaled dot product
    /// whose variance grows with d_k).
    pub scaled: bool,
}

impl Default for TransformerSpec {
    fn default() -> Self {
        Self {
            d_model: 256,
            heads: 8,
            ffn: 1024,
            enc_layers: 3,
            dec_layers: 3,
            dropout: 0.1,
            attention_dropout: 0.1,
            pre_norm: true,
            tie_output: true,
            share_embeddings: true,
            positions: true,
            causal: true,
            scaled: true,
        }
    }
}

/// Configuration of [`Transformer`]: its vocabularies and its hyperparameters.
#[derive(Debug, Clone)]
pub struct TransformerConfig {
    /// Source vocabulary size.
    pub src_vocab: usize,
    /// Target vocabulary size.
    pub tgt_vocab: usize,
    /// Source and target share one vocabulary, so the embeddings may be shared
    /// ([`TransformerSpec::share_embeddings`]).
    pub joint: bool,
    /// The hyperparameters.
    pub spec: TransformerSpec,
}

impl TransformerConfig {
    /// `spec` over separate vocabularies of these sizes.
    pub fn new(src_vocab: usize, tgt_vocab: usize, spec: TransformerSpec) -> Self {
        Self { src_vocab, tgt_vocab, joint: false, spec }
    }
}

/// The Transformer encoder-decoder.
///
/// # Shapes
/// - source `[batch, src]`, target input `[batch, tgt]` → logits `[batch, tgt, tgt_vocab]`,
///   cross-attention `[batch, tgt, src]` (last layer, averaged over heads)
#[derive(Module, Debug)]
pub struct Transformer {
    /// Source embedding (absent when shared with the target's).
    pub src_embed: Option<Embedding>,
    /// Target embedding.
    pub tgt_embed: Embedding,
    /// Encoder stack.
    pub encoder: Vec<EncoderLayer>,
    /// Decoder stack.
    pub decoder: Vec<DecoderLayer>,
    /// Final encoder norm (pre-norm only).
    pub encoder_norm: Option<LayerNorm>,
    /// Final decoder norm (pre-norm only).
    pub decoder_norm: Option<LayerNorm>,
    /// Output projection (absent when tied to the target embedding).
    pub output: Option<Linear>,
    /// Dropout on the scaled embeddings plus positions.
    pub dropout: Dropout,
    /// `d_model`.
    #[module(skip)]
    pub d_model: usize,
    /// Whether positions are added to the embeddings ([`TransformerSpec::positions`]).
    #[module(skip)]
    pub positions: bool,
    /// Whether teacher-forced self-attention is causal ([`TransformerSpec::causal`]).
    #[module(skip)]
    pub causal: bool,
}

/// The Transformer's incremental decoding state.
#[derive(Debug, Clone)]
pub struct TransformerState {
    /// Per decoder layer: cross-attention keys/values of the memory `[rows, h, src, d_k]`.
    pub memory: Vec<KeyValue>,
    /// Per decoder layer: self-attention keys/values of the positions decoded so far.
    pub cache: Vec<Option<ops::StepCache>>,
    /// Additive source mask (0 or −∞) `[rows, 1, 1, src]`.
    pub memory_mask: Tensor<4>,
    /// Positions decoded so far (the next position's index).
    pub position: usize,
    /// Per row, the encoded sentence whose memory it reads, and whether `memory` and
    /// `memory_mask` keep a row per sentence or per state row ([`ops::SourceRows`]).
    pub rows: ops::SourceRows,
}

impl TransformerState {
    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows.len()
    }
}

impl TransformerConfig {
    /// Initialises the model; errors on inconsistent sizes.
    pub fn init(&self, device: &Device) -> Result<Transformer, crate::ModelError> {
        let s = &self.spec;
        if s.d_model == 0 || s.enc_layers == 0 || s.dec_layers == 0 {
            return Err(crate::ModelError::EmptyTransformer);
        }
        for (name, p) in [("dropout", s.dropout), ("attention_dropout", s.attention_dropout)] {
            if !(0.0..1.0).contains(&p) {
                return Err(crate::ModelError::Probability { name, value: p });
            }
        }
        let share = s.share_embeddings && self.joint;
        if share && self.src_vocab != self.tgt_vocab {
            return Err(crate::ModelError::SharedVocabulary { src: self.src_vocab, tgt: self.tgt_vocab });
        }
        let layer = LayerConfig::new(s.d_model, s.heads, s.ffn)
            .with_dropout(s.dropout)
            .with_attention_dropout(s.attention_dropout)
            .with_pre_norm(s.pre_norm)
            .with_scaled(s.scaled);
        // N(0, d^-1/2) so that √d · E[y] has unit scale (as in fairseq).
        let embedding = |v: usize| {
            EmbeddingConfig::new(v, s.d_model)
                .with_initializer(Initializer::Normal { mean: 0.0, std: (s.d_model as f64).powf(-0.5) })
                .init(device)
        };
        let norm = || s.pre_norm.then(|| LayerNormConfig::new(s.d_model).init(device));
        Ok(Transformer {
            src_embed: (!share).then(|| embedding(self.src_vocab)),
            tgt_embed: embedding(self.tgt_vocab),
            encoder: (0..s.enc_layers).map(|_| layer.init_encoder(device)).collect::<Result<_, _>>()?,
            decoder: (0..s.dec_layers).map(|_| layer.init_decoder(device)).collect::<Result<_, _>>()?,
            encoder_norm: norm(),
            decoder_norm: norm(),
            output: (!s.tie_output).then(|| {
                LinearConfig::new(s.d_model, self.tgt_vocab)
                    .with_initializer(Initializer::XavierUniform { gain: 1.0 })
                    .init(device)
            }),
            dropout: DropoutConfig::new(s.dropout).init(),
            d_model: s.d_model,
            positions: s.positions,
            causal: s.causal,
        })
    }
}

/// Every attention weight of a teacher-forced pass ([`Transformer::inspect`]), per layer,
/// bottom first.
#[derive(Debug, Clone)]
pub struct TransformerAttention {
    /// Encoder self-attention `[batch, heads, src, src]`.
    pub encoder_self: Vec<Tensor<4>>,
    /// Decoder (causal) self-attention `[batch, heads, tgt, tgt]`.
    pub decoder_self: Vec<Tensor<4>>,
    /// Cross-attention `[batch, heads, tgt, src]`.
    pub cross: Vec<Tensor<4>>,
}

/// The additive key mask `[batch, 1, 1, src]`: 0 on real tokens, −∞ on padding.
fn key_mask(src: &Source) -> Tensor<4> {
    let [b, s] = src.key_mask.dims();
    src.key_mask.clone().reshape([b, 1, 1, s])
}

/// The additive causal mask `[1, 1, t, t]`: −∞ where the key lies after the query.
fn causal_mask(t: usize, device: &Device) -> Tensor<4> {
    ops::constant("causal_mask", &[t], device, || {
        let v: Vec<f32> =
            (0..t).flat_map(|i| (0..t).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 })).collect();
        Tensor::from_data(TensorData::new(v, [1, 1, t, t]), device)
    })
}

impl Transformer {
    fn src_embedding(&self) -> &Embedding {
        self.src_embed.as_ref().unwrap_or(&self.tgt_embed)
    }

    /// `Dropout(√d · E[ids] + PE(start..))`, `[batch, t, d_model]` (without `PE` when
    /// positions are off).
    fn embed(&self, embedding: &Embedding, ids: Tensor<2, Int>, start: usize) -> Tensor<3> {
        let [_, t] = ids.dims();
        let device = ids.device();
        let x = embedding.forward(ids) * (self.d_model as f32).sqrt();
        if !self.positions {
            return ops::dropout(&self.dropout, x);
        }
        ops::dropout(&self.dropout, x + sinusoids(start, t, self.d_model, &device).unsqueeze_dim::<3>(0))
    }

    /// The encoder memory `[batch, src, d_model]` and its key mask.
    pub fn memory(&self, src: &Source) -> (Tensor<3>, Tensor<4>) {
        let (memory, mask, _) = self.encode_layers(src);
        (memory, mask)
    }

    /// The encoder: the memory, its key mask, and every layer's self-attention weights
    /// `[batch, heads, src, src]`, bottom first.
    fn encode_layers(&self, src: &Source) -> (Tensor<3>, Tensor<4>, Vec<Tensor<4>>) {
        let mask = key_mask(src);
        let mut x = self.embed(self.src_embedding(), src.ids.clone(), 0);
        let mut weights = Vec::with_capacity(self.encoder.len());
        for layer in &self.encoder {
            let (y, w) = layer.forward(x, &mask);
            x = y;
            weights.push(w);
        }
        if let Some(n) = &self.encoder_norm {
            x = ops::layer_norm(n, x);
        }
        (x, mask, weights)
    }

    /// Logits `[batch, t, vocab]` of the decoder's top layer.
    fn project(&self, x: Tensor<3>) -> Tensor<3> {
        let x = match &self.decoder_norm {
            Some(n) => ops::layer_norm(n, x),
            None => x,
        };
        match &self.output {
            Some(o) => ops::linear(o, x),
            None => ops::matmul_rows(x, self.tgt_embed.weight.val().transpose()), // E: [V, d]
        }
    }

    /// Teacher-forced logits and the cross-attention of every decoder layer
    /// (`[batch, heads, tgt, src]` each), for reports that show heads and layers.
    pub fn forward_all(&self, src: &Source, tgt_in: Tensor<2, Int>) -> (Tensor<3>, Vec<Tensor<4>>) {
        let (memory, memory_mask) = self.memory(src);
        let (logits, _, cross) = self.decode_layers(memory, &memory_mask, tgt_in);
        (logits, cross)
    }

    /// The teacher-forced decoder over the encoder `memory`: the logits `[batch, tgt, vocab]`,
    /// and every layer's self- and cross-attention weights (`[batch, heads, tgt, tgt]`,
    /// `[batch, heads, tgt, src]`), bottom first.
    fn decode_layers(
        &self,
        memory: Tensor<3>,
        memory_mask: &Tensor<4>,
        tgt_in: Tensor<2, Int>,
    ) -> (Tensor<3>, Vec<Tensor<4>>, Vec<Tensor<4>>) {
        let t = tgt_in.dims()[1];
        let causal = self.causal.then(|| causal_mask(t, &memory.device()));
        let mut x = self.embed(&self.tgt_embed, tgt_in, 0);
        let (mut self_weights, mut cross_weights) = (Vec::new(), Vec::new());
        for layer in &self.decoder {
            let kv = layer.cross_attention.memory(memory.clone());
            let out = layer.forward(x, None, causal.as_ref(), &kv, memory_mask, None);
            x = out.output;
            self_weights.push(out.self_weights);
            cross_weights.push(out.cross_weights);
        }
        (self.project(x), self_weights, cross_weights)
    }

    /// Teacher-forced logits `[batch, tgt, vocab]` and every attention weight of every layer
    /// and head (`[batch, heads, queries, keys]` each), for showing what the model looks at:
    /// [`Transformer::forward`] keeping the weights of every layer.
    pub fn inspect(&self, src: &Source, tgt_in: Tensor<2, Int>) -> (Tensor<3>, TransformerAttention) {
        let (memory, memory_mask, encoder_self) = self.encode_layers(src);
        let (logits, decoder_self, cross) = self.decode_layers(memory, &memory_mask, tgt_in);
        (logits, TransformerAttention { encoder_self, decoder_self, cross })
    }

    /// Teacher-forced logits; attention = the last layer's cross-attention averaged over heads.
    pub fn forward(&self, src: &Source, tgt_in: Tensor<2, Int>) -> Forward {
        let (logits, weights) = self.forward_all(src, tgt_in);
        let attention = weights.last().map(|w| w.clone().mean_dim(1).squeeze_dim::<3>(1));
        Forward { logits, attention }
    }

    /// Encodes and precomputes every layer's cross-attention keys and values.
    pub fn encode(&self, src: &Source) -> TransformerState {
        let (memory, memory_mask) = self.memory(src);
        TransformerState {
            memory: self.decoder.iter().map(|l| l.cross_attention.memory(memory.clone())).collect(),
            cache: vec![None; self.decoder.len()],
            memory_mask,
            position: 0,
            rows: ops::SourceRows::new(src.batch(), &src.ids.device()),
        }
    }

    /// One step: embeds `last` `[rows]` at the next position, extends every layer's cache.
    pub fn decode_step(&self, state: TransformerState, last: Tensor<1, Int>) -> (Step, TransformerState) {
        let memory_rows = state.rows.sources(&state.memory_mask.device());
        let TransformerState { memory, cache, memory_mask, position, rows } = state;
        let mut x = self.embed(&self.tgt_embed, last.unsqueeze_dim::<2>(1), position); // [N, 1, D]
        let mut next = Vec::with_capacity(cache.len());
        let mut attention = None;
        for ((layer, kv), c) in self.decoder.iter().zip(&memory).zip(cache) {
            let out = layer.forward(x, c, None, kv, &memory_mask, memory_rows.as_ref());
            x = out.output;
            next.push(Some(out.cache));
            attention = Some(out.cross_weights);
        }
        let logits = self.project(x); // [N, 1, V]
        let [n, _, v] = logits.dims();
        let logits = logits.reshape([n, v]);
        let attention = attention.map(|w| {
            let [n, _, _, s] = w.dims();
            w.mean_dim(1).reshape([n, s])
        });
        (
            Step { logits, attention },
            TransformerState { memory, cache: next, memory_mask, position: position + 1, rows },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ModelSpec;
    use crate::config::TransformerSpec;
    use crate::model::Model;

    #[test]
    fn shares_and_ties_embeddings_only_when_it_can() {
        let d = Device::flex();
        let spec =
            ModelSpec::Transformer(TransformerSpec { d_model: 8, heads: 2, ffn: 8, ..Default::default() });
        let Model::Transformer(joint) = spec.init_for(30, 30, true, &d).unwrap() else { panic!() };
        assert!(joint.src_embed.is_none() && joint.output.is_none());
        let Model::Transformer(apart) = spec.init_for(30, 31, false, &d).unwrap() else { panic!() };
        assert!(apart.src_embed.is_some());
        let shared = TransformerSpec { share_embeddings: true, ..Default::default() };
        assert!(
            TransformerConfig { joint: true, ..TransformerConfig::new(30, 31, shared) }.init(&d).is_err()
        );
        let uneven = TransformerSpec { d_model: 10, heads: 4, ..Default::default() };
        assert!(TransformerConfig::new(30, 30, uneven).init(&d).is_err());
    }

    #[test]
    fn masks_have_the_right_zeros_and_infinities() {
        let d = Device::flex();
        let c: Vec<f32> = causal_mask(3, &d).into_data().try_to_vec::<f32>().unwrap();
        let ninf = f32::NEG_INFINITY;
        assert_eq!(c, vec![0.0, ninf, ninf, 0.0, 0.0, ninf, 0.0, 0.0, 0.0]);
        let src = Source::new(&[4, 3, 0], &[2], 3, &d);
        let k: Vec<f32> = key_mask(&src).into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(k, vec![0.0, 0.0, ninf]);
    }

    #[test]
    fn attention_of_every_layer_and_head() {
        let d = Device::flex();
        let small =
            TransformerSpec { d_model: 8, heads: 2, ffn: 8, share_embeddings: false, ..Default::default() };
        let m = TransformerConfig::new(12, 12, small).init(&d).unwrap();
        let src = Source::new(&[4, 5, 3, 6, 3, 0], &[3, 2], 3, &d);
        let tgt = Tensor::<2, Int>::from_data(TensorData::new(vec![2i64, 4, 2, 5], [2, 2]), &d);
        let (logits, weights) = m.forward_all(&src, tgt);
        assert_eq!(logits.dims(), [2, 2, 12]);
        assert_eq!(weights.len(), 3);
        for w in weights {
            assert_eq!(w.dims(), [2, 2, 2, 3]);
            let padded: Vec<f32> = w.narrow(0, 1, 1).narrow(3, 2, 1).into_data().try_to_vec::<f32>().unwrap();
            assert!(padded.iter().all(|&x| x == 0.0));
        }
    }

    /// `inspect` is the same function as `forward_all` (logits and cross-attention equal,
    /// post- and pre-norm), its self-attention rows are distributions that give padding and
    /// later positions nothing.
    #[test]
    fn inspection_equals_the_forward_pass_and_keeps_every_weight() {
        let d = Device::flex();
        for pre_norm in [false, true] {
            let small = TransformerSpec {
                d_model: 8,
                heads: 2,
                ffn: 8,
                pre_norm,
                share_embeddings: false,
                ..Default::default()
            };
            let m = TransformerConfig::new(12, 12, small).init(&d).unwrap();
            let src = Source::new(&[4, 5, 3, 6, 3, 0], &[3, 2], 3, &d);
            let tgt = Tensor::<2, Int>::from_data(TensorData::new(vec![2i64, 4, 7, 2, 5, 8], [2, 3]), &d);
            let (logits, cross) = m.forward_all(&src, tgt.clone());
            let (l2, att) = m.inspect(&src, tgt);
            assert!(crate::test_support::max_diff(logits, l2) < 1e-5, "logits");
            assert_eq!((att.encoder_self.len(), att.decoder_self.len(), att.cross.len()), (3, 3, 3));
            for (a, b) in cross.into_iter().zip(att.cross) {
                assert!(crate::test_support::max_diff(a, b) < 1e-5, "cross-attention");
            }
            let rows = |w: Tensor<4>| w.into_data().try_to_vec::<f32>().unwrap();
            for w in att.encoder_self {
                assert_eq!(w.dims(), [2, 2, 3, 3]);
                let v = rows(w);
                for (r, row) in v.chunks(3).enumerate() {
                    assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
                    if r >= 6 {
                        assert_eq!(row[2], 0.0, "the second sentence's padding gets no weight");
                    }
                }
            }
            for w in att.decoder_self {
                assert_eq!(w.dims(), [2, 2, 3, 3]);
                for (r, row) in rows(w).chunks(3).enumerate() {
                    let q = r % 3;
                    assert!(row[q + 1..].iter().all(|&x| x == 0.0), "causal: {row:?}");
                    assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
                }
            }
        }
    }
}
