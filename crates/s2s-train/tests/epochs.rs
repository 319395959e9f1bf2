//! An epoch budget is whole passes over the training data (fairseq's `--max-epoch`): a run
//! stops at the end of its last pass, each pass counted with its own batches, though
//! token-filled epochs differ by a few.

mod common;

use s2s_data::StreamBatcher;
use s2s_train::pipeline::run_and_test;
use s2s_train::run::prepare;
use s2s_train::{Budget, TrainSpec};

#[test]
fn an_epoch_budget_stops_at_the_end_of_the_last_pass() {
    let cfg = common::small_run(
        common::tiny_transformer(0.1),
        TrainSpec {
            budget: Budget { steps: None, epochs: Some(3), minutes: None },
            valid_every: 1000,
            valid_bleu_sentences: 8,
            // Pools of 4 batches' worth: several pools, so the passes' batches differ.
            batch: s2s_data::BatchConfig { max_tokens: 150, pool_batches: 4, ..Default::default() },
            ..Default::default()
        },
    );
    let dir = std::env::temp_dir().join(format!("s2s-epochs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let search = s2s_train::testset::greedy(cfg.train.max_output);
    let out = run_and_test(
        &cfg,
        &dir,
        &[burn::tensor::Device::flex()],
        "test",
        false,
        &search,
        s2s_train::pipeline::Tested::Best,
        &|_| {},
    )
    .expect("training runs");
    // The same data, prepared again for the run directory, planned pass by pass.
    let data = prepare(&cfg, &dir).expect("prepared again").data;
    let batcher = StreamBatcher::new(&data.train, cfg.train.batch);
    let lens: Vec<u64> = (0..3).map(|e| batcher.epoch_len(cfg.train.seed, e) as u64).collect();
    assert!(lens.iter().any(|&l| l != lens[0]), "the passes differ in length here: {lens:?}");
    assert_eq!(out.train.steps, lens.iter().sum::<u64>(), "passes of {lens:?} batches");
    let _ = std::fs::remove_dir_all(&dir);
}
