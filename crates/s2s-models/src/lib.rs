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
#[cfg(not(feature = "gpu-tuned"))]
pub mod cube_launch;
pub mod deferred_grad;
pub mod dropout;
pub mod fastmath;
pub mod flex_data;
pub mod fused_attention;
pub mod fused_layer_norm;
pub mod fused_lstm;
pub mod fused_softmax;
pub mod fused_tanh;
#[cfg(not(feature = "gpu-tuned"))]
pub mod gpu_attention;
#[cfg(not(feature = "gpu-tuned"))]
pub mod gpu_cat;
#[cfg(not(feature = "gpu-tuned"))]
pub mod gpu_dropout;
#[cfg(not(feature = "gpu-tuned"))]
pub mod gpu_layer_norm;
#[cfg(not(feature = "gpu-tuned"))]
pub mod gpu_lstm_cell;
pub mod gpu_steps;
pub mod interface;
pub mod lockstep;
pub mod lstm;
pub mod model;
pub mod packed_gemm;
pub mod rnn;
#[cfg(not(feature = "gpu-tuned"))]
pub(crate) mod second_output;
pub mod small_matmul;
#[doc(hidden)]
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
pub use interface::{DecodeState, Forward, RnnState, Source, Step};
pub use model::Model;
