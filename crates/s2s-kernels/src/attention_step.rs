//! The recurrent decoders' attention while decoding, one pass per sentence on the CPU.
//!
//! At every decoder step the scores and the context read the whole projected memory:
//!
//! - dot / general (Luong et al., 2015, eq. 8): `eⱼ = kⱼ · q`;
//! - additive (Bahdanau et al., 2015, eq. 6): `eⱼ = vᵀ tanh(kⱼ + q)`, `q = W₂s + b`;
//! - context (Bahdanau et al., 2015, eq. 5): `c = Σⱼ αⱼ hⱼ`.
//!
//! Composed from burn's operations each is a broadcast product into a `[batch, src, d]`
//! temporary (3 MiB on the benchmark shape) and a reduction over it: ~835 µs of a 9.3 ms
//! Luong greedy step on the AVX-512 VM. Here each sentence's row is one pass over its
//! `[src, d]` block, with no temporary. Decoding only (no autodiff: training keeps the
//! composed operations, whose gradients burn knows), on flex; elsewhere the same operations
//! are composed. The sums run in another order than burn's, so results agree to rounding.
//!
//! # Shapes
//! - `q`: `[batch, d]`, `keys` / `values`: `[batch, src, d]`, `v`: `[d, 1]`
//! - scores and weights: `[batch, src]`, context: `[batch, d]`

use std::borrow::Cow;

use burn::backend::flex::FlexTensor;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::tensor::{DType, Tensor, TensorData};
use rayon::prelude::*;

use crate::fastmath::{LANES, block, block_mut, tanh, wide};
use crate::flex_data::{contiguous, f32s, is_flex};

/// The decoding kernels as a burn backend extension (flex only).
#[backend_extension(Flex)]
pub trait AttentionStep: burn::backend::Backend {
    /// `e[b, j] = keys[b, j, :] · q[b, :]`.
    fn dot_scores(q: FloatTensor<Self>, keys: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `e[b, j] = Σₐ v[a] tanh(keys[b, j, a] + q[b, a])`.
    fn additive_scores(
        q: FloatTensor<Self>,
        keys: FloatTensor<Self>,
        v: FloatTensor<Self>,
    ) -> FloatTensor<Self>;

    /// `c[b, :] = Σⱼ weights[b, j] values[b, j, :]`.
    fn weighted_sum(weights: FloatTensor<Self>, values: FloatTensor<Self>) -> FloatTensor<Self>;
}

/// Sentences per rayon task (a sentence is ~12k multiply-adds on the benchmark shape).
const ROWS_PER_TASK: usize = 4;

impl AttentionStep for Flex {
    fn dot_scores(q: FlexTensor, keys: FlexTensor) -> FlexTensor {
        per_row(
            &q,
            &keys,
            #[inline(always)]
            |q, keys, e| {
                for (e, key) in e.iter_mut().zip(keys.chunks_exact(q.len())) {
                    *e = dot(q, key);
                }
            },
        )
    }

    fn additive_scores(q: FlexTensor, keys: FlexTensor, v: FlexTensor) -> FlexTensor {
        let v = f32s(&v);
        assert_eq!(v.len(), q.layout().shape().dims::<2>()[1], "additive_scores: v is not [d, 1]");
        per_row(
            &q,
            &keys,
            #[inline(always)]
            |q, keys, e| {
                let d = q.len();
                let whole = d / LANES * LANES;
                for (e, key) in e.iter_mut().zip(keys.chunks_exact(d)) {
                    let mut acc = [0f32; LANES];
                    for j in (0..whole).step_by(LANES) {
                        let (k, q, v) = (block(key, j), block(q, j), block(&v, j));
                        for l in 0..LANES {
                            acc[l] += v[l] * tanh(k[l] + q[l]);
                        }
                    }
                    let tail: f32 = (whole..d).map(|j| v[j] * tanh(key[j] + q[j])).sum();
                    *e = acc.iter().sum::<f32>() + tail;
                }
            },
        )
    }

