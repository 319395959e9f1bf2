//! What the course measures inside a model, each probe a small function with a hand-computed
//! test: gradient norms by distance, score statistics, entropies, a permutation check, a
//! least-squares slope.

use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};

/// `‖∂L/∂x_t‖` for every position `t` of `x` `[batch, T, features]`, listed by distance from
/// the last position (index 0 is `t = T − 1`): how much of the loss's gradient reaches each
/// input, the signal that must pass through every state between `t` and the output. `loss`
/// maps `x` (tracked on `device`, an autodiff device) to a scalar.
///
/// # Shapes
/// - `x`: `[batch, T, features]` → `T` norms
pub fn gradient_by_distance(x: Tensor<3>, loss: impl FnOnce(Tensor<3>) -> Tensor<1>) -> Vec<f64> {
    let [_, t, _] = x.dims();
    let x = x.require_grad();
    let grads = loss(x.clone()).backward();
    let g = x.grad(&grads).expect("the loss depends on x");
    // ‖g_t‖ over batch and features: [T].
    let norms: Vec<f32> =
        g.powi_scalar(2).sum_dim(2).sum_dim(0).sqrt().reshape([t]).into_data().try_to_vec().unwrap();
    norms.iter().rev().map(|&n| n as f64).collect()
}

/// The least-squares slope of `ys` against `xs` (points whose `y` is not finite are left out).
pub fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let pts: Vec<(f64, f64)> =
        xs.iter().zip(ys).filter(|(_, y)| y.is_finite()).map(|(&x, &y)| (x, y)).collect();
    let n = pts.len() as f64;
    let (mx, my) = (pts.iter().map(|p| p.0).sum::<f64>() / n, pts.iter().map(|p| p.1).sum::<f64>() / n);
    let sxy: f64 = pts.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = pts.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    sxy / sxx
}

/// Entropy in nats of each row of `p` `[rows, n]` (rows of probabilities).
pub fn entropy(p: &Tensor<2>) -> Vec<f64> {
    let [rows, _] = p.dims();
    // 0 · ln 0 = 0: clamp inside the log only.
    let h = (p.clone() * p.clone().clamp_min(1e-30).log()).sum_dim(1).neg().reshape([rows]);
    h.into_data().convert::<f64>().try_to_vec::<f64>().unwrap()
}

/// Statistics of attention scores between `n_queries` queries and `n_keys` keys drawn
/// from N(0, 1)ᵈ, dot products divided by `scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreStats {
    /// Variance of the scores.
    pub variance: f64,
    /// Mean entropy of each query's softmax over the keys (nats; ln n_keys at most).
    pub entropy: f64,
    /// Mean largest softmax weight.
    pub max_weight: f64,
    /// Mean Frobenius norm of the softmax's Jacobian `diag(p) − p pᵀ`: how much gradient a
    /// score can pass on (0 when saturated).
    pub jacobian: f64,
}

/// [`ScoreStats`] of `d`-dimensional unit-variance queries and keys (seeded by `device`).
pub fn score_stats(d: usize, n_queries: usize, n_keys: usize, scale: f64, device: &Device) -> ScoreStats {
    let q: Tensor<2> = Tensor::random([n_queries, d], Distribution::Normal(0.0, 1.0), device);
    let k: Tensor<2> = Tensor::random([n_keys, d], Distribution::Normal(0.0, 1.0), device);
    let s = q.matmul(k.transpose()).div_scalar(scale); // [queries, keys]
    let v: Vec<f64> = s.clone().into_data().convert::<f64>().try_to_vec::<f64>().unwrap();
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let variance = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64;
    let p = burn::tensor::activation::softmax(s, 1);
    let h = entropy(&p);
    let rows = |t: Tensor<2>| t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap();
    let max_weight = rows(p.clone().max_dim(1)).iter().sum::<f64>() / n_queries as f64;
    // ‖diag(p) − ppᵀ‖²_F = Σpᵢ² − 2Σpᵢ³ + (Σpᵢ²)².
    let p2 = p.clone().powi_scalar(2).sum_dim(1);
    let p3 = p.powi_scalar(3).sum_dim(1);
    let j = (p2.clone() - p3.mul_scalar(2.0) + p2.powi_scalar(2)).clamp_min(0.0).sqrt();
    ScoreStats {
        variance,
        entropy: h.iter().sum::<f64>() / n_queries as f64,
        max_weight,
        jacobian: rows(j).iter().sum::<f64>() / n_queries as f64,
    }
}

