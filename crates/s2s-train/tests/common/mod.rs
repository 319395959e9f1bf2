//! Helpers shared by the training tests.

use std::path::Path;

use s2s_data::{Level, TokenizerConfig};
use s2s_models::{ModelSpec, TransformerSpec};
use s2s_train::TrainSpec;
use s2s_train::run::{DataSpec, RunConfig};

/// `model` trained as `train` says on 400 built-in pairs of up to 12 words, word-level: the
/// small run the training tests share.
pub fn small_run(model: ModelSpec, train: TrainSpec) -> RunConfig {
    RunConfig {
        data: DataSpec::Builtin { pairs: 400, seed: 3, max_tokens: 12 },
        tokenizer: TokenizerConfig {
            level: Level::Word,
            vocab_size: 0,
            joint: false,
            min_freq: 1,
            ..Default::default()
        },
        model,
        train,
    }
}

/// A Transformer of width 16, one layer each side.
#[allow(dead_code)] // (not every test file that includes this module trains one)
pub fn tiny_transformer(dropout: f64) -> ModelSpec {
    ModelSpec::Transformer(TransformerSpec {
        d_model: 16,
        heads: 2,
        ffn: 32,
        enc_layers: 1,
        dec_layers: 1,
        dropout,
        attention_dropout: dropout,
        ..Default::default()
    })
}

/// The tensor bytes of `dir`'s last checkpoint: its burnpack file after the header, which
/// carries per-run metadata.
#[allow(dead_code)] // (not every test file that includes this module reads weights)
pub fn last_weights(dir: &Path) -> Vec<u8> {
    let last = s2s_train::checkpoint::Checkpoints::new(dir).pointed("last").expect("pointer").expect("last");
    let w = std::fs::read(last.join("model.bpk")).expect("weights");
    let header = u32::from_le_bytes(w[6..10].try_into().expect("burnpack header")) as usize;
    w[10 + header..].to_vec()
}
