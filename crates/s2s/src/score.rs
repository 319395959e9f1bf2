//! `s2s score`: sacreBLEU-compatible scoring of a hypothesis file (or stdin).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use s2s_eval::{Format, Metric, PairedTest, ScoreRequest, Seed, Smoothing, TerConfig, Tokenizer};

/// Score hypotheses against one or more references, like the sacrebleu CLI (BLEU: 13a,
/// mixed case, exponential smoothing; chrF2; TER). Prints each score with its signature;
/// several --hyp files give a table, and --paired-bs / --paired-ar test each against the
/// first (seed 12345, or SACREBLEU_SEED).
#[derive(Args, Debug)]
pub struct ScoreArgs {
    /// Hypothesis file, one segment per line; repeat for several systems (default: standard
    /// input).
    #[arg(long)]
    hyp: Vec<PathBuf>,
    /// Reference file; repeat for several references.
    #[arg(long = "ref", required = true)]
    refs: Vec<PathBuf>,
    /// Metrics, comma-separated: bleu, chrf, ter.
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
    /// TER: case-sensitive (default: lowercase).
    #[arg(long)]
    ter_case_sensitive: bool,
    /// TER: normalise punctuation and XML entities.
    #[arg(long)]
    ter_normalized: bool,
    /// TER: remove punctuation.
    #[arg(long)]
    ter_no_punct: bool,
    /// TER: treat Asian scripts specially (with --ter-normalized or --ter-no-punct).
    #[arg(long)]
    ter_asian_support: bool,
    /// Paired bootstrap resampling of each --hyp against the first (the baseline).
    #[arg(long, conflicts_with = "paired_ar")]
    paired_bs: bool,
    /// Paired approximate randomization of each --hyp against the first (the baseline).
    #[arg(long)]
    paired_ar: bool,
    /// Bootstrap resamples of --paired-bs.
    #[arg(long, default_value_t = 1000, value_parser = crate::args::at_least_one)]
    paired_bs_n: usize,
    /// Trials of --paired-ar.
    #[arg(long, default_value_t = 10000, value_parser = crate::args::at_least_one)]
    paired_ar_n: usize,
}

/// Runs `s2s score`.
pub fn run(a: ScoreArgs) -> Result<()> {
    let paired = if a.paired_bs {
        Some(PairedTest::Bootstrap)
    } else if a.paired_ar {
        Some(PairedTest::ApproximateRandomization)
    } else {
        None
    };
    let req = ScoreRequest {
        hyps: a.hyp,
        refs: a.refs,
        metrics: a.metrics,
        format: a.format,
        tokenize: a.tokenize,
        lowercase: a.lowercase,
        smoothing: a.smooth,
        chrf_word_order: a.chrf_word_order,
        width: a.width,
        ter: TerConfig {
            normalized: a.ter_normalized,
            no_punct: a.ter_no_punct,
            asian_support: a.ter_asian_support,
            case_sensitive: a.ter_case_sensitive,
        },
        paired,
        paired_bs_n: a.paired_bs_n,
        paired_ar_n: a.paired_ar_n,
        seed: Seed::from_env()?,
    };
    let text = s2s_eval::run_score(&req, std::io::stdin().lock())?;
    let mut out = crate::out::Stdout::lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}
