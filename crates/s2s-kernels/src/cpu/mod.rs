//! What the CPU kernels share: vectorised `exp`, `σ`, `tanh` and the instruction set they run
//! (`fastmath`), flex tensors' data as slices (`flex_data`), and the threads of a step cut into
//! parts, which help each other's large products (`crew`).
//!
//! Kernel outputs are written once, never zero-filled first (`lstm::cpu`'s `Unzeroed`,
//! `PackedB::product`, `softmax::cpu`'s `fill`, `gemm::flex::matmul_2d`): allocated with
//! capacity and written through raw pointers or `MaybeUninit`, never through a reference to
//! unwritten memory, before `set_len`. Each one's tests start from, or check against, outputs
//! that would show an element left unwritten.

pub mod crew;
pub mod fastmath;
pub mod flex_data;
