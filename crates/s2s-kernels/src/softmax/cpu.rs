//! `softmax` and `log_softmax` over the last dimension on the CPU in one fused pass per row,
//! with their backward: `∂x = y ⊙ (∂y − Σ ∂y ⊙ y)` for `y = softmax(x)`, and
//! `∂x = ∂y − softmax(x) Σ ∂y` for `y = log_softmax(x)`.
//!
//! Every decoder step normalises `[rows, vocabulary]` logits (8,000 classes in the benchmark),
//! and every attention layer its `[batch, heads, t_q, t_k]` scores. burn composes both from a
//! maximum, a subtraction, glibc's scalar `expf`, a sum and a division or logarithm, each a
//! pass over the data and a new buffer (softmax of the Transformer bench shape's scores:
//! ~1.5 ms of a 2.1 ms attention forward). Here a row is read three times — maximum,
//! `Σ exp(x − max)` through the vectorised [`crate::cpu::fastmath::exp`] in 16 lanes
//! ([`crate::cpu::fastmath::lane_fold`]), and the output — with rows in parallel. A burn
//! `#[backend_extension]` for flex; other backends keep burn's functions.
//!
//! Greedy search's choice, each row's best token and its log-probability
//! (`best_log_prob_pairs`), is one pass a row here and one launch on a GPU: a cube a row, 64
//! units striding over the vocabulary for the maximum and its first index, then
//! `Σ exp(x − max)`, reduced in shared memory. 256 units a row were slower (most units idle
//! through more barrier rounds on a small vocabulary).

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::flex::FlexTensor;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::tensor::{Tensor, TensorData};
use rayon::prelude::*;
use std::mem::MaybeUninit;

use crate::cpu::fastmath::{exp, lane_fold, lane_fold_map};
use crate::cpu::flex_data::f32s;
use crate::own_backward::WithBackward;

/// Each row's best entry and its log-probability as a burn backend extension (flex, and
/// cubecl without fusion; decoding).
#[backend_extension(Flex, Cube: cfg(not(feature = "gpu-tuned")))]
pub trait BestLogProb: burn::backend::Backend {
    /// `[rows, 2]`: the index of each row's largest score (the first of equals, as a float:
    /// exact below 2²⁴) and `log_softmax` at it.
    fn best_log_prob(logits: FloatTensor<Self>) -> FloatTensor<Self>;
}

impl BestLogProb for Flex {
    fn best_log_prob(logits: FlexTensor) -> FlexTensor {
        let [rows, width] = logits.layout().shape().dims::<2>();
        let x = f32s(&logits);
        let mut out = vec![0f32; rows * 2];
        let per_task = (1usize << 14).div_ceil(width.max(1));
        out.par_chunks_mut(2).zip(x.par_chunks(width.max(1))).with_min_len(per_task).for_each(|(o, x)| {
            crate::cpu::fastmath::wide(
                #[inline(always)]
                || {
                    // The fused `log_softmax`'s own `max` and `lse`, so the log-probability has
                    // its bits.
                    let (max, lse) = max_and_lse(x);
                    let best = x.iter().position(|&v| v == max).unwrap_or(0);
                    o[0] = best as f32;
                    o[1] = x[best] - lse;
                },
            )
        });
        FlexTensor::from_data(TensorData::new(out, [rows, 2]))
    }
}

/// Each row's best token (the first of equal scores, as f32: ids are exact below 2²⁴) and its
/// log-probability, `[rows, 2]`, left on the device: one pass per row on flex, one launch on
/// a GPU ([`gpu`]; greedy search's step otherwise launched `log_softmax`'s six kernels, an
/// argmax, a cast and a concatenation). Without autodiff, on flex or a cubecl device without
/// fusion: [`crate::ops::best_log_prob_pairs`] picks it, the reference elsewhere.
pub fn best_log_prob_pairs(logits: Tensor<2>) -> Tensor<2> {
    Tensor::<2>::from_dispatch(<Dispatch as BestLogProb>::best_log_prob(logits.into_dispatch()))
}

/// [`BestLogProb`] on a GPU: one cube (workgroup) a row, its units striding over the row for
/// their maximum (and its first index), then `Σ exp(x − max)`, each reduced in shared memory;
/// the log-probability of the best is `−ln Σ exp(x − max)`.
#[cfg(not(feature = "gpu-tuned"))]
mod gpu {
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
}

/// The fused softmax as a burn backend extension (flex only).
#[backend_extension(Flex, Autodiff)]
pub trait FastSoftmax: burn::backend::Backend {
    /// `softmax` (or with `log`, `log_softmax`) over the last dimension, any rank.
    fn fast_softmax(x: FloatTensor<Self>, log: bool) -> FloatTensor<Self>;
}

