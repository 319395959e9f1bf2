//! `cargo +nightly fuzz run config --features burn`: the property in
//! `crates/s2s-fuzz/src/config.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| s2s_fuzz::config::check(data));
