//! `s2s train`: one model into a run directory, then its test-split scores.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use s2s_data::{CorpusFiles, Level, SplitFiles};
use s2s_models::attention::LuongScore;
use s2s_models::cell::CellKind;
use s2s_models::{AttentionRnnSpec, LstmSpec, ModelSpec, TransformerSpec};
use s2s_train::TrainSpec;
use s2s_train::device::{DeviceChoice, select_many};
use s2s_train::pipeline::{Tested, run_and_test};
use s2s_train::run::{DataSpec, RunConfig};

use crate::args;
use crate::out::outln;

/// Train one model (lstm, bahdanau, luong or transformer) with the shared loop. Without a corpus, trains on
/// the built-in language pair. Writes RUN_DIR/{run.json, tokenizer/, checkpoints/,
/// metrics.csv, test/}; rerunning on the same RUN_DIR resumes from its last checkpoint.
#[derive(Args, Debug)]
pub struct TrainArgs {
    /// A TOML run configuration ([data], [tokenizer], [model], [train]); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Run directory (default: runs/<model kind>).
    #[arg(long)]
    run: Option<PathBuf>,
    /// Model kind when no --config: lstm, bahdanau, luong or transformer.
    #[arg(long)]
    model: Option<String>,
    /// Training source file (with --tgt); default: the built-in language pair.
    #[arg(long, requires_all = ["tgt", "valid_src", "valid_tgt"])]
    src: Option<PathBuf>,
    /// Training target file.
    #[arg(long)]
    tgt: Option<PathBuf>,
    /// Validation source file.
    #[arg(long)]
    valid_src: Option<PathBuf>,
    /// Validation target file.
    #[arg(long)]
    valid_tgt: Option<PathBuf>,
    /// Test source file (optional).
    #[arg(long, requires = "test_tgt")]
    test_src: Option<PathBuf>,
    /// Test target file.
    #[arg(long)]
    test_tgt: Option<PathBuf>,
    /// Tokenisation level: bpe, word or char.
    #[arg(long)]
    level: Option<Level>,
    /// Vocabulary size (BPE size; cap for word/char).
    #[arg(long)]
    vocab_size: Option<usize>,
    #[command(flatten)]
    tokenizer_files: args::TokenizerFileArgs,
    /// Embedding size (the Transformer's d_model).
    #[arg(long, value_parser = args::at_least_one)]
    emb: Option<usize>,
    /// Hidden size (RNNs).
    #[arg(long, value_parser = args::at_least_one)]
    hidden: Option<usize>,
    /// Layers of encoder and of decoder.
    #[arg(long, value_parser = args::at_least_one)]
    layers: Option<usize>,
    /// Transformer attention heads.
    #[arg(long, value_parser = args::at_least_one)]
    heads: Option<usize>,
    /// Transformer feed-forward width.
    #[arg(long, value_parser = args::at_least_one)]
    ffn: Option<usize>,
    /// Learning-rate warm-up steps (switches to the Noam schedule).
    #[arg(long)]
    warmup: Option<u64>,
    /// Recurrent cell: lstm, gru or rnn.
    #[arg(long, value_parser = parse_cell)]
    cell: Option<CellKind>,
    /// Luong score: dot, general, concat or low-rank.
    #[arg(long)]
    score: Option<LuongScore>,
    /// Dropout.
    #[arg(long, value_parser = args::probability, allow_negative_numbers = true)]
    dropout: Option<f64>,
    /// Training budget in optimizer steps.
    #[arg(long)]
    steps: Option<u64>,
    /// Training budget in epochs.
    #[arg(long)]
    epochs: Option<u64>,
    /// Training budget in wall-clock minutes.
    #[arg(long, value_parser = args::positive, allow_negative_numbers = true)]
    minutes: Option<f64>,
    /// Token budget per batch.
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Learning rate.
    #[arg(long, value_parser = args::positive, allow_negative_numbers = true)]
    lr: Option<f64>,
    /// Validate (and checkpoint) every N steps.
    #[arg(long)]
    valid_every: Option<u64>,
    /// Seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Device: auto (a real GPU if present, else CPU), cpu or wgpu.
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
    /// Train data-parallel on this many GPUs (one batch each per step; the CPU is one device).
    #[arg(long)]
    devices: Option<u32>,
    /// Skip (and count) batches whose loss is NaN or infinite instead of stopping.
    #[arg(long)]
    skip_nonfinite: bool,
    /// GPU steps captured as graphs and replayed: auto (on a physical GPU), on, off.
    #[arg(long)]
    capture: Option<s2s_train::config::Capture>,
    /// Most captured graphs alive (one per batch shape; 0: padded eager steps).
    #[arg(long)]
    capture_graphs: Option<usize>,
    /// Matrix-product precision: f32, or mixed (f16 products, f32 weights, dynamic loss
    /// scaling; a GPU only).
    #[arg(long)]
    precision: Option<s2s_train::precision::Precision>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn parse_cell(s: &str) -> Result<CellKind, String> {
    match s {
        "lstm" => Ok(CellKind::Lstm),
        "gru" => Ok(CellKind::Gru),
        "rnn" => Ok(CellKind::Rnn),
        _ => Err(format!("unknown cell `{s}`: use lstm, gru or rnn")),
    }
}

/// Builds the run configuration: the --config file (or the --model defaults) with the flags applied.
fn config(a: &TrainArgs) -> Result<RunConfig> {
    let (mut cfg, text) = base_config(a)?;
    if a.config.is_some() && a.model.is_some() {
        bail!("--model conflicts with --config: set the kind in the file's [model] table");
    }
    apply_data_flags(a, &mut cfg.data);
    if let Some(l) = a.level {
        cfg.tokenizer.level = l;
    }
    if let Some(v) = a.vocab_size {
        cfg.tokenizer.vocab_size = v;
    }
    a.tokenizer_files.apply(&mut cfg.tokenizer, |key, e| match (&a.config, text.as_deref()) {
        (Some(path), Some(text)) => match s2s_train::experiment::key_line(text, "[tokenizer]", 0, key) {
            Some(line) => format!("{}:{line}: [tokenizer]: {e}", path.display()),
            None => format!("{}: [tokenizer]: {e}", path.display()),
        },
        _ => e.to_string(),
    })?;
    apply_model_flags(a, &mut cfg.model)?;
    if !matches!(cfg.model, ModelSpec::Transformer(_)) && (a.heads.is_some() || a.ffn.is_some()) {
        bail!("--heads and --ffn are for --model transformer");
    }
    check_model(a, &cfg.model, text.as_deref())?;
    apply_train_flags(a, &mut cfg.train);
    cfg.train.validate()?;
    Ok(cfg)
}

/// Returns the configuration read from --config (with its text), or the defaults for --model
/// (bahdanau when unset).
fn base_config(a: &TrainArgs) -> Result<(RunConfig, Option<String>)> {
    Ok(match &a.config {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let cfg = toml::from_str::<RunConfig>(&text)
                .with_context(|| format!("{}: invalid run configuration", path.display()))?;
            (cfg, Some(text))
        }
        None => (
            RunConfig {
                data: DataSpec::default(),
                tokenizer: Default::default(),
                model: match a.model.as_deref().unwrap_or("bahdanau") {
                    "lstm" => ModelSpec::Lstm(LstmSpec::default()),
                    "bahdanau" => ModelSpec::Bahdanau(AttentionRnnSpec::default()),
                    "luong" => ModelSpec::Luong(AttentionRnnSpec::default()),
                    "transformer" => ModelSpec::Transformer(TransformerSpec::default()),
                    other => bail!("unknown model kind `{other}`: use lstm, bahdanau, luong or transformer"),
                },
                train: Default::default(),
            },
            None,
        ),
    })
}

