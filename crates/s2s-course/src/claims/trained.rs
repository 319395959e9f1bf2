//! The course's trained model, shared by the claims that need one: a small Bahdanau model on
//! the built-in pair, trained once per course directory (`runs/bahdanau`; a rerun finds it
//! finished and reuses it).

use std::path::PathBuf;

use burn::tensor::Device;
use s2s_models::{AttentionRnnSpec, ModelSpec};
use s2s_train::run::{DataSpec, RunConfig};
use s2s_train::{Budget as TrainBudget, TrainSpec};

use crate::Context;

/// The course's shared model: its budget in steps, so the model is the same on any machine.
pub fn config(ctx: &Context) -> RunConfig {
    run_config(
        ModelSpec::Bahdanau(AttentionRnnSpec {
            emb: 32,
            hidden: 64,
            attention_dim: 64,
            ..Default::default()
        }),
        ctx.budget.pick(2000, 300),
        ctx.budget.pick(100, 50),
    )
}

/// `model` trained `steps` steps on the built-in pair (4,000 pairs), validated every
/// `valid_every` steps (perplexity, and greedy BLEU on 200 sentences).
pub fn run_config(model: ModelSpec, steps: u64, valid_every: u64) -> RunConfig {
    RunConfig {
        data: DataSpec::Builtin { pairs: 4000, seed: 1, max_tokens: 24 },
        ..long_config(model, steps, valid_every)
    }
}

/// [`run_config`] on the built-in pair's long sentences (8,000 pairs, sources up to 48 tokens).
pub fn long_config(model: ModelSpec, steps: u64, valid_every: u64) -> RunConfig {
    RunConfig {
        data: DataSpec::Builtin { pairs: 8000, seed: 1, max_tokens: 48 },
        tokenizer: s2s_data::TokenizerConfig {
            level: s2s_data::Level::Word,
            vocab_size: 0,
            joint: false,
            min_freq: 1,
        },
        model,
        train: TrainSpec {
            budget: TrainBudget { steps: Some(steps), epochs: None, minutes: None },
            valid_every,
            valid_bleu_sentences: 200,
            lr: 3e-3,
            batch: s2s_data::BatchConfig { max_tokens: 1024, ..Default::default() },
            capture: s2s_train::config::Capture::Off,
            ..Default::default()
        },
    }
}

/// The trained run's directory (trained now unless it is there, finished, for this budget).
pub fn bahdanau(ctx: &Context) -> Result<PathBuf, String> {
    train(ctx, "bahdanau", &config(ctx))
}

/// `cfg` trained into the course's `runs/NAME-BUDGET` (or found there, finished).
pub fn train(ctx: &Context, name: &str, cfg: &RunConfig) -> Result<PathBuf, String> {
    let dir = ctx.work.join(format!("{name}-{}", ctx.budget.pick("full", "quick")));
    let search = s2s_train::testset::greedy(cfg.train.max_output);
    s2s_train::pipeline::run_and_test(cfg, &dir, &[Device::flex()], "cpu", false, &search, 1, &|_| {})
        .map_err(|e| format!("training the course's model in {}: {e}", dir.display()))?;
    Ok(dir)
}

/// A validation row: (step, perplexity, BLEU).
pub type Row = (f64, f64, f64);

/// A run's validation rows.
pub fn metrics(dir: &std::path::Path) -> Vec<Row> {
    let Ok(mut r) = csv::Reader::from_path(dir.join("metrics.csv")) else { return Vec::new() };
    r.deserialize::<std::collections::HashMap<String, String>>()
        .filter_map(|row| {
            let row = row.ok()?;
            let f = |k: &str| row.get(k)?.parse::<f64>().ok();
            Some((f("step")?, f("val_ppl")?, f("val_bleu")?))
        })
        .collect()
}
