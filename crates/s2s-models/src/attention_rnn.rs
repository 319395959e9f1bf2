//! Attention RNN encoder-decoders: RNNsearch (Bahdanau, Cho & Bengio, 2015) and global
//! attention (Luong, Pham & Manning, 2015), on the shared recurrent cells.
//!
//! **Bahdanau** (`attention = "bahdanau"`): attend with the *previous* state,
//! `cₜ = Σᵢ αₜᵢ hᵢ`, `αₜ = softmax(vᵀ tanh(W₁hᵢ + W₂s_{t−1}))`; the context enters the
//! decoder input, `sₜ = RNN([E y_{t−1}; cₜ], s_{t−1})`; deep output
//! `p(yₜ) = softmax(W_o [sₜ; cₜ; E y_{t−1}])` (eq. 4 and A.2.2, without the maxout).
//!
//! **Luong** (`attention = "luong"`): attend with the *current* state,
//! `sₜ = RNN([E y_{t−1}; h̃_{t−1}], s_{t−1})` (input feeding; `E y_{t−1}` alone without it),
//! `cₜ` from the chosen score on `sₜ`, attentional state `h̃ₜ = tanh(W_c [cₜ; sₜ])` (eq. 5),
//! `p(yₜ) = softmax(W_s h̃ₜ)` (eq. 6).
//!
//! The encoder is bidirectional by default (`hidden / 2` per direction, concatenated), and
//! its per-layer final states start the decoder. Keys are projected once per sentence.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{Device, Int, Tensor};
use serde::{Deserialize, Serialize};

use crate::attention::{AdditiveAttentionConfig, Attention, LuongAttentionConfig, LuongScore};
use crate::cell::CellKind;
use crate::interface::{Forward, RnnState, Source, Step, embed_masked};
use crate::lstm::bridge;
use crate::rnn::{StackedRnn, StackedRnnConfig};
use s2s_kernels::ops;
use s2s_kernels::ops::tanh;
use s2s_kernels::ops::{defer_grad, for_steps};

/// Which attention mechanism (and decoder wiring) the model uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionStyle {
    /// Additive score on the previous state; context in the decoder input (RNNsearch).
    Bahdanau,
    /// Score on the current state; attentional hidden state; optional input feeding.
    Luong,
}

/// Hyperparameters of the `bahdanau` and `luong` kinds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AttentionRnnSpec {
    /// Embedding size.
    pub emb: usize,
    /// Hidden size (a bidirectional encoder uses half per direction).
    pub hidden: usize,
    /// Layers of encoder and of decoder.
    pub layers: usize,
    /// `lstm`, `gru` or `rnn`.
    pub cell: CellKind,
    /// Bidirectional encoder.
    pub bidirectional: bool,
    /// Luong score: `dot`, `general`, `concat` or `low-rank` (Luong only).
    pub score: LuongScore,
    /// Luong input feeding.
    pub input_feeding: bool,
    /// Hidden size of additive/concat score networks (0: `hidden`).
    pub attention_dim: usize,
    /// Rank of the `low-rank` score.
    pub rank: usize,
    /// Dropout.
    pub dropout: f64,
}

impl Default for AttentionRnnSpec {
    fn default() -> Self {
        Self {
            emb: 256,
            hidden: 512,
            layers: 1,
            cell: CellKind::Lstm,
            bidirectional: true,
            score: LuongScore::General,
            input_feeding: true,
            attention_dim: 0,
            rank: 64,
            dropout: 0.1,
        }
    }
}

/// Configuration of [`AttentionRnn`]: its vocabularies, its wiring and its hyperparameters.
#[derive(Debug, Clone)]
pub struct AttentionRnnConfig {
    /// Source vocabulary size.
    pub src_vocab: usize,
    /// Target vocabulary size.
    pub tgt_vocab: usize,
    /// Bahdanau or Luong wiring.
    pub attention: AttentionStyle,
    /// The hyperparameters (`score` is Luong's only).
    pub spec: AttentionRnnSpec,
}

impl AttentionRnnConfig {
    /// `spec` wired as `attention` over vocabularies of these sizes.
    pub fn new(
        src_vocab: usize,
        tgt_vocab: usize,
        attention: AttentionStyle,
        spec: AttentionRnnSpec,
    ) -> Self {
        Self { src_vocab, tgt_vocab, attention, spec }
    }
}

/// An attention RNN encoder-decoder (see the module doc for both wirings).
///
/// # Shapes
/// - source `[batch, src]`, target input `[batch, tgt]` → logits `[batch, tgt, tgt_vocab]`,
///   attention `[batch, tgt, src]`
#[derive(Module, Debug)]
pub struct AttentionRnn {
    /// Source embeddings.
    pub src_embed: Embedding,
    /// Target embeddings.
    pub tgt_embed: Embedding,
    /// Encoder stack.
    pub encoder: StackedRnn,
    /// Decoder stack; layer 0's input is `[E y; cₜ]` (Bahdanau), `[E y; h̃]` or `E y` (Luong).
    pub decoder: StackedRnn,
    /// The score function.
    pub attention: Attention,
    /// Luong's `W_c` (attentional hidden state); absent for Bahdanau.
    pub combine: Option<Linear>,
    /// Dropout on the decoder output.
    pub dropout: Dropout,
    /// Output projection: `W_o` on `[sₜ; cₜ; E y]` (Bahdanau) or `W_s` on `h̃ₜ` (Luong).
    pub output: Linear,
    /// Wiring.
    #[module(skip)]
    pub style: AttentionStyle,
    /// Luong input feeding.
    #[module(skip)]
    pub input_feeding: bool,
    /// Embedding size.
    #[module(skip)]
    pub emb: usize,
}

