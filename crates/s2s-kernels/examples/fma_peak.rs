//! The machine's f32 FMA peak per core, alone and with every core busy: ten independent chains
//! of 8-wide fused multiply-adds in registers (no memory traffic) on each of N threads.
//!
//!   cargo run --release -p s2s-kernels --example fma_peak -- [THREADS] [ITERATIONS]
//!
//! If two vCPUs are SMT siblings of one physical core they share its FMA units, and each
//! thread's rate halves when both run; on separate cores it stays. A product that slows with
//! more threads while this does not is bound by memory or cache, not by arithmetic
//! (docs/benchmarks.md, "CPU: where a step's time goes"). AVX2 and FMA only; elsewhere it says so.

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let iters: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(300_000_000);
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        let rates: Vec<f64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|_| s.spawn(move || unsafe { chains(iters) })).collect();
            handles.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        let each: Vec<String> = rates.iter().map(|r| format!("{r:.1}")).collect();
        println!(
            "{threads} thread(s): {} GFLOP/s each, {:.1} together",
            each.join(" / "),
            rates.iter().sum::<f64>()
        );
        return;
    }
    println!("fma_peak needs an x86-64 CPU with AVX2 and FMA");
}

/// GFLOP/s of one thread running `iters` rounds of ten independent 8-wide FMAs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn chains(iters: u64) -> f64 {
    use std::arch::x86_64::*;
    let (b, c) = (_mm256_set1_ps(1.000_000_1), _mm256_set1_ps(1e-7));
    let mut a: [__m256; 10] = std::array::from_fn(|i| _mm256_set1_ps(i as f32));
    let t = Instant::now();
    for _ in 0..iters {
        for x in a.iter_mut() {
            *x = _mm256_fmadd_ps(*x, b, c);
        }
    }
    let s = t.elapsed().as_secs_f64();
    std::hint::black_box(&a);
    iters as f64 * 10.0 * 16.0 / s / 1e9
}
