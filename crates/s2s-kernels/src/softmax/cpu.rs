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
//! ([`super::best_log_prob_pairs`]), is one pass a row here (its GPU kernel: `softmax/gpu.rs`).

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

impl super::BestLogProb for Flex {
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
