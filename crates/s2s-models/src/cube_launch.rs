//! What the cubecl kernels of this workspace share: fresh f32 buffers and the launch grid
//! of one thread per element.

use burn::tensor::{DType, Shape};
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::calculate_cube_count_elemwise;
use cubecl::prelude::{CubeCount, CubeDim};

/// An uninitialised contiguous f32 tensor of `shape` (`[usize; D]` or a `Shape`) on `like`'s
/// device.
pub fn empty(like: &CubeTensor, shape: impl Into<Shape>) -> CubeTensor {
    empty_device_contiguous_dtype(like.client.clone(), like.device.clone(), shape.into(), DType::F32)
}

/// The cube count and size that give `n` threads (at least) on `t`'s device.
pub fn launch_dims(t: &CubeTensor, n: usize) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new(&t.client, n);
    (calculate_cube_count_elemwise(&t.client, n, dim), dim)
}
