//! `s2s quantize`: a run's checkpoint with its weights in int8, written as a new checkpoint.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use s2s_data::Tokenizers;
use s2s_train::lock::DirLock;
use s2s_train::run::read_manifest;

use crate::out::outln;

/// Write a checkpoint's weights in int8 (one scale per output unit) into
/// `checkpoints/int8/`, about a quarter of the bytes; the original is untouched. Translate
/// with it: `s2s translate --model RUN --checkpoint int8` (int8 products on the CPU).
#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The run directory.
    #[arg(value_name = "RUN_DIR")]
    run: PathBuf,
    /// The precision to write: int8.
    #[arg(long, value_name = "int8")]
    to: String,
    /// Which checkpoint: best, last, or the name of one under RUN_DIR/checkpoints.
    #[arg(long, default_value = "best")]
    checkpoint: String,
}

/// Runs `s2s quantize`.
pub fn run(a: QuantizeArgs) -> Result<()> {
    if a.to != "int8" {
        bail!("--to {}: the one precision written is int8 (--to int8)", a.to);
    }
    let manifest = read_manifest(&a.run)
        .with_context(|| format!("{} is not a run directory (no readable run.json)", a.run.display()))?;
    // It writes into the run: not while another process (a training) writes it.
    let _lock = DirLock::acquire(&a.run)?;
    let tok = Tokenizers::load(&a.run.join("tokenizer"))
        .with_context(|| format!("loading {}", a.run.join("tokenizer").display()))?;
    let (dir, record) =
        s2s_train::quantized::quantize_checkpoint(&a.run, &manifest.config.model, &tok, &a.checkpoint)?;
    eprintln!(
        "quantized {} (step {}): {} bytes where model.bpk has {} ({:.0} %)",
        record.from,
        record.step,
        record.int8_bytes,
        record.f32_bytes,
        100.0 * record.int8_bytes as f64 / record.f32_bytes.max(1) as f64
    );
    outln!("{}", dir.display())?;
    Ok(())
}
