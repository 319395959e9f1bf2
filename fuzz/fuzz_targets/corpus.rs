//! `cargo +nightly fuzz run corpus`: the property in `crates/s2s-fuzz/src/corpus.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| s2s_fuzz::corpus::check(data));
