//! The LSTM encoder-decoder of Sutskever, Vinyals & Le (2014): the encoder reads the source
//! into its final state, which is the decoder's initial state — the *only* link between the
//! two (the fixed-vector bottleneck that attention removes).
//!
//! `p(y | x) = Πₜ softmax(W_o sₜ)`, `sₜ = RNN_dec(E y_{t−1}, s_{t−1})`, `s₀ = RNN_enc(x)`.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{Device, Int, Tensor};
use serde::{Deserialize, Serialize};

use crate::cell::{CellKind, CellState};
use crate::interface::{Forward, RnnState, Source, Step, embed_masked};
use crate::rnn::{StackedRnn, StackedRnnConfig};
use s2s_kernels::ops;

/// Hyperparameters of the `lstm` kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LstmSpec {
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
    /// Feed the source reversed.
    pub reverse_source: bool,
    /// Dropout.
    pub dropout: f64,
}

impl Default for LstmSpec {
    fn default() -> Self {
        Self {
            emb: 256,
            hidden: 512,
            layers: 2,
            cell: CellKind::Lstm,
            bidirectional: false,
            reverse_source: false,
            dropout: 0.1,
        }
    }
}

/// Configuration of [`LstmSeq2Seq`]: its vocabularies and its hyperparameters.
#[derive(Debug, Clone)]
pub struct LstmSeq2SeqConfig {
    /// Source vocabulary size.
    pub src_vocab: usize,
    /// Target vocabulary size.
    pub tgt_vocab: usize,
    /// The hyperparameters.
    pub spec: LstmSpec,
}

impl LstmSeq2SeqConfig {
    /// `spec` over vocabularies of these sizes.
    pub fn new(src_vocab: usize, tgt_vocab: usize, spec: LstmSpec) -> Self {
        Self { src_vocab, tgt_vocab, spec }
    }
}

/// The LSTM encoder-decoder.
///
/// # Shapes
/// - source `[batch, src]`, target input `[batch, tgt]` → logits `[batch, tgt, tgt_vocab]`
#[derive(Module, Debug)]
pub struct LstmSeq2Seq {
    /// Source embeddings.
    pub src_embed: Embedding,
    /// Target embeddings.
    pub tgt_embed: Embedding,
    /// Encoder stack.
    pub encoder: StackedRnn,
    /// Decoder stack.
    pub decoder: StackedRnn,
    /// Dropout before the output projection.
    pub dropout: Dropout,
    /// `W_o`: hidden → target vocabulary.
    pub output: Linear,
    /// Reverse the source.
    #[module(skip)]
    pub reverse_source: bool,
}

impl LstmSeq2SeqConfig {
    /// Initialises the model; errors on inconsistent sizes.
    pub fn init(&self, device: &Device) -> Result<LstmSeq2Seq, crate::ModelError> {
        let s = &self.spec;
        let encoder =
            StackedRnnConfig::encoder(s.cell, s.emb, s.hidden, s.layers, s.bidirectional, s.dropout)?;
        Ok(LstmSeq2Seq {
            src_embed: EmbeddingConfig::new(self.src_vocab, s.emb).init(device),
            tgt_embed: EmbeddingConfig::new(self.tgt_vocab, s.emb).init(device),
            encoder: encoder.init(device),
            decoder: StackedRnnConfig::new(s.cell, s.emb, s.hidden)
                .with_layers(s.layers)
                .with_dropout(s.dropout)
                .init(device),
            dropout: DropoutConfig::new(s.dropout).init(),
            output: LinearConfig::new(s.hidden, self.tgt_vocab).init(device),
            reverse_source: s.reverse_source,
        })
    }
}

/// Per-layer decoder initial states from an encoder's final states (ordered layer 0 forward,
/// layer 0 backward, …): a bidirectional encoder's two directions are concatenated.
pub(crate) fn bridge(finals: Vec<CellState>, directions: usize) -> Vec<CellState> {
    if directions == 1 {
        return finals;
    }
    finals
        .chunks(2)
        .map(|pair| CellState {
            h: Tensor::cat(vec![pair[0].h.clone(), pair[1].h.clone()], 1),
            c: match (&pair[0].c, &pair[1].c) {
                (Some(a), Some(b)) => Some(Tensor::cat(vec![a.clone(), b.clone()], 1)),
                _ => None,
            },
        })
        .collect()
}

impl LstmSeq2Seq {
    /// Runs the encoder: (outputs `[batch, src, hidden]`, decoder initial states).
    pub(crate) fn run_encoder(&self, src: &Source) -> (Tensor<3>, Vec<CellState>) {
        let src = if self.reverse_source { src.reversed() } else { src.clone() };
        let x = embed_masked(&self.src_embed, src.ids.clone(), &src.keep); // [B, S, E]
        let (out, finals) = self.encoder.forward(x, &src.keep, src.dense, None);
        (out, bridge(finals, self.encoder.directions()))
    }

    /// Teacher-forced logits.
    pub fn forward(&self, src: &Source, tgt_in: Tensor<2, Int>) -> Forward {
        let (_, init) = self.run_encoder(src);
        let [batch, tgt] = tgt_in.dims();
        let y = self.tgt_embed.forward(tgt_in); // [B, T, E]
        // Target padding comes after every real token and is masked in the loss: run on.
        let keep = Tensor::ones([batch, tgt], &y.device());
        let (h, _) = self.decoder.forward(y, &keep, tgt, Some(init)); // [B, T, H]
        Forward { logits: ops::linear(&self.output, ops::dropout(&self.dropout, h)), attention: None }
    }

    /// The decoder's initial state.
    pub fn encode(&self, src: &Source) -> RnnState {
        let (_, layers) = self.run_encoder(src);
        RnnState { layers, memory: None, keys: None, key_mask: src.key_mask.clone(), feed: None }
    }

    /// One step: `last` `[rows]` → logits `[rows, vocab]`.
    pub fn decode_step(&self, state: RnnState, last: Tensor<1, Int>) -> (Step, RnnState) {
        let e = self.tgt_embed.forward(last.unsqueeze_dim::<2>(1)).squeeze_dim::<2>(1); // [N, E]
        let (top, layers) = self.decoder.step(self.decoder.forward_cells[0].project(e), &state.layers);
        let logits = ops::linear(&self.output, top);
        (Step { logits, attention: None }, RnnState { layers, ..state })
    }
}
