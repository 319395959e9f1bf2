//! The label-smoothed loss's backward pass on the bench's logits (`[64, 24, 8000]`, the
//! `lstm` shape's batch), best of 30 (figures in docs/benchmarks.md):
//!
//!     cargo run --release -p s2s-train --example loss_backward

use std::time::Instant;

use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use s2s_train::loss::label_smoothed_loss;

fn main() {
    let (n, t, v) = (64usize, 24usize, 8000usize);
    let d = Device::flex().autodiff();
    d.seed(0);
    let logits = Tensor::<3>::random([n, t, v], Distribution::Normal(0.0, 2.0), &d);
    let ids: Vec<i64> = (0..n * t).map(|i| ((i * 7919) % v) as i64).collect();
    let targets = Tensor::<2, Int>::from_data(TensorData::new(ids, [n, t]), &d);
    let keep = Tensor::<2>::ones([n, t], &d);
    // On a rayon worker, as the `s2s` binary runs its commands.
    let best = rayon::ThreadPoolBuilder::new().build().expect("a thread pool").install(|| {
        (0..30)
            .map(|_| {
                let loss = label_smoothed_loss(logits.clone().require_grad(), targets.clone(), &keep, 0.1);
                let t0 = Instant::now();
                drop(loss.smoothed.backward());
                t0.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    });
    println!("loss backward on [{n}, {t}, {v}] logits: best of 30 {:.2} ms", best * 1e3);
}
