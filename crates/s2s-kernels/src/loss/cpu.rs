//! Label-smoothed cross-entropy as one CPU kernel, forward and backward.
//!
//! Per row `n` of logits `x` (`V` classes), target `y` and keep mask `k`, with
//! `lse = log Σᵥ eˣᵛ`:
//!
//! `nll = lse − x_y`, `uniform = lse − (1/V)·Σᵥ xᵥ`, `ℓ = (1 − ε)·nll + ε·uniform`
//! (the equations of [`crate::reference::label_smoothed_xent`]), returned as `k·[nll, ℓ]`; and back, with
//! `pᵥ = e^{xᵥ − lse}`:
//!
//! `∂xᵥ = k·((g_nll + g_ℓ)·pᵥ − g_nll·[v = y] − g_ℓ·((1 − ε)·[v = y] + ε/V))`.
//!
//! Composed from tensor operations the loss makes several `[tokens, vocab]` tensors (log-
//! softmax, its sum, the gathered column, their gradients) — 49 MB each on the bench shapes,
//! each freshly allocated and page-faulted, with scalar `expf` — where this kernel reads the
//! logits twice forward, once backward, and writes the one gradient, rows in parallel.
//! A burn `#[backend_extension]` for flex; other backends use the composed form.
//!
//! # Shapes
//! - logits `[rows, vocab]`, targets and keep `[rows]` (targets as floats) → `[rows, 2]`

use crate::cpu::fastmath::{exp, wide};
use crate::cpu::flex_data::{contiguous, f32s};
use crate::own_backward::WithBackward;
use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::flex::FlexTensor;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::tensor::{Tensor, TensorData};
use rayon::prelude::*;

/// The fused loss as a burn backend extension (flex only; see the module doc).
#[backend_extension(Flex, Autodiff)]
pub trait SmoothedXent: burn::backend::Backend {
    /// `k·[nll, ℓ]` per row, `[rows, 2]`.
    fn smoothed_xent(
        logits: FloatTensor<Self>,
        targets: FloatTensor<Self>,
        keep: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self>;
}

impl SmoothedXent for Flex {
    fn smoothed_xent(logits: FlexTensor, targets: FlexTensor, keep: FlexTensor, epsilon: f64) -> FlexTensor {
        Rows::new(&logits, &targets, &keep, epsilon).forward().0
    }
}

impl<C: CheckpointStrategy> SmoothedXent for Autodiff<Flex, C> {
    fn smoothed_xent(
        logits: FloatTensor<Self>,
        targets: FloatTensor<Self>,
        keep: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        let (t, k) = (targets.into_primitive(), keep.into_primitive());
        Self::with_backward(
            [logits],
            |[x], keep| {
                let rows = Rows::new(&x, &t, &k, epsilon);
                let (out, lse) = rows.forward();
                // The logits, targets, mask and ε, and each row's log-sum-exp.
                (out, keep.then(|| (rows.logits, rows.targets, rows.keep, epsilon, lse)))
            },
            |(logits, targets, keep, epsilon, lse), dy, _| {
                let shape = dims2(&logits);
                let rows = Rows { logits, targets, keep, epsilon, shape };
                [Some(rows.backward(&lse, &f32s(&dy)))]
            },
        )
    }
}

/// The kernel's operands as plain rows.
struct Rows {
    /// Contiguous `[rows, vocab]` (shared with the caller's tensor, not copied).
    logits: FlexTensor,
    targets: Vec<u32>,
    keep: Vec<f32>,
    epsilon: f64,
    shape: [usize; 2],
}

impl Rows {
    fn new(logits: &FlexTensor, targets: &FlexTensor, keep: &FlexTensor, epsilon: f64) -> Self {
        let shape = dims2(logits);
        let targets: Vec<u32> = f32s(targets).iter().map(|&t| t as u32).collect();
        assert!(targets.iter().all(|&t| (t as usize) < shape[1]), "a target id is outside the vocabulary");
        Self { logits: contiguous(logits), targets, keep: f32s(keep).into_owned(), epsilon, shape }
    }

    fn x(&self) -> &[f32] {
        self.logits.as_slice::<f32>().expect("contiguous f32 logits")
    }

