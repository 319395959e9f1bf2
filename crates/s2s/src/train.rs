//! `s2s train`: one model into a run directory, then its test-split scores.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use burn::module::Module;
use clap::Args;
use s2s_data::{CorpusFiles, Level, SplitFiles, encode_pairs};
use s2s_models::attention::LuongScore;
use s2s_models::cell::CellKind;
use s2s_models::{AttentionRnnSpec, LstmSpec, ModelSpec, TransformerSpec};
use s2s_train::device::{DeviceChoice, select};
use s2s_train::evaluate::{detokenize, nll, translate_greedy};
use s2s_train::run::{DataSpec, RunConfig, RunManifest, prepare, write_manifest};
use s2s_train::{TrainJob, load_model, train};

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
    /// Embedding size (the Transformer's d_model).
    #[arg(long)]
    emb: Option<usize>,
    /// Hidden size (RNNs).
    #[arg(long)]
    hidden: Option<usize>,
    /// Layers of encoder and of decoder.
    #[arg(long)]
    layers: Option<usize>,
    /// Transformer attention heads.
    #[arg(long)]
    heads: Option<usize>,
    /// Transformer feed-forward width.
    #[arg(long)]
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
    #[arg(long)]
    dropout: Option<f64>,
    /// Training budget in optimizer steps.
    #[arg(long)]
    steps: Option<u64>,
    /// Training budget in epochs.
    #[arg(long)]
    epochs: Option<u64>,
    /// Training budget in wall-clock minutes.
    #[arg(long)]
    minutes: Option<f64>,
    /// Token budget per batch.
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Learning rate.
    #[arg(long)]
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

fn config(a: &TrainArgs) -> Result<RunConfig> {
    let mut cfg = match &a.config {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            toml::from_str::<RunConfig>(&text)
                .with_context(|| format!("{}: invalid run configuration", path.display()))?
        }
        None => RunConfig {
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
    };
    if a.config.is_some() && a.model.is_some() {
        bail!("--model conflicts with --config: set the kind in the file's [model] table");
    }
    if let (Some(src), Some(tgt), Some(vs), Some(vt)) = (&a.src, &a.tgt, &a.valid_src, &a.valid_tgt) {
        let pair = |s: &PathBuf, t: &PathBuf| CorpusFiles::Aligned { src: s.clone(), tgt: t.clone() };
        let test = a.test_src.as_ref().zip(a.test_tgt.as_ref()).map(|(s, t)| pair(s, t));
        cfg.data = DataSpec::Files {
            splits: SplitFiles { train: pair(src, tgt), valid: pair(vs, vt), test },
            max_words: s2s_data::ReadOptions::default().max_words,
        };
    }
    if let Some(l) = a.level {
        cfg.tokenizer.level = l;
    }
    if let Some(v) = a.vocab_size {
        cfg.tokenizer.vocab_size = v;
    }
    match &mut cfg.model {
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
    if !matches!(cfg.model, ModelSpec::Transformer(_)) && (a.heads.is_some() || a.ffn.is_some()) {
        bail!("--heads and --ffn are for --model transformer");
    }
    let t = &mut cfg.train;
    if a.steps.is_some() || a.epochs.is_some() || a.minutes.is_some() {
        t.budget = s2s_train::Budget { steps: a.steps, epochs: a.epochs, minutes: a.minutes };
    }
    set(&mut t.batch.max_tokens, a.max_tokens);
    set(&mut t.lr, a.lr);
    set(&mut t.valid_every, a.valid_every);
    set(&mut t.seed, a.seed);
    if let Some(w) = a.warmup {
        t.schedule = s2s_train::schedule::Schedule::Noam { warmup: w };
    }
    t.validate().map_err(anyhow::Error::msg)?;
    Ok(cfg)
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
    let (device, device_name) = select(a.device);
    eprintln!("device: {device_name}");
    eprintln!("run directory: {}", run_dir.display());
    let prepared = prepare(&cfg, &run_dir)?;
    for (split, r) in &prepared.reports {
        eprintln!("{split}: {r}");
    }
    let params =
        s2s_train::build_model(&cfg.model, &prepared.tokenizers, cfg.train.seed, &device)?.num_params();
    eprintln!("model: {} with {params} parameters", cfg.model.kind());
    let mut manifest = RunManifest {
        config: cfg.clone(),
        device: device_name,
        version: env!("CARGO_PKG_VERSION").into(),
        burn: "0.22.1".into(),
        commit: option_env!("S2S_GIT_COMMIT").map(String::from),
        params,
        status: "training".into(),
        data_report: prepared.reports.clone(),
    };
    write_manifest(&run_dir, &manifest)?;
    let outcome = train(TrainJob {
        run_dir: &run_dir,
        model: &cfg.model,
        spec: &cfg.train,
        tokenizers: &prepared.tokenizers,
        data: &prepared.data,
        device: &device,
        progress: !a.quiet,
    })?;
    manifest.status = "finished".into();
    write_manifest(&run_dir, &manifest)?;
    eprintln!(
        "trained {} steps in {:.0} s{}; best checkpoint: step {}",
        outcome.steps,
        outcome.wall,
        if outcome.stopped_early { " (early stop)" } else { "" },
        outcome.best_step
    );
    if let Some(test) = &prepared.test {
        let model =
            load_model(&cfg.model, &prepared.tokenizers, &outcome.best_dir, &device.clone().autodiff())?
                .valid();
        let ex = encode_pairs(&prepared.tokenizers, test);
        let refs: Vec<String> = test.iter().map(|p| p.tgt.clone()).collect();
        let hyps = translate_greedy(&model, &ex, cfg.train.batch, cfg.train.max_output, &device);
        let text = detokenize(&prepared.tokenizers.tgt, &hyps);
        let (sum, tokens) = nll(&model, &ex, cfg.train.batch, &device);
        let bleu = s2s_eval::corpus_bleu(&text, &[&refs])?;
        let chrf = s2s_eval::corpus_chrf(&text, &[&refs])?;
        let dir = run_dir.join("test");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("hypotheses.txt"), text.join("\n") + "\n")?;
        // BLEU by source length in words (half-open buckets 0-9 … 50+).
        let src_lens: Vec<usize> = test.iter().map(|p| s2s_eval::word_count(&p.src)).collect();
        let buckets = s2s_eval::bleu_by_length(
            &s2s_eval::BleuConfig::default(),
            &src_lens,
            &text,
            &[&refs],
            &s2s_eval::DEFAULT_LENGTH_EDGES,
        )?;
        let by_length: Vec<serde_json::Value> = buckets
            .iter()
            .map(|b| serde_json::json!({"bucket": b.label, "sentences": b.count, "bleu": b.bleu.score}))
            .collect();
        let scores = serde_json::json!({
            "bleu": bleu.score, "bleu_signature": bleu.signature,
            "chrf": chrf.score, "chrf_signature": chrf.signature,
            "ppl": s2s_eval::perplexity(sum, tokens), "sentences": test.len(), "decoding": "greedy",
            "bleu_by_source_length": by_length,
        });
        std::fs::write(dir.join("scores.json"), serde_json::to_string_pretty(&scores)? + "\n")?;
        println!(
            "test: BLEU {:.2} ({}), chrF {:.2}, perplexity {:.2} on {} sentences (greedy)",
            bleu.score,
            bleu.signature,
            chrf.score,
            s2s_eval::perplexity(sum, tokens),
            test.len()
        );
    }
    Ok(())
}