/// The largest and mean `|f(P·x) − P·f(x)|` over a fixed permutation `P` of the positions
/// of `ids` `[batch, len]`: 0 for a permutation-equivariant `f` (`[batch, len, d]` out).
pub fn permutation_gap(ids: &Tensor<2, Int>, f: impl Fn(&Tensor<2, Int>) -> Tensor<3>) -> (f64, f64) {
    let [batch, len] = ids.dims();
    let device = ids.device();
    // A fixed derangement-like shuffle: position j takes (3j + 1) mod len when 3 ∤ len.
    let step = if len % 3 == 0 { 5 } else { 3 };
    let perm: Vec<i64> = (0..len).map(|j| ((step * j + 1) % len) as i64).collect();
    let idx2 = Tensor::<2, Int>::from_data(TensorData::new(perm.repeat(batch), [batch, len]), &device);
    let permuted_in = ids.clone().gather(1, idx2);
    let out = f(ids);
    let d = out.dims()[2];
    let idx3 = Tensor::<1, Int>::from_data(TensorData::new(perm, [len]), &device);
    let expected = out.select(1, idx3);
    let got = f(&permuted_in);
    let diff: Vec<f64> = (got - expected).abs().into_data().convert::<f64>().try_to_vec::<f64>().unwrap();
    let _ = d;
    (diff.iter().cloned().fold(0.0, f64::max), diff.iter().sum::<f64>() / diff.len() as f64)
}

/// How far query position `i` looks: `Σⱼ pⱼ·|i − j|` for its attention row `p` (tokens).
pub fn attention_distance(p: &[f32], i: usize) -> f64 {
    p.iter().enumerate().map(|(j, &q)| q as f64 * (i as f64 - j as f64).abs()).sum()
}

/// The entropy `−Σ p ln p` of one attention row (nats; 0 for one-hot, ln n for uniform).
pub fn row_entropy(p: &[f32]) -> f64 {
    p.iter().filter(|&&q| q > 0.0).map(|&q| -(q as f64) * (q as f64).ln()).sum()
}

