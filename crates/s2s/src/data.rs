//! `s2s data`: the built-in language pair, corpus preparation and corpus statistics.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use s2s_data::stats::corpus_stats;
use s2s_data::synth::{SynthConfig, generate, write_splits};
use s2s_data::{
    BatchConfig, BudgetSide, FilterConfig, Level, Pair, Phase, PrepareConfig, PreparedDataset, Preparer,
    ReadOptions, TokenizerConfig, Tokenizers, encode_pairs, read_corpus,
};

use crate::args::CorpusArgs;
use crate::out::{out, outln};

/// Corpus tools.
#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Generate the built-in synthetic language pair into DIR/{train,valid,test}.{src,tgt}
    /// (deterministic in --seed; grammar in datasets/README.md).
    Synth(SynthArgs),
    /// Prepare a corpus for training once: learn the tokenizer on a sample, filter, encode on
    /// every core into memory-mapped shards. `s2s train` and `s2s experiment` do this
    /// themselves (and reuse what is prepared); this prints the directory and its statistics.
    Prepare(PrepareArgs),
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

/// `s2s data prepare`. The defaults are those of `s2s train` and of an experiment's
/// `[data]`/`[tokenizer]` tables, so the same settings find the same prepared dataset.
#[derive(Args, Debug)]
pub struct PrepareArgs {
    #[command(flatten)]
    corpus: CorpusArgs,
    #[command(flatten)]
    tokenizer: TokenizerArgs,
    #[command(flatten)]
    tokenizer_files: crate::args::TokenizerFileArgs,
    /// Pairs the tokenizer learns from: a larger corpus is sampled down to this many (0: all).
    #[arg(long, default_value_t = PrepareConfig::default().sample_pairs)]
    sample_pairs: usize,
    /// Skip pairs with a side longer than this many words (0: no limit).
    #[arg(long, default_value_t = 200)]
    max_words: usize,
    /// Drop pairs with a side of fewer tokens than this.
    #[arg(long, default_value_t = 0)]
    min_len: usize,
    /// Drop pairs with a side of more tokens than this (0: no limit).
    #[arg(long, default_value_t = 0)]
    max_len: usize,
    /// Drop pairs whose longer side has more than this many times the tokens of the shorter
    /// (0: no limit; Moses' clean-corpus uses 9).
    #[arg(long, default_value_t = 0.0, value_parser = crate::args::non_negative, allow_negative_numbers = true)]
    max_ratio: f64,
    /// Drop exact duplicate pairs (the first is kept).
    #[arg(long)]
    dedup: bool,
    /// Drop pairs whose source equals their target.
    #[arg(long)]
    drop_copies: bool,
    /// Every filter on: 1–250 tokens a side, ratio 9, duplicates and copies dropped.
    #[arg(long, conflicts_with_all = ["min_len", "max_len", "max_ratio", "dedup", "drop_copies"])]
    filter_recommended: bool,
    /// Where prepared datasets are kept (default: $S2S_DATA_CACHE, else ~/.cache/s2s/prepared).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// Encoding threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Print the manifest and statistics as JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// How a tokenizer is learned (`s2s data prepare`, `s2s data stats`): the defaults of a run's
/// `[tokenizer]` table.
#[derive(Args, Debug)]
pub struct TokenizerArgs {
    /// Tokenisation level: bpe, word or char.
    #[arg(long, default_value = "bpe")]
    level: Level,
    /// Vocabulary size (BPE size, or cap for word/char; 0: no cap).
    #[arg(long, default_value_t = 8000)]
    vocab_size: usize,
    /// Separate source and target vocabularies (default: joint).
    #[arg(long)]
    separate: bool,
}

impl TokenizerArgs {
    fn config(&self) -> TokenizerConfig {
        TokenizerConfig {
            level: self.level,
            vocab_size: self.vocab_size,
            joint: !self.separate,
            min_freq: 1,
            ..Default::default()
        }
    }
}

/// `s2s data stats`.
#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    corpus: CorpusArgs,
    /// Describe a prepared dataset (a directory `s2s data prepare` printed) instead: the
    /// statistics computed when it was prepared.
    #[arg(long, conflicts_with_all = ["src", "tgt", "tsv", "tokenizer"])]
    prepared: Option<PathBuf>,
    /// Use a run's saved tokenizers (RUN_DIR/tokenizer), or a tokenizer file for both sides
    /// (a tokenizer.json or a SentencePiece .model), instead of training new ones.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    // How to learn the tokenizer when no --tokenizer is given.
    #[command(flatten)]
    learn: TokenizerArgs,
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
        DataCommand::Prepare(a) => prepare(a),
        DataCommand::Stats(a) => stats(a),
    }
}

