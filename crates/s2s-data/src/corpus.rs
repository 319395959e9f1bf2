//! Parallel corpus readers: two aligned files or one TSV, read as a stream.
//!
//! Lines are normalised ([`crate::normalize`]); a pair with an empty side, or with a side longer
//! than [`ReadOptions::max_words`] words, is skipped and counted in [`ReadReport`] (never
//! silently). Malformed input is a [`DataError`] naming the file and the 1-based line.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{DataError, Result};
use crate::normalize::normalize;

/// One normalised sentence pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pair {
    /// Source sentence.
    pub src: String,
    /// Target sentence.
    pub tgt: String,
}

/// Where the sentence pairs of one split come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CorpusFiles {
    /// Two line-aligned files (`--src train.de --tgt train.en`).
    Aligned {
        /// Source-side file.
        src: PathBuf,
        /// Target-side file.
        tgt: PathBuf,
    },
    /// One tab-separated file (`--tsv pairs.tsv --src-col 1 --tgt-col 0`, 0-based columns).
    Tsv {
        /// The TSV file.
        tsv: PathBuf,
        /// 0-based column of the source sentence.
        src_col: usize,
        /// 0-based column of the target sentence.
        tgt_col: usize,
    },
}

impl CorpusFiles {
    /// A short description for messages ("train.de + train.en" or "pairs.tsv[1→0]").
    pub fn describe(&self) -> String {
        match self {
            CorpusFiles::Aligned { src, tgt } => format!("{} + {}", src.display(), tgt.display()),
            CorpusFiles::Tsv { tsv, src_col, tgt_col } => {
                format!("{} (columns {src_col}→{tgt_col})", tsv.display())
            }
        }
    }
}

/// Options for reading a corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadOptions {
    /// Pairs where either side has more whitespace-separated words than this are skipped
    /// (0: no limit).
    pub max_words: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self { max_words: 200 }
    }
}

/// What reading a corpus did: every line is accounted for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadReport {
    /// Lines (pairs) read.
    pub lines: usize,
    /// Pairs kept.
    pub kept: usize,
    /// Pairs skipped because a side was empty after normalisation.
    pub skipped_empty: usize,
    /// Pairs skipped because a side had more than `max_words` words.
    pub skipped_long: usize,
}

impl std::fmt::Display for ReadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} pairs read, {} kept, {} skipped (empty side), {} skipped (too long)",
            self.lines, self.kept, self.skipped_empty, self.skipped_long
        )
    }
}

/// The pairs of one split and the account of how they were read.
#[derive(Debug, Clone)]
pub struct Corpus {
    /// Normalised pairs, in file order.
    pub pairs: Vec<Pair>,
    /// What was kept and skipped.
    pub report: ReadReport,
}

/// Reads one split (see the module doc).
pub fn read_corpus(files: &CorpusFiles, opts: &ReadOptions) -> Result<Corpus> {
    let mut acc = Accumulator { opts: *opts, pairs: Vec::new(), report: ReadReport::default() };
    let anchor = match files {
        CorpusFiles::Aligned { src, tgt } => {
            read_aligned(src, tgt, &mut acc)?;
            src
        }
        CorpusFiles::Tsv { tsv, src_col, tgt_col } => {
            read_tsv(tsv, *src_col, *tgt_col, &mut acc)?;
            tsv
        }
    };
    if acc.pairs.is_empty() {
        return Err(DataError::NothingUsable {
            path: anchor.clone(),
            skipped_empty: acc.report.skipped_empty,
            skipped_long: acc.report.skipped_long,
        });
    }
    Ok(Corpus { pairs: acc.pairs, report: acc.report })
}

struct Accumulator {
    opts: ReadOptions,
    pairs: Vec<Pair>,
    report: ReadReport,
}

impl Accumulator {
    fn push(&mut self, src: &str, tgt: &str) {
        self.report.lines += 1;
        let (src, tgt) = (normalize(src), normalize(tgt));
        if src.is_empty() || tgt.is_empty() {
            self.report.skipped_empty += 1;
        } else if self.opts.max_words > 0
            && (words(&src) > self.opts.max_words || words(&tgt) > self.opts.max_words)
        {
            self.report.skipped_long += 1;
        } else {
            self.report.kept += 1;
            self.pairs.push(Pair { src, tgt });
        }
    }
}

