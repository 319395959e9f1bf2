//! The LSTM: the cell's gate math and the whole layer, on the CPU (`cpu`, with its threads in
//! lockstep, `lockstep`) and on a GPU (`gpu`).

pub(crate) mod reference;

pub mod cpu;
#[cfg(not(feature = "gpu-tuned"))]
pub(crate) mod gpu;
pub(crate) mod lockstep;
