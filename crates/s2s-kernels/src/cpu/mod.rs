//! What the CPU kernels share: vectorised `exp`, `σ`, `tanh` and the instruction set they run
//! (`fastmath`), and flex tensors' data as slices (`flex_data`).

pub mod fastmath;
pub mod flex_data;
