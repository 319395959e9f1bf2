//! What the fused CPU kernels share: which devices run them, and reading a flex tensor's data.

use std::borrow::Cow;

use burn::backend::flex::FlexTensor;
use burn::tensor::{DType, Device};

/// True when `device` (autodiff or not) runs on flex, where the fused kernels
/// ([`crate::lstm::cpu`], [`crate::tanh`], [`crate::dropout`], and the loss in
/// `s2s-train`) replace the composed tensor operations.
pub fn is_flex(device: &Device) -> bool {
    *device == Device::flex()
}

/// `t` itself when its f32 elements are contiguous (a shared handle, no copy), else a
/// contiguous copy: read it with `as_slice::<f32>()`.
pub fn contiguous(t: &FlexTensor) -> FlexTensor {
    assert_eq!(t.dtype(), DType::F32, "the fused CPU kernels compute in f32");
    if t.is_contiguous() { t.clone() } else { t.to_contiguous() }
}

/// A flex tensor's f32 elements in row-major order (copied only when not contiguous).
pub fn f32s(t: &FlexTensor) -> Cow<'_, [f32]> {
    assert_eq!(t.dtype(), DType::F32, "the fused CPU kernels compute in f32");
    match t.as_slice::<f32>() {
        Some(s) => s.into(),
        None => t.to_contiguous().as_slice::<f32>().expect("contiguous f32").to_vec().into(),
    }
}
