//! Attention's fast kernels: the recurrent decoders' scores and context and the Transformer's
//! multi-head attention (`multi_head`: which path computes the heads), with the fused CPU
//! kernels (`fused`: all heads in one kernel; `step`: one query position per row while
//! decoding), the GPU kernels (`gpu` for the heads, `rnn_gpu` for the recurrent decoders) and
//! the decoder's self-attention cache (`step_cache`). The equations they compute are the
//! models' own (`transformer/mha.rs`; `attention/bahdanau.rs`, `luong.rs` and `mod.rs`), which
//! run under `--kernels reference` and wherever no kernel here applies.

pub mod fused;
#[cfg(not(feature = "gpu-tuned"))]
pub mod gpu;
pub(crate) mod multi_head;
#[cfg(not(feature = "gpu-tuned"))]
pub mod rnn_gpu;
pub mod step;
pub mod step_cache;

use std::fmt::Debug;

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::tensor::FloatTensor;
use burn::backend::{AutodiffBackend, Backend};

use crate::own_backward::WithBackward;

/// One backend's fused multi-head attention (`fused` on flex, `gpu` on cubecl): made from `q`
/// (or `[Q | K | V]`), `[K | V]` for cross-attention, the additive mask, the heads and the
/// dropout `(seed, keep)`; run forward; and backward from the weights `P` its forward made.
pub(crate) trait AttentionCall<B: Backend>: Clone + Send + Debug + Sized + 'static {
    fn new(
        q: FloatTensor<B>,
        kv: Option<FloatTensor<B>>,
        mask: FloatTensor<B>,
        heads: usize,
        scale: f32,
        drop: (u64, f32),
    ) -> Self;

    /// `(output [b, t_q, d_model], weights [b, heads, t_q, t_k])`.
    fn forward(&self) -> (FloatTensor<B>, FloatTensor<B>);

    /// `(∂q, ∂kv)` (`∂kv` `None` for self-attention, whose `∂[Q | K | V]` is the first).
    fn backward(
        &self,
        weights: FloatTensor<B>,
        dy: FloatTensor<B>,
    ) -> (FloatTensor<B>, Option<FloatTensor<B>>);
}

/// A backend with fused multi-head attention kernels (flex, cubecl): on its autodiff wrapper
/// they run with their own backward ([`with_own_backward`]), the call kept as its state.
pub(crate) trait AttentionKernels: Backend {
    /// The kernels' call.
    type Call: AttentionCall<Self>;
}

impl<B: AttentionKernels, C: CheckpointStrategy> fused::FusedAttention for Autodiff<B, C> {
    fn self_attention(
        qkv: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        heads: usize,
        scale: f32,
        drop: (u64, f32),
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        with_own_backward::<B, C, B::Call, 1>([qkv], mask, heads, scale, drop)
    }

    fn cross_attention(
        q: FloatTensor<Self>,
        kv: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        heads: usize,
        scale: f32,
        drop: (u64, f32),
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        with_own_backward::<B, C, B::Call, 2>([q, kv], mask, heads, scale, drop)
    }
}

/// Attention on an autodiff backend, with `A`'s backward: self-attention from `[[Q | K | V]]`
/// or cross-attention from `[q, [K | V]]` → (output, weights). The weights carry no gradient:
/// they are for reports and heatmaps.
pub(crate) fn with_own_backward<B, C, A, const N: usize>(
    inputs: [FloatTensor<Autodiff<B, C>>; N],
    mask: FloatTensor<Autodiff<B, C>>,
    heads: usize,
    scale: f32,
    drop: (u64, f32),
) -> (FloatTensor<Autodiff<B, C>>, FloatTensor<Autodiff<B, C>>)
where
    B: Backend,
    C: CheckpointStrategy,
    A: AttentionCall<B>,
{
    let mask = mask.into_primitive();
    let mut weights = None;
    let out = <Autodiff<B, C>>::with_backward(
        inputs,
        |operands, keep| {
            let mut operands = operands.into_iter();
            let q = operands.next().expect("q, or [Q | K | V]");
            let call = A::new(q, operands.next(), mask, heads, scale, drop);
            let (out, w) = call.forward();
            weights = Some(w.clone());
            // The call (its operands) and the weights `P`.
            (out, keep.then(|| (call, w)))
        },
        |(call, weights): (A, FloatTensor<B>), dy, _| {
            let (gq, gkv) = call.backward(weights, dy);
            let mut gradients = [Some(gq), gkv].into_iter();
            std::array::from_fn(|_| gradients.next().flatten())
        },
    );
    (out, <Autodiff<B, C> as AutodiffBackend>::from_inner(weights.expect("the forward ran")))
}
