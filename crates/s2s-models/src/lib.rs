//! # s2s-models: one seq2seq interface over LSTM, attention RNN and Transformer models
//!
//! Every model implements the interface of [`interface`] through [`Model`]: teacher-forced
//! `forward`, `encode`, and an incremental `decode_step` whose [`DecodeState`] can be
//! reordered by row. Shared building blocks: recurrent cells ([`cell`]), stacked
//! (bi)directional RNNs over padded batches ([`rnn`]), attention scores ([`attention`]).
//!
//! The models are written as their equations; every operation with a fast kernel is one call
//! into `s2s_kernels::ops`, which picks the kernel for the device (or the plain-tensor
//! reference under `--kernels reference`). `docs/models.md` maps each concept to its code.

pub mod attention;
pub mod attention_rnn;
pub mod cell;
pub mod config;
pub mod error;
pub mod interface;
pub mod lstm;
pub mod model;
pub mod rnn;
pub mod testing;
pub mod transformer;

/// What the unit tests share.
#[cfg(test)]
pub(crate) mod test_support {
    use burn::tensor::Tensor;

    /// The largest absolute element-wise difference of `a` and `b`.
    pub(crate) fn max_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
        (a - b).abs().max().into_scalar::<f32>()
    }
}

pub use config::{AttentionRnnSpec, LstmSpec, ModelSpec, TransformerSpec};
pub use error::ModelError;
pub use interface::{Forward, RnnState, Source, Step};
pub use model::{AttentionKind, AttentionMap, DecodeState, Model};
