//! # s2s-data: from corpus files to padded id batches (no burn)
//!
//! Data flows one way: corpus files ([`corpus`]) → normalised pairs ([`normalize`]) →
//! tokenizers ([`tokenizer`], [`vocab`]) → examples → token-budget batches ([`batch`]).
//! [`synth`] generates the built-in language pair; [`stats`] describes a corpus. A tokenizer
//! can be brought instead of learned: a `tokenizer.json` or a SentencePiece model
//! ([`external`], [`spm`]).
//!
//! For corpora larger than memory: [`mod@prepare`] learns the tokenizer on a sample, filters
//! ([`filter`]) and encodes in parallel into memory-mapped shards once; [`PreparedDataset`]
//! reads them back by index and [`StreamBatcher`] ([`stream`]) makes the same kind of batches
//! in bounded memory.

pub mod batch;
pub mod corpus;
pub mod error;
pub mod external;
pub mod filter;
pub mod hash;
pub mod line;
pub mod manifest;
pub mod normalize;
pub mod prepare;
pub mod prepared;
pub mod rng;
mod shard;
#[doc(hidden)]
pub mod shared;
pub mod spm;
pub mod stats;
pub mod stream;
pub mod synth;
#[cfg(test)]
mod testutil;
pub mod tokenizer;
pub mod vocab;

pub use batch::{Batch, BatchConfig, Batcher, BudgetSide, Example, bucket, bucket_rows};
pub use corpus::{
    Corpus, CorpusFiles, Pair, PairReader, ReadOptions, ReadReport, ReadSkip, SplitFiles, read_corpus,
    read_verdict,
};
pub use error::{DataError, Result};
pub use filter::{Dropped, FilterConfig, FilterReport};
pub use normalize::normalize;
pub use prepare::{Manifest, Phase, PrepareConfig, Prepared, Preparer, Progress, Timings, prepare};
pub use prepared::PreparedDataset;
pub use shard::ShardInfo;
pub use stream::{EpochPlan, StreamBatcher};
pub use tokenizer::{Level, Tokenizer, TokenizerConfig, TokenizerFiles, Tokenizers};
pub use vocab::{BOS, EOS, PAD, SPECIALS, UNK, Vocab};

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` atomically: a temporary file beside it, fsynced, then renamed over
/// `path` (and the directory fsynced), so readers see the old file or the new one, never half.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        DataError::io(path, e)
    })
}

/// Creates the directory `path` and its missing parents (`std::fs::create_dir_all`). Where a
/// file stands in the way — `path` itself or a parent — the error says which, that it is a file
/// where a directory is needed, and what to do ([`DataError::NotADirectory`]), instead of the
/// system's bare "File exists" or "Not a directory".
pub fn create_dir_all(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|e| {
        // The nearest path that exists, `path` included: a file there is what is in the way.
        let existing = path
            .ancestors()
            .filter(|a| !a.as_os_str().is_empty())
            .find_map(|a| std::fs::metadata(a).ok().map(|m| (a, m)));
        match existing {
            Some((file, m)) if !m.is_dir() => {
                DataError::NotADirectory { file: file.to_path_buf(), dir: path.to_path_buf() }
            }
            _ => DataError::io(path, e),
        }
    })
}

/// Tokenises pairs into examples (ids without specials).
pub fn encode_pairs(tok: &Tokenizers, pairs: &[Pair]) -> Vec<Example> {
    pairs.iter().map(|p| Example { src: tok.src.encode(&p.src), tgt: tok.tgt.encode(&p.tgt) }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Scratch;

    #[test]
    fn a_file_where_a_directory_is_needed_is_named_as_such() {
        let d = Scratch::new("mkdir");
        let file = d.path().join("runs");
        std::fs::write(&file, "x").unwrap();
        for (wanted, what) in [(file.clone(), "where a directory is needed:"), (file.join("a/b"), "to hold")]
        {
            let e = create_dir_all(&wanted).unwrap_err();
            assert!(matches!(&e, DataError::NotADirectory { file: f, .. } if *f == file), "{e:?}");
            let m = e.to_string();
            assert!(m.starts_with(&format!("{} is a file", file.display())), "{m}");
            assert!(m.contains(what) && m.contains("move the file away"), "{m}");
            assert!(!m.contains("os error"), "{m}");
        }
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x", "the file is left as it was");
        let fresh = d.path().join("new/run");
        create_dir_all(&fresh).unwrap();
        create_dir_all(&fresh).unwrap();
        assert!(fresh.is_dir());
    }
}
