//! The `n` best entries of a row, and beam search's step on the CPU: each row's `n` best
//! log-probabilities straight from the logits.
//!
//! Beam search needs, per row of `[rows, vocabulary]` logits, the `2·beam` best tokens and
//! their log-probabilities. Normalising the whole tensor first (`log_softmax`) wrote a new
//! `[rows, vocabulary]` buffer every step (10 MB at beam 5 × 64 sentences × 8k words) that the
//! host then copied out to pick from. [`TopLogProbs`] computes each row's `log Σ exp` (the
//! fused `log_softmax`'s own, so the values have its bits), writes the row's log-probabilities
//! into a scratch row that stays in the cache, and keeps its `n` best: `[rows, 2n]` comes back.
//!
//! Off the CPU, beam search takes each row's `2·beam` best on the device with burn's top-k
//! (cubecl's keeps ties in index order, as `top` does) and reads back `[rows, 4·beam]`; on the
//! CPU the host picks, since reading back costs nothing there and `top` is faster than a sort.
//! A test runs both picks on every model kind and compares the n-best lists.

use burn::backend::flex::FlexTensor;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::tensor::{Tensor, TensorData};
use rayon::prelude::*;

use crate::cpu::flex_data::f32s;

/// Each row's `n` best log-probabilities as a burn backend extension (flex only; decoding).
#[backend_extension(Flex)]
pub trait TopLogProbs: burn::backend::Backend {
    /// `[rows, 2n]`: row `r`'s `n` best `log_softmax` values, best first, then their ids as
    /// floats (exact below 2²⁴).
    fn top_log_probs(logits: FloatTensor<Self>, n: usize) -> FloatTensor<Self>;
}

impl TopLogProbs for Flex {
    fn top_log_probs(logits: FlexTensor, n: usize) -> FlexTensor {
        let [rows, width] = logits.layout().shape().dims::<2>();
        let n = n.min(width);
        let x = f32s(&logits);
        let mut out = vec![0f32; rows * 2 * n];
        if n > 0 {
            out.par_chunks_mut(2 * n).zip(x.par_chunks(width)).for_each_init(
                || vec![0f32; width],
                |lp, (o, x)| {
                    crate::softmax::cpu::log_softmax_row(x, lp);
                    for (j, t) in top(lp, n).into_iter().enumerate() {
                        o[j] = lp[t];
                        o[n + j] = t as f32;
                    }
                },
            );
        }
        FlexTensor::from_data(TensorData::new(out, [rows, 2 * n]))
    }
}

/// Each row's `n` best log-probabilities of `logits` `[rows, vocab]`: `(lp, ids)`, row `r`'s
/// `j`-th best at `r·min(n, vocab) + j` — the values `log_softmax` gives, picked as [`top`]
/// picks. Flex without autodiff ([`crate::ops::top_log_probs`] chooses); `None` if the result
/// cannot be read.
pub fn top_log_probs(logits: Tensor<2>, n: usize) -> Option<(Vec<f32>, Vec<u32>)> {
    let [rows, vocab] = logits.dims();
    let w = n.min(vocab);
    let both =
        Tensor::<2>::from_dispatch(<Dispatch as TopLogProbs>::top_log_probs(logits.into_dispatch(), n));
    let both = both.into_data().convert::<f32>().try_to_vec::<f32>().ok()?;
    let (mut lp, mut ids) = (Vec::with_capacity(rows * w), Vec::with_capacity(rows * w));
    for row in both.chunks(2 * w.max(1)) {
        lp.extend_from_slice(&row[..w]);
        ids.extend(row[w..].iter().map(|&t| t as u32));
    }
    Some((lp, ids))
}

