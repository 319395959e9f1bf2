//! A CPU step cut over the cores (`core_split`, `s2s_train::core_split`): the same step as the
//! batch whole up to rounding, and the same run, bit for bit, whatever the number of threads
//! (the parts run at once on two threads, one after another on one).

mod common;

use std::path::Path;

use s2s_train::pipeline::run_and_test;
use s2s_train::run::RunConfig;
use s2s_train::{Budget, TrainSpec};

fn config(core_split: u32, dropout: f64) -> RunConfig {
    common::small_run(
        common::tiny_transformer(dropout),
        TrainSpec {
            core_split,
            budget: Budget { steps: Some(6), epochs: None, minutes: None },
            valid_every: 3,
            valid_bleu_sentences: 8,
            batch: s2s_data::BatchConfig { max_tokens: 120, ..Default::default() },
            ..Default::default()
        },
    )
}

/// Each metrics row's training loss and validation perplexity, and the last checkpoint's
/// tensor bytes (the burnpack file after its header, which carries per-run metadata), of
/// `cfg` trained on `threads` threads.
fn run(cfg: &RunConfig, threads: usize, dir: &Path) -> (Vec<(f64, f64)>, Vec<u8>) {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
    pool.install(|| {
        let search = s2s_train::testset::greedy(cfg.train.max_output);
        let cpu = burn::tensor::Device::flex();
        let out = run_and_test(
            cfg,
            dir,
            &[cpu],
            "test",
            false,
            &search,
            s2s_train::pipeline::Tested::Best,
            &|_| {},
        )
        .expect("training runs");
        assert_eq!(out.train.steps, 6);
    });
    let mut rdr = csv::Reader::from_path(dir.join("metrics.csv")).expect("metrics.csv");
    let headers = rdr.headers().expect("header").clone();
    let col = |name: &str| headers.iter().position(|h| h == name).expect("column");
    let (loss, ppl) = (col("train_loss"), col("val_ppl"));
    let rows = rdr
        .records()
        .map(|r| {
            let r = r.expect("row");
            (r[loss].parse().expect("loss"), r[ppl].parse().expect("ppl"))
        })
        .collect();
    (rows, common::last_weights(dir))
}

#[test]
fn a_step_cut_over_the_cores_is_the_whole_batch_step_and_does_not_depend_on_the_threads() {
    let tmp = std::env::temp_dir().join(format!("s2s-core-split-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    // Without dropout the parts' gradients add up to the whole batch's, up to rounding.
    let (whole, w_whole) = run(&config(1, 0.0), 2, &tmp.join("whole"));
    let (halves, w_halves) = run(&config(2, 0.0), 2, &tmp.join("halves"));
    assert_eq!(whole.len(), halves.len());
    for (a, b) in whole.iter().zip(&halves) {
        assert!((a.0 - b.0).abs() < 1e-4 * a.0 && (a.1 - b.1).abs() < 1e-4 * a.1, "{a:?} against {b:?}");
    }
    assert!(w_whole != w_halves, "summed in two halves, the gradients round differently");
    // With dropout, at once on two threads or one after another on one: the same run.
    let (two, w_two) = run(&config(2, 0.1), 2, &tmp.join("two-threads"));
    let (one, w_one) = run(&config(2, 0.1), 1, &tmp.join("one-thread"));
    assert_eq!(two, one, "metrics differ between two threads and one");
    assert!(w_two == w_one, "weights differ between two threads and one");
    let _ = std::fs::remove_dir_all(&tmp);
}
