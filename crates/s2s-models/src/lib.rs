//! # s2s-models: one seq2seq interface over LSTM, attention RNN and Transformer models
//!
//! Every model implements the interface of [`interface`] through [`Model`]: teacher-forced
//! `forward`, `encode`, and an incremental `decode_step` whose [`DecodeState`] can be
//! reordered by row. Shared building blocks: recurrent cells ([`cell`]), stacked
//! (bi)directional RNNs over padded batches ([`rnn`]), attention scores ([`attention`]).

pub mod attention;
pub mod attention_rnn;
pub mod cell;
pub mod config;
pub mod dropout;
pub mod fastmath;
pub mod flex_data;
pub mod fused_lstm;
pub mod fused_tanh;
pub mod interface;
pub mod lstm;
pub mod model;
pub mod packed_gemm;
pub mod rnn;
pub mod small_matmul;
pub mod transformer;

pub use config::{AttentionRnnSpec, LstmSpec, ModelSpec, TransformerSpec};
pub use interface::{DecodeState, Forward, RnnState, Source, Step};
pub use model::Model;