fn prepare(a: PrepareArgs) -> Result<()> {
    let Some(files) = a.corpus.files()? else {
        anyhow::bail!("give the corpus to prepare as --src FILE --tgt FILE, or as --tsv FILE");
    };
    let filter = if a.filter_recommended {
        FilterConfig::recommended()
    } else {
        FilterConfig {
            min_tokens: a.min_len,
            max_tokens: a.max_len,
            max_ratio: a.max_ratio,
            dedup: a.dedup,
            drop_copies: a.drop_copies,
        }
    };
    let mut tokenizer = a.tokenizer.config();
    a.tokenizer_files.apply(&mut tokenizer, |_, e| e.to_string())?;
    let cfg = PrepareConfig {
        read: ReadOptions { max_words: a.max_words },
        tokenizer,
        sample_pairs: a.sample_pairs,
        filter,
        ..PrepareConfig::default()
    };
    let cache = a.cache.clone().unwrap_or_else(s2s_train::run::data_cache);
    let started = std::time::Instant::now();
    let mut last = std::time::Instant::now();
    let mut progress = |p: &s2s_data::Progress| {
        if last.elapsed().as_secs_f64() >= 2.0 {
            last = std::time::Instant::now();
            let what = match p.phase {
                Phase::Tokenizer => "learning the tokenizer",
                _ => "encoding",
            };
            eprintln!("{what}: {} pairs read, {} examples written", p.pairs_read, p.examples);
        }
        std::ops::ControlFlow::Continue(())
    };
    let done = Preparer::new(&files, &cfg, &cache).threads(a.threads).progress(&mut progress).run()?;
    let d = &done.dataset;
    let m = d.manifest();
    if a.json {
        let out = serde_json::json!({ "dir": d.dir(), "reused": done.reused, "timings": done.timings,
            "manifest": m, "stats": d.stats() });
        outln!("{}", serde_json::to_string_pretty(&out)?)?;
    } else {
        let how = if done.reused {
            "already prepared with these inputs and settings".to_string()
        } else {
            format!("prepared in {:.1} s", started.elapsed().as_secs_f64())
        };
        outln!("{}\n  {how}", d.dir().display())?;
        outln!("  read: {}", m.read)?;
        outln!("  filters: {}", m.filter)?;
        outln!("  {} examples, {} tokens, {} shard(s)", m.examples, m.tokens, m.shards.len())?;
        out!("{}", d.stats())?;
    }
    Ok(())
}

fn stats(a: StatsArgs) -> Result<()> {
    if let Some(dir) = &a.prepared {
        let d = PreparedDataset::open(dir)?;
        let batch =
            BatchConfig { max_tokens: a.max_tokens, budget_on: a.budget_on, ..BatchConfig::default() };
        let s = d.stats_for(batch, a.seed);
        if a.json {
            outln!("{}", serde_json::to_string_pretty(&s)?)?;
        } else {
            out!("{s}")?;
        }
        return Ok(());
    }
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
        Some(file) if file.is_file() => {
            let t = s2s_data::Tokenizer::from_file(file).map_err(|e| anyhow::anyhow!("--tokenizer: {e}"))?;
            Tokenizers { src: t.clone(), tgt: t, joint: true }
        }
        Some(dir) => Tokenizers::load(&dir.join("tokenizer"))?,
        None => Tokenizers::train(&a.learn.config(), &pairs)?,
    };
    let ex = encode_pairs(&tok, &pairs);
    let batch = BatchConfig { max_tokens: a.max_tokens, budget_on: a.budget_on, ..BatchConfig::default() };
    let s = corpus_stats("corpus", &ex, (tok.src.vocab_size(), tok.tgt.vocab_size()), batch, a.seed);
    let mut out = crate::out::Stdout::lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&s)?)?;
    } else {
        write!(out, "{s}")?;
    }
    Ok(())
}
