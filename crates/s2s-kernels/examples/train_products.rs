//! One thread, the lstm bench shape's training products (one core-split part: 768 rows):
//! `gemm` (burn's product, `matmul_2d`) against our packed kernel (packing included); then the
//! recurrent steps' 32-row products (one part's state by a weight packed once, 24 steps in a row,
//! as a layer's pass runs them), packed kernel only.
//!
//!   cargo run --release -p s2s-kernels --example train_products -- [ROUNDS]

use std::time::Instant;

use burn::backend::flex::FlexTensor;
use burn::tensor::TensorData;
use s2s_kernels::bench::{PackedB, matmul_2d};

fn tensor(rows: usize, cols: usize, seed: u32) -> (Vec<f32>, FlexTensor) {
    let v: Vec<f32> = (0..rows * cols)
        .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    (v.clone(), FlexTensor::from_data(TensorData::new(v, [rows, cols])))
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    pool.install(|| {
        for (name, m, k, n) in [
            ("output fwd", 768, 512, 8000),
            ("output dx", 768, 8000, 512),
            ("output dW", 512, 768, 8000),
            ("x W_x 512", 768, 512, 2048),
            ("x W_x 256", 768, 256, 2048),
            ("dx W_x", 768, 2048, 512),
            ("dW_x / dW_h", 512, 768, 2048),
        ] {
            let (a, at) = tensor(m, k, 1);
            let (b, bt) = tensor(k, n, 2);
            let flop = 2.0 * (m * k * n) as f64;
            let (mut g, mut p) = (f64::MAX, f64::MAX);
            for _ in 0..rounds {
                let t = Instant::now();
                let y = matmul_2d(&at, &bt);
                g = g.min(t.elapsed().as_secs_f64());
                std::hint::black_box(y);
                let t = Instant::now();
                let packed = PackedB::from_row_blocks(k, n, |rows, block| {
                    block.copy_from_slice(&b[rows.start * n..rows.end * n])
                });
                let y = packed.product(&a, m, k, None);
                p = p.min(t.elapsed().as_secs_f64());
                std::hint::black_box(y);
            }
            println!(
                "{name:12} {m:5}×{k:5}×{n:5}: gemm {:6.1} GFLOP/s, packed {:6.1} ({:+.0} %)",
                flop / g / 1e9,
                flop / p / 1e9,
                100.0 * (g / p - 1.0)
            );
        }
        for (name, m, k, n) in [
            ("h W_h", 32, 512, 2048),
            ("[x; h̃] W_x", 32, 768, 2048),
            ("∂g W_hᵀ", 32, 2048, 512),
            ("[h; c] W_c", 32, 1024, 512),
        ] {
            let (a, _) = tensor(m, k, 1);
            let (b, _) = tensor(k, n, 2);
            let packed = PackedB::from_row_blocks(k, n, |rows, block| {
                block.copy_from_slice(&b[rows.start * n..rows.end * n])
            });
            let mut c = vec![0f32; m * n];
            let steps = 24;
            let flop = 2.0 * (m * k * n * steps) as f64;
            let mut best = f64::MAX;
            for _ in 0..rounds.max(5) {
                let t = Instant::now();
                for _ in 0..steps {
                    packed.matmul(&a, m, k, &mut c, n, false);
                    std::hint::black_box(&mut c);
                }
                best = best.min(t.elapsed().as_secs_f64());
            }
            println!("{name:12} {m:5}×{k:5}×{n:5}: packed, {steps} steps {:6.1} GFLOP/s", flop / best / 1e9);
        }
    });
}
