//! `cargo +nightly fuzz run studio --features burn`: the property in
//! `crates/s2s-fuzz/src/studio.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| s2s_fuzz::studio::check(data));
