//! Layer normalisation: the fused CPU kernel (`cpu`) and the GPU kernels (`gpu`).

pub mod cpu;
#[cfg(not(feature = "gpu-tuned"))]
pub mod gpu;
