//! Softmax, log-softmax and the best tokens of each row: the fused CPU kernels (`cpu`) and the
//! device top-k of beam search (`top_k`).

pub(crate) mod reference;

pub(crate) mod cpu;
pub mod top_k;
