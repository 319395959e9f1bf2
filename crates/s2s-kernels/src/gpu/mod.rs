//! What the GPU kernels share: launching cubecl kernels on burn's tensors (`launch`), captured
//! steps (`graph`, `step_scalars`), the steps' slices and stacks (`steps`), concatenation
//! (`cat`), a second output of a custom backward (`second_output`), and the host's clock
//! (`host_clock`, `launch_probe`).

pub(crate) mod reference;

#[cfg(not(feature = "gpu-tuned"))]
pub(crate) mod cat;
pub mod graph;
pub mod host_clock;
#[cfg(not(feature = "gpu-tuned"))]
pub(crate) mod launch;
#[cfg(not(feature = "gpu-tuned"))]
pub mod launch_probe;
#[cfg(not(feature = "gpu-tuned"))]
pub(crate) mod second_output;
pub mod step_scalars;
pub(crate) mod steps;
