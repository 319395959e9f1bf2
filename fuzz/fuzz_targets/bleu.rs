//! `cargo +nightly fuzz run bleu`: the property in `crates/s2s-fuzz/src/bleu.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| s2s_fuzz::bleu::check(data));
