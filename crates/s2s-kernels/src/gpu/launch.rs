//! What the cubecl kernels of this workspace share: fresh f32 buffers, buffers a kernel may
//! write in place, the launch grid of one thread per element, and for kernels over a
//! `Sequence` of tensors their size, argument and grid, and the tensors out of burn's
//! dispatch type.

#[cfg(not(feature = "gpu-tuned"))]
use burn::backend::{BackendTensor, DispatchAutodiffContext, DispatchTensor, DispatchTensorKind};
use burn::tensor::{DType, Shape};
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::calculate_cube_count_elemwise;
use cubecl::prelude::{CubeCount, CubeDim, SequenceArg};

/// An uninitialised contiguous f32 tensor of `shape` (`[usize; D]` or a `Shape`) on `like`'s
/// device.
pub fn empty(like: &CubeTensor, shape: impl Into<Shape>) -> CubeTensor {
    empty_device_contiguous_dtype(like.client.clone(), like.device.clone(), shape.into(), DType::F32)
}

/// `t` contiguous and held alone (itself when it already is, else a copy), so a kernel may
/// write it in place.
pub fn exclusive(t: CubeTensor) -> CubeTensor {
    let t = burn_cubecl::kernel::into_contiguous(t);
    // Contiguous is enough: a kernel's buffer argument covers the tensor's elements, whatever
    // padding the allocator gave its handle (a 12-float parameter sits in a larger slot, which
    // `is_contiguous_buffer` refuses: it was copied at every step, and a captured step would
    // have kept updating the first copy).
    if t.can_mut() && t.is_contiguous() { t } else { t.copy() }
}

/// The cube count and size that give `n` threads (at least) on `t`'s device.
pub fn launch_dims(t: &CubeTensor, n: usize) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new(&t.client, n);
    (calculate_cube_count_elemwise(&t.client, n, dim), dim)
}

/// Tensors a launch for a kernel over a `Sequence` of buffers, `each` buffers a tensor: what
/// the device binds to one kernel, less a margin for the runtime's and the kernel's other
/// bindings, and at most `cap` (such kernels unroll a loop over the sequence).
pub fn per_launch(like: &CubeTensor, each: usize, cap: usize) -> usize {
    let bindings = like.client.properties().hardware.max_bindings as usize;
    (bindings.saturating_sub(4) / each.max(1)).clamp(1, cap.max(1))
}

/// `ts`' buffers as a kernel's `Sequence<Box<[f32]>>` argument.
pub fn buffers<'a>(ts: impl IntoIterator<Item = &'a CubeTensor>) -> SequenceArg<Box<[f32]>> {
    let mut seq = SequenceArg::new();
    for t in ts {
        seq.push(t.clone().into_buffer_arg());
    }
    seq
}

/// The grid of a kernel whose threads stride over tensors of at most `largest` elements:
/// the cube count and size, and the stride (the thread count, at most 2¹⁸).
pub fn strided(like: &CubeTensor, largest: usize) -> (CubeCount, CubeDim, u32) {
    let stride = largest.clamp(1, 1 << 18);
    let (count, dim) = launch_dims(like, stride);
    (count, dim, stride as u32)
}

/// The cubecl tensor inside a burn dispatch tensor, or the dispatch tensor back where it holds
/// none (flex). For code that hands many tensors to one kernel: burn's `backend_extension`
/// does not route `Vec` arguments.
#[cfg(not(feature = "gpu-tuned"))]
pub fn cube_of(t: DispatchTensor) -> Result<CubeTensor, DispatchTensor> {
    match t.kind {
        DispatchTensorKind::Cube(BackendTensor::Float(c)) => Ok(c),
        kind => Err(DispatchTensor { kind, autodiff: t.autodiff }),
    }
}

/// A burn dispatch tensor holding `t`, outside autodiff.
#[cfg(not(feature = "gpu-tuned"))]
pub fn dispatch_of(t: CubeTensor) -> DispatchTensor {
    DispatchTensor {
        kind: DispatchTensorKind::Cube(BackendTensor::Float(t)),
        autodiff: DispatchAutodiffContext::Disabled,
    }
}