    /// `(k·[nll, ℓ]` `[rows, 2]`, log-sum-exp per row).
    fn forward(&self) -> (FlexTensor, Vec<f32>) {
        let [n, v] = self.shape;
        let eps = self.epsilon as f32;
        let per_row: Vec<[f32; 3]> = self
            .x()
            .par_chunks(v)
            .zip(&self.targets)
            .zip(&self.keep)
            .map(|((x, &y), &k)| {
                wide(
                    #[inline(always)]
                    || {
                        let max = lanes(x, f32::NEG_INFINITY, |m, a| m.max(a), |m, a| m.max(a));
                        let sum = lanes(x, 0.0, |s, a| s + exp(a - max), |s, t| s + t);
                        let total = lanes(x, 0.0, |s, a| s + a, |s, t| s + t);
                        let lse = max + sum.ln();
                        let nll = lse - x[y as usize];
                        let uniform = lse - total / v as f32;
                        [k * nll, k * ((1.0 - eps) * nll + eps * uniform), lse]
                    },
                )
            })
            .collect();
        let out: Vec<f32> = per_row.iter().flat_map(|r| [r[0], r[1]]).collect();
        (FlexTensor::from_data(TensorData::new(out, [n, 2])), per_row.iter().map(|r| r[2]).collect())
    }

    /// `∂logits` from `grad = ∂(k·[nll, ℓ])` `[rows, 2]` (equation in the module doc).
    fn backward(&self, lse: &[f32], grad: &[f32]) -> FlexTensor {
        let [n, v] = self.shape;
        let eps = self.epsilon as f32;
        let mut out = vec![0f32; n * v];
        out.par_chunks_mut(v).zip(self.x().par_chunks(v)).enumerate().for_each(|(r, (d, x))| {
            let k = self.keep[r];
            let (g_nll, g_l) = (grad[2 * r] * k, grad[2 * r + 1] * k);
            if g_nll == 0.0 && g_l == 0.0 {
                return;
            }
            let (scale, floor) = (g_nll + g_l, g_l * eps / v as f32);
            // The row's log-sum-exp as a local: read from `lse` inside the loop, it was loaded
            // again after every store to `d` (the compiler cannot tell the two apart here), and
            // the loop ran one element at a time on every CPU.
            let m = lse[r];
            wide(
                #[inline(always)]
                || {
                    for (d, &a) in d.iter_mut().zip(x) {
                        *d = scale * exp(a - m) - floor;
                    }
                },
            );
            d[self.targets[r] as usize] -= g_nll + g_l * (1.0 - eps);
        });
        FlexTensor::from_data(TensorData::new(out, [n, v]))
    }
}

/// `x` folded with `step` in [`LANES`] independent accumulators, then the lanes and the tail
/// combined with `merge`: a float reduction the compiler can vectorise (one accumulator makes
/// every step wait for the last, and it may not reorder float additions itself).
#[inline(always)]
fn lanes(x: &[f32], init: f32, step: impl Fn(f32, f32) -> f32, merge: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [init; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder().iter().fold(init, |a, &v| step(a, v));
    for chunk in chunks {
        for (a, &v) in acc.iter_mut().zip(chunk) {
            *a = step(*a, v);
        }
    }
    acc.into_iter().fold(tail, merge)
}

/// Accumulators per reduction: two AVX registers.
const LANES: usize = 16;

/// `[nll, ℓ]` per row of `logits` `[rows, vocab]` against `targets` `[rows]` (class ids as
/// floats) where `keep` `[rows]` is 1, through the fused kernel (flex devices only).
pub fn smoothed_xent(logits: Tensor<2>, targets: Tensor<1>, keep: Tensor<1>, epsilon: f64) -> Tensor<2> {
    Tensor::<2>::from_dispatch(<Dispatch as SmoothedXent>::smoothed_xent(
        logits.into_dispatch(),
        targets.into_dispatch(),
        keep.into_dispatch(),
        epsilon,
    ))
}

fn dims2(t: &FlexTensor) -> [usize; 2] {
    t.layout().shape().dims::<2>()
}
