//! The properties our fuzz targets check, written once.
//!
//! `fuzz/fuzz_targets/*.rs` (cargo-fuzz, nightly) hands libFuzzer's bytes to these functions;
//! `tests/regressions.rs` replays every input kept under `fuzz/regressions/<target>/` through the
//! same functions on stable, so a crash found once stays fixed. Each function panics when a
//! property fails — that is how libFuzzer notices — and returns normally otherwise.

pub mod bleu;
pub mod corpus;
pub mod tokenizer;

/// The fuzz targets, by the name of their file in `fuzz/fuzz_targets/` and of their folder in
/// `fuzz/regressions/`.
pub const TARGETS: [(&str, fn(&[u8])); 3] =
    [("corpus", corpus::check), ("tokenizer", tokenizer::check), ("bleu", bleu::check)];
