//! A training run's whole configuration (data, tokenizer, model, training) and its
//! preparation: generate the corpus if it is the built-in one, prepare it (tokenizer learned,
//! pairs filtered and encoded into memory-mapped shards, [`s2s_data::prepare`]) or reuse the
//! dataset prepared before from the same inputs and settings, save the tokenizers, and write
//! `run.json` — everything `s2s translate` later needs is in the run directory.

use std::path::{Path, PathBuf};

use s2s_data::synth::{SynthConfig, write_splits};
use s2s_data::{
    CorpusFiles, FilterConfig, FilterReport, Pair, PrepareConfig, Preparer, ReadOptions, SplitFiles,
    TokenizerConfig, Tokenizers, read_corpus,
};
use s2s_models::ModelSpec;
use serde::{Deserialize, Serialize};

use crate::config::TrainSpec;
use crate::error::TrainError;
use crate::trainer::TrainData;

/// Where the sentence pairs come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "lowercase", deny_unknown_fields)]
pub enum DataSpec {
    /// The built-in synthetic language pair, generated into the run directory.
    Builtin {
        /// Sentence pairs generated (split 90/5/5 into train/valid/test).
        #[serde(default = "default_pairs")]
        pairs: usize,
        /// Generator seed.
        #[serde(default = "default_seed")]
        seed: u64,
        /// Longest source sentence in tokens.
        #[serde(default = "default_max_tokens")]
        max_tokens: usize,
    },
    /// Files on disk.
    Files {
        /// The splits.
        #[serde(flatten)]
        splits: SplitFiles,
        /// Pairs with a side longer than this many words are skipped (counted).
        #[serde(default = "default_max_words")]
        max_words: usize,
        /// Training pairs to drop before training (`[data.filter]`: `min_tokens`,
        /// `max_tokens`, `max_ratio`, `dedup`, `drop_copies`; all off by default). Validation
        /// and test pairs are never filtered.
        #[serde(default)]
        filter: FilterConfig,
        /// Training pairs the tokenizer learns from: a larger corpus is sampled down to this
        /// many (0: all of it).
        #[serde(default = "default_sample_pairs")]
        sample_pairs: usize,
    },
}

fn default_sample_pairs() -> usize {
    PrepareConfig::default().sample_pairs
}

fn default_pairs() -> usize {
    20_000
}
fn default_seed() -> u64 {
    1
}
fn default_max_tokens() -> usize {
    64
}
fn default_max_words() -> usize {
    ReadOptions::default().max_words
}

impl Default for DataSpec {
    fn default() -> Self {
        DataSpec::Builtin { pairs: default_pairs(), seed: default_seed(), max_tokens: default_max_tokens() }
    }
}

/// One model's complete run configuration (the `s2s train --config` file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Corpus.
    #[serde(default)]
    pub data: DataSpec,
    /// Tokenisation.
    #[serde(default)]
    pub tokenizer: TokenizerConfig,
    /// Model kind and hyperparameters.
    pub model: ModelSpec,
    /// Training.
    #[serde(default)]
    pub train: TrainSpec,
}

/// `run.json`: what was run, where, with which versions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunManifest {
    /// The configuration.
    pub config: RunConfig,
    /// Device description.
    pub device: String,
    /// `s2s` version.
    pub version: String,
    /// burn version.
    pub burn: String,
    /// Git commit of the toolkit, when built from a checkout.
    pub commit: Option<String>,
    /// Trainable parameters.
    pub params: usize,
    /// `created`, `training`, `finished`.
    pub status: String,
    /// What reading the corpus skipped, per split.
    pub data_report: Vec<(String, s2s_data::ReadReport)>,
    /// What the filters dropped from the training split.
    #[serde(default)]
    pub filter_report: FilterReport,
    /// The prepared training dataset's directory.
    #[serde(default)]
    pub prepared: Option<PathBuf>,
}

/// The prepared data of a run.
pub struct Prepared {
    /// Tokenizers (saved under `run_dir/tokenizer`).
    pub tokenizers: Tokenizers,
    /// Tokenised train/valid data.
    pub data: TrainData,
    /// Test pairs (plain text), when the corpus has a test split.
    pub test: Option<Vec<Pair>>,
    /// Reading reports per split.
    pub reports: Vec<(String, s2s_data::ReadReport)>,
    /// What the filters dropped from the training split.
    pub filter: FilterReport,
}

