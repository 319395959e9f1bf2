//! Errors of the data pipeline: each names the file, the line and what to do.

use std::path::PathBuf;

/// Everything that can go wrong reading, tokenising or batching a corpus.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Aligned source and target files differ in length.
    #[error(
        "{src_path} has {src_lines} lines but {tgt_path} has {tgt_lines}: aligned corpus files \
         must have one sentence per line on both sides"
    )]
    LineCountMismatch {
        /// Source file.
        src_path: PathBuf,
        /// Lines in the source file.
        src_lines: usize,
        /// Target file.
        tgt_path: PathBuf,
        /// Lines in the target file.
        tgt_lines: usize,
    },
    /// A line is not valid UTF-8.
    #[error("{path}:{line}: invalid UTF-8; re-encode the file as UTF-8 (e.g. `iconv -t UTF-8`)")]
    InvalidUtf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
    },
    /// A line longer than [`crate::line::MAX_LINE_BYTES`]: not one sentence (a binary file, or
    /// text without line breaks).
    #[error(
        "{path}:{line}: the line is longer than {limit} bytes; the input holds one sentence per \
         line: check that this is the right file (text with `\\n` line ends, not a binary or a \
         one-line export), or split the line"
    )]
    LineTooLong {
        /// The file (`stdin` for standard input).
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The limit, in bytes.
        limit: usize,
    },
    /// A TSV row has fewer columns than asked for.
    #[error(
        "{path}:{line}: expected at least {needed} tab-separated columns, found {found}; \
         check --src-col/--tgt-col (0-based) and that the file is tab-separated"
    )]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// Columns needed (highest requested index + 1).
        needed: usize,
        /// Columns on the line.
        found: usize,
    },
    /// A corpus file has no lines at all.
    #[error("{path}: the file is empty; give a corpus with one sentence per line")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// Every line pair was skipped (empty sides or too long).
    #[error("{path}: no usable sentence pairs ({skipped_empty} empty, {skipped_long} too long)")]
    NothingUsable {
        /// The (source) file.
        path: PathBuf,
        /// Pairs skipped because one side was empty.
        skipped_empty: usize,
        /// Pairs skipped because a side was longer than the maximum.
        skipped_long: usize,
    },
    /// The `tokenizers` crate failed (training, saving or loading BPE).
    #[error("tokenizer {path}: {message}")]
    Tokenizer {
        /// The tokenizer file or directory.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A saved vocabulary or tokenizer file is corrupt.
    #[error("{path}: corrupt or truncated ({message}); retrain or restore the run directory")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A prepared dataset's shard (or its manifest or statistics) is truncated, corrupted or
    /// does not match the manifest.
    #[error(
        "{path}: {message}; the prepared dataset is damaged: delete the directory {dir} and prepare \
         it again"
    )]
    Shard {
        /// The damaged file.
        path: PathBuf,
        /// The prepared dataset's directory.
        dir: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A directory is not a complete prepared dataset of this format version (no completion
    /// marker: an interrupted preparation; or another format version).
    #[error("{dir}: not a complete prepared dataset ({message}); delete the directory and prepare it again")]
    NotPrepared {
        /// The directory.
        dir: PathBuf,
        /// Why.
        message: String,
    },
    /// Every pair read was dropped by the filters.
    #[error("{path}: every pair was filtered out ({summary}); loosen the filters")]
    AllFiltered {
        /// The (source) file.
        path: PathBuf,
        /// The filter report.
        summary: String,
    },
    /// A preparation was stopped (by its progress callback) before it finished; nothing of it
    /// was kept.
    #[error("preparing {dir} was stopped before it finished; nothing was kept: run it again")]
    Interrupted {
        /// The dataset directory it would have written.
        dir: PathBuf,
    },
    /// A directory was to be created (or used) where a file stands: `file` is `dir` itself or
    /// one of its parents.
    #[error("{}", not_a_directory(.file, .dir))]
    NotADirectory {
        /// The file in the way.
        file: PathBuf,
        /// The directory wanted.
        dir: PathBuf,
    },
    /// A bad option value.
    #[error("{0}")]
    Config(String),
}

fn not_a_directory(file: &std::path::Path, dir: &std::path::Path) -> String {
    let remedy = "name a directory (it is created if missing), or move the file away";
    if file == dir {
        format!("{} is a file, where a directory is needed: {remedy}", file.display())
    } else {
        format!(
            "{} is a file, where a directory is needed to hold {}: {remedy}",
            file.display(),
            dir.display()
        )
    }
}

impl DataError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DataError::Io { path: path.into(), source }
    }
}

/// Result alias for the data crate.
pub type Result<T> = std::result::Result<T, DataError>;
