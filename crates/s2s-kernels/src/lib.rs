//! # s2s-kernels: the fast kernels behind the models' operations
//!
//! The models call [`ops`] and nothing else of this crate: one function per operation (linear
//! layers, the LSTM step and layer, attention scores and context, multi-head attention,
//! softmax, `tanh`, layer norm, dropout, the loss, Adam, clipping …). Each picks what runs for
//! the tensor's device, or its plain-tensor [`reference`] when [`mode`] says so
//! (`--kernels reference`, `S2S_KERNELS=reference`). The crate knows no model type. The LSTM
//! and multi-head attention keep their equations in the models; here they have only fast
//! kernels, reached by name (`ops::fast_lstm_step`, `ops::fast_attention`, …), which return
//! `None` where none applies.
//!
//! Behind [`ops`], one folder per operation, each with its reference (`reference.rs`; not
//! `lstm`), its CPU kernel (on burn's flex backend) and its GPU kernel (cubecl, for wgpu):
//! `lstm`, `attention` (the recurrent decoders' and the Transformer's multi-head attention), `softmax`,
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
pub(crate) mod device;
pub(crate) mod dropout;
pub(crate) mod gemm;
pub(crate) mod gpu;
pub(crate) mod layer_norm;
pub(crate) mod loss;
pub(crate) mod lstm;
pub(crate) mod optimizer;
pub(crate) mod own_backward;
pub(crate) mod softmax;
pub(crate) mod steps;
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
    pub use crate::gemm::probe::{ProductRate, ProductShape, product_probe, step_shapes, table_entries};
    pub use crate::gemm::table::{self as products, Kernel, Operand};
    pub use crate::gpu::host_clock::{HostTime, Snapshot};
    #[cfg(not(feature = "gpu-tuned"))]
    pub use crate::gpu::launch_probe::{ProbeConfig, launch_probe};
    pub use crate::lstm::cpu::lstm_layer;
}

/// int8 quantization as the decoding products use it (`--quantize int8`; `gemm::int8`): what
/// an int8 checkpoint stores and the product it runs.
pub mod quantize {
    pub use crate::gemm::int8::{
        Kernel, PackedI8, QuantRows, dequantize_matrix, kernel, kernel_for, quantize_matrix,
        reference_product,
    };
    pub use crate::mode::{Quantize, quantize, set_quantize, with_quantize};
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

    /// The LSTM cell's equations in burn's operations, what the gate kernels are held to (the
    /// models' own is `RecurrentCell::step` in `cell.rs`): from the pre-activation gates
    /// `[i f g o]` `[batch, 4·hidden]` and `c`, `c' = σ(f)⊙c + σ(i)⊙tanh(g)`,
    /// `h' = σ(o)⊙tanh(c')` → `(h', c')`.
    pub(crate) fn lstm_gates_equation(gates: Tensor<2>, c: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
        use burn::tensor::activation::{sigmoid, tanh};
        let h = c.dims()[1];
        let gate = |k: usize| gates.clone().narrow(1, k * h, h);
        let (i, f, g, o) = (sigmoid(gate(0)), sigmoid(gate(1)), tanh(gate(2)), sigmoid(gate(3)));
        let c = f * c + i * g;
        (o * tanh(c.clone()), c)
    }
}