impl AttentionRnnConfig {
    /// Initialises the model; errors on inconsistent sizes.
    pub fn init(&self, device: &Device) -> Result<AttentionRnn, crate::ModelError> {
        let s = &self.spec;
        let encoder =
            StackedRnnConfig::encoder(s.cell, s.emb, s.hidden, s.layers, s.bidirectional, s.dropout)?;
        let h = s.hidden;
        let d_att = if s.attention_dim == 0 { h } else { s.attention_dim };
        let feeds = self.attention == AttentionStyle::Bahdanau || s.input_feeding;
        let dec_input = s.emb + if feeds { h } else { 0 };
        let attention = match self.attention {
            AttentionStyle::Bahdanau => {
                Attention::Bahdanau(AdditiveAttentionConfig::new(h, h, d_att).init(device))
            }
            AttentionStyle::Luong => Attention::Luong(
                LuongAttentionConfig::new(s.score, h, h)
                    .with_d_attention(d_att)
                    .with_rank(s.rank)
                    .init(device)?,
            ),
        };
        let (combine, d_out) = match self.attention {
            AttentionStyle::Bahdanau => (None, 2 * h + s.emb),
            AttentionStyle::Luong => (Some(LinearConfig::new(2 * h, h).init(device)), h),
        };
        Ok(AttentionRnn {
            src_embed: EmbeddingConfig::new(self.src_vocab, s.emb).init(device),
            tgt_embed: EmbeddingConfig::new(self.tgt_vocab, s.emb).init(device),
            encoder: encoder.init(device),
            decoder: StackedRnnConfig::new(s.cell, dec_input, h)
                .with_layers(s.layers)
                .with_dropout(s.dropout)
                .init(device),
            attention,
            combine,
            dropout: DropoutConfig::new(s.dropout).init(),
            output: LinearConfig::new(d_out, self.tgt_vocab).init(device),
            style: self.attention,
            input_feeding: s.input_feeding,
            emb: s.emb,
        })
    }
}

/// Layer 0's input projection of the concatenation `[E y_{t−1}; x]`, by parts:
/// `[E y; x] W = E y W_e + x W_x`, where `ey = E y_{t−1} W_e + b` is computed for every step at
/// once and `w_x` holds the rows of `W` that multiply `x` (the context or `h̃_{t−1}`).
struct ConcatProjection<'w> {
    ey: Tensor<2>,
    w_x: Option<&'w Tensor<2>>,
}

impl ConcatProjection<'_> {
    /// `[E y_{t−1}; x] W + b`, as `ey + x W_x` (one product added to `ey`).
    fn project(self, x: Tensor<2>) -> Tensor<2> {
        ops::add_matmul(self.ey, x, self.w_x.expect("the input has a fed part").clone())
    }
}

/// What one decoder step produces before the output projection.
struct StepOut {
    /// What the output layer reads, but for Bahdanau's embedding: `[sₜ, cₜ]` (Bahdanau, whose
    /// output layer reads `[sₜ; cₜ; E y_{t−1}]`) or `[h̃ₜ]` (Luong).
    readout: Vec<Tensor<2>>,
    /// Attention weights `[rows, src]`.
    weights: Tensor<2>,
}

impl AttentionRnn {
    /// Encodes and prepares the decoder state (keys projected once).
    pub fn encode(&self, src: &Source) -> RnnState {
        self.encode_state(src)
    }

    fn encode_state(&self, src: &Source) -> RnnState {
        let x = embed_masked(&self.src_embed, src.ids.clone(), &src.keep); // [B, S, E]
        let (memory, finals) = self.encoder.forward(x, &src.keep, src.dense, None); // [B, S, H]
        let keys = self.attention.keys(memory.clone());
        let batch = src.batch();
        let feed = (self.style == AttentionStyle::Luong && self.input_feeding)
            .then(|| Tensor::zeros([batch, self.decoder.d_hidden()], &memory.device()));
        RnnState {
            layers: bridge(finals, self.encoder.directions()),
            memory: Some(memory),
            keys: Some(keys),
            key_mask: src.key_mask.clone(),
            feed,
        }
    }

    /// The rows of layer 0's input weight that multiply the context (Bahdanau) or `h̃`
    /// (Luong with input feeding) part of its input, `[H, G·H]`; `None` when the input is the
    /// embedding alone.
    fn feed_weight(&self) -> Option<Tensor<2>> {
        let cell0 = &self.decoder.forward_cells[0];
        let rows = cell0.w_input.dims()[0];
        (rows > self.emb).then(|| cell0.input_rows(self.emb, rows - self.emb))
    }