/// Checks the model's sizes and rates ([`ModelSpec::validate`]); an error names the flag that
/// set the value, or the line of --config's `[model]` table that did.
fn check_model(a: &TrainArgs, model: &ModelSpec, text: Option<&str>) -> Result<()> {
    let Err(e) = model.validate() else { return Ok(()) };
    let field = e.field().unwrap_or("");
    let flags: Vec<&str> = [
        ("--emb", a.emb.is_some() && matches!(field, "emb" | "d_model" | "heads")),
        ("--hidden", a.hidden.is_some() && field == "hidden"),
        ("--layers", a.layers.is_some() && matches!(field, "layers" | "enc_layers" | "dec_layers")),
        ("--heads", a.heads.is_some() && field == "heads"),
        ("--ffn", a.ffn.is_some() && field == "ffn"),
        ("--dropout", a.dropout.is_some() && field == "dropout"),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect();
    if !flags.is_empty() {
        bail!("{}: {e}", flags.join(", "));
    }
    if let (Some(path), Some(text)) = (&a.config, text) {
        match s2s_train::experiment::key_line(text, "[model]", 0, field) {
            Some(line) => bail!("{}:{line}: [model]: {e}", path.display()),
            None => bail!("{}: [model]: {e}", path.display()),
        }
    }
    bail!("{e}")
}

/// Replaces the corpus with the --src/--tgt/--valid-*/--test-* files when all four required ones are given.
fn apply_data_flags(a: &TrainArgs, data: &mut DataSpec) {
    if let (Some(src), Some(tgt), Some(vs), Some(vt)) = (&a.src, &a.tgt, &a.valid_src, &a.valid_tgt) {
        let pair = |s: &PathBuf, t: &PathBuf| CorpusFiles::Aligned { src: s.clone(), tgt: t.clone() };
        let test = a.test_src.as_ref().zip(a.test_tgt.as_ref()).map(|(s, t)| pair(s, t));
        *data = DataSpec::Files {
            splits: SplitFiles { train: pair(src, tgt), valid: pair(vs, vt), test },
            max_words: s2s_data::ReadOptions::default().max_words,
            filter: Default::default(),
            sample_pairs: s2s_data::PrepareConfig::default().sample_pairs,
        };
    }
}

/// Applies the model flags to the model's hyperparameters; errors on RNN-only flags for a transformer.
fn apply_model_flags(a: &TrainArgs, model: &mut ModelSpec) -> Result<()> {
    match model {
        ModelSpec::Lstm(m) => {
            set(&mut m.emb, a.emb);
            set(&mut m.hidden, a.hidden);
            set(&mut m.layers, a.layers);
            set(&mut m.cell, a.cell);
            set(&mut m.dropout, a.dropout);
        }
        ModelSpec::Bahdanau(m) | ModelSpec::Luong(m) => {
            set(&mut m.emb, a.emb);
            set(&mut m.hidden, a.hidden);
            set(&mut m.layers, a.layers);
            set(&mut m.cell, a.cell);
            set(&mut m.dropout, a.dropout);
            set(&mut m.score, a.score);
        }
        ModelSpec::Transformer(m) => {
            if a.hidden.is_some() || a.cell.is_some() || a.score.is_some() {
                bail!(
                    "--hidden, --cell and --score are for the RNN models; a transformer takes --emb (d_model), --heads, --ffn and --layers"
                );
            }
            set(&mut m.d_model, a.emb);
            set(&mut m.heads, a.heads);
            set(&mut m.ffn, a.ffn);
            set(&mut m.enc_layers, a.layers);
            set(&mut m.dec_layers, a.layers);
            set(&mut m.dropout, a.dropout);
        }
    }
    Ok(())
}

/// Applies the budget, optimisation, device and schedule flags to the training settings.
fn apply_train_flags(a: &TrainArgs, t: &mut TrainSpec) {
    if a.steps.is_some() || a.epochs.is_some() || a.minutes.is_some() {
        t.budget = s2s_train::Budget { steps: a.steps, epochs: a.epochs, minutes: a.minutes };
    }
    set(&mut t.batch.max_tokens, a.max_tokens);
    set(&mut t.lr, a.lr);
    set(&mut t.valid_every, a.valid_every);
    set(&mut t.seed, a.seed);
    set(&mut t.devices, a.devices);
    set(&mut t.capture, a.capture);
    set(&mut t.capture_graphs, a.capture_graphs);
    set(&mut t.precision, a.precision);
    if a.skip_nonfinite {
        t.skip_nonfinite = true;
    }
    if let Some(w) = a.warmup {
        t.schedule = s2s_train::schedule::Schedule::Noam { warmup: w };
    }
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

/// Runs `s2s train`.
pub fn run(a: TrainArgs) -> Result<()> {
    let cfg = config(&a)?;
    let run_dir = a.run.clone().unwrap_or_else(|| PathBuf::from("runs").join(cfg.model.kind()));
    let (devices, device_name) = select_many(a.device, cfg.train.devices)?;
    eprintln!("device: {device_name}");
    eprintln!("run directory: {}", run_dir.display());
    let search = s2s_train::testset::greedy(cfg.train.max_output);
    let out = run_and_test(&cfg, &run_dir, &devices, &device_name, !a.quiet, &search, Tested::Best, &|m| {
        eprintln!("{m}")
    })?;
    if let Some(s) = out.test {
        outln!(
            "test: BLEU {:.2} ({}), chrF {:.2}, perplexity {:.2} on {} sentences ({})",
            s.bleu,
            s.bleu_signature,
            s.chrf,
            s.ppl,
            s.sentences,
            s.decoding
        )?;
    }
    Ok(())
}
