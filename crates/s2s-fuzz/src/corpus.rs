//! Fuzz property of the corpus readers (`s2s_data::read_corpus`), aligned files and TSV.
//!
//! Input layout: byte 0 picks the format and options, the rest is file content — for the
//! aligned reader split at the first `0xFF` byte into the source and the target file (a byte that
//! never occurs in UTF-8, so both halves stay arbitrary text or not-text).
//!
//! Properties: reading never panics; an error names the file it read (and the line, for
//! invalid UTF-8 or a missing column); every pair kept is normalised, non-empty and within the
//! word limit; the report accounts for every line.

use std::path::PathBuf;

use s2s_data::{CorpusFiles, DataError, ReadOptions, normalize, read_corpus};

/// Runs the property on one input (see the module doc).
pub fn check(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else { return };
    let dir = Scratch::new();
    let max_words = [0, 1, 3, 200][(mode >> 2) as usize % 4];
    let opts = ReadOptions { max_words };
    let files = if mode & 1 == 0 {
        let cut = body.iter().position(|&b| b == 0xFF).unwrap_or(body.len());
        let (src, tgt) = (&body[..cut], body.get(cut + 1..).unwrap_or(&[]));
        CorpusFiles::Aligned { src: dir.write("src.txt", src), tgt: dir.write("tgt.txt", tgt) }
    } else {
        let (src_col, tgt_col) = [(0, 1), (1, 0), (2, 0)][(mode >> 1) as usize % 3];
        CorpusFiles::Tsv { tsv: dir.write("pairs.tsv", body), src_col, tgt_col }
    };
    match read_corpus(&files, &opts) {
        Ok(corpus) => {
            let r = corpus.report;
            assert_eq!(r.lines, r.kept + r.skipped_empty + r.skipped_long, "{r:?}");
            assert_eq!(corpus.pairs.len(), r.kept);
            assert!(r.kept > 0, "Ok with nothing kept");
            for p in &corpus.pairs {
                for side in [&p.src, &p.tgt] {
                    assert!(!side.is_empty());
                    assert_eq!(&normalize(side), side, "kept text is not normalised");
                    assert!(max_words == 0 || side.split(' ').count() <= max_words);
                }
            }
        }
        Err(e) => {
            let message = e.to_string();
            let named = message.contains(&*dir.0.to_string_lossy());
            assert!(named, "the error does not name the file: {message}");
            if let DataError::InvalidUtf8 { line, .. } | DataError::MissingColumn { line, .. } = e {
                assert!(line >= 1, "line numbers are 1-based");
                assert!(message.contains(&line.to_string()), "the error does not name the line");
            }
        }
    }
}

/// A per-input directory under the system temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("s2s-fuzz-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).expect("temp file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
