//! Where the tests find the real corpora and scoring fixtures that are never copied into the
//! repository: `$S2S_SHARED`, else `../shared` beside the project root. Not for the CLI's use.
//!
//! A test that needs them calls [`require`]: where they are missing it prints one line —
//! what is missing, where it was looked for, how to get it — and the test skips; under
//! `CI=true` it fails instead, so CI never passes without them.

use std::path::{Path, PathBuf};

/// The shared directory for a crate at `manifest_dir`: `$S2S_SHARED`, else `../shared` beside
/// the workspace root (two levels above a crate's directory).
pub fn root(manifest_dir: &Path) -> PathBuf {
    std::env::var_os("S2S_SHARED").map(PathBuf::from).unwrap_or_else(|| manifest_dir.join("../../../shared"))
}

/// The line a test prints (or fails with) when `path` is missing.
pub fn missing_message(path: &Path) -> String {
    format!(
        "test data missing: {} (looked in $S2S_SHARED, else ../shared beside the project root); \
         get it with `scripts/fetch-shared.sh DIR` and set S2S_SHARED=DIR",
        path.display()
    )
}

/// `root/rel` when it exists; otherwise `None` after printing why (the caller skips), or a
/// panic under `CI=true`.
pub fn require(manifest_dir: &Path, rel: &str) -> Option<PathBuf> {
    let path = root(manifest_dir).join(rel);
    if path.exists() {
        return Some(path);
    }
    let message = missing_message(&path);
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
    eprintln!("skipped: {message}");
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_path_is_named_with_its_remedy() {
        let m = missing_message(Path::new("/nowhere/fixtures/bleu"));
        assert!(
            m.contains("/nowhere/fixtures/bleu") && m.contains("S2S_SHARED") && m.contains("fetch-shared.sh")
        );
        // Present: found without a message (this crate's own directory stands in).
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        assert!(root(here).ends_with("shared") || std::env::var_os("S2S_SHARED").is_some());
    }
}