impl FastSoftmax for Flex {
    fn fast_softmax(x: FlexTensor, log: bool) -> FlexTensor {
        rows(
            &x,
            None,
            #[inline(always)]
            |x, _, out| {
                if log {
                    let (_, lse) = max_and_lse(x);
                    fill(out, x.iter().map(|&x| x - lse));
                } else {
                    let max = lane_fold(x, f32::NEG_INFINITY, f32::max);
                    let out = fill(out, x.iter().map(|&x| exp(x - max)));
                    let scale = 1.0 / lane_fold(out, 0.0, |a, b| a + b);
                    out.iter_mut().for_each(|o| *o *= scale);
                }
            },
        )
    }
}

impl<C: CheckpointStrategy> FastSoftmax for Autodiff<Flex, C> {
    fn fast_softmax(x: FloatTensor<Self>, log: bool) -> FloatTensor<Self> {
        Self::with_backward(
            [x],
            |[x], keep| {
                let y = Flex::fast_softmax(x, log);
                // The output `y`, and whether it is `log_softmax`.
                (y.clone(), keep.then_some((y, log)))
            },
            |(y, log), dy, _| {
                [Some(rows(
                    &y,
                    Some(&dy),
                    #[inline(always)]
                    |y, g, out| {
                        if log {
                            let total = lane_fold(g, 0.0, |a, b| a + b);
                            fill(out, y.iter().zip(g).map(|(&y, &g)| g - exp(y) * total));
                        } else {
                            let out = fill(out, y.iter().zip(g).map(|(&y, &g)| g * y));
                            let dot = lane_fold(out, 0.0, |a, b| a + b);
                            for ((o, &y), &g) in out.iter_mut().zip(y).zip(g) {
                                *o = y * (g - dot);
                            }
                        }
                    },
                ))]
            },
        )
    }
}

/// `out = log_softmax(x)` for one row, with the bits of the fused `log_softmax` (for
/// [`crate::softmax::top_k`]: the same `log Σ exp`, the same subtraction).
pub fn log_softmax_row(x: &[f32], out: &mut [f32]) {
    crate::cpu::fastmath::wide(
        #[inline(always)]
        || {
            let (_, lse) = max_and_lse(x);
            for (o, &v) in out.iter_mut().zip(x) {
                *o = v - lse;
            }
        },
    )
}

/// A row's maximum and `log Σ exp`, computed as `max + log Σ exp(x − max)`.
#[inline(always)]
fn max_and_lse(x: &[f32]) -> (f32, f32) {
    let max = lane_fold(x, f32::NEG_INFINITY, f32::max);
    (max, max + lane_fold_map(x, 0.0, |v| exp(v - max), |a, b| a + b).ln())
}

/// Writes `values` into `out`, all of it, and returns it as written floats.
///
/// # Panics
/// When `values` has fewer items than `out`.
#[inline(always)]
fn fill(out: &mut [MaybeUninit<f32>], values: impl Iterator<Item = f32>) -> &mut [f32] {
    let mut written = 0;
    for (o, v) in out.iter_mut().zip(values) {
        o.write(v);
        written += 1;
    }
    assert_eq!(written, out.len(), "fused_softmax: a row left partly unwritten");
    // SAFETY: every element was written just above.
    unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<f32>(), out.len()) }
}

/// `f(row of a, row of b (or empty), output row)` for every row of the last dimension, groups
/// of rows in parallel. The output is not zero-filled first (for `[1536, 8000]` logits, 49 MB
/// a call): `f` must write its whole row, through [`fill`].
fn rows(
    a: &FlexTensor,
    b: Option<&FlexTensor>,
    f: impl Fn(&[f32], &[f32], &mut [MaybeUninit<f32>]) + Sync,
) -> FlexTensor {
    let shape = a.layout().shape().clone();
    let width = shape.as_slice().last().copied().unwrap_or(1).max(1);
    let a = f32s(a);
    let b = b.map(f32s);
    let mut out: Vec<f32> = Vec::with_capacity(a.len());
    let chunk = width * (1usize << 14).div_ceil(width);
    out.spare_capacity_mut()[..a.len()].par_chunks_mut(chunk).zip(a.par_chunks(chunk)).enumerate().for_each(
        |(i, (o, a))| {
            let b = b.as_ref().map(|b| &b[i * chunk..i * chunk + a.len()]);
            crate::cpu::fastmath::wide(
                #[inline(always)]
                || {
                    for (r, (o, a)) in o.chunks_mut(width).zip(a.chunks(width)).enumerate() {
                        f(a, b.map_or(&[][..], |b| &b[r * width..(r + 1) * width]), o);
                    }
                },
            )
        },
    );
    // SAFETY: every row of every chunk was written by `f` (`fill` checks each).
    unsafe { out.set_len(a.len()) };
    FlexTensor::from_data(TensorData::new(out, shape))
}

/// `log_softmax` over the last dimension through the fused kernel (flex devices only:
/// [`crate::ops::log_softmax`] picks it).
pub fn log_softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as FastSoftmax>::fast_softmax(x.into_dispatch(), true))
}

