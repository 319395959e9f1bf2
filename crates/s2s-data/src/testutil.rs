//! Helpers shared by the unit tests: scratch directories and small prepared corpora.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::corpus::CorpusFiles;
use crate::prepare::{PrepareConfig, prepare};
use crate::prepared::PreparedDataset;
use crate::synth::{SynthConfig, generate};
use crate::tokenizer::{Level, TokenizerConfig};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A fresh empty directory under the system temp dir, removed when dropped.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    pub(crate) fn new(tag: &str) -> Self {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("s2s-data-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `n` synthetic pairs (seed `seed`) as `dir/c.src` + `dir/c.tgt`.
pub(crate) fn synth_files(dir: &Path, n: usize, seed: u64) -> CorpusFiles {
    let pairs = generate(&SynthConfig { pairs: n, seed, max_tokens: 24, ..SynthConfig::default() });
    let (src, tgt) = (dir.join("c.src"), dir.join("c.tgt"));
    let join =
        |f: fn(&(String, String)) -> &str| pairs.iter().map(|p| format!("{}\n", f(p))).collect::<String>();
    std::fs::write(&src, join(|p| &p.0)).unwrap();
    std::fs::write(&tgt, join(|p| &p.1)).unwrap();
    CorpusFiles::Aligned { src, tgt }
}

/// Word-level settings (fast to train) with small shards.
pub(crate) fn word_config(shard_examples: usize) -> PrepareConfig {
    PrepareConfig {
        tokenizer: TokenizerConfig {
            level: Level::Word,
            vocab_size: 0,
            joint: true,
            min_freq: 1,
            ..Default::default()
        },
        shard_examples,
        ..PrepareConfig::default()
    }
}

/// `n` synthetic pairs prepared under `dir/cache` in shards of `shard` examples.
pub(crate) fn prepared(dir: &Path, n: usize, shard: usize) -> PreparedDataset {
    let files = synth_files(dir, n, 7);
    prepare(&files, &word_config(shard), &dir.join("cache")).unwrap().dataset
}