/// Indices of the `n` largest entries of `row` in `f32::total_cmp`'s order (ties: lower
/// index first), best first.
///
/// One pass keeping the `n` best so far: a block of 64 entries whose largest does not beat
/// the `n`-th best is skipped after one (vectorised) maximum, which is nearly every block once
/// the first few have set the bar. A full partial sort (`select_nth_unstable` over an index
/// vector) took ~20 µs for an 8000-word row, ~7 ms a beam-5 step of 64 sentences; this takes
/// about a third of that.
pub fn top(row: &[f32], n: usize) -> Vec<usize> {
    /// `f32::total_cmp`'s order as an integer: `key(a) < key(b)` iff `a < b` in that order.
    #[inline(always)]
    fn key(v: f32) -> i32 {
        let b = v.to_bits() as i32;
        b ^ (((b >> 31) as u32) >> 1) as i32
    }
    const BLOCK: usize = 64;
    let n = n.min(row.len());
    if n == 0 {
        return Vec::new();
    }
    // The best so far, best first: (key, index).
    let mut best: Vec<(i32, usize)> = Vec::with_capacity(n + 1);
    for (b, block) in row.chunks(BLOCK).enumerate() {
        if best.len() == n && block.iter().fold(i32::MIN, |m, &v| m.max(key(v))) <= best[n - 1].0 {
            continue;
        }
        for (j, &v) in block.iter().enumerate() {
            let k = key(v);
            // A tie with the n-th best loses: its index is higher.
            if best.len() == n && k <= best[n - 1].0 {
                continue;
            }
            // After every entry at least as large (so ties keep index order).
            let at = best.partition_point(|&(kb, _)| kb >= k);
            best.insert(at, (k, b * BLOCK + j));
            best.truncate(n);
        }
    }
    best.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, Distribution};

    /// `top` picks what a full sort picks (ties to the lower index), on rows with ties,
    /// infinities and NaN, at the edges of its 64-entry blocks, and for `n` of 0, 1, 10 and
    /// more than the row holds.
    #[test]
    fn top_equals_a_full_sort() {
        let sorted = |row: &[f32], n: usize| {
            let mut idx: Vec<usize> = (0..row.len()).collect();
            idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            idx.truncate(n);
            idx
        };
        let mut state = 7u64;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) % 2000) as f32 / 100.0 - 10.0
        };
        let mut rows: Vec<Vec<f32>> =
            (0..20).map(|len| (0..len * 37 + 1).map(|_| next()).collect()).collect();
        rows.push(vec![1.0; 300]);
        rows.push((0..300).map(|i| (i % 7) as f32).collect());
        rows.push((0..300).map(|i| -(i as f32)).collect());
        rows.push((0..300).map(|i| i as f32).collect());
        let mut special: Vec<f32> = (0..200).map(|_| next()).collect();
        special[3] = f32::NAN;
        special[64] = f32::INFINITY;
        special[65] = f32::NEG_INFINITY;
        special[127] = f32::INFINITY;
        special[128] = -0.0;
        special[129] = 0.0;
        rows.push(special);
        for row in &rows {
            for n in [0, 1, 10, row.len() + 3] {
                assert_eq!(top(row, n), sorted(row, n), "n {n}, row of {}", row.len());
            }
        }
    }

    /// The fused step picks what `log_softmax` then [`top`] pick, with the same bits.
    #[test]
    fn top_log_probs_equal_log_softmax_then_top() {
        let d = Device::flex();
        d.seed(5);
        for (rows, vocab, n) in [(7, 300, 10), (3, 5, 10), (1, 8000, 1)] {
            let logits = Tensor::<2>::random([rows, vocab], Distribution::Normal(0.0, 3.0), &d);
            let lp = crate::softmax::cpu::log_softmax(logits.clone())
                .into_data()
                .convert::<f32>()
                .try_to_vec::<f32>()
                .unwrap();
            let (got, ids) = top_log_probs(logits, n).expect("flex runs the kernel");
            let w = n.min(vocab);
            for (r, row) in lp.chunks(vocab).enumerate() {
                let want = top(row, n);
                assert_eq!(
                    ids[r * w..(r + 1) * w].iter().map(|&t| t as usize).collect::<Vec<_>>(),
                    want,
                    "row {r}"
                );
                for (j, &t) in want.iter().enumerate() {
                    assert_eq!(got[r * w + j].to_bits(), row[t].to_bits(), "row {r}, entry {j}");
                }
            }
        }
    }
}
