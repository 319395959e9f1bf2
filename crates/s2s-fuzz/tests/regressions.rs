//! Replays every input kept under `fuzz/regressions/<target>/` — the crashers the fuzzers found
//! (fixed since) and hand-written edge cases — through the fuzz properties, on stable Rust.

use std::path::PathBuf;

use s2s_fuzz::TARGETS;

fn regressions(target: &str) -> Vec<PathBuf> {
    let dir = manifest_dir().join("../../fuzz/regressions").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    files.sort();
    files
}

#[test]
fn every_kept_input_passes_its_property() {
    for &(target, check) in TARGETS {
        let files = regressions(target);
        assert!(!files.is_empty(), "no regression inputs for {target}");
        for file in files {
            let data = std::fs::read(&file).expect("regression input");
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{target}: {} fails its property again", file.display());
        }
    }
}

/// This crate's directory: cargo's run-time `CARGO_MANIFEST_DIR` (a target directory shared by
/// clones at other paths may hold a test binary built elsewhere), else the compile-time one.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}