    fn weighted_sum(weights: FlexTensor, values: FlexTensor) -> FlexTensor {
        let [b, s, d] = values.layout().shape().dims::<3>();
        assert_eq!(
            weights.layout().shape().dims::<2>(),
            [b, s],
            "weighted_sum: weights are not [batch, src]"
        );
        let mut out = vec![0f32; b * d];
        if out.is_empty() || s == 0 {
            return FlexTensor::from_data(TensorData::new(out, [b, d]));
        }
        let w = f32s(&weights);
        let (vals, stride) = sentences(&values);
        let whole = d / LANES * LANES;
        out.par_chunks_mut(d).enumerate().with_min_len(ROWS_PER_TASK).for_each(|(r, c)| {
            let (w, h) = (&w[r * s..(r + 1) * s], &vals[r * stride..][..s * d]);
            wide(
                #[inline(always)]
                || {
                    // A column block of `c` at a time, summed over the positions in registers
                    // (summing row by row into `c` kept every partial sum in memory).
                    for j in (0..whole).step_by(LANES) {
                        let mut acc = [0f32; LANES];
                        for (i, &a) in w.iter().enumerate() {
                            let h = block(h, i * d + j);
                            for l in 0..LANES {
                                acc[l] += a * h[l];
                            }
                        }
                        *block_mut(c, j) = acc;
                    }
                    for (j, c) in c.iter_mut().enumerate().skip(whole) {
                        *c = w.iter().enumerate().map(|(i, &a)| a * h[i * d + j]).sum();
                    }
                },
            )
        });
        FlexTensor::from_data(TensorData::new(out, [b, d]))
    }
}

/// Scores for every sentence: `score(q_row, keys_block, e_row)` fills row `e_row` (`src`
/// long) from the sentence's query (`d`) and keys (`[src, d]`, row-major).
fn per_row(
    q: &FlexTensor,
    keys: &FlexTensor,
    score: impl Fn(&[f32], &[f32], &mut [f32]) + Sync,
) -> FlexTensor {
    let [b, s, d] = keys.layout().shape().dims::<3>();
    assert_eq!(q.layout().shape().dims::<2>(), [b, d], "attention scores: query is not [batch, d]");
    let mut out = vec![0f32; b * s];
    if out.is_empty() {
        return FlexTensor::from_data(TensorData::new(out, [b, s]));
    }
    let q = f32s(q);
    let (k, stride) = sentences(keys);
    out.par_chunks_mut(s).enumerate().with_min_len(ROWS_PER_TASK).for_each(|(r, e)| {
        wide(
            #[inline(always)]
            || score(&q[r * d..(r + 1) * d], &k[r * stride..][..s * d], e),
        )
    });
    FlexTensor::from_data(TensorData::new(out, [b, s]))
}

/// A `[batch, src, d]` tensor's elements and the distance between two sentences' blocks: the
/// storage itself when each sentence's `[src, d]` block is contiguous (the Luong decoder's
/// memory is a narrowed view of a longer buffer, copying it cost 3 MiB a step), else a
/// contiguous copy.
fn sentences(t: &FlexTensor) -> (Cow<'_, [f32]>, usize) {
    let layout = t.layout();
    let [_, s, d] = layout.shape().dims::<3>();
    match layout.strides() {
        &[bs, rs, 1] if rs as usize == d && bs >= (s * d) as isize && t.dtype() == DType::F32 => {
            (t.storage::<f32>()[layout.start_offset()..].into(), bs as usize)
        }
        _ => (contiguous(t).as_slice::<f32>().expect("contiguous f32").to_vec().into(), s * d),
    }
}

/// `x · y` in [`LANES`] lanes.
#[inline(always)]
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let whole = x.len() / LANES * LANES;
    let mut acc = [0f32; LANES];
    for j in (0..whole).step_by(LANES) {
        let (a, b) = (block(x, j), block(y, j));
        for l in 0..LANES {
            acc[l] += a[l] * b[l];
        }
    }
    acc.iter().sum::<f32>() + (whole..x.len()).map(|j| x[j] * y[j]).sum::<f32>()
}

/// True where the kernels run: flex, without autodiff.
fn fused(t: &Tensor<2>) -> bool {
    is_flex(&t.device()) && !t.is_autodiff()
}

/// `e[b, j] = keys[b, j, :] · q[b, :]` (Luong's dot and general scores, the latter with
/// `W_a` already applied to the keys).
pub fn dot_scores(q: Tensor<2>, keys: &Tensor<3>) -> Tensor<2> {
    #[cfg(not(feature = "gpu-tuned"))]
    if !is_flex(&q.device()) {
        return crate::gpu_attend::dot_scores(q, keys);
    }
    if !fused(&q) {
        // Σ_k keys ⊙ q rather than a batched [S, k] × [k, 1] product per sentence: one
        // element-wise pass beats `batch` tiny matrix products on the CPU.
        return (keys.clone() * q.unsqueeze_dim::<3>(1)).sum_dim(2).squeeze_dim::<2>(2); // [B, S, k] → [B, S]
    }
    Tensor::from_dispatch(<Dispatch as AttentionStep>::dot_scores(
        q.into_dispatch(),
        keys.clone().into_dispatch(),
    ))
}

