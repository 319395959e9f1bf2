//! The LSTM step beside the machine's best product rate (the goal: at least 0.8 of it), both measured
//! in one run so that they meet the same machine state (`s2s bench --lstm-step`).
//!
//! One LSTM layer over `time` steps runs `time` recurrent products `h_{t−1} W_h`, `[batch,
//! hidden] × [hidden, 4·hidden]`: `2·time·batch·hidden·4·hidden` flops. The layer's rate is
//! those flops over a whole layer call: everything around the products (adding `x W_x`, the
//! gate math, writing outputs and what backward needs, packing `W_h`, the threads waiting
//! for each other's state) counts as time. The backward pass has twice those flops: per step
//! `∂gates W_hᵀ`, and `∂W_h` as one product over all steps. A training step of the layer is
//! the forward and the backward pass of the same round: three times the forward flops over
//! their summed time.
//!
//! The machine's best product rate is the fastest of the products this toolkit runs, each
//! alone on all the pool's threads: the step's own product against a `W_h` packed once
//! ([`PackedB`]), a decoder's output-layer product, and `gemm`'s large training products
//! ([`matmul_2d`]). Every figure is its best call, so they compare like with like (a layer
//! call's best against a product's best), and the calls are interleaved round by round.

use std::time::Instant;

use burn::backend::flex::FlexTensor;
use burn::tensor::{Device, Tensor, TensorData};
use s2s_kernels::bench::{PackedB, lstm_layer, matmul_2d};
use serde::Serialize;

/// One product of the best-rate candidates.
#[derive(Debug, Clone, Serialize)]
pub struct ProductRate {
    /// `[m, k] × [k, n]` and how it was run.
    pub product: String,
    /// GFLOP/s of its best call.
    pub gflops: f64,
}

/// What `s2s bench --lstm-step` reports.
#[derive(Debug, Clone, Serialize)]
pub struct StepRate {
    /// `[batch, hidden]`, `time` steps.
    pub batch: usize,
    /// Hidden units (`W_h` is `[hidden, 4·hidden]`).
    pub hidden: usize,
    /// Steps per layer call.
    pub time: usize,
    /// Threads the kernels split over.
    pub threads: usize,
    /// The candidates for the best product rate.
    pub products: Vec<ProductRate>,
    /// The best of them, GFLOP/s.
    pub best_product_gflops: f64,
    /// A whole forward layer call without autodiff (encoding while decoding), GFLOP/s.
    pub decode_layer_gflops: f64,
    /// A whole forward layer call under autodiff (saving what backward needs), GFLOP/s.
    pub train_forward_gflops: f64,
    /// The layer's backward pass (twice the forward flops), GFLOP/s.
    pub train_backward_gflops: f64,
    /// A training step's share of the layer, forward and backward of the same round (three
    /// times the forward flops over their summed time), GFLOP/s.
    pub train_step_gflops: f64,
    /// `decode_layer_gflops / best_product_gflops`.
    pub decode_ratio: f64,
    /// `train_forward_gflops / best_product_gflops`.
    pub train_forward_ratio: f64,
    /// `train_backward_gflops / best_product_gflops`.
    pub train_backward_ratio: f64,
    /// `train_step_gflops / best_product_gflops`.
    pub train_step_ratio: f64,
}

/// Seconds `f` takes once.
fn seconds(f: impl FnOnce()) -> f64 {
    let t0 = Instant::now();
    f();
    t0.elapsed().as_secs_f64()
}

fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = s2s_data::rng::SplitMix64::new(seed);
    (0..len).map(|_| (rng.next_u64() % 2001) as f32 / 1000.0 - 1.0).collect()
}

/// One candidate for the best product rate, ready to run: `[m, k] × [k, n]`.
enum Product {
    /// Through [`PackedB::matmul`]`_par` against a `B` packed once (the step's product, and
    /// a decoder's output layer).
    Packed { a: Vec<f32>, b: PackedB, c: Vec<f32>, m: usize, k: usize, n: usize },
    /// Through `gemm` ([`matmul_2d`]), as the large training products run.
    Gemm { a: FlexTensor, b: FlexTensor, m: usize, k: usize, n: usize },
}

impl Product {
    fn packed(m: usize, k: usize, n: usize) -> Self {
        let w = random(k * n, 2);
        let b = PackedB::from_rows(k, n, |r, row| row.copy_from_slice(&w[r * n..(r + 1) * n]));
        Self::Packed { a: random(m * k, 1), b, c: vec![0f32; m * n], m, k, n }
    }

