//! `cargo +nightly fuzz run spm`: the property in `crates/s2s-fuzz/src/spm.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| s2s_fuzz::spm::check(data));
