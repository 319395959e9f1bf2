//! The course's trained model, shared by the claims that need one: a small Bahdanau model on
//! the built-in pair, trained once per course directory (`runs/bahdanau`; a rerun finds it
//! finished and reuses it).

use std::path::PathBuf;

use burn::tensor::Device;
use s2s_models::{AttentionRnnSpec, ModelSpec};
use s2s_train::run::{DataSpec, RunConfig};
use s2s_train::{Budget as TrainBudget, TrainSpec};

use crate::Context;

/// The run's configuration: its budget in steps, so the model is the same on any machine.
pub fn config(ctx: &Context) -> RunConfig {
    RunConfig {
        data: DataSpec::Builtin { pairs: 4000, seed: 1, max_tokens: 24 },
        tokenizer: s2s_data::TokenizerConfig {
            level: s2s_data::Level::Word,
            vocab_size: 0,
            joint: false,
            min_freq: 1,
        },
        model: ModelSpec::Bahdanau(AttentionRnnSpec {
            emb: 32,
            hidden: 64,
            attention_dim: 64,
            ..Default::default()
        }),
        train: TrainSpec {
            budget: TrainBudget { steps: Some(ctx.budget.pick(2000, 300)), epochs: None, minutes: None },
            valid_every: ctx.budget.pick(100, 50),
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
    let dir = ctx.work.join(format!("bahdanau-{}", ctx.budget.pick("full", "quick")));
    let cfg = config(ctx);
    let search = s2s_train::testset::greedy(cfg.train.max_output);
    s2s_train::pipeline::run_and_test(&cfg, &dir, &[Device::flex()], "cpu", false, &search, 1, &|_| {})
        .map_err(|e| format!("training the course's model in {}: {e}", dir.display()))?;
    Ok(dir)
}