    fn gemm(m: usize, k: usize, n: usize) -> Self {
        let a = FlexTensor::from_data(TensorData::new(random(m * k, 3), [m, k]));
        let b = FlexTensor::from_data(TensorData::new(random(k * n, 4), [k, n]));
        Self::Gemm { a, b, m, k, n }
    }

    fn name(&self) -> String {
        match self {
            Self::Packed { m, k, n, .. } => format!("[{m}, {k}] × [{k}, {n}] packed"),
            Self::Gemm { m, k, n, .. } => format!("[{m}, {k}] × [{k}, {n}] gemm"),
        }
    }

    fn flops(&self) -> f64 {
        let (Self::Packed { m, k, n, .. } | Self::Gemm { m, k, n, .. }) = self;
        2.0 * (m * k * n) as f64
    }

    /// Seconds of one product.
    fn run(&mut self) -> f64 {
        match self {
            Self::Packed { a, b, c, m, k, n } => seconds(|| b.matmul_par(a, *m, *k, c, *n)),
            Self::Gemm { a, b, .. } => seconds(|| drop(matmul_2d(a, b))),
        }
    }
}

/// Measures the LSTM step of a `[batch, hidden]` layer over `time` steps beside the best
/// product rate (see the module doc) on the CPU (flex). `rounds` rounds, each running every
/// product three times back to back (the step's own, which is short, six) and every layer
/// figure once, so that a machine whose speed drifts (shared VMs: ±20 % between runs) drifts
/// under both sides of the ratio alike; each figure is its best round.
pub fn lstm_step_rate(batch: usize, hidden: usize, time: usize, out_vocab: usize, rounds: usize) -> StepRate {
    let four_h = 4 * hidden;
    let mut products = [
        Product::packed(batch, hidden, four_h),
        // Bahdanau's deep output on the bench shapes: `[s_t; c_t; E y]`, 512 + 512 + 256 wide.
        Product::packed(batch, 2 * hidden + hidden / 2, out_vocab),
        Product::gemm(batch * time, hidden, four_h),
        Product::gemm(batch * time, hidden, out_vocab),
    ];
    let flops = 2.0 * (time * batch * hidden * four_h) as f64;
    let plain = Device::flex();
    let decode_args = layer_inputs(batch, hidden, time, &plain);
    let LayerArgs { xw, w, zeros, keep } = layer_inputs(batch, hidden, time, &plain.autodiff());
    let train_args = LayerArgs { xw: xw.require_grad(), w: w.require_grad(), zeros, keep };

    let times = best_times(&mut products, &decode_args, &train_args, time, rounds);
    report(batch, hidden, time, flops, &products, &times)
}

/// The operands of one layer call.
struct LayerArgs {
    /// `x W_x`, `[batch, time, 4·hidden]`.
    xw: Tensor<3>,
    /// `W_h`, `[hidden, 4·hidden]`.
    w: Tensor<2>,
    /// The initial hidden and cell state, `[batch, hidden]`.
    zeros: Tensor<2>,
    /// The keep mask, `[batch, time]`.
    keep: Tensor<2>,
}

/// Returns a layer's operands on `d`: random `x W_x` and `W_h` (seeds 5 and 6), a zero initial
/// state and an all-ones keep mask.
fn layer_inputs(batch: usize, hidden: usize, time: usize, d: &Device) -> LayerArgs {
    let four_h = 4 * hidden;
    let xw =
        Tensor::<3>::from_data(TensorData::new(random(batch * time * four_h, 5), [batch, time, four_h]), d);
    let w = Tensor::<2>::from_data(TensorData::new(random(hidden * four_h, 6), [hidden, four_h]), d)
        .mul_scalar(0.05);
    LayerArgs {
        xw,
        w,
        zeros: Tensor::<2>::zeros([batch, hidden], d),
        keep: Tensor::<2>::ones([batch, time], d),
    }
}

/// The best seconds of each figure over the counted rounds.
struct BestTimes {
    /// Of one call of each product, in the order of the candidates.
    products: [f64; 4],
    /// Of a forward layer call without autodiff.
    decode: f64,
    /// Of a forward layer call under autodiff.
    forward: f64,
    /// Of the layer's backward pass.
    backward: f64,
    /// Of a forward and backward pass of the same round.
    step: f64,
}

