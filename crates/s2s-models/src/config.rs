//! The user-facing model specification (TOML/JSON, tagged by `kind`), strict about unknown
//! keys, and how it becomes a [`Model`].

use burn::module::Module;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use crate::attention::LuongScore;
use crate::attention_rnn::{AttentionRnnConfig, AttentionStyle};
use crate::cell::CellKind;
use crate::lstm::LstmSeq2SeqConfig;
use crate::model::Model;
use crate::transformer::TransformerConfig;

/// A model kind and its hyperparameters; vocabulary sizes come from the run's tokenizers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ModelSpec {
    /// LSTM encoder-decoder without attention.
    Lstm(LstmSpec),
    /// RNNsearch: additive attention on the previous state.
    Bahdanau(AttentionRnnSpec),
    /// Luong global attention on the current state.
    Luong(AttentionRnnSpec),
    /// Transformer encoder-decoder.
    Transformer(TransformerSpec),
}

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

impl ModelSpec {
    /// The teaching ablations this model turns on (switches that are off by default and break
    /// what the model is for), each said as a warning.
    pub fn ablations(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if let ModelSpec::Transformer(t) = self {
            if !t.positions {
                v.push("positions = false: the Transformer cannot see word order");
            }
            if !t.causal {
                v.push("causal = false: training reads the token it must predict; decoding cannot");
            }
            if !t.scaled {
                v.push("scaled = false: attention scores are not divided by √d_k and saturate the softmax");
            }
        }
        v
    }

    /// The kind's name (`lstm`, `bahdanau`, `luong`).
    pub fn kind(&self) -> &'static str {
        match self {
            ModelSpec::Lstm(_) => "lstm",
            ModelSpec::Bahdanau(_) => "bahdanau",
            ModelSpec::Luong(_) => "luong",
            ModelSpec::Transformer(_) => "transformer",
        }
    }

    /// Builds the model for the given vocabulary sizes on `device` (separate vocabularies).
    pub fn init(
        &self,
        src_vocab: usize,
        tgt_vocab: usize,
        device: &Device,
    ) -> Result<Model, crate::ModelError> {
        self.init_for(src_vocab, tgt_vocab, false, device)
    }

    /// Builds the model; `joint` says both sides use one vocabulary, which lets a Transformer
    /// share its embeddings.
    ///
    /// Every parameter is drawn here, not lazily at first use, so the weights depend only on
    /// the device's seed at this call (not on what else draws random numbers before the first
    /// forward pass).
    pub fn init_for(
        &self,
        src_vocab: usize,
        tgt_vocab: usize,
        joint: bool,
        device: &Device,
    ) -> Result<Model, crate::ModelError> {
        let model = self.init_lazy(src_vocab, tgt_vocab, joint, device)?;
        model.visit(&mut Materialize);
        Ok(model)
    }

    /// The model with every parameter still undrawn (burn draws a parameter at its first
    /// use): for loading a checkpoint, which replaces every parameter, so drawing them first
    /// would be wasted (up to half of a short `s2s translate`). Use [`ModelSpec::init_for`]
    /// for weights to train.
    pub fn init_lazy(
        &self,
        src_vocab: usize,
        tgt_vocab: usize,
        joint: bool,
        device: &Device,
    ) -> Result<Model, crate::ModelError> {
        match self {
            ModelSpec::Lstm(s) => LstmSeq2SeqConfig::new(src_vocab, tgt_vocab)
                .with_emb(s.emb)
                .with_hidden(s.hidden)
                .with_layers(s.layers)
                .with_cell(s.cell)
                .with_bidirectional(s.bidirectional)
                .with_reverse_source(s.reverse_source)
                .with_dropout(s.dropout)
                .init(device)
                .map(Model::Lstm),
            ModelSpec::Bahdanau(s) => attention(s, AttentionStyle::Bahdanau, src_vocab, tgt_vocab, device),
            ModelSpec::Luong(s) => attention(s, AttentionStyle::Luong, src_vocab, tgt_vocab, device),
            ModelSpec::Transformer(s) => TransformerConfig::new(src_vocab, tgt_vocab)
                .with_d_model(s.d_model)
                .with_heads(s.heads)
                .with_d_ff(s.ffn)
                .with_encoder_layers(s.enc_layers)
                .with_decoder_layers(s.dec_layers)
                .with_dropout(s.dropout)
                .with_attention_dropout(s.attention_dropout)
                .with_pre_norm(s.pre_norm)
                .with_tie_output(s.tie_output)
                .with_share_embeddings(s.share_embeddings && joint && src_vocab == tgt_vocab)
                .with_positions(s.positions)
                .with_causal(s.causal)
                .with_scaled(s.scaled)
                .init(device)
                .map(Model::Transformer),
        }
    }
}

/// Draws every lazily initialised parameter.
struct Materialize;

impl burn::module::ModuleVisitor for Materialize {
    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<burn::tensor::Tensor<D>>) {
        let _ = param.val();
    }
}

fn attention(
    s: &AttentionRnnSpec,
    style: AttentionStyle,
    src_vocab: usize,
    tgt_vocab: usize,
    device: &Device,
) -> Result<Model, crate::ModelError> {
    AttentionRnnConfig::new(src_vocab, tgt_vocab, style)
        .with_score(s.score)
        .with_emb(s.emb)
        .with_hidden(s.hidden)
        .with_layers(s.layers)
        .with_cell(s.cell)
        .with_bidirectional(s.bidirectional)
        .with_input_feeding(s.input_feeding)
        .with_attention_dim(s.attention_dim)
        .with_rank(s.rank)
        .with_dropout(s.dropout)
        .init(device)
        .map(Model::AttentionRnn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kind_and_defaults() {
        let s: ModelSpec =
            serde_json::from_str(r#"{"kind": "luong", "score": "low-rank", "rank": 8}"#).unwrap();
        match s {
            ModelSpec::Luong(a) => {
                assert_eq!(a.score, LuongScore::LowRank);
                assert_eq!(a.rank, 8);
                assert_eq!(a.hidden, 512);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_sizes_are_errors_not_panics() {
        let d = Device::flex();
        let lstm = ModelSpec::Lstm(LstmSpec { dropout: 1.5, ..Default::default() });
        assert!(lstm.init(10, 10, &d).unwrap_err().to_string().contains("dropout"));
        let odd = ModelSpec::Bahdanau(AttentionRnnSpec { hidden: 7, ..Default::default() });
        assert!(odd.init(10, 10, &d).unwrap_err().to_string().contains("even hidden size"));
    }

    #[test]
    fn unknown_key_is_named() {
        let e = serde_json::from_str::<ModelSpec>(r#"{"kind": "lstm", "hiden": 3}"#).unwrap_err().to_string();
        assert!(e.contains("hiden"), "{e}");
        let e = serde_json::from_str::<ModelSpec>(r#"{"kind": "gpt"}"#).unwrap_err().to_string();
        assert!(e.contains("gpt"), "{e}");
    }
}
