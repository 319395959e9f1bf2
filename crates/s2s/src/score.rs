//! `s2s score`: sacreBLEU-compatible scoring of a hypothesis file (or stdin).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use s2s_eval::{Format, Metric, ScoreRequest, Smoothing, Tokenizer};

/// Score hypotheses against one or more references, like the sacrebleu CLI (BLEU: 13a,
/// mixed case, exponential smoothing; chrF2). Prints each score with its signature.
#[derive(Args, Debug)]
pub struct ScoreArgs {
    /// Hypothesis file, one segment per line (default: standard input).
    #[arg(long)]
    hyp: Option<PathBuf>,
    /// Reference file; repeat for several references.
    #[arg(long = "ref", required = true)]
    refs: Vec<PathBuf>,
    /// Metrics, comma-separated: bleu, chrf.
    #[arg(long, value_delimiter = ',', default_value = "bleu,chrf")]
    metrics: Vec<Metric>,
    /// Output format: text or json.
    #[arg(long, default_value = "text")]
    format: Format,
    /// BLEU tokenisation: 13a (default), intl or none.
    #[arg(long, default_value = "13a")]
    tokenize: Tokenizer,
    /// Lowercase hypotheses and references before scoring.
    #[arg(long)]
    lowercase: bool,
    /// BLEU smoothing: exp (default), floor, add-k or none.
    #[arg(long, default_value = "exp")]
    smooth: Smoothing,
    /// chrF word n-gram order (2 gives chrF++).
    #[arg(long, default_value_t = 0)]
    chrf_word_order: usize,
    /// Decimals printed (sacreBLEU's --width).
    #[arg(long, default_value_t = 1)]
    width: usize,
}

/// Runs `s2s score`.
pub fn run(a: ScoreArgs) -> Result<()> {
    let req = ScoreRequest {
        hyp: a.hyp,
        refs: a.refs,
        metrics: a.metrics,
        format: a.format,
        tokenize: a.tokenize,
        lowercase: a.lowercase,
        smoothing: a.smooth,
        chrf_word_order: a.chrf_word_order,
        width: a.width,
    };
    let text = s2s_eval::run_score(&req, std::io::stdin().lock())?;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    Ok(())
}