/// Runs the warm-up round and `rounds` counted rounds of every product and layer figure,
/// interleaved, and returns each figure's best time.
fn best_times(
    products: &mut [Product; 4],
    decode_args: &LayerArgs,
    train_args: &LayerArgs,
    time: usize,
    rounds: usize,
) -> BestTimes {
    let layer = |a: &LayerArgs| {
        lstm_layer(a.xw.clone(), a.w.clone(), a.zeros.clone(), a.zeros.clone(), a.keep.clone(), time, false)
    };
    let mut product_s = [f64::INFINITY; 4];
    let [mut decode, mut forward, mut backward, mut step] = [f64::INFINITY; 4];
    // Round 0 warms up (first touches, packing caches) and is not counted.
    for round in 0..=rounds.max(1) {
        let keep_best = |best: &mut f64, s: f64| {
            if round > 0 {
                *best = best.min(s);
            }
        };
        for (i, p) in products.iter_mut().enumerate() {
            // Back to back, so its best call runs with its operands in cache, as a product
            // runs at its best: the layer is held to that, not to a product run cold.
            for _ in 0..if i == 0 { 6 } else { 3 } {
                let s = p.run();
                keep_best(&mut product_s[i], s);
            }
        }
        keep_best(&mut decode, seconds(|| drop(layer(decode_args))));
        let t0 = Instant::now();
        let (out, h, c) = layer(train_args);
        let f = t0.elapsed().as_secs_f64();
        keep_best(&mut forward, f);
        let loss = out.sum() + h.sum() + c.sum();
        let b = seconds(|| drop(loss.backward()));
        keep_best(&mut backward, b);
        keep_best(&mut step, f + b);
    }
    BestTimes { products: product_s, decode, forward, backward, step }
}

/// Returns the report: each figure's rate (`flops` a forward layer call) and its ratio to the
/// best product rate.
fn report(
    batch: usize,
    hidden: usize,
    time: usize,
    flops: f64,
    products: &[Product],
    times: &BestTimes,
) -> StepRate {
    let products: Vec<ProductRate> = products
        .iter()
        .zip(&times.products)
        .map(|(p, s)| ProductRate { product: p.name(), gflops: p.flops() / s / 1e9 })
        .collect();
    let best = products.iter().map(|p| p.gflops).fold(0.0, f64::max);
    let rate = |s: f64, f: f64| f / s / 1e9;
    let (decode_layer_gflops, train_forward_gflops) = (rate(times.decode, flops), rate(times.forward, flops));
    let train_backward_gflops = rate(times.backward, 2.0 * flops);
    let train_step_gflops = rate(times.step, 3.0 * flops);
    StepRate {
        batch,
        hidden,
        time,
        threads: rayon::current_num_threads(),
        products,
        best_product_gflops: best,
        decode_layer_gflops,
        train_forward_gflops,
        train_backward_gflops,
        train_step_gflops,
        decode_ratio: decode_layer_gflops / best,
        train_forward_ratio: train_forward_gflops / best,
        train_backward_ratio: train_backward_gflops / best,
        train_step_ratio: train_step_gflops / best,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures are finite, positive and consistent on a small shape (a check of the
    /// arithmetic and of the calls, not of any speed).
    #[test]
    fn reports_consistent_rates_on_a_small_shape() {
        let r = lstm_step_rate(4, 16, 3, 40, 1);
        assert_eq!(r.products.len(), 4);
        assert!(r.products.iter().all(|p| p.gflops.is_finite() && p.gflops > 0.0));
        let best = r.products.iter().map(|p| p.gflops).fold(0.0, f64::max);
        assert_eq!(r.best_product_gflops, best);
        for g in [r.decode_layer_gflops, r.train_forward_gflops, r.train_backward_gflops, r.train_step_gflops]
        {
            assert!(g.is_finite() && g > 0.0);
        }
        assert!((r.decode_ratio - r.decode_layer_gflops / best).abs() < 1e-12);
        // A step's time is one round's forward plus backward, each at least its best: its rate
        // lies at or below the harmonic combination of the best forward and backward rates.
        let bound = 3.0 / (1.0 / r.train_forward_gflops + 2.0 / r.train_backward_gflops);
        assert!(r.train_step_gflops <= bound * (1.0 + 1e-9), "{} > {bound}", r.train_step_gflops);
    }
}
