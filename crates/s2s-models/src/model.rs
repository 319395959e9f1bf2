//! [`Model`]: one value over every model kind, so the training loop, the decoders and the CLI
//! hold a `Model` and never branch on the kind.

use burn::module::Module;
use burn::tensor::{Int, Tensor};

use crate::attention_rnn::AttentionRnn;
use crate::interface::{Forward, RnnState, Source, Step};
use crate::lstm::LstmSeq2Seq;
use crate::transformer::{Transformer, TransformerState};

/// Any seq2seq model of the toolkit.
#[derive(Module, Debug)]
pub enum Model {
    /// Sutskever-style LSTM encoder-decoder (no attention).
    Lstm(LstmSeq2Seq),
    /// Bahdanau or Luong attention RNN.
    AttentionRnn(AttentionRnn),
    /// Transformer encoder-decoder.
    Transformer(Transformer),
}

impl Model {
    /// Teacher-forced logits `[batch, tgt, vocab]` (and attention when the model has it).
    pub fn forward(&self, src: &Source, tgt_in: Tensor<2, Int>) -> Forward {
        match self {
            Model::Lstm(m) => m.forward(src, tgt_in),
            Model::AttentionRnn(m) => m.forward(src, tgt_in),
            Model::Transformer(m) => m.forward(src, tgt_in),
        }
    }

    /// Teacher-forced logits `[batch, tgt, vocab]` and every attention map the model has, for
    /// showing (the same function as [`Model::forward`]): a recurrent model's cross-attention
    /// as one map of one head; every layer and head of the Transformer's encoder
    /// self-attention, decoder self-attention and cross-attention.
    pub fn inspect(&self, src: &Source, tgt_in: Tensor<2, Int>) -> (Tensor<3>, Vec<AttentionMap>) {
        match self {
            Model::Transformer(m) => {
                let (logits, att) = m.inspect(src, tgt_in);
                let maps = [
                    (AttentionKind::Cross, att.cross),
                    (AttentionKind::DecoderSelf, att.decoder_self),
                    (AttentionKind::EncoderSelf, att.encoder_self),
                ]
                .into_iter()
                .flat_map(|(kind, layers)| {
                    layers.into_iter().enumerate().map(move |(layer, weights)| AttentionMap {
                        kind,
                        layer,
                        weights,
                    })
                })
                .collect();
                (logits, maps)
            }
            _ => {
                let f = self.forward(src, tgt_in);
                let maps = f
                    .attention
                    .map(|w| AttentionMap {
                        kind: AttentionKind::Cross,
                        layer: 0,
                        weights: w.unsqueeze_dim::<4>(1),
                    })
                    .into_iter()
                    .collect();
                (f.logits, maps)
            }
        }
    }

    /// Encodes the source into the decoder's initial state.
    pub fn encode(&self, src: &Source) -> DecodeState {
        match self {
            Model::Lstm(m) => DecodeState::Rnn(m.encode(src)),
            Model::AttentionRnn(m) => DecodeState::Rnn(m.encode(src)),
            Model::Transformer(m) => DecodeState::Transformer(m.encode(src)),
        }
    }

    /// One incremental step from the previous tokens `last` `[rows]`.
    ///
    /// # Panics
    /// When `state` was made by another kind of model (a programming error, not bad input).
    pub fn decode_step(&self, state: DecodeState, last: Tensor<1, Int>) -> (Step, DecodeState) {
        match (self, state) {
            (Model::Lstm(m), DecodeState::Rnn(s)) => {
                let (step, s) = m.decode_step(s, last);
                (step, DecodeState::Rnn(s))
            }
            (Model::AttentionRnn(m), DecodeState::Rnn(s)) => {
                let (step, s) = m.decode_step(s, last);
                (step, DecodeState::Rnn(s))
            }
            (Model::Transformer(m), DecodeState::Transformer(s)) => {
                let (step, s) = m.decode_step(s, last);
                (step, DecodeState::Transformer(s))
            }
            _ => panic!("decode_step: the state was made by another kind of model"),
        }
    }
}

/// Which attention an [`AttentionMap`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKind {
    /// Target positions over source positions.
    Cross,
    /// Target positions over the target prefix (causal).
    DecoderSelf,
    /// Source positions over source positions.
    EncoderSelf,
}

/// One layer's attention weights from [`Model::inspect`].
///
/// # Shapes
/// - `weights`: `[batch, heads, queries, keys]`
#[derive(Debug, Clone)]
pub struct AttentionMap {
    /// Which attention.
    pub kind: AttentionKind,
    /// Layer, bottom first (0 for a recurrent model).
    pub layer: usize,
    /// The weights.
    pub weights: Tensor<4>,
}

/// The decoder's state between incremental steps, for every model kind.
#[derive(Debug, Clone)]
pub enum DecodeState {
    /// Recurrent decoders.
    Rnn(RnnState),
    /// The Transformer's per-layer key/value caches.
    Transformer(TransformerState),
}

impl DecodeState {
    /// Rows in the state.
    pub fn rows(&self) -> usize {
        match self {
            DecodeState::Rnn(s) => s.key_mask.dims()[0],
            DecodeState::Transformer(s) => s.rows(),
        }
    }
}
