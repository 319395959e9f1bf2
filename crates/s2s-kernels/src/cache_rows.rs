//! Beam search's reordering of a decoder's self-attention cache on the CPU: the positions in
//! use of the rows it keeps, and nothing else.
//!
//! The cache is `[rows, heads, room, d_k]` with positions `0..len` in use and room to append in
//! place. burn's `select` along rows copies every position of the room into a zero-filled
//! tensor: at beam 5 on the benchmark shape (320 rows, 8 heads, room 32, `d_k` 32) that is
//! 2 × 10.5 MB zeroed and copied per layer and step, most of it room never read. This kernel
//! copies the `len` positions in use of each kept row into a tensor whose room is `len + 1`:
//! exactly what the next step appends in place before the search reorders again. The room
//! beyond `len` is zero, so the result equals `select` on every position a reader sees.

use burn::backend::flex::FlexTensor;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::tensor::{Int, Tensor, TensorData};
use rayon::prelude::*;

use crate::flex_data::{contiguous, is_flex};

/// The spare position's zeros (`d_k` of them; a spare position wider than this is cut in
/// pieces).
const ZEROS: [f32; 256] = [0.0; 256];

/// The cache reordering as a burn backend extension (flex only; decoding).
#[backend_extension(Flex)]
pub trait CacheRows: burn::backend::Backend {
    /// `[picked.len(), heads, len + 1, d_k]`: row `i` holds positions `0..len` of row
    /// `picked[i]` of `x` (`[rows, heads, room, d_k]`, `len ≤ room`), position `len` zero.
    fn select_cache_rows(x: FloatTensor<Self>, picked: Vec<usize>, len: usize) -> FloatTensor<Self>;
}

impl CacheRows for Flex {
    fn select_cache_rows(x: FlexTensor, picked: Vec<usize>, len: usize) -> FlexTensor {
        let [rows, heads, room, dk] = x.layout().shape().dims::<4>();
        assert!(len <= room, "select_cache_rows: {len} positions in use, room for {room}");
        assert!(picked.iter().all(|&r| r < rows), "select_cache_rows: a row past the {rows} held");
        let x = contiguous(&x);
        let src = x.as_slice::<f32>().expect("contiguous f32");
        let (used, plane, row) = (len * dk, (len + 1) * dk, heads * (len + 1) * dk);
        let total = picked.len() * row;
        // Written once, without zero-filling first: each (row, head) gets its `len` positions
        // and one zero position, which is every element.
        let mut out: Vec<f32> = Vec::with_capacity(total);
        // Rows are independent; a task copies a few of them (a row is ~25 KB on the benchmark
        // shape), so both cores share a step's copy.
        out.spare_capacity_mut()[..total].par_chunks_mut(row).zip(&picked).with_min_len(8).for_each(
            |(o, &r)| {
                for h in 0..heads {
                    let from = (r * heads + h) * room * dk;
                    let (o, src) = (&mut o[h * plane..][..plane], &src[from..from + used]);
                    let (o, spare) = o.split_at_mut(used);
                    o.write_copy_of_slice(src);
                    for piece in spare.chunks_mut(ZEROS.len()) {
                        piece.write_copy_of_slice(&ZEROS[..piece.len()]);
                    }
                }
            },
        );
        // SAFETY: the loop above wrote all `total` elements (every row's `heads` planes of
        // `plane` elements each).
        unsafe { out.set_len(total) };
        FlexTensor::from_data(TensorData::new(out, [picked.len(), heads, len + 1, dk]))
    }
}

/// Rows `picked` (equal to `indices`, held by the host) of a self-attention cache `x`
/// (`[rows, heads, room, d_k]`, positions `0..len` in use). On flex without autodiff
/// ([`CacheRows`]) the result's room is `len + 1`; elsewhere it is burn's `select`, room and
/// all. Either way positions `0..len` equal `x.select(0, indices)`'s.
pub fn select_cache_rows(x: Tensor<4>, indices: &Tensor<1, Int>, picked: &[usize], len: usize) -> Tensor<4> {
    if crate::mode::reference() || !is_flex(&x.device()) || x.is_autodiff() {
        return x.select(0, indices.clone());
    }
    Tensor::from_dispatch(<Dispatch as CacheRows>::select_cache_rows(x.into_dispatch(), picked.to_vec(), len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, Distribution};

    /// Positions in use equal burn's `select`, rows repeated and dropped as beam search does,
    /// and the room left is one zero position.
    #[test]
    fn equals_select_on_the_positions_in_use() {
        let device = Device::flex();
        let (rows, heads, room, dk, len) = (6, 3, 8, 5, 5);
        let x = Tensor::<4>::random([rows, heads, room, dk], Distribution::Normal(0.0, 1.0), &device);
        let picked = [4usize, 4, 0, 5, 2];
        let idx = Tensor::<1, Int>::from_data(
            TensorData::new(picked.iter().map(|&i| i as i64).collect::<Vec<_>>(), [picked.len()]),
            &device,
        );
        let want = x.clone().select(0, idx.clone()).narrow(2, 0, len);
        let got = select_cache_rows(x, &idx, &picked, len);
        assert_eq!(got.dims(), [picked.len(), heads, len + 1, dk]);
        let (got_used, spare) = (got.clone().narrow(2, 0, len), got.narrow(2, len, 1));
        assert_eq!(got_used.into_data().to_vec::<f32>().unwrap(), want.into_data().to_vec::<f32>().unwrap());
        assert!(spare.into_data().to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
    }
}
