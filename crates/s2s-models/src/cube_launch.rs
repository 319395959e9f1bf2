//! What the cubecl kernels of this workspace share: fresh f32 buffers, buffers a kernel may
//! write in place, and the launch grid of one thread per element.

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

/// `t` contiguous in a buffer of its own (itself when it already is, else a copy), so a
/// kernel may write it in place.
pub fn exclusive(t: CubeTensor) -> CubeTensor {
    let t = burn_cubecl::kernel::into_contiguous(t);
    if t.can_mut() && t.is_contiguous_buffer() { t } else { t.copy() }
}

/// The cube count and size that give `n` threads (at least) on `t`'s device.
pub fn launch_dims(t: &CubeTensor, n: usize) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new(&t.client, n);
    (calculate_cube_count_elemwise(&t.client, n, dim), dim)
}
