//! Attention: the recurrent decoders' scores and context and the Transformer's multi-head
//! attention (`multi_head`: which path computes the heads), with the fused CPU kernels (`fused`:
//! all heads in one kernel; `step`: one query position per row while decoding), the GPU
//! kernels (`gpu` for the heads, `rnn_gpu` for the recurrent decoders) and the decoder's
//! self-attention cache (`step_cache`).

pub(crate) mod reference;

pub mod fused;
#[cfg(not(feature = "gpu-tuned"))]
pub mod gpu;
pub(crate) mod multi_head;
#[cfg(not(feature = "gpu-tuned"))]
pub mod rnn_gpu;
pub mod step;
pub mod step_cache;
