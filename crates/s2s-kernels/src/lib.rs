//! # s2s-kernels: the fast kernels behind the models' operations
//!
//! The models call [`ops`] and nothing else of this crate: one function per operation (linear
//! layers, the LSTM step and layer, attention scores and context, multi-head attention,
//! softmax, `tanh`, layer norm, dropout, the loss, Adam, clipping …). Each picks what runs for
//! the tensor's device, or its plain-tensor [`reference`] when [`mode`] says so
//! (`--kernels reference`, `S2S_KERNELS=reference`). The crate knows no model type.
//!
//! Behind [`ops`]: fused CPU kernels on burn's flex backend (`fused_*`, [`packed_gemm`],
//! [`small_matmul`], [`lockstep`], [`fastmath`]), cubecl kernels for wgpu (`gpu_*`,
//! [`cube_launch`], [`second_output`]), and custom autodiff nodes ([`deferred_grad`]).
//! `docs/kernels.md` says why each exists, what it replaces and how it is tested.

pub mod mode;
pub mod ops;
pub mod reference;

pub mod attention_step;
pub mod clip;
#[cfg(not(feature = "gpu-tuned"))]
pub mod cube_launch;
pub mod deferred_grad;
pub mod dropout;
pub mod dropout_mask;
pub mod fastmath;
pub mod flex_data;
pub mod flex_gemm;
pub mod fused_adam;
pub mod fused_attention;
pub mod fused_layer_norm;
pub mod fused_loss;
pub mod fused_lstm;
pub mod fused_softmax;
pub mod fused_tanh;
#[cfg(not(feature = "gpu-tuned"))]
pub mod gpu_attend;
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
pub mod graph;
pub mod host_clock;
#[cfg(not(feature = "gpu-tuned"))]
pub mod launch_probe;
pub mod lockstep;
pub mod loss_sum;
mod multi_head;
pub mod packed_gemm;
#[cfg(not(feature = "gpu-tuned"))]
pub(crate) mod second_output;
pub mod small_matmul;
pub mod step_cache;
pub mod step_scalars;
#[doc(hidden)]
pub mod testing;
pub mod top_k;

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
