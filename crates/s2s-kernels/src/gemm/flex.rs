//! Products of 2-D f32 flex tensors through the `gemm` crate: what the CPU kernels call for
//! their large products (training's input projections and weight gradients). In a part of a
//! split CPU step, a large product cuts itself into pieces that a finished part's idle thread
//! can take ([`gemm_pieces`], [`crate::cpu::crew`]).
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
use crate::gemm::packed::SendPtr;

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
    let large = m * n * k >= 192 * 192 * 192;
    let parallelism = if large { gemm::Parallelism::Rayon(0) } else { gemm::Parallelism::None };
    // A large product in a part of a split step, while another part's thread waits idle, is
    // cut into pieces it can help with (`cpu::crew`).
    let pieces = if large { crate::cpu::crew::idle() + 1 } else { 1 };
    let mut out: Vec<f32> = Vec::with_capacity(m * n);
    // SAFETY: `out` has room for `[m, n]` row-major, which the pieces (`gemm` not reading it:
    // `read_dst` false) write completely; the operands hold `[m, k]` and `[k, n]` at the
    // strides given (asserted above).
    unsafe {
        gemm_pieces(
            [m, n, k],
            SendPtr(out.as_mut_ptr()),
            n,
            (a.as_ptr(), a_rs, a_cs),
            (b.as_ptr(), b_rs, b_cs),
            parallelism,
            pieces,
        );
        out.set_len(m * n);
    }
    FlexTensor::from_data(TensorData::new(out, [m, n]))
}

/// Output rows or columns below which a piece is not cut: `gemm` picks its `k` blocking
/// differently for outputs of at most 64 × 64, which would change the sums' order.
const MIN_PIECE: usize = 128;

/// [`gemm_into`] as up to `pieces` products over disjoint row or column ranges of `C`, the
/// first computed here and the others offered to this thread's crew ([`crate::cpu::crew`]):
/// columns when `A` (which each column piece packs again) is no larger than `B`, else rows.
/// Each element of `C` is summed in the same order as by one call (tested), so the result has
/// the same bits however it is cut.
///
/// # Safety
/// As [`gemm_into`].
pub(crate) unsafe fn gemm_pieces(
    [m, n, k]: [usize; 3],
    c: SendPtr,
    ldc: usize,
    (a, a_rs, a_cs): (*const f32, usize, usize),
    (b, b_rs, b_cs): (*const f32, usize, usize),
    parallelism: gemm::Parallelism,
    pieces: usize,
) {
    let by_columns = m <= n;
    let len = if by_columns { n } else { m };
    // Whole 16-element blocks (a panel of our kernels, a multiple of gemm's), none below
    // MIN_PIECE.
    let pieces = pieces.min(len / MIN_PIECE).max(1);
    let width = len.div_ceil(pieces).div_ceil(16) * 16;
    let (a, b) = (SendPtr(a as *mut f32), SendPtr(b as *mut f32));
    crate::cpu::crew::offer(len.div_ceil(width), &|i| {
        let (start, (c, a, b)) = (i * width, (&c, &a, &b));
        let part = width.min(len - start);
        // Columns `start..` of `C` and `B`, or rows `start..` of `C` and `A`.
        let (dims, c_at, a_at, b_at) = if by_columns {
            ([m, part, k], start, 0, start * b_cs)
        } else {
            ([part, n, k], start * ldc, start * a_rs, 0)
        };
        // SAFETY: each piece writes its own rows or columns `start..start + part` of `C` and
        // reads within `A` and `B` as the whole product would (the caller's guarantees);
        // `offer` returns only once every piece has run.
        unsafe {
            gemm_into(
                dims,
                c.0.add(c_at),
                ldc,
                (a.0.add(a_at), a_rs, a_cs),
                (b.0.add(b_at), b_rs, b_cs),
                parallelism,
            )
        }
    });
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `[rows, cols]` of varied values, and its strides read as is (`false`) or as the
    /// transpose of a `[cols, rows]` buffer (`true`), as the backward products read theirs.
    fn operand(rows: usize, cols: usize, transposed: bool, seed: u32) -> (Vec<f32>, usize, usize) {
        let v = (0..rows * cols)
            .map(|i| {
                ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / (1 << 24) as f32 - 0.5
            })
            .collect();
        if transposed { (v, 1, rows) } else { (v, cols, 1) }
    }

    /// Cut by rows or columns into any number of pieces, a product has the bits of one call:
    /// the LSTM bench's training products (one core-split part, transposed operands as their
    /// backward reads them) and uneven sizes.
    #[test]
    fn pieces_give_the_bits_of_one_call() {
        for (m, n, k, a_t, b_t) in [
            (768, 8000, 512, false, false),
            (768, 512, 8000, false, true),
            (512, 2048, 768, true, false),
            (768, 512, 2048, false, true),
            (1000, 300, 777, true, true),
            (300, 1001, 333, false, false),
        ] {
            let (a, a_rs, a_cs) = operand(m, k, a_t, 1);
            let (b, b_rs, b_cs) = operand(k, n, b_t, 2);
            let product = |pieces: usize| {
                let mut c = vec![f32::NAN; m * n];
                // SAFETY: `c` is `[m, n]`; `a` and `b` hold `[m, k]` and `[k, n]` at their strides.
                unsafe {
                    gemm_pieces(
                        [m, n, k],
                        SendPtr(c.as_mut_ptr()),
                        n,
                        (a.as_ptr(), a_rs, a_cs),
                        (b.as_ptr(), b_rs, b_cs),
                        gemm::Parallelism::Rayon(0),
                        pieces,
                    )
                };
                c
            };
            let whole = product(1);
            assert!(whole.iter().all(|x| x.is_finite()), "{m}×{k}×{n}: an element left unwritten");
            for pieces in [2, 3, 7] {
                let cut = product(pieces);
                let same = whole.iter().zip(&cut).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{m}×{k}×{n} in {pieces} pieces differs from one call");
            }
        }
    }
}