/// Where prepared datasets of corpus files are kept, shared by every run and experiment:
/// `$S2S_DATA_CACHE`, else `$XDG_CACHE_HOME/s2s/prepared`, else `~/.cache/s2s/prepared`, else
/// `.s2s-prepared` in the working directory.
pub fn data_cache() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = env("S2S_DATA_CACHE") {
        return dir;
    }
    match env("XDG_CACHE_HOME").or_else(|| env("HOME").map(|h| h.join(".cache"))) {
        Some(cache) => cache.join("s2s").join("prepared"),
        None => PathBuf::from(".s2s-prepared"),
    }
}

/// The splits, their reading and preparation settings, and where their prepared datasets
/// live: generates the built-in pair under `run_dir/data` if asked (its prepared datasets stay
/// beside it, in `run_dir/data/prepared`; corpus files go to `cache`).
pub fn split_files(
    cfg: &RunConfig,
    run_dir: &Path,
    cache: &Path,
) -> Result<(SplitFiles, PrepareConfig, PathBuf), TrainError> {
    let prep = |max_words, filter, sample_pairs| PrepareConfig {
        read: ReadOptions { max_words },
        tokenizer: cfg.tokenizer.clone(),
        filter,
        sample_pairs,
        ..PrepareConfig::default()
    };
    match &cfg.data {
        DataSpec::Files { splits, max_words, filter, sample_pairs } => {
            Ok((splits.clone(), prep(*max_words, *filter, *sample_pairs), cache.to_path_buf()))
        }
        DataSpec::Builtin { pairs, seed, max_tokens } => {
            let dir = run_dir.join("data");
            let synth =
                SynthConfig { pairs: *pairs, seed: *seed, max_tokens: *max_tokens, ..SynthConfig::default() };
            let s = write_splits(&synth, &dir).map_err(|e| TrainError::io(&dir, e))?;
            let files = |(src, tgt): (PathBuf, PathBuf)| CorpusFiles::Aligned { src, tgt };
            let splits =
                SplitFiles { train: files(s.train), valid: files(s.valid), test: Some(files(s.test)) };
            Ok((splits, prep(0, FilterConfig::default(), 0), dir.join("prepared")))
        }
    }
}

/// Prepares the training split (or reuses its prepared dataset), saves its tokenizers in the
/// run directory (on resume: keeps the saved ones, preparing anew with them if the corpus
/// changed since), and encodes the validation split with them. Only the validation split is
/// held in memory (as ids, and its references as text, for BLEU); the test split is read as
/// text, which test decoding starts from.
pub fn prepare(cfg: &RunConfig, run_dir: &Path) -> Result<Prepared, TrainError> {
    prepare_in(cfg, run_dir, &data_cache())
}

/// [`prepare`] with corpus files prepared under `cache` instead of [`data_cache`].
pub fn prepare_in(cfg: &RunConfig, run_dir: &Path, cache: &Path) -> Result<Prepared, TrainError> {
    s2s_data::create_dir_all(run_dir)?;
    let (splits, pcfg, cache) = split_files(cfg, run_dir, cache)?;
    let mut train = Preparer::new(&splits.train, &pcfg, &cache).run()?.dataset;
    let tok_dir = run_dir.join("tokenizer");
    let tokenizers = if tok_dir.exists() {
        let saved = Tokenizers::load(&tok_dir)?;
        let built = train.tokenizers();
        if !(saved.joint == built.joint && saved.src.same_as(&built.src)? && saved.tgt.same_as(&built.tgt)?) {
            train = Preparer::new(&splits.train, &pcfg, &cache).tokenizers(&saved).run()?.dataset;
        }
        saved
    } else {
        let t = train.tokenizers().clone();
        t.save(&tok_dir)?;
        t
    };
    // Validation pairs are never filtered: their ids and their text must stay line for line.
    let vcfg = PrepareConfig { filter: FilterConfig::default(), ..pcfg.clone() };
    let valid = Preparer::new(&splits.valid, &vcfg, &cache).tokenizers(&tokenizers).run()?.dataset;
    let valid_text = read_corpus(&splits.valid, &pcfg.read)?;
    if valid_text.pairs.len() != valid.len() {
        return Err(TrainError::Config(format!(
            "{}: read {} pairs but its prepared dataset {} holds {}: delete that directory and run again",
            splits.valid.describe(),
            valid_text.pairs.len(),
            valid.dir().display(),
            valid.len()
        )));
    }
    let test = splits.test.as_ref().map(|t| read_corpus(t, &pcfg.read)).transpose()?;
    let mut reports =
        vec![("train".to_string(), train.manifest().read), ("valid".to_string(), valid.manifest().read)];
    if let Some(t) = &test {
        reports.push(("test".to_string(), t.report));
    }
    if train.is_empty() {
        return Err(TrainError::Config(format!(
            "{}: no training pair is left after reading and filtering ({}; {}): check the files and [data] settings",
            splits.train.describe(),
            train.manifest().read,
            train.manifest().filter
        )));
    }
    let filter = train.manifest().filter;
    let data = TrainData {
        valid: valid.examples(),
        valid_refs: valid_text.pairs.into_iter().map(|p| p.tgt).collect(),
        train,
    };
    Ok(Prepared { tokenizers, data, test: test.map(|t| t.pairs), reports, filter })
}