fn words(s: &str) -> usize {
    s.split(' ').count()
}

/// A streaming line reader that yields `&str` lines (without `\n` / `\r\n`) and names the file
/// and line number in errors.
struct Lines {
    path: PathBuf,
    reader: BufReader<File>,
    buf: Vec<u8>,
    line: usize,
}

impl Lines {
    fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| DataError::io(path, e))?;
        let empty = file.metadata().map(|m| m.len() == 0).unwrap_or(false);
        if empty {
            return Err(DataError::Empty { path: path.to_path_buf() });
        }
        Ok(Self {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(1 << 16, file),
            buf: Vec::new(),
            line: 0,
        })
    }

    /// The next line, or `None` at the end of the file.
    fn next_line(&mut self) -> Result<Option<&str>> {
        self.buf.clear();
        let n = self.reader.read_until(b'\n', &mut self.buf).map_err(|e| DataError::io(&self.path, e))?;
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        let mut bytes = &self.buf[..];
        if let Some(b) = bytes.strip_suffix(b"\n") {
            bytes = b.strip_suffix(b"\r").unwrap_or(b);
        }
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(Some(s)),
            Err(_) => Err(DataError::InvalidUtf8 { path: self.path.clone(), line: self.line }),
        }
    }

    /// Counts the remaining lines without decoding them (for the line-count mismatch message).
    fn count_rest(mut self) -> Result<usize> {
        let mut n = self.line;
        loop {
            self.buf.clear();
            let read =
                self.reader.read_until(b'\n', &mut self.buf).map_err(|e| DataError::io(&self.path, e))?;
            if read == 0 {
                return Ok(n);
            }
            n += 1;
        }
    }
}

fn read_aligned(src: &Path, tgt: &Path, acc: &mut Accumulator) -> Result<()> {
    let mut s = Lines::open(src)?;
    let mut t = Lines::open(tgt)?;
    loop {
        match (s.next_line()?, t.next_line()?) {
            (Some(a), Some(b)) => acc.push(a, b),
            (None, None) => return Ok(()),
            _ => {
                let (src_lines, tgt_lines) = (s.count_rest()?, t.count_rest()?);
                return Err(DataError::LineCountMismatch {
                    src_path: src.to_path_buf(),
                    src_lines,
                    tgt_path: tgt.to_path_buf(),
                    tgt_lines,
                });
            }
        }
    }
}

fn read_tsv(path: &Path, src_col: usize, tgt_col: usize, acc: &mut Accumulator) -> Result<()> {
    let mut lines = Lines::open(path)?;
    let needed = src_col.max(tgt_col) + 1;
    while let Some(line) = lines.next_line()? {
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() < needed {
            let found = cols.len();
            return Err(DataError::MissingColumn {
                path: path.to_path_buf(),
                line: lines.line,
                needed,
                found,
            });
        }
        acc.push(cols[src_col], cols[tgt_col]);
    }
    Ok(())
}