/// `e[b, j] = vᵀ tanh(keys[b, j, :] + q[b, :])` (Bahdanau's score network, `q` the projected
/// query with its bias, `v` `[d, 1]`).
pub fn additive_scores(q: Tensor<2>, keys: &Tensor<3>, v: Tensor<2>) -> Tensor<2> {
    #[cfg(not(feature = "gpu-tuned"))]
    if !is_flex(&q.device()) {
        return crate::gpu_attend::additive_scores(q, keys, v);
    }
    if !fused(&q) {
        let [b, s, a] = keys.dims();
        // vᵀ tanh(·) as one [B·S, A] × [A, 1] product (a batched [S, A] × [A, 1] per sentence,
        // which `Linear` on a 3-d input amounts to, runs B tiny matmuls).
        let h = crate::fused_tanh::tanh(keys.clone() + q.unsqueeze_dim::<3>(1)).reshape([b * s, a]); // [B·S, A]
        return h.matmul(v).reshape([b, s]); // [B, S]
    }
    Tensor::from_dispatch(<Dispatch as AttentionStep>::additive_scores(
        q.into_dispatch(),
        keys.clone().into_dispatch(),
        v.into_dispatch(),
    ))
}

/// `c[b, :] = Σⱼ weights[b, j] values[b, j, :]`.
pub fn weighted_sum(weights: Tensor<2>, values: &Tensor<3>) -> Tensor<2> {
    if !fused(&weights) {
        // An element-wise pass, not one [1, S] × [S, D] product per sentence.
        return (weights.unsqueeze_dim::<3>(2) * values.clone()).sum_dim(1).squeeze_dim::<2>(1); // [B, D]
    }
    Tensor::from_dispatch(<Dispatch as AttentionStep>::weighted_sum(
        weights.into_dispatch(),
        values.clone().into_dispatch(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::{Device, Distribution};

    /// Each kernel equals the composed operations (run under autodiff, which keeps them),
    /// with a width that leaves a partial lane block and one that does not, on a contiguous
    /// memory and on a narrowed view.
    #[test]
    fn kernels_equal_the_composed_operations() {
        let d = Device::flex();
        d.seed(17);
        let ad = d.clone().autodiff();
        let rand = |dims: Vec<usize>| {
            Tensor::<3>::random([dims[0], dims[1], dims[2]], Distribution::Normal(0.0, 1.0), &d)
        };
        for (b, s, k, extra) in [(5, 7, 37, 0), (9, 3, 64, 0), (1, 1, 1, 0), (4, 6, 40, 2)] {
            // With `extra`, a narrowed view of a longer buffer (as the encoder's memory is),
            // read in place at its batch stride.
            let keys = rand(vec![b, s + extra, k]).narrow(1, 0, s);
            let q = rand(vec![b, 1, k]).squeeze_dim::<2>(1);
            let v = rand(vec![1, k, 1]).squeeze_dim::<2>(0);
            let w = rand(vec![b, 1, s]).squeeze_dim::<2>(1);
            let on = |t: &Tensor<2>| Tensor::<2>::from_data(t.to_data(), &ad);
            let on3 = |t: &Tensor<3>| Tensor::<3>::from_data(t.to_data(), &ad);
            let pairs = [
                (dot_scores(q.clone(), &keys), dot_scores(on(&q), &on3(&keys)).inner()),
                (
                    additive_scores(q.clone(), &keys, v.clone()),
                    additive_scores(on(&q), &on3(&keys), on(&v)).inner(),
                ),
                (weighted_sum(w.clone(), &keys), weighted_sum(on(&w), &on3(&keys)).inner()),
            ];
            for (i, (fast, composed)) in pairs.into_iter().enumerate() {
                assert_eq!(fast.dims(), composed.dims(), "kernel {i}, {b}x{s}x{k}");
                assert!(max_diff(fast, composed) < 1e-5, "kernel {i}, {b}x{s}x{k}");
            }
        }
    }
}
