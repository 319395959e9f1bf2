//! A prepared dataset's format: the settings that decide its content ([`PrepareConfig`]), its
//! `manifest.json` ([`Manifest`]) and its completion marker — what [`crate::prepare`] writes
//! and [`crate::prepared`] reads.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::corpus::{CorpusFiles, ReadOptions, ReadReport};
use crate::filter::{FilterConfig, FilterReport};
use crate::shard::{SHARD_VERSION, ShardInfo};
use crate::tokenizer::TokenizerConfig;

/// The format name in `COMPLETE` and `manifest.json`.
pub const FORMAT_NAME: &str = "s2s-prepared";
/// The version of the prepared-dataset format this build writes and reads.
pub const FORMAT_VERSION: u32 = SHARD_VERSION;
/// The completion marker's file name.
pub const MARKER: &str = "COMPLETE";

/// Everything that decides a prepared dataset's content (all of it is in the key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrepareConfig {
    /// Reading rules (empty sides, `max_words`), as for [`crate::read_corpus`].
    pub read: ReadOptions,
    /// How to learn the tokenizers (ignored when tokenizers are given).
    pub tokenizer: TokenizerConfig,
    /// Pairs the tokenizer learns from: a corpus with more is sampled down to this many
    /// (0: the whole corpus, however large).
    pub sample_pairs: usize,
    /// Seed of the sample.
    pub sample_seed: u64,
    /// Which pairs to drop.
    pub filter: FilterConfig,
    /// Examples per shard (the last shard holds the rest).
    pub shard_examples: usize,
}

impl Default for PrepareConfig {
    fn default() -> Self {
        Self {
            read: ReadOptions::default(),
            tokenizer: TokenizerConfig::default(),
            sample_pairs: 1_000_000,
            sample_seed: 1,
            filter: FilterConfig::default(),
            shard_examples: 1 << 20,
        }
    }
}

/// An input file as the key saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    /// Canonical path.
    pub path: PathBuf,
    /// Size in bytes.
    pub bytes: u64,
    /// Modification time: seconds since the Unix epoch…
    pub modified_s: u64,
    /// …and nanoseconds.
    pub modified_ns: u32,
}

/// `manifest.json`: what a prepared dataset was made from and what it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`].
    pub version: u32,
    /// The key (also the directory name's suffix).
    pub key: String,
    /// The corpus files, canonical paths.
    pub files: CorpusFiles,
    /// Each input file's size and modification time.
    pub inputs: Vec<InputFile>,
    /// The settings.
    pub config: PrepareConfig,
    /// Whether the tokenizers were given rather than learned.
    pub tokenizer_given: bool,
    /// Pairs the tokenizer learned from (0 when given; about `sample_pairs` when sampled).
    pub tokenizer_sample: usize,
    /// What reading did (`kept` pairs went on to the filters).
    pub read: ReadReport,
    /// What the filters did (`kept` is the number of examples).
    pub filter: FilterReport,
    /// Examples in the dataset.
    pub examples: usize,
    /// Token ids in the dataset (both sides, no specials).
    pub tokens: u64,
    /// The shards, in example order.
    pub shards: Vec<ShardInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Marker {
    pub(crate) format: String,
    pub(crate) version: u32,
    pub(crate) key: String,
    pub(crate) examples: usize,
}
