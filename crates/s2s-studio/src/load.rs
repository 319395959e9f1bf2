//! Loading what the studio shows: the trained models of an experiment (or of run
//! directories), each once, the test sentences to pick from, and — on the built-in language
//! pair — the gold word alignment of every sentence the generator made.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::Device;
use s2s_data::synth::{SynthConfig, generate_aligned, split_indices};
use s2s_data::{Level, ReadOptions, Tokenizers, read_corpus};
use s2s_decode::MaxLength;
use s2s_models::Model;
use s2s_report::ExperimentIndex;
use s2s_train::checkpoint::Checkpoints;
use s2s_train::run::{DataSpec, RunConfig, read_manifest};

use crate::StudioError;

/// One trained model, loaded once.
pub struct Loaded {
    /// Its name in the page (the run directory's name, or the experiment's entry name).
    pub name: String,
    /// The run directory.
    pub run: PathBuf,
    /// `lstm`, `bahdanau`, `luong` or `transformer`.
    pub kind: &'static str,
    /// The network, in inference mode.
    pub model: Model,
    /// Its tokenizers.
    pub tok: Tokenizers,
    /// Output length limit of its run.
    pub limit: MaxLength,
    /// Trainable parameters.
    pub params: usize,
    /// Alignment error rate of its attention over the test sentences with a gold alignment
    /// (the built-in pair, word-level tokens), when it has attention.
    pub aer: Option<f64>,
}

/// A test sentence to pick.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Example {
    /// Source text.
    pub source: String,
    /// Reference translation.
    pub reference: String,
    /// Source words (split on spaces).
    pub words: usize,
}

/// Gold word alignments of the built-in pair: source sentence → (target sentence,
/// `alignment[j]` = the source word that target word `j` translates).
pub type GoldTable = HashMap<String, (String, Vec<usize>)>;

/// Everything the studio serves.
pub struct Studio {
    /// The models, in the order given (an experiment's in its order).
    pub models: Vec<Loaded>,
    /// Test sentences of the first model's corpus, shortest first.
    pub examples: Vec<Example>,
    /// Gold alignments (empty unless the first model was trained on the built-in pair).
    pub gold: GoldTable,
    /// The device every model runs on.
    pub device: Device,
    /// What the page says about it.
    pub device_name: String,
}

/// Test sentences offered in the page at most (spread evenly over the test split).
pub const MAX_EXAMPLES: usize = 400;

/// The run directories under each path: a run directory itself (it holds `run.json`), or an
/// experiment directory (its `experiment.json` entries in order, else every subdirectory
/// holding a `run.json`, by name). Runs without a `best` checkpoint are skipped with a
/// warning. Returns (name, run directory) pairs.
pub fn find_runs(paths: &[PathBuf]) -> Result<Vec<(String, PathBuf)>, StudioError> {
    let mut runs = Vec::new();
    for path in paths {
        runs.extend(runs_under(path)?);
    }
    let ready = with_checkpoint(runs)?;
    Ok(disambiguated(&ready))
}

/// Returns the (name, run directory) pairs of one path: the run directory itself, or the runs of
/// an experiment directory; an error when it is no directory or holds no run.
fn runs_under(path: &Path) -> Result<Vec<(String, PathBuf)>, StudioError> {
    if !path.is_dir() {
        return Err(StudioError::NoRuns(format!(
            "{} is not a directory: give an experiment directory (runs/NAME) or run directories",
            path.display()
        )));
    }
    if path.join("run.json").exists() {
        return Ok(vec![(dir_name(path), path.to_path_buf())]);
    }
    let mut found = Vec::new();
    let index = path.join("experiment.json");
    if let Ok(text) = std::fs::read_to_string(&index) {
        let v: ExperimentIndex = serde_json::from_str(&text).map_err(|e| {
            StudioError::NoRuns(format!(
                "{}: not an experiment index ({e}): run the experiment again",
                index.display()
            ))
        })?;
        found.extend(v.entries.into_iter().map(|e| (e.name, path.join(e.dir))));
    } else {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| StudioError::Io { path: path.to_path_buf(), source: e })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("run.json").exists())
            .collect();
        dirs.sort();
        found.extend(dirs.into_iter().map(|d| (dir_name(&d), d)));
    }
    if found.is_empty() {
        return Err(StudioError::NoRuns(format!(
            "{} holds no run (no run.json in it or its subdirectories): train models first, e.g. \
             `s2s experiment run experiments/quickstart.toml`, then give runs/quickstart",
            path.display()
        )));
    }
    Ok(found)
}

