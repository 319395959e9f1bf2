//! # s2s-kernels: the fast kernels behind the models' operations
//!
//! The models call [`ops`] and nothing else of this crate: one function per operation (linear
//! layers, the LSTM step and layer, attention scores and context, multi-head attention,
//! softmax, `tanh`, layer norm, dropout, the loss, Adam, clipping …). Each picks what runs for
//! the tensor's device, or its plain-tensor [`reference`] when [`mode`] says so
//! (`--kernels reference`, `S2S_KERNELS=reference`). The crate knows no model type.
//!
//! Behind [`ops`], one folder per operation, each with its reference (`reference.rs`), its CPU
//! kernel (on burn's flex backend) and its GPU kernel (cubecl, for wgpu): [`lstm`], `attention` (the recurrent decoders' and
//! the Transformer's multi-head attention), [`softmax`], `layer_norm`, `dropout`, [`loss`],
//! [`optimizer`], `tanh`; and what they share: matrix products ([`gemm`]), the CPU's vector
//! math ([`cpu`]) and GPU launches, captured steps and timing ([`gpu`]).
//! Only what other crates call is public: [`ops`], [`mode`], [`reference`], the captured steps
//! and timing in [`gpu`], and what the benchmarks and tests reach directly.
//! `docs/kernels.md` says why each exists, what it replaces and how it is tested.

pub mod mode;
pub mod ops;
pub mod reference;

pub(crate) mod attention;
pub mod cpu;
pub(crate) mod dropout;
pub mod gemm;
pub mod gpu;
pub(crate) mod layer_norm;
pub mod loss;
pub mod lstm;
pub mod optimizer;
pub(crate) mod own_backward;
pub mod softmax;
pub(crate) mod tanh;

#[doc(hidden)]
pub mod testing;

pub use mode::Kernels;

/// What the unit tests share.
#[cfg(test)]
pub(crate) mod test_support {
    use burn::tensor::Tensor;

    /// The largest absolute element-wise difference of `a` and `b`.
    pub(crate) fn max_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
        (a - b).abs().max().into_scalar::<f32>()
    }
}
