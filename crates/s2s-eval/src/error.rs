//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong while scoring. No function of this crate panics on
/// user input; it returns one of these instead.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A file (or standard input) could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file, or `<stdin>`.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A line of a file (or of standard input) is not valid UTF-8.
    #[error("{}: line {line} is not valid UTF-8", path.display())]
    InvalidUtf8 {
        /// The file, or `<stdin>`.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
    },

    /// The hypothesis file and a reference file have different numbers of lines.
    #[error("{} has {hyp_lines} lines but {} has {ref_lines}", hyp.display(), reference.display())]
    LineCountMismatch {
        /// The hypothesis file, or `<stdin>`.
        hyp: PathBuf,
        /// Lines in the hypothesis file.
        hyp_lines: usize,
        /// The reference file.
        reference: PathBuf,
        /// Lines in the reference file.
        ref_lines: usize,
    },

    /// In-memory streams: a reference stream is not as long as the hypotheses.
    #[error("there are {hyps} hypotheses but reference stream {index} has {refs} segments")]
    StreamLengthMismatch {
        /// Number of hypotheses.
        hyps: usize,
        /// 0-based index of the reference stream.
        index: usize,
        /// Segments in that reference stream.
        refs: usize,
    },

    /// A per-sentence input (such as source lengths) does not have one entry per hypothesis.
    #[error("there are {hyps} hypotheses but {len} {what}")]
    LengthMismatch {
        /// What was counted, e.g. "source lengths".
        what: &'static str,
        /// Number of hypotheses.
        hyps: usize,
        /// Number of entries given.
        len: usize,
    },

    /// No reference stream was given.
    #[error("at least one reference is required")]
    NoReferences,

    /// An option has an invalid value (unknown name, out-of-range order, bad edges, ...).
    #[error("invalid option: {0}")]
    InvalidOption(String),
}
