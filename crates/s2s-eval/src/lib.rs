//! Evaluation for Seq2Seq Lab: sacreBLEU-identical corpus BLEU, chrF and TER, paired
//! significance tests (bootstrap resampling, approximate randomization), perplexity, BLEU
//! by source length, and the logic of the `s2s score` command. No burn here.
//!
//! # sacreBLEU-identical
//!
//! For the same hypotheses, references and options, this crate produces the same
//! segment statistics (n-gram counts, totals, hypothesis and reference lengths) as
//! sacreBLEU, exactly, and the same scores up to floating-point summation order
//! (the computations follow sacreBLEU's operation order, so in practice the scores
//! agree to the last bits). That covers: the `none`, `13a` and `intl` tokenisers,
//! lowercasing, `exp`/`floor`/`add-k`/`none` smoothing, effective order, any number
//! of references (closest reference length, ties to the shorter; n-gram counts clipped
//! by the per-reference maximum), chrF/chrF++ with its per-sentence best-reference
//! choice and effective-order averaging, TER with the Tercom tokeniser and sacreBLEU's
//! shift search ([`ter`]), the paired tests with numpy's random generator reproduced bit
//! for bit ([`significance`], [`nprng`]), and the command line's line reading
//! (`rstrip()` of each line) and output formats. Signatures have sacreBLEU's layout,
//! with `version:2.6.0+s2s-<this crate's version>` ([`VERSION`]). The conformance fixtures
//! (`shared/fixtures/bleu`) were produced with **sacreBLEU 2.6.0**, the TER and
//! significance expectations (`tests/fixtures`) with sacreBLEU 2.6.0 and numpy 2.4.6
//! (`scripts/sacrebleu-expected.py`).
//!
//! The implementation is checked against sacreBLEU 2.6.0 itself: the fixtures, unit tests
//! whose expected values come from Python one-liners (quoted next to them), and a
//! differential test of the 13a tokeniser against its literal regular expressions.
//!
//! Known differences:
//! - sacreBLEU's `None` references (a variable number of references per segment,
//!   `nrefs:var`) are not supported; an empty string is an empty reference of length 0,
//!   as in sacreBLEU.
//! - Unicode tables (lowercasing, `intl`'s `\p{P}`/`\p{S}`/`\p{N}`) are Rust's and the
//!   `regex` crate's rather than Python's; they can differ for characters added in
//!   recent Unicode versions.
//! - With `add-k`, sacreBLEU reports the incremented counts in `counts`/`totals`; this
//!   crate reports the raw ones (score and precisions are identical).
//! - Hypothesis and reference streams of different lengths are an error, not silently
//!   truncated (the sacreBLEU API zips them).
//! - Only the `none`, `13a` and `intl` tokenisers; BLEU's maximum order is fixed at 4,
//!   chrF's character order is at most 6 and word order at most 4.
//! - Command line ([`run_score`]): no tab-separated multi-system standard input, no
//!   `--num-refs` tab-split references, no sentence-level mode, no single-system
//!   confidence intervals (`--confidence`), no short signatures, no colours, no
//!   "tokenized period" warning; `lowercase` applies to chrF too; an empty input scores 0
//!   instead of being refused. Paired tests: see [`significance`] for its differences.
//!
//! # Example
//!
//! ```
//! let hyps = ["The cat sat on the mat."];
//! let refs = [vec!["The cat sat on the mat."]];
//! let bleu = s2s_eval::corpus_bleu(&hyps, &refs).unwrap();
//! assert!((bleu.score - 100.0).abs() < 1e-9);
//! let chrf = s2s_eval::corpus_chrf(&hyps, &refs).unwrap();
//! assert!((chrf.score - 100.0).abs() < 1e-9);
//! ```

#![warn(missing_docs)]

pub mod alignment;
pub mod bleu;
pub mod chrf;
pub mod error;
pub mod length;
mod ngram;
pub mod nprng;
pub mod perplexity;
pub mod score_cmd;
pub mod significance;
pub mod ter;
pub mod tokenize;

pub use bleu::{BleuConfig, BleuScore, BleuStats, MAX_NGRAM_ORDER, Smoothing, corpus_bleu};
pub use chrf::{ChrfConfig, ChrfScore, ChrfStats, MAX_CHAR_ORDER, MAX_WORD_ORDER, corpus_chrf};
pub use error::EvalError;
pub use length::{DEFAULT_LENGTH_EDGES, LengthBucket, bleu_by_length, word_count};
pub use perplexity::{NllAccumulator, perplexity};
pub use score_cmd::{Format, Metric, ScoreRequest, format_systems, run_score};
pub use significance::{
    DEFAULT_SEED, MetricConfig, PairedColumn, PairedOptions, PairedResult, PairedTest, Seed, paired_test,
};
pub use ter::{TerConfig, TerScore, TerStats, corpus_ter};
pub use tokenize::{Tokenizer, is_py_whitespace, tokenize_13a, tokenize_intl};

/// The `version:` of every signature: the sacreBLEU release whose scores these are, then the
/// implementation that computed them, `2.6.0+s2s-0.1.0` (semantic versioning's build metadata):
/// a reader comparing signatures across papers sees sacreBLEU 2.6.0's numbers, and that they
/// came from s2s.
pub const VERSION: &str = concat!("2.6.0+s2s-", env!("CARGO_PKG_VERSION"));

#[cfg(test)]
mod version_tests {
    #[test]
    fn signatures_name_the_sacrebleu_release_and_the_implementation() {
        assert!(super::VERSION.starts_with("2.6.0+s2s-"), "{}", super::VERSION);
    }
}
