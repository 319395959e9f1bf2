//! `s2s data`: the built-in language pair and corpus statistics.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use s2s_data::stats::corpus_stats;
use s2s_data::synth::{SynthConfig, generate, write_splits};
use s2s_data::{
    BatchConfig, BudgetSide, Level, Pair, ReadOptions, TokenizerConfig, Tokenizers, encode_pairs, read_corpus,
};

use crate::args::CorpusArgs;

/// Corpus tools.
#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Generate the built-in synthetic language pair into DIR/{train,valid,test}.{src,tgt}
    /// (deterministic in --seed; grammar in datasets/README.md).
    Synth(SynthArgs),
    /// Describe a corpus (or the built-in pair): sizes, length histograms, vocabulary
    /// coverage and the padding ratio of token-budget batches.
    Stats(StatsArgs),
}

/// `s2s data synth`.
#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Sentence pairs to generate (split 90/5/5).
    #[arg(long, default_value_t = 20_000)]
    pairs: usize,
    /// Generator seed: the same seed always gives the same corpus.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Longest source sentence in tokens.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Output directory (created).
    #[arg(long)]
    out: PathBuf,
}

/// `s2s data stats`.
#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    corpus: CorpusArgs,
    /// Use a run's saved tokenizers (RUN_DIR/tokenizer) instead of training new ones.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Tokenisation level when training: bpe, word or char.
    #[arg(long, default_value = "bpe")]
    level: Level,
    /// Vocabulary size when training (BPE size, or cap for word/char; 0: no cap).
    #[arg(long, default_value_t = 8000)]
    vocab_size: usize,
    /// Separate source and target vocabularies (default: joint).
    #[arg(long)]
    separate: bool,
    /// Token budget per batch (padded tokens).
    #[arg(long, default_value_t = 4096)]
    max_tokens: usize,
    /// Which side the budget counts: source, target or max.
    #[arg(long, default_value = "max", value_parser = parse_side)]
    budget_on: BudgetSide,
    /// Skip pairs with a side longer than this many words (0: no limit).
    #[arg(long, default_value_t = 200)]
    max_words: usize,
    /// Shuffling seed for the batches measured.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn parse_side(s: &str) -> Result<BudgetSide, String> {
    match s {
        "source" => Ok(BudgetSide::Source),
        "target" => Ok(BudgetSide::Target),
        "max" => Ok(BudgetSide::Max),
        _ => Err(format!("unknown side `{s}`: use source, target or max")),
    }
}

/// Runs `s2s data …`.
pub fn run(c: DataCommand) -> Result<()> {
    match c {
        DataCommand::Synth(a) => {
            let cfg = SynthConfig {
                pairs: a.pairs,
                seed: a.seed,
                max_tokens: a.max_tokens,
                ..SynthConfig::default()
            };
            let s = write_splits(&cfg, &a.out).with_context(|| format!("writing {}", a.out.display()))?;
            eprintln!(
                "wrote {} train, {} valid, {} test pairs to {}",
                s.counts[0],
                s.counts[1],
                s.counts[2],
                a.out.display()
            );
            Ok(())
        }
        DataCommand::Stats(a) => stats(a),
    }
}

fn stats(a: StatsArgs) -> Result<()> {
    let pairs: Vec<Pair> = match a.corpus.files()? {
        Some(files) => {
            let c = read_corpus(&files, &ReadOptions { max_words: a.max_words })?;
            eprintln!("{}: {}", files.describe(), c.report);
            c.pairs
        }
        None => {
            eprintln!("no corpus given: describing the built-in language pair (20,000 pairs, seed 1)");
            generate(&SynthConfig::default()).into_iter().map(|(src, tgt)| Pair { src, tgt }).collect()
        }
    };
    let tok = match &a.tokenizer {
        Some(dir) => Tokenizers::load(&dir.join("tokenizer"))?,
        None => {
            let cfg =
                TokenizerConfig { level: a.level, vocab_size: a.vocab_size, joint: !a.separate, min_freq: 1 };
            Tokenizers::train(&cfg, &pairs)?
        }
    };
    let ex = encode_pairs(&tok, &pairs);
    let batch = BatchConfig { max_tokens: a.max_tokens, budget_on: a.budget_on, ..BatchConfig::default() };
    let s = corpus_stats("corpus", &ex, (tok.src.vocab_size(), tok.tgt.vocab_size()), batch, a.seed);
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&s)?)?;
    } else {
        write!(out, "{s}")?;
    }
    Ok(())
}