/// Writes `run.json` atomically.
pub fn write_manifest(run_dir: &Path, manifest: &RunManifest) -> Result<(), TrainError> {
    let json = serde_json::to_vec_pretty(manifest).expect("manifest serialises");
    Ok(s2s_data::write_atomic(&run_dir.join("run.json"), &json)?)
}

/// Reads `run.json`.
pub fn read_manifest(run_dir: &Path) -> Result<RunManifest, TrainError> {
    let p = run_dir.join("run.json");
    let text = std::fs::read_to_string(&p).map_err(|e| TrainError::io(&p, e))?;
    serde_json::from_str(&text)
        .map_err(|e| TrainError::Checkpoint { path: p, message: format!("corrupt run manifest: {e}") })
}

#[cfg(test)]
mod tests {
    use super::*;
    use s2s_data::Level;

    fn write(dir: &Path, name: &str, lines: &[&str]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        p
    }

    /// A run resumed after its corpus changed keeps its own tokenizer (its checkpoints were
    /// trained with it) and still reads the new corpus, through a dataset prepared with it.
    #[test]
    fn a_resumed_run_keeps_its_tokenizer_when_the_corpus_changed() {
        let dir = std::env::temp_dir().join(format!("s2s-run-prepare-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let src = write(&dir, "train.src", &["a b", "b c"]);
        let tgt = write(&dir, "train.tgt", &["x y", "y z"]);
        let vs = write(&dir, "valid.src", &["a c"]);
        let vt = write(&dir, "valid.tgt", &["x z"]);
        let splits = SplitFiles {
            train: CorpusFiles::Aligned { src: src.clone(), tgt: tgt.clone() },
            valid: CorpusFiles::Aligned { src: vs, tgt: vt },
            test: None,
        };
        let cfg = RunConfig {
            data: DataSpec::Files {
                splits,
                max_words: 200,
                filter: FilterConfig::default(),
                sample_pairs: 0,
            },
            tokenizer: TokenizerConfig { level: Level::Word, ..Default::default() },
            model: ModelSpec::Lstm(Default::default()),
            train: TrainSpec::default(),
        };
        let run = dir.join("run");
        let cache = dir.join("cache");
        let first = prepare_in(&cfg, &run, &cache).unwrap();
        assert_eq!(first.data.train.len(), 2);
        assert_eq!(first.data.valid_refs, vec!["x z".to_string()]);
        let vocab = first.tokenizers.src.to_json().unwrap();
        // New words: a tokenizer learned now would differ.
        write(&dir, "train.src", &["a b", "b c", "d e f"]);
        write(&dir, "train.tgt", &["x y", "y z", "u v w"]);
        let again = prepare_in(&cfg, &run, &cache).unwrap();
        assert_eq!(again.tokenizers.src.to_json().unwrap(), vocab);
        assert_eq!(again.data.train.len(), 3);
        assert!(again.data.train.manifest().tokenizer_given);
        assert_eq!(again.data.train.tokenizers().src.to_json().unwrap(), vocab);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
