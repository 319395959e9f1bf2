//! `cargo +nightly fuzz run tokenizer`: the property in `crates/s2s-fuzz/src/tokenizer.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| s2s_fuzz::tokenizer::check(data));