/// `softmax` over the last dimension through the fused kernel (flex devices only:
/// [`crate::ops::softmax`] picks it).
pub fn softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as FastSoftmax>::fast_softmax(x.into_dispatch(), false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::Device;

    /// The one-pass pick gives what `log_softmax` and an argmax give (indices, and the
    /// log-probabilities to the bit), over rows spanning several tasks; equal scores go to
    /// the first.
    #[test]
    fn best_log_probs_equal_log_softmax_and_argmax() {
        let d = Device::flex();
        d.seed(9);
        let logits = Tensor::<2>::random([300, 77], burn::tensor::Distribution::Normal(0.0, 3.0), &d);
        let (ids, best) = crate::ops::best_log_probs(logits.clone());
        let (want_best, want_ids) = log_softmax(logits).max_dim_with_indices(1);
        let want_ids = want_ids.into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
        let want_best = want_best.into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(ids, want_ids);
        assert_eq!(
            best.iter().map(|b| b.to_bits()).collect::<Vec<_>>(),
            want_best.iter().map(|b| b.to_bits()).collect::<Vec<_>>()
        );
        let tie = Tensor::<2>::from_data(TensorData::new(vec![0.0f32, 2.0, 1.0, 2.0], [1, 4]), &d);
        let (ids, best) = crate::ops::best_log_probs(tie);
        assert_eq!(ids, vec![1]);
        let lse = (1.0f32 + 2.0 * 2f32.exp() + 1f32.exp()).ln();
        assert!((best[0] - (2.0 - lse)).abs() < 1e-6);
    }

    /// On wgpu (lavapipe where there is no GPU) the kernel gives burn's argmax of
    /// `log_softmax` and its value, for rows shorter and longer than a cube's units, and the
    /// first of equal scores whether one unit or two units hold them.
    #[cfg(not(feature = "gpu-tuned"))]
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

    /// Equal to a float64 reference, value and gradient, softmax and log-softmax, on an
    /// autodiff device and without, with a row width that leaves a partial lane block and rows
    /// spanning several chunks; and to burn's functions.
    #[test]
    fn equals_a_float64_reference() {
        let d = Device::flex().autodiff();
        for (shape, log) in
            [([2, 3, 8003], true), ([1, 4, 5], true), ([2, 3, 8003], false), ([3, 2, 37], false)]
        {
            let width = shape[2];
            let n = shape.iter().product::<usize>();
            let xs: Vec<f32> =
                (0..n).map(|i| 8.0 * (i as f32 * 0.37).sin() * (i as f32 * 0.011).cos()).collect();
            let gs: Vec<f32> = (0..n).map(|i| (i as f32 * 1.3).cos()).collect();
            let x = Tensor::<3>::from_data(TensorData::new(xs.clone(), shape), &d);
            let w = Tensor::<3>::from_data(TensorData::new(gs.clone(), shape), &d);
            let (mut want_y, mut want_dx) = (vec![0f64; n], vec![0f64; n]);
            for r in 0..n / width {
                let row = r * width..(r + 1) * width;
                let max = xs[row.clone()].iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
                let lse = max + xs[row.clone()].iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
                let p = |i: usize| (xs[i] as f64 - lse).exp();
                let total: f64 = gs[row.clone()].iter().map(|&g| g as f64).sum();
                let dot: f64 = row.clone().map(|i| gs[i] as f64 * p(i)).sum();
                for i in row {
                    want_y[i] = if log { xs[i] as f64 - lse } else { p(i) };
                    want_dx[i] = if log { gs[i] as f64 - p(i) * total } else { p(i) * (gs[i] as f64 - dot) };
                }
            }
            let worst = |got: Tensor<3>, want: &[f64]| {
                let got: Vec<f32> = got.into_data().try_to_vec().unwrap();
                got.iter().zip(want).map(|(&a, &b)| (a as f64 - b).abs()).fold(0.0, f64::max)
            };
            let f = |x: Tensor<3>| if log { log_softmax(x) } else { softmax(x) };
            let xg = x.clone().require_grad();
            let y = f(xg.clone());
            let grads = (y.clone() * w.clone()).sum().backward();
            let (ey, edx) = (worst(y.inner(), &want_y), worst(xg.grad(&grads).expect("∂x"), &want_dx));
            assert!(ey < 1e-5 && edx < 1e-6, "{shape:?} log {log}: value off by {ey}, gradient by {edx}");
            let plain = x.inner();
            let burn = if log {
                burn::tensor::activation::log_softmax(plain.clone(), 2)
            } else {
                burn::tensor::activation::softmax(plain.clone(), 2)
            };
            assert!(max_diff(f(plain), burn) < 1e-4);
        }
    }

    /// Masked classes (−∞) get probability exactly 0, the others still sum to 1.
    #[test]
    fn negative_infinity_is_probability_zero() {
        let d = Device::flex();
        let x = Tensor::<2>::from_data(TensorData::new(vec![1.0, f32::NEG_INFINITY, 2.0, 0.5], [1, 4]), &d);
        for p in [log_softmax(x.clone()).exp(), softmax(x)] {
            let p: Vec<f32> = p.into_data().try_to_vec::<f32>().unwrap();
            assert_eq!(p[1], 0.0);
            assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6, "{p:?}");
        }
    }
}