    /// One decoder step. `xe` is layer 0's projection of `E y_{t−1}` (bias included) and
    /// `feed_w` the [`Self::feed_weight`]: together the decoder's input, [`ConcatProjection`].
    fn step(&self, xe: Tensor<2>, feed_w: Option<&Tensor<2>>, state: &mut RnnState) -> StepOut {
        let memory = state.memory.as_ref().expect("attention state has memory");
        let keys = state.keys.as_ref().expect("attention state has keys");
        let input = ConcatProjection { ey: xe, w_x: feed_w };
        match self.style {
            AttentionStyle::Bahdanau => {
                // cₜ from s_{t−1}; sₜ = RNN([E y_{t−1}; cₜ], s_{t−1})
                let query = state.layers.last().expect("decoder layers").h.clone();
                let (ctx, weights) = self.attention.attend(query, keys, memory, &state.key_mask); // [N, H], [N, S]
                let (s, layers) = self.decoder.step(input.project(ctx.clone()), &state.layers);
                state.layers = layers;
                StepOut { readout: vec![s, ctx], weights }
            }
            AttentionStyle::Luong => {
                // sₜ = RNN([E y_{t−1}; h̃_{t−1}], s_{t−1}) (E y_{t−1} alone without input feeding)
                let input = match &state.feed {
                    Some(h_tilde) => input.project(h_tilde.clone()),
                    None => input.ey,
                };
                let (s, layers) = self.decoder.step(input, &state.layers);
                state.layers = layers;
                // cₜ from sₜ; h̃ₜ = tanh(W_c [cₜ; sₜ])
                let (ctx, weights) = self.attention.attend(s.clone(), keys, memory, &state.key_mask);
                let combine = self.combine.as_ref().expect("Luong has W_c");
                let h_tilde = tanh(ops::linear(combine, ops::cat_columns(vec![ctx, s]))); // [N, H]
                if state.feed.is_some() {
                    state.feed = Some(h_tilde.clone());
                }
                StepOut { readout: vec![h_tilde], weights }
            }
        }
    }

    /// What every teacher-forced step reads and no step changes, each read through the kernels'
    /// step-invariant handles: the decoder, the attention and `W_c`, whose weight gradients are
    /// summed over the steps in one product each (`ops::for_steps`), and the encoder's memory
    /// and keys and layer 0's fed weight, whose gradients are summed once after the last step
    /// (`ops::defer_grad`), not added step by step. Returns the model the steps run, their
    /// state and the fed weight.
    fn step_reads(&self, mut state: RnnState) -> (AttentionRnn, RnnState, Option<Tensor<2>>) {
        state.memory = state.memory.map(defer_grad);
        state.keys = state.keys.map(defer_grad);
        let stepper = AttentionRnn {
            decoder: for_steps(&self.decoder),
            attention: for_steps(&self.attention),
            combine: self.combine.as_ref().map(for_steps),
            ..self.clone()
        };
        (stepper, state, self.feed_weight().map(defer_grad))
    }

    /// Teacher-forced logits and attention weights.
    pub fn forward(&self, src: &Source, tgt_in: Tensor<2, Int>) -> Forward {
        let (stepper, mut state, feed_w) = self.step_reads(self.encode_state(src));
        let y = self.tgt_embed.forward(tgt_in); // [B, T, E]
        // Layer 0's projection of every step's `E y_{t−1}` in one product (bias included).
        let ye = self.decoder.forward_cells[0].project_first(y.clone()); // [B, T, G·H]
        // The decoder over the target, step by step (`Self::step`): the readout's parts, then
        // the weights, `[B, T, ·]` each.
        let mut parts = ops::unroll(ye, |xe| {
            let out = stepper.step(xe, feed_w.as_ref(), &mut state);
            out.readout.into_iter().chain([out.weights]).collect()
        });
        let weights = parts.pop().expect("the weights");
        if self.style == AttentionStyle::Bahdanau {
            parts.push(y);
        }
        let readout = ops::cat_features(parts); // [B, T, d_out]
        let logits = ops::linear(&self.output, ops::dropout(&self.dropout, readout));
        Forward { logits, attention: Some(weights) }
    }

    /// One incremental step.
    pub fn decode_step(&self, mut state: RnnState, last: Tensor<1, Int>) -> (Step, RnnState) {
        let e = self.tgt_embed.forward(last.unsqueeze_dim::<2>(1)).squeeze_dim::<2>(1); // [N, E]
        let cell0 = &self.decoder.forward_cells[0];
        let xe = cell0.project_first(e.clone()); // [N, G·H]
        let out = self.step(xe, self.feed_weight().as_ref(), &mut state);
        let mut parts = out.readout;
        if self.style == AttentionStyle::Bahdanau {
            parts.push(e);
        }
        let logits = ops::linear(&self.output, ops::cat_columns(parts));
        (Step { logits, attention: Some(out.weights) }, state)
    }
}
