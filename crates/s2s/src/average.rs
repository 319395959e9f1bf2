//! `s2s average`: a run's last N checkpoints averaged into a new one.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use s2s_data::Tokenizers;
use s2s_train::lock::DirLock;
use s2s_train::run::read_manifest;

use crate::out::outln;

/// Average the last N checkpoints of a run into `checkpoints/average-last-N/` (a new
/// checkpoint; the originals are untouched). Translate with it: `s2s translate --model RUN
/// --checkpoint average-last-N`.
#[derive(Args, Debug)]
pub struct AverageArgs {
    /// The run directory.
    #[arg(value_name = "RUN_DIR")]
    run: PathBuf,
    /// How many of the most recent checkpoints (train with `keep_last = N` in [train]).
    #[arg(long, default_value_t = 5)]
    last: usize,
}

/// Runs `s2s average`.
pub fn run(a: AverageArgs) -> Result<()> {
    let manifest = read_manifest(&a.run)
        .with_context(|| format!("{} is not a run directory (no readable run.json)", a.run.display()))?;
    // It writes into the run: not while another process (a training) writes it.
    let _lock = DirLock::acquire(&a.run)?;
    let tok = Tokenizers::load(&a.run.join("tokenizer"))
        .with_context(|| format!("loading {}", a.run.join("tokenizer").display()))?;
    let (dir, record) = s2s_train::average::average_last(&a.run, &manifest.config.model, &tok, a.last)?;
    let steps: Vec<String> = record.steps.iter().map(|s| s.to_string()).collect();
    eprintln!("averaged the checkpoints of steps {}", steps.join(", "));
    outln!("{}", dir.display())?;
    Ok(())
}
