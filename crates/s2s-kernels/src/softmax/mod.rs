//! Softmax, log-softmax and the best tokens of each row: the fused CPU kernels (`cpu`), greedy
//! search's best token on a GPU (`gpu`) and beam search's top-k on the CPU (`top_k`).

pub(crate) mod reference;

pub(crate) mod cpu;
#[cfg(not(feature = "gpu-tuned"))]
pub(crate) mod gpu;
pub mod top_k;

use burn::backend::{Dispatch, backend_extension, tensor::FloatTensor};
use burn::tensor::Tensor;

/// Each row's best entry and its log-probability as a burn backend extension (flex, and
/// cubecl without fusion; decoding).
#[backend_extension(Flex, Cube: cfg(not(feature = "gpu-tuned")))]
pub trait BestLogProb: burn::backend::Backend {
    /// `[rows, 2]`: the index of each row's largest score (the first of equals, as a float:
    /// exact below 2²⁴) and `log_softmax` at it.
    fn best_log_prob(logits: FloatTensor<Self>) -> FloatTensor<Self>;
}

/// Each row's best token (the first of equal scores, as f32: ids are exact below 2²⁴) and its
/// log-probability, `[rows, 2]`, left on the device: one pass per row on flex, one launch on
/// a GPU ([`gpu`]; greedy search's step otherwise launched `log_softmax`'s six kernels, an
/// argmax, a cast and a concatenation). Without autodiff, on flex or a cubecl device without
/// fusion: [`crate::ops::best_log_prob_pairs`] picks it, the reference elsewhere.
pub fn best_log_prob_pairs(logits: Tensor<2>) -> Tensor<2> {
    Tensor::<2>::from_dispatch(<Dispatch as BestLogProb>::best_log_prob(logits.into_dispatch()))
}
