//! Data-parallel training (`devices = N`) takes the step that `accumulate = N` takes on one
//! device: same batches, same loss scaling, gradients summed on the first device in device
//! order. Checked with two replicas of the CPU device (the machinery — forked weights, one
//! thread per device, gradients moved back — is the same as on two GPUs) and, where a Vulkan
//! adapter exists, with the second replica on wgpu.

mod common;

use std::path::Path;

use burn::tensor::Device;
use s2s_models::{AttentionRnnSpec, ModelSpec};
use s2s_train::pipeline::run_and_test;
use s2s_train::run::RunConfig;
use s2s_train::{Budget, TrainSpec};

fn config(devices: u32, accumulate: u32) -> RunConfig {
    common::small_run(
        ModelSpec::Bahdanau(AttentionRnnSpec {
            emb: 16,
            hidden: 16,
            attention_dim: 16,
            dropout: 0.0,
            ..Default::default()
        }),
        TrainSpec {
            devices,
            accumulate,
            // Each batch whole on the one-device side too (crate::core_split is tested on its own).
            core_split: 1,
            budget: Budget { steps: Some(6), epochs: None, minutes: None },
            valid_every: 3,
            valid_bleu_sentences: 8,
            batch: s2s_data::BatchConfig { max_tokens: 120, ..Default::default() },
            ..Default::default()
        },
    )
}

/// metrics.csv without its wall-clock columns, and the last checkpoint's tensor bytes (the
/// burnpack file after its header, which carries per-run metadata).
fn run(cfg: &RunConfig, devices: &[Device], dir: &Path) -> (Vec<Vec<String>>, Vec<u8>) {
    let search = s2s_train::testset::greedy(cfg.train.max_output);
    let out =
        run_and_test(cfg, dir, devices, "test", false, &search, s2s_train::pipeline::Tested::Best, &|_| {})
            .expect("training runs");
    assert_eq!(out.train.steps, 6);
    let mut rdr = csv::Reader::from_path(dir.join("metrics.csv")).expect("metrics.csv");
    let headers = rdr.headers().expect("header").clone();
    let rows = rdr
        .records()
        .map(|r| {
            let r = r.expect("row");
            headers
                .iter()
                .zip(r.iter())
                .filter(|(h, _)| *h != "wall" && *h != "tokens_per_s")
                .map(|(h, v)| format!("{h}={v}"))
                .collect()
        })
        .collect();
    (rows, common::last_weights(dir))
}

#[test]
fn two_devices_take_the_step_of_accumulating_two_batches() {
    let tmp = std::env::temp_dir().join(format!("s2s-dp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let cpu = Device::flex();
    let (one, w_one) = run(&config(1, 2), &[cpu.clone()], &tmp.join("accumulate2"));
    let (two, w_two) = run(&config(2, 1), &[cpu.clone(), cpu.clone()], &tmp.join("devices2"));
    assert_eq!(one, two, "metrics differ");
    assert!(w_one == w_two, "weights differ");
    // A different split of the work is a different run: the comparison can fail.
    let (single, _) = run(&config(1, 1), &[cpu.clone()], &tmp.join("single"));
    assert_ne!(single, one);

    // The second replica on wgpu (lavapipe here): weights forked to another backend, gradients
    // brought back. Floats differ slightly between backends, so compare losses with a tolerance.
    if let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() {
        let (mixed, _) = run(&config(2, 1), &[cpu, gpu], &tmp.join("mixed"));
        let loss = |rows: &[Vec<String>]| -> Vec<f64> {
            rows.iter()
                .flat_map(|r| r.iter().filter(|c| c.starts_with("train_loss=") || c.starts_with("val_ppl=")))
                .map(|c| c.split('=').nth(1).unwrap().parse().unwrap())
                .collect()
        };
        let (a, b) = (loss(&one), loss(&mixed));
        assert!(!a.is_empty() && a.len() == b.len());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-3 * x.abs().max(1.0), "cpu+cpu {x} vs cpu+wgpu {y}");
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
