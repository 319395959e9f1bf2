//! The references: every operation of [`crate::ops`] as its equation in plain burn tensor
//! operations, calling no kernel of this crate — but attention and the LSTM, whose equations are
//! the models' own (`scaled_dot_product` in the models' `transformer/mha.rs`; the recurrent
//! decoders' scores, masked softmax and context in their `attention/`; `RecurrentCell::step` in
//! `cell.rs` and the padded loop `run_steps` in `rnn.rs`), their fast kernels here returning
//! `None` where none applies. They define what the kernels compute — the tests hold each kernel
//! equal to its reference, values and gradients, on the CPU and on wgpu — and they run whole
//! models under `--kernels reference` (`S2S_KERNELS=reference`).
//!
//! Dropout is the one place where a reference reads something of the kernels': the mask. A
//! reference draws the same seed from the same source and builds the same mask on the host
//! ([`crate::dropout::mask::mask`] on the CPU, the GPU kernels' hash elsewhere), then multiplies, so
//! a model trained on the references draws the masks it would draw on the kernels.
//!
//! Each folder holds its operations' references beside its kernels (`softmax/reference.rs`, …); this module gathers them under one name.

pub use crate::dropout::reference::*;
pub use crate::gemm::reference::*;
pub use crate::gpu::reference::*;
pub use crate::layer_norm::reference::*;
pub use crate::loss::reference::*;
pub use crate::softmax::reference::*;
pub use crate::steps::reference::*;
pub use crate::tanh::reference::*;
