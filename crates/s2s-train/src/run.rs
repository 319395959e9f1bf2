//! A training run's whole configuration (data, tokenizer, model, training) and its
//! preparation: read or generate the corpus, train and save the tokenizers, tokenise, and
//! write `run.json` — everything `s2s translate` later needs is in the run directory.

use std::path::{Path, PathBuf};

use s2s_data::synth::{SynthConfig, write_splits};
use s2s_data::{
    CorpusFiles, Pair, ReadOptions, SplitFiles, TokenizerConfig, Tokenizers, encode_pairs, read_corpus,
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
    },
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
}

/// Resolves the splits: generates the built-in pair under `run_dir/data` if asked.
pub fn split_files(data: &DataSpec, run_dir: &Path) -> Result<(SplitFiles, usize), TrainError> {
    match data {
        DataSpec::Files { splits, max_words } => Ok((splits.clone(), *max_words)),
        DataSpec::Builtin { pairs, seed, max_tokens } => {
            let dir = run_dir.join("data");
            let cfg =
                SynthConfig { pairs: *pairs, seed: *seed, max_tokens: *max_tokens, ..SynthConfig::default() };
            let s = write_splits(&cfg, &dir).map_err(|e| TrainError::io(&dir, e))?;
            let files = |(src, tgt): (PathBuf, PathBuf)| CorpusFiles::Aligned { src, tgt };
            Ok((SplitFiles { train: files(s.train), valid: files(s.valid), test: Some(files(s.test)) }, 0))
        }
    }
}

/// Reads the corpus, trains (or, on resume, loads) the tokenizers, and tokenises.
pub fn prepare(cfg: &RunConfig, run_dir: &Path) -> Result<Prepared, TrainError> {
    std::fs::create_dir_all(run_dir).map_err(|e| TrainError::io(run_dir, e))?;
    let (splits, max_words) = split_files(&cfg.data, run_dir)?;
    let opts = ReadOptions { max_words };
    let train = read_corpus(&splits.train, &opts)?;
    let valid = read_corpus(&splits.valid, &opts)?;
    let test = splits.test.as_ref().map(|t| read_corpus(t, &opts)).transpose()?;
    let tok_dir = run_dir.join("tokenizer");
    let tokenizers = if tok_dir.exists() {
        Tokenizers::load(&tok_dir)?
    } else {
        let t = Tokenizers::train(&cfg.tokenizer, &train.pairs)?;
        t.save(&tok_dir)?;
        t
    };
    let mut reports = vec![("train".to_string(), train.report), ("valid".to_string(), valid.report)];
    if let Some(t) = &test {
        reports.push(("test".to_string(), t.report));
    }
    let data = TrainData {
        train: encode_pairs(&tokenizers, &train.pairs),
        valid: encode_pairs(&tokenizers, &valid.pairs),
        valid_refs: valid.pairs.iter().map(|p| p.tgt.clone()).collect(),
    };
    Ok(Prepared { tokenizers, data, test: test.map(|t| t.pairs), reports })
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
