//! Products of 2-D f32 flex tensors through the `gemm` crate: what the CPU kernels call for
//! their large products (training's input projections and weight gradients).
//!
//! [`matmul_2d`] calls `gemm` as burn does (the same threading threshold) but allocates the
//! result once and writes it before `set_len`: burn-flex 0.22's `FlexTensor::empty` zero-fills
//! a byte vector and then copies it into an aligned allocation, which cost ~15 ms of a 62 ms
//! `[1536, 512] × [512, 8000]` product. [`crate::gemm::small`] sends its products above 256
//! rows and its weight gradients here, and the LSTM layer's `∂W_h` and the deferred weight
//! gradients ([`crate::gemm::deferred_grad`]) use it too.
//!
//! The large products stay `gemm`'s: a cache-blocked GEMM of our own (packed `A` and `B`, a
//! 6×16 AVX2 register block) was equal on `[1536, 256] × [256, 8000]`, 1.2–1.3× faster on
//! `[1536, 256] × [256, 768 or 1024]` and 0.7–0.85× on the transposed backward products.

use burn::backend::flex::FlexTensor;
use burn::tensor::TensorData;

use crate::cpu::flex_data::f32s;

/// `C = A B` through `gemm`: `C` row-major (`[m, n]`, row stride `ldc`), `A` (`[m, k]`) and
/// `B` (`[k, n]`) each a first element with its row and column strides.
///
/// # Safety
/// `c` has room for `[m, n]` at `ldc` and nothing else touches it meanwhile; `a` and `b` hold
/// their matrices at the strides given.
pub(crate) unsafe fn gemm_into(
    [m, n, k]: [usize; 3],
    c: *mut f32,
    ldc: usize,
    (a, a_rs, a_cs): (*const f32, usize, usize),
    (b, b_rs, b_cs): (*const f32, usize, usize),
    parallelism: gemm::Parallelism,
) {
    // `dst = alpha·dst + beta·A·B` with `read_dst` false: `C` is written, never read.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            1,
            ldc as isize,
            false,
            a,
            a_cs as isize,
            a_rs as isize,
            b,
            b_cs as isize,
            b_rs as isize,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            parallelism,
        )
    };
}

/// `A B` for 2-D f32 flex tensors through `gemm` with its own threads (from burn's
/// threshold, 192³ multiply-adds, up), as burn's `float_matmul` does, but with the result
/// allocated once. burn-flex 0.22 creates a product's output with `FlexTensor::empty`, which
/// zero-fills a byte vector and then copies it into a 16-byte-aligned allocation: two
/// allocations, a memset and a memcpy per product, and for the large ones fresh pages
/// faulted in twice (in `perf`, ~7 % of the lstm bench's time went to those faults).
pub fn matmul_2d(a: &FlexTensor, b: &FlexTensor) -> FlexTensor {
    let [m, k] = a.layout().shape().dims::<2>();
    let [k2, n] = b.layout().shape().dims::<2>();
    assert_eq!(k, k2, "matmul_2d: [m, k] × [k, n] shapes disagree");
    if m == 0 || n == 0 || k == 0 {
        return FlexTensor::from_data(TensorData::new(vec![0f32; m * n], [m, n]));
    }
    let ((a, a_rs, a_cs), (b, b_rs, b_cs)) = (strided(a), strided(b));
    assert!(
        a.len() > (m - 1) * a_rs + (k - 1) * a_cs && b.len() > (k - 1) * b_rs + (n - 1) * b_cs,
        "matmul_2d: operands too short"
    );
    let parallelism =
        if m * n * k >= 192 * 192 * 192 { gemm::Parallelism::Rayon(0) } else { gemm::Parallelism::None };
    let mut out: Vec<f32> = Vec::with_capacity(m * n);
    // SAFETY: `out` has room for `[m, n]` row-major, which `gemm` (not reading it: `read_dst`
    // false) writes completely; the operands hold `[m, k]` and `[k, n]` at the strides given
    // (asserted above).
    unsafe {
        gemm_into(
            [m, n, k],
            out.as_mut_ptr(),
            n,
            (a.as_ptr(), a_rs, a_cs),
            (b.as_ptr(), b_rs, b_cs),
            parallelism,
        );
        out.set_len(m * n);
    }
    FlexTensor::from_data(TensorData::new(out, [m, n]))
}

/// A 2-D flex tensor's f32 elements from its first one, and its row and column strides: the
/// storage itself when the strides are non-negative (a transposed or narrowed weight is
/// read in place), else a row-major copy.
pub(crate) fn strided(t: &FlexTensor) -> (std::borrow::Cow<'_, [f32]>, usize, usize) {
    let layout = t.layout();
    let [_, cols] = layout.shape().dims::<2>();
    match layout.strides() {
        &[rs, cs] if rs >= 0 && cs >= 0 && t.dtype() == burn::tensor::DType::F32 => {
            (t.storage::<f32>()[layout.start_offset()..].into(), rs as usize, cs as usize)
        }
        _ => (f32s(t), cols, 1),
    }
}
