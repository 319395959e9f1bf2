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

    /// Checks every size and rate of the spec before anything is built: each size at least 1,
    /// each dropout in `[0, 1)`, a bidirectional encoder's hidden size even, the Transformer's
    /// heads dividing `d_model`. Each error names its key ([`crate::ModelError::field`]).
    pub fn validate(&self) -> Result<(), crate::ModelError> {
        use crate::ModelError;
        let positive = |sizes: &[(&'static str, usize)]| match sizes.iter().find(|(_, v)| *v == 0) {
            Some(&(name, _)) => Err(ModelError::Zero { name }),
            None => Ok(()),
        };
        let probability = |name: &'static str, value: f64| {
            if (0.0..1.0).contains(&value) { Ok(()) } else { Err(ModelError::Probability { name, value }) }
        };
        let bidirectional = |on: bool, hidden: usize| {
            if on && hidden % 2 != 0 { Err(ModelError::OddBidirectional(hidden)) } else { Ok(()) }
        };
        match self {
            ModelSpec::Lstm(s) => {
                positive(&[("emb", s.emb), ("hidden", s.hidden), ("layers", s.layers)])?;
                probability("dropout", s.dropout)?;
                bidirectional(s.bidirectional, s.hidden)
            }
            ModelSpec::Bahdanau(s) | ModelSpec::Luong(s) => {
                positive(&[("emb", s.emb), ("hidden", s.hidden), ("layers", s.layers)])?;
                if matches!(self, ModelSpec::Luong(_)) && s.score == crate::attention::LuongScore::LowRank {
                    positive(&[("rank", s.rank)])?;
                }
                probability("dropout", s.dropout)?;
                bidirectional(s.bidirectional, s.hidden)
            }
            ModelSpec::Transformer(s) => {
                positive(&[
                    ("d_model", s.d_model),
                    ("heads", s.heads),
                    ("ffn", s.ffn),
                    ("enc_layers", s.enc_layers),
                    ("dec_layers", s.dec_layers),
                ])?;
                if !s.d_model.is_multiple_of(s.heads) {
                    return Err(ModelError::Heads { heads: s.heads, d_model: s.d_model });
                }
                probability("dropout", s.dropout)?;
                probability("attention_dropout", s.attention_dropout)
            }
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
        self.validate()?;
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

    /// Every size of every kind at 0 is an error naming it (a 0 used to panic while the
    /// model was built: an index out of bounds for 0 layers, empty products for the others).
    #[test]
    fn zero_sizes_are_named() {
        let d = Device::flex();
        let lstm = |f: fn(&mut LstmSpec)| {
            let mut s = LstmSpec::default();
            f(&mut s);
            ModelSpec::Lstm(s)
        };
        let rnn = |f: fn(&mut AttentionRnnSpec)| {
            let mut s = AttentionRnnSpec::default();
            f(&mut s);
            (ModelSpec::Bahdanau(s.clone()), ModelSpec::Luong(s))
        };
        let tf = |f: fn(&mut TransformerSpec)| {
            let mut s = TransformerSpec::default();
            f(&mut s);
            ModelSpec::Transformer(s)
        };
        let mut cases = vec![
            (lstm(|s| s.emb = 0), "emb"),
            (lstm(|s| s.hidden = 0), "hidden"),
            (lstm(|s| s.layers = 0), "layers"),
            (tf(|s| s.d_model = 0), "d_model"),
            (tf(|s| s.heads = 0), "heads"),
            (tf(|s| s.ffn = 0), "ffn"),
            (tf(|s| s.enc_layers = 0), "enc_layers"),
            (tf(|s| s.dec_layers = 0), "dec_layers"),
        ];
        for (f, name) in [
            ((|s: &mut AttentionRnnSpec| s.emb = 0) as fn(&mut AttentionRnnSpec), "emb"),
            (|s: &mut AttentionRnnSpec| s.hidden = 0, "hidden"),
            (|s: &mut AttentionRnnSpec| s.layers = 0, "layers"),
        ] {
            let (b, l) = rnn(f);
            cases.push((b, name));
            cases.push((l, name));
        }
        for (spec, name) in cases {
            let e = spec.validate().unwrap_err();
            assert_eq!(e, crate::ModelError::Zero { name }, "{spec:?}");
            assert_eq!(e.field(), Some(name));
            assert_eq!(e.to_string(), format!("{name} must be at least 1, got 0"));
            assert_eq!(spec.init(10, 10, &d).unwrap_err(), e, "init checks first");
        }
        // The low-rank score's rank, Luong only; a Bahdanau model has no score to rank.
        let (bahdanau, luong) = rnn(|s| (s.score, s.rank) = (crate::attention::LuongScore::LowRank, 0));
        assert_eq!(luong.validate().unwrap_err().field(), Some("rank"));
        assert!(bahdanau.validate().is_ok());
    }

    #[test]
    fn rates_and_shapes_are_named() {
        let tf = |f: fn(&mut TransformerSpec)| {
            let mut s = TransformerSpec::default();
            f(&mut s);
            ModelSpec::Transformer(s).validate().unwrap_err()
        };
        assert_eq!(tf(|s| s.heads = 3), crate::ModelError::Heads { heads: 3, d_model: 256 });
        assert_eq!(tf(|s| s.dropout = 1.0).field(), Some("dropout"));
        assert_eq!(tf(|s| s.attention_dropout = f64::NAN).field(), Some("attention_dropout"));
        assert_eq!(tf(|s| s.dropout = -0.1).field(), Some("dropout"));
        let odd = ModelSpec::Lstm(LstmSpec { bidirectional: true, hidden: 7, ..Default::default() });
        assert_eq!(odd.validate().unwrap_err(), crate::ModelError::OddBidirectional(7));
        for kind in s2s_models_defaults() {
            assert!(kind.validate().is_ok(), "{kind:?}");
        }
    }

    fn s2s_models_defaults() -> Vec<ModelSpec> {
        vec![
            ModelSpec::Lstm(LstmSpec::default()),
            ModelSpec::Bahdanau(AttentionRnnSpec::default()),
            ModelSpec::Luong(AttentionRnnSpec::default()),
            ModelSpec::Transformer(TransformerSpec::default()),
        ]
    }

    #[test]
    fn unknown_key_is_named() {
        let e = serde_json::from_str::<ModelSpec>(r#"{"kind": "lstm", "hiden": 3}"#).unwrap_err().to_string();
        assert!(e.contains("hiden"), "{e}");
        let e = serde_json::from_str::<ModelSpec>(r#"{"kind": "gpt"}"#).unwrap_err().to_string();
        assert!(e.contains("gpt"), "{e}");
    }
}