/// The total-variation distance `½ Σ |p − q|` of two distributions: 0 alike, 1 disjoint.
pub fn total_variation(p: &[f32], q: &[f32]) -> f64 {
    0.5 * p.iter().zip(q).map(|(a, b)| (a - b).abs() as f64).sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-step linear RNN, h₁ = x₁, h₂ = a·h₁ + x₂, L = h₂: ∂L/∂x₂ = 1, ∂L/∂x₁ = a.
    #[test]
    fn gradient_norms_of_a_two_step_linear_rnn() {
        let d = Device::flex().autodiff();
        let x = Tensor::<3>::from_data(TensorData::new(vec![0.3f32, -1.2], [1, 2, 1]), &d);
        let a = 0.5;
        let norms = gradient_by_distance(x, |x| {
            let h1 = x.clone().narrow(1, 0, 1);
            let h2 = h1.mul_scalar(a) + x.narrow(1, 1, 1);
            h2.sum()
        });
        assert_eq!(norms, [1.0, 0.5]);
    }

    #[test]
    fn entropy_of_known_distributions() {
        let d = Device::flex();
        let p = Tensor::<2>::from_data(
            TensorData::new(vec![0.25f32, 0.25, 0.25, 0.25, 1.0, 0.0, 0.0, 0.0], [2, 4]),
            &d,
        );
        let h = entropy(&p);
        assert!((h[0] - 4f64.ln()).abs() < 1e-6 && h[1].abs() < 1e-9, "{h:?}");
    }

    /// Position 2 of 4 looking half at itself and half at position 0 looks 1 token away; one-hot
    /// rows have entropy 0, uniform ones ln n; disjoint rows are 1 apart, equal ones 0.
    #[test]
    fn attention_distance_entropy_and_total_variation_by_hand() {
        assert_eq!(attention_distance(&[0.5, 0.0, 0.5, 0.0], 2), 1.0);
        assert_eq!(attention_distance(&[0.0, 0.0, 0.0, 1.0], 0), 3.0);
        assert_eq!(row_entropy(&[0.0, 1.0, 0.0]), 0.0);
        assert!((row_entropy(&[0.25; 4]) - 4f64.ln()).abs() < 1e-7);
        assert_eq!(total_variation(&[1.0, 0.0], &[0.0, 1.0]), 1.0);
        assert_eq!(total_variation(&[0.3, 0.7], &[0.3, 0.7]), 0.0);
        assert!((total_variation(&[0.5, 0.5, 0.0], &[0.0, 0.5, 0.5]) - 0.5).abs() < 1e-9);
    }

    /// Unscaled dot products of unit-variance vectors have variance ≈ d; divided by √d, ≈ 1.
    #[test]
    fn unscaled_scores_have_variance_d() {
        let d = Device::flex();
        d.seed(7);
        for dk in [16usize, 64] {
            let raw = score_stats(dk, 256, 64, 1.0, &d);
            let scaled = score_stats(dk, 256, 64, (dk as f64).sqrt(), &d);
            assert!((raw.variance / dk as f64 - 1.0).abs() < 0.1, "{dk}: {raw:?}");
            assert!((scaled.variance - 1.0).abs() < 0.1, "{dk}: {scaled:?}");
            // Larger scores, a peakier softmax. (The Jacobian's norm is not monotone in that:
            // it is small both for a uniform softmax and a saturated one.)
            assert!(raw.entropy < scaled.entropy && raw.max_weight > scaled.max_weight, "{raw:?} {scaled:?}");
        }
    }

    #[test]
    fn slope_of_a_line_and_the_gap_of_an_equivariant_map() {
        assert!((slope(&[0.0, 1.0, 2.0], &[1.0, 3.0, 5.0]) - 2.0).abs() < 1e-12);
        let d = Device::flex();
        let ids = Tensor::<2, Int>::from_data(TensorData::new((0..14i64).collect::<Vec<_>>(), [2, 7]), &d);
        // Elementwise in positions: equivariant, gap 0. Adding the position: not.
        let (eq, _) = permutation_gap(&ids, |ids| ids.clone().float().unsqueeze_dim::<3>(2));
        assert_eq!(eq, 0.0);
        let (neq, _) = permutation_gap(&ids, |ids| {
            let pos = Tensor::<1, Int>::arange(0..7, &d).float().reshape([1, 7]);
            (ids.clone().float() + pos).unsqueeze_dim::<3>(2)
        });
        assert!(neq >= 1.0);
    }
}

/// How to read the bytes the process holds allocated: set by a binary whose global allocator
/// counts them (the `s2s` CLI's does), left unset elsewhere (memory is then not measured).
#[derive(Debug, Clone, Copy)]
pub struct AllocationCounter {
    /// Starts counting and measures the peak from here.
    pub count_from_now: fn(),
    /// The most bytes held at once since `count_from_now`, beyond those held then.
    pub peak_bytes: fn() -> usize,
}

static COUNTER: std::sync::OnceLock<AllocationCounter> = std::sync::OnceLock::new();

/// Sets the process's [`AllocationCounter`] (the first call wins).
pub fn count_allocations_with(counter: AllocationCounter) {
    let _ = COUNTER.set(counter);
}

/// The most bytes `f` held allocated at once beyond what was held when it began (all threads:
/// the worker threads' buffers count), or `None` when no counter is set.
pub fn peak_bytes(f: impl FnOnce()) -> Option<usize> {
    let c = COUNTER.get()?;
    (c.count_from_now)();
    f();
    Some((c.peak_bytes)())
}
