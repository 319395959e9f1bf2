//! The user-facing model specification (TOML/JSON, tagged by `kind`), strict about unknown
//! keys, and how it becomes a [`Model`]. Each kind's hyperparameters and their defaults are
//! defined once, beside its model ([`LstmSpec`], [`AttentionRnnSpec`], [`TransformerSpec`]);
//! each model's config is its vocabularies plus that spec.

use burn::module::Module;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};

pub use crate::attention_rnn::AttentionRnnSpec;
use crate::attention_rnn::{AttentionRnnConfig, AttentionStyle};
use crate::lstm::LstmSeq2SeqConfig;
pub use crate::lstm::LstmSpec;
use crate::model::Model;
use crate::transformer::TransformerConfig;
pub use crate::transformer::TransformerSpec;

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

    /// The kind's name (`lstm`, `bahdanau`, `luong`, `transformer`).
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
            ModelSpec::Lstm(s) => {
                LstmSeq2SeqConfig::new(src_vocab, tgt_vocab, s.clone()).init(device).map(Model::Lstm)
            }
            ModelSpec::Bahdanau(s) => attention(s, AttentionStyle::Bahdanau, src_vocab, tgt_vocab, device),
            ModelSpec::Luong(s) => attention(s, AttentionStyle::Luong, src_vocab, tgt_vocab, device),
            ModelSpec::Transformer(s) => TransformerConfig {
                joint: joint && src_vocab == tgt_vocab,
                ..TransformerConfig::new(src_vocab, tgt_vocab, s.clone())
            }
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
    AttentionRnnConfig::new(src_vocab, tgt_vocab, style, s.clone()).init(device).map(Model::AttentionRnn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::LuongScore;

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
