//! The label-smoothed cross-entropy: the fused CPU kernel (`cpu`) and the loss summed on the
//! device between read-backs (`sum`).

pub(crate) mod reference;

pub(crate) mod cpu;
pub mod sum;
