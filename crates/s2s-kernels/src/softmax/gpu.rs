//! [`BestLogProb`] on a GPU: one cube (workgroup) a row, its units striding over the row for
//! their maximum (and its first index), then `Σ exp(x − max)`, each reduced in shared memory;
//! the log-probability of the best is `−ln Σ exp(x − max)`.
//! 256 units a row were slower (most units idle through more barrier rounds on a small
//! vocabulary).

use burn::tensor::DType;
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::cube;
use cubecl::prelude::*;

use crate::gpu::launch::empty;

/// Units a row (a power of two).
const UNITS: usize = 64;

/// Rows a launch.
const MAX_CUBES: usize = 65_535;

/// One unit's share of a row's best: the largest of its entries (`m`) and the first index
/// holding it (`best`).
#[derive(CubeType)]
struct Best {
    m: f32,
    best: usize,
}

/// Unit `unit`'s maximum over its entries `unit, unit + UNITS, …` of the row at `at`
/// (`v` long), and its first index.
#[cube]
fn unit_best(logits: &[f32], at: usize, unit: usize, v: usize) -> Best {
    // The unit's maximum and its first index; a unit past the row's end starts from
    // entry 0, a real candidate, so ties still go to the first index.
    let mut j0 = 0usize;
    if unit < v {
        j0 = unit;
    }
    let mut m = logits[at + j0];
    let mut best = j0;
    let mut j = unit + UNITS;
    while j < v {
        let x = logits[at + j];
        if x > m {
            m = x;
            best = j;
        }
        j += UNITS;
    }
    Best { m, best }
}

/// Unit `unit`'s share of `Σ exp(x − top)`: its entries `unit, unit + UNITS, …` of the
/// row at `at` (`v` long), added in order.
#[cube]
fn unit_sum_exp(logits: &[f32], at: usize, unit: usize, v: usize, top: f32) -> f32 {
    let mut z = 0.0f32;
    let mut j = unit;
    while j < v {
        z += f32::exp(logits[at + j] - top);
        j += UNITS;
    }
    z
}

#[cube(launch)]
fn best_log_prob_rows(logits: &[f32], out: &mut [f32], vocab: u32, first_row: u32) {
    let (row, unit, v) = (first_row as usize + CUBE_POS_X as usize, UNIT_POS_X as usize, vocab as usize);
    let at = row * v;
    let own = unit_best(logits, at, unit, v);
    let mut maxes = Shared::<[f32]>::new_slice(UNITS);
    // Indices as f32: exact below 2²⁴.
    let mut firsts = Shared::<[f32]>::new_slice(UNITS);
    maxes[unit] = own.m;
    firsts[unit] = f32::cast_from(own.best);
    sync_cube();
    // A runtime value (`UNITS`, the launch's cube size): a loop variable.
    let mut stride = CUBE_DIM_X as usize / 2;
    while stride > 0 {
        if unit < stride {
            let m1 = maxes[unit];
            let b1 = firsts[unit];
            let m2 = maxes[unit + stride];
            let b2 = firsts[unit + stride];
            let take = m2 > m1 || (m2 == m1 && b2 < b1);
            maxes[unit] = select(take, m2, m1);
            firsts[unit] = select(take, b2, b1);
        }
        sync_cube();
        stride /= 2;
    }
    let top = maxes[0usize];
    let z = unit_sum_exp(logits, at, unit, v, top);
    let mut sums = Shared::<[f32]>::new_slice(UNITS);
    sums[unit] = z;
    sync_cube();
    // A runtime value (`UNITS`, the launch's cube size): a loop variable.
    let mut stride = CUBE_DIM_X as usize / 2;
    while stride > 0 {
        if unit < stride {
            let other = sums[unit + stride];
            sums[unit] = sums[unit] + other;
        }
        sync_cube();
        stride /= 2;
    }
    if unit == 0 {
        let first = firsts[0usize];
        let total = sums[0usize];
        out[row * 2] = first;
        out[row * 2 + 1] = 0.0 - f32::ln(total);
    }
}

impl super::BestLogProb for CubeBackend {
    fn best_log_prob(logits: CubeTensor) -> CubeTensor {
        let s = logits.meta.shape();
        assert!(
            s.num_dims() == 2 && logits.dtype == DType::F32,
            "best_log_prob: logits are not f32 [rows, vocab]"
        );
        let (rows, vocab) = (s[0], s[1]);
        let logits = into_contiguous(logits);
        let out = empty(&logits, [rows, 2]);
        if vocab > 0 {
            // A grid dimension holds at most 65,535 cubes.
            for first in (0..rows).step_by(MAX_CUBES) {
                best_log_prob_rows::launch(
                    &logits.client.clone(),
                    CubeCount::Static((rows - first).min(MAX_CUBES) as u32, 1, 1),
                    CubeDim::new_1d(UNITS as u32),
                    logits.clone().into_buffer_arg(),
                    out.clone().into_buffer_arg(),
                    vocab as u32,
                    first as u32,
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Tensor, TensorData};

    /// On wgpu (lavapipe where there is no GPU) the kernel gives burn's argmax of
    /// `log_softmax` and its value, for rows shorter and longer than a cube's units, and the
    /// first of equal scores whether one unit or two units hold them.
    #[test]
    fn best_log_probs_on_wgpu_equal_log_softmax_and_argmax() {
        let Some(d) = crate::testing::wgpu_or_skip() else { return };
        for (rows, vocab) in [(300, 77), (5, 8000), (3, 5)] {
            let logits = Tensor::<2>::random([rows, vocab], burn::tensor::Distribution::Normal(0.0, 3.0), &d);
            let (ids, best) = crate::ops::best_log_probs(logits.clone());
            let (want_best, want_ids) = crate::reference::log_softmax(logits).max_dim_with_indices(1);
            let want_ids = want_ids.into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
            let want_best = want_best.into_data().try_to_vec::<f32>().unwrap();
            assert_eq!(ids, want_ids, "{rows} × {vocab}");
            for (a, b) in best.iter().zip(&want_best) {
                assert!((a - b).abs() < 1e-5, "{rows} × {vocab}: {a} against {b}");
            }
        }
        let mut v = vec![0.0f32; 3 * 1000];
        // Row 0: equals at 700 and 300 (two units); row 1: at 44 and 300 (one unit); row 2: at 999 only.
        for (row, at) in [(0, 700), (0, 300), (1, 300), (1, 44), (2, 999)] {
            v[row * 1000 + at] = 5.0;
        }
        let (ids, _) = crate::ops::best_log_probs(Tensor::<2>::from_data(TensorData::new(v, [3, 1000]), &d));
        assert_eq!(ids, vec![300, 44, 999]);
    }
}
