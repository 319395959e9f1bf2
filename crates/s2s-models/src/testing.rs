//! What the tests of this workspace share (the decoding and training tests): not for the
//! CLI's use.

use crate::attention::LuongScore;
use crate::{AttentionRnnSpec, LstmSpec, ModelSpec, TransformerSpec};

/// Tiny models of the four kinds, by name, with `dropout` at every dropout site: a 2-layer
/// LSTM, a bidirectional Bahdanau model, a 2-layer Luong model with the `general` score, and
/// a 2 + 2-layer Transformer of 2 heads.
pub fn tiny_specs(dropout: f64) -> Vec<(&'static str, ModelSpec)> {
    let rnn = AttentionRnnSpec { emb: 8, hidden: 12, dropout, ..Default::default() };
    vec![
        ("lstm", ModelSpec::Lstm(LstmSpec { emb: 8, hidden: 12, layers: 2, dropout, ..Default::default() })),
        ("bahdanau", ModelSpec::Bahdanau(AttentionRnnSpec { bidirectional: true, ..rnn.clone() })),
        ("luong", ModelSpec::Luong(AttentionRnnSpec { layers: 2, score: LuongScore::General, ..rnn })),
        ("transformer", ModelSpec::Transformer(tiny_transformer(dropout))),
    ]
}

/// A 2 + 2-layer Transformer of 2 heads (d_model 8, feed-forward 16), `dropout` at every
/// dropout site.
pub fn tiny_transformer(dropout: f64) -> TransformerSpec {
    TransformerSpec {
        d_model: 8,
        heads: 2,
        ffn: 16,
        enc_layers: 2,
        dec_layers: 2,
        dropout,
        attention_dropout: dropout,
        ..Default::default()
    }
}
