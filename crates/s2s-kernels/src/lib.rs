//! # s2s-kernels: the fast kernels behind the models' operations
//!
//! The models call [`ops`] and nothing else of this crate: one function per operation (linear
//! layers, the LSTM step and layer, attention scores and context, multi-head attention,
//! softmax, `tanh`, layer norm, dropout, the loss, Adam, clipping …). Each picks what runs for
//! the tensor's device, or its plain-tensor [`reference`] when [`mode`] says so
//! (`--kernels reference`, `S2S_KERNELS=reference`). The crate knows no model type.
//!
//! Behind [`ops`], one folder per operation, each with its reference (`reference.rs`), its CPU
//! kernel (on burn's flex backend) and its GPU kernel (cubecl, for wgpu): `lstm`, `attention`
//! (the recurrent decoders' and the Transformer's multi-head attention), `softmax`,
//! `layer_norm`, `dropout`, `loss`, `optimizer`, `tanh`; and what they share: matrix products
//! (`gemm`), the CPU's vector math (`cpu`) and GPU launches, captured steps and timing (`gpu`).
//! Only what other crates call is public: [`ops`], [`mode`] and [`reference`]; [`capture`], the
//! few calls a captured GPU step needs beyond its operations; [`Crew`], which the CPU's
//! split steps run their parts under; and [`bench`], the entry points the benchmarks time
//! directly.
//! `docs/kernels.md` says why each exists, what it replaces and how it is tested.

pub mod mode;
pub mod ops;
pub mod reference;

/// The threads of a CPU step cut into parts (`s2s_train::core_split`): each runs its part as
/// a member, and a member whose part has finished helps the others' large products.
pub use crate::cpu::crew::Crew;

pub(crate) mod attention;
pub(crate) mod cpu;
pub(crate) mod dropout;
pub(crate) mod gemm;
pub(crate) mod gpu;
pub(crate) mod layer_norm;
pub(crate) mod loss;
pub(crate) mod lstm;
pub(crate) mod optimizer;
pub(crate) mod own_backward;
pub(crate) mod softmax;
pub(crate) mod tanh;

/// What a captured step needs beyond its operations: recording and replaying it
/// (`gpu::graph`), writing a new batch into its inputs, keeping its scalars and its loss on the
/// device. The trainer's and the searches' captured steps call these; see
/// `docs/decisions.md`, "Captured steps".
pub mod capture {
    pub use crate::gpu::graph::{
        GraphError, Recorder, StepGraph, device_bytes_reserved, grow_largest_pool, write_floats, write_ids,
    };
    pub use crate::gpu::step_scalars::require_in_place;
    pub use crate::loss::sum::LossSum;
}

/// What `s2s bench` times directly rather than through a model: the CPU's products and LSTM
/// layer beside the machine's best product rate (`s2s bench --lstm-step`), the host's CPU time
/// per thread, and the cost of one GPU launch (`s2s bench --launch-probe`).
pub mod bench {
    pub use crate::gemm::flex::matmul_2d;
    pub use crate::gemm::packed::PackedB;
    pub use crate::gemm::probe::{ProductRate, ProductShape, product_probe, step_shapes};
    pub use crate::gpu::host_clock::{HostTime, Snapshot};
    #[cfg(not(feature = "gpu-tuned"))]
    pub use crate::gpu::launch_probe::{ProbeConfig, launch_probe};
    pub use crate::lstm::cpu::lstm_layer;
}

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