/// The named splits of a corpus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitFiles {
    /// Training pairs.
    pub train: CorpusFiles,
    /// Validation pairs (perplexity, BLEU, early stopping).
    pub valid: CorpusFiles,
    /// Test pairs (final evaluation); optional.
    #[serde(default)]
    pub test: Option<CorpusFiles>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn tmp(name: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("s2s-corpus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::File::create(&p).unwrap().write_all(bytes).unwrap();
        p
    }

    fn aligned(s: &PathBuf, t: &PathBuf) -> CorpusFiles {
        CorpusFiles::Aligned { src: s.clone(), tgt: t.clone() }
    }

    #[test]
    fn reads_aligned_files_and_normalises() {
        let s = tmp("ok.de", b"Ein  Hund .\r\nZwei\xc2\xa0Katzen\n");
        let t = tmp("ok.en", b"A dog .\nTwo cats");
        let c = read_corpus(&aligned(&s, &t), &ReadOptions::default()).unwrap();
        assert_eq!(c.pairs[0], Pair { src: "Ein Hund .".into(), tgt: "A dog .".into() });
        assert_eq!(c.pairs[1], Pair { src: "Zwei Katzen".into(), tgt: "Two cats".into() });
        assert_eq!(c.report, ReadReport { lines: 2, kept: 2, skipped_empty: 0, skipped_long: 0 });
    }

    #[test]
    fn line_count_mismatch_names_both_files_and_counts() {
        let s = tmp("mm.de", b"a\nb\nc\n");
        let t = tmp("mm.en", b"a\nb\n");
        let e = read_corpus(&aligned(&s, &t), &ReadOptions::default()).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, DataError::LineCountMismatch { src_lines: 3, tgt_lines: 2, .. }), "{msg}");
        assert!(msg.contains("mm.de has 3 lines") && msg.contains("mm.en has 2"), "{msg}");
    }

    #[test]
    fn invalid_utf8_names_file_and_line() {
        let s = tmp("bad.de", b"gut\nschlecht \xff\xfe\n");
        let t = tmp("bad.en", b"good\nbad\n");
        let e = read_corpus(&aligned(&s, &t), &ReadOptions::default()).unwrap_err();
        assert!(matches!(e, DataError::InvalidUtf8 { line: 2, .. }), "{e}");
        assert!(e.to_string().contains("bad.de:2"), "{e}");
    }

    #[test]
    fn tsv_missing_column_names_file_and_line() {
        let p = tmp("pairs.tsv", b"Go.\tVa !\nRun!\n");
        let files = CorpusFiles::Tsv { tsv: p, src_col: 1, tgt_col: 0 };
        let e = read_corpus(&files, &ReadOptions::default()).unwrap_err();
        assert!(matches!(e, DataError::MissingColumn { line: 2, needed: 2, found: 1, .. }), "{e}");
        assert!(e.to_string().contains("pairs.tsv:2"), "{e}");
    }

    #[test]
    fn tsv_columns_are_picked() {
        let p = tmp("cols.tsv", b"Go.\tVa !\tCC-BY\n");
        let files = CorpusFiles::Tsv { tsv: p, src_col: 1, tgt_col: 0 };
        let c = read_corpus(&files, &ReadOptions::default()).unwrap();
        assert_eq!(c.pairs, vec![Pair { src: "Va !".into(), tgt: "Go.".into() }]);
    }

    #[test]
    fn empty_file_is_an_error() {
        let s = tmp("empty.de", b"");
        let t = tmp("empty.en", b"x\n");
        let e = read_corpus(&aligned(&s, &t), &ReadOptions::default()).unwrap_err();
        assert!(matches!(e, DataError::Empty { .. }), "{e}");
        assert!(e.to_string().contains("empty.de"), "{e}");
    }

    #[test]
    fn empty_and_long_lines_are_skipped_and_counted() {
        let s = tmp("skip.de", b"a b\n \nc\nd e f g\n");
        let t = tmp("skip.en", b"x\ny\n\nz\n");
        let c = read_corpus(&aligned(&s, &t), &ReadOptions { max_words: 3 }).unwrap();
        assert_eq!(c.pairs.len(), 1);
        assert_eq!(c.report, ReadReport { lines: 4, kept: 1, skipped_empty: 2, skipped_long: 1 });
    }

    #[test]
    fn all_skipped_is_an_error_not_an_empty_corpus() {
        let s = tmp("allskip.de", b"\n\n");
        let t = tmp("allskip.en", b"a\nb\n");
        let e = read_corpus(&aligned(&s, &t), &ReadOptions::default()).unwrap_err();
        assert!(matches!(e, DataError::NothingUsable { skipped_empty: 2, .. }), "{e}");
    }

    #[test]
    fn missing_file_is_named() {
        let files = aligned(&PathBuf::from("/nonexistent/x.de"), &PathBuf::from("/nonexistent/x.en"));
        let e = read_corpus(&files, &ReadOptions::default()).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x.de"), "{e}");
    }
}
