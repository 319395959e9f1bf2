//! The properties our fuzz targets check, written once.
//!
//! `fuzz/fuzz_targets/*.rs` (cargo-fuzz, nightly) hands libFuzzer's bytes to these functions;
//! `tests/regressions.rs` replays every input kept under `fuzz/regressions/<target>/` through the
//! same functions on stable, so a crash found once stays fixed. Each function panics when a
//! property fails — that is how libFuzzer notices — and returns normally otherwise.
//!
//! `config` and `studio` (feature `burn`, on by default) check crates that build burn: fuzz/
//! builds them only for those two targets (`cargo fuzz run config --features burn`).

pub mod bleu;
#[cfg(feature = "burn")]
pub mod config;
pub mod corpus;
pub mod spm;
#[cfg(feature = "burn")]
pub mod studio;
pub mod tokenizer;

/// The fuzz targets, by the name of their file in `fuzz/fuzz_targets/` and of their folder in
/// `fuzz/regressions/`.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("corpus", corpus::check),
    ("tokenizer", tokenizer::check),
    ("bleu", bleu::check),
    ("spm", spm::check),
    #[cfg(feature = "burn")]
    ("config", config::check),
    #[cfg(feature = "burn")]
    ("studio", studio::check),
];