/// Returns the runs that have a `best` checkpoint, warning about the others; an error when none has.
fn with_checkpoint(runs: Vec<(String, PathBuf)>) -> Result<Vec<(String, PathBuf)>, StudioError> {
    let (ready, unready): (Vec<_>, Vec<_>) =
        runs.into_iter().partition(|(_, dir)| dir.join("checkpoints/best.json").exists());
    for (name, dir) in &unready {
        eprintln!("warning: {name} ({}) has no best checkpoint yet: skipped", dir.display());
    }
    if ready.is_empty() {
        return Err(StudioError::NoRuns(
            "none of the runs has a checkpoint yet: let training reach its first validation".into(),
        ));
    }
    Ok(ready)
}

/// Returns the runs with unique names: a name given twice gets its run's parent directory in front.
fn disambiguated(ready: &[(String, PathBuf)]) -> Vec<(String, PathBuf)> {
    // Two runs of the same name (two experiments' `lstm`) get their parent's name in front.
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (n, _) in ready {
        *counts.entry(n.as_str()).or_default() += 1;
    }
    let twice: Vec<bool> = ready.iter().map(|(n, _)| counts[n.as_str()] > 1).collect();
    ready
        .iter()
        .zip(twice)
        .map(|((n, d), twice)| {
            let name = if twice {
                format!("{}/{n}", d.parent().map(dir_name).unwrap_or_default())
            } else {
                n.clone()
            };
            (name, d.clone())
        })
        .collect()
}

fn dir_name(p: &Path) -> String {
    p.canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| p.display().to_string())
}

/// Loads one run's best checkpoint (or `checkpoint`) in inference mode.
pub fn load_run(name: &str, run: &Path, checkpoint: &str, device: &Device) -> Result<Loaded, StudioError> {
    let manifest = read_manifest(run)?;
    let tok_dir = run.join("tokenizer");
    let tok =
        Tokenizers::load(&tok_dir).map_err(|e| StudioError::Run(format!("{}: {e}", tok_dir.display())))?;
    let dir = Checkpoints::new(run).named(checkpoint)?;
    let model = s2s_train::load_model(&manifest.config.model, &tok, &dir, &device.clone().autodiff())?;
    Ok(Loaded {
        name: name.to_string(),
        run: run.to_path_buf(),
        kind: manifest.config.model.kind(),
        model: model.valid(),
        tok,
        limit: manifest.config.train.max_output,
        params: manifest.params,
        aer: None,
    })
}

/// The test split of a run's corpus (text pairs) and, for the built-in pair, the gold
/// alignment of every generated sentence.
pub fn test_sentences(run: &Path) -> Result<(Vec<Example>, GoldTable), StudioError> {
    let cfg: RunConfig = read_manifest(run)?.config;
    let mut gold = GoldTable::new();
    let pairs: Vec<(String, String)> = match &cfg.data {
        DataSpec::Builtin { pairs, seed, max_tokens } => {
            let synth =
                SynthConfig { pairs: *pairs, seed: *seed, max_tokens: *max_tokens, ..SynthConfig::default() };
            let aligned = generate_aligned(&synth);
            let plain: Vec<(String, String)> =
                aligned.iter().map(|p| (p.src.clone(), p.tgt.clone())).collect();
            let [_, _, test] = split_indices(&plain);
            for p in aligned {
                gold.insert(p.src, (p.tgt, p.alignment));
            }
            test.into_iter().map(|i| plain[i].clone()).collect()
        }
        DataSpec::Files { splits, .. } => match &splits.test {
            Some(files) => read_corpus(files, &ReadOptions::default())
                .map_err(|e| StudioError::Run(format!("reading the test split of {}: {e}", run.display())))?
                .pairs
                .into_iter()
                .map(|p| (p.src, p.tgt))
                .collect(),
            None => Vec::new(),
        },
    };
    let step = pairs.len().div_ceil(MAX_EXAMPLES).max(1);
    let mut examples: Vec<Example> = pairs
        .into_iter()
        .step_by(step)
        .map(|(source, reference)| Example { words: source.split_whitespace().count(), source, reference })
        .collect();
    examples.sort_by_key(|e| e.words);
    Ok((examples, gold))
}

/// True when both of the model's tokenizers make one token per word, so that its attention
/// can be scored against a word alignment.
pub fn word_level(tok: &Tokenizers) -> bool {
    tok.src.level() == Level::Word && tok.tgt.level() == Level::Word
}
