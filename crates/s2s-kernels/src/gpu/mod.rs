//! What the GPU kernels share: launching cubecl kernels on burn's tensors (`launch`), captured
//! steps (`graph`, `step_scalars`), concatenation
//! (`cat`), a second output of a custom backward (`second_output`), and the host's clock
//! (`host_clock`, `launch_probe`).
//!
//! # SPIR-V (the `spirv` feature, opt-in)
//!
//! With burn's `vulkan` feature cubecl compiles its kernels to SPIR-V itself on Vulkan adapters
//! that support it: buffer addresses as push constants instead of a bind group per launch,
//! subgroup operations, cooperative-matrix products where the device has them (WGSL through
//! naga elsewhere; the device line says `wgpu<spirv>`). It is not the default and not tested
//! against flex: cubecl-spirv 0.11.3 emits invalid SPIR-V for cubek's tiled matmul
//! (`MatmulEntry`, the first product of any step), a workgroup variable declared as a pointer
//! to a pointer and indexed as the array. `spirv-val` rejects it and lavapipe segfaults
//! compiling it (Mesa 22.3 and 25.0.7); NVIDIA's driver (580, H200) accepts it and every
//! model's training step gives the WGSL build's loss (`scripts/gpu-session.sh spirv`).
//! f32 products still run on the CUDA cores: cubek's cooperative-matrix routine takes f32 as
//! tf32, which Vulkan does not offer. `scripts/spirv-check.sh` validates each kernel of a
//! step. The fix belongs in cubecl.
//!
//! # cubecl, for whoever writes the next kernel
//!
//! - A mutable loop variable initialised from a Rust `const` (`let mut stride = UNITS / 2`) is
//!   a comptime constant, and mutating it in a runtime loop fails the kernel's verification
//!   ("Expected operand type cube.ptr, but found cube.index"); start it from `CUBE_DIM_X`.
//! - cubecl-wgpu 0.11.3 submits its queued work every 32 tasks (`CUBECL_WGPU_MAX_TASKS`) and,
//!   after 64 buffer writes (`MAX_PENDING_WRITES`), submits and waits for the device, which
//!   stalls the host/GPU overlap a launch-bound loop lives on (`scripts/gpu-session.sh tasks`
//!   sweeps `MAX_TASKS`). The host cost of a launch lies in cubecl's and wgpu's device thread,
//!   not in this crate.

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
