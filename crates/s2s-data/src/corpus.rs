//! Parallel corpus readers: two aligned files or one TSV, read as a stream.
//!
//! Lines are normalised ([`crate::normalize`]); a pair with an empty side, or with a side longer
//! than [`ReadOptions::max_words`] words, is skipped and counted in [`ReadReport`] (never
//! silently). Malformed input is a [`DataError`] naming the file and the 1-based line; so is a
//! line longer than [`MAX_LINE_BYTES`], read no further than that (memory stays bounded).

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{DataError, Result};
use crate::line::{self, LineRead, MAX_LINE_BYTES};
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
    let mut reader = PairReader::open(files)?;
    let mut pairs = Vec::new();
    let mut report = ReadReport::default();
    while let Some((src, tgt)) = reader.next_pair()? {
        report.lines += 1;
        match read_verdict(src, tgt, opts) {
            Ok(p) => {
                report.kept += 1;
                pairs.push(p);
            }
            Err(skip) => report.count(skip),
        }
    }
    if pairs.is_empty() {
        return Err(DataError::NothingUsable {
            path: files.anchor().to_path_buf(),
            skipped_empty: report.skipped_empty,
            skipped_long: report.skipped_long,
        });
    }
    Ok(Corpus { pairs, report })
}

/// Why [`read_verdict`] skipped a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadSkip {
    /// A side is empty after normalisation.
    Empty,
    /// A side has more than [`ReadOptions::max_words`] words.
    Long,
}

impl ReadReport {
    /// Counts one skipped pair.
    pub fn count(&mut self, skip: ReadSkip) {
        match skip {
            ReadSkip::Empty => self.skipped_empty += 1,
            ReadSkip::Long => self.skipped_long += 1,
        }
    }
}

/// Normalises one raw line pair and applies the reading rules of the module doc: the
/// normalised pair, or why it is skipped. [`read_corpus`] is this over every line.
pub fn read_verdict(src: &str, tgt: &str, opts: &ReadOptions) -> std::result::Result<Pair, ReadSkip> {
    let (src, tgt) = (normalize(src), normalize(tgt));
    if src.is_empty() || tgt.is_empty() {
        Err(ReadSkip::Empty)
    } else if opts.max_words > 0 && (words(&src) > opts.max_words || words(&tgt) > opts.max_words) {
        Err(ReadSkip::Long)
    } else {
        Ok(Pair { src, tgt })
    }
}

impl CorpusFiles {
    /// The file errors about the split as a whole name (the source file, or the TSV).
    pub fn anchor(&self) -> &Path {
        match self {
            CorpusFiles::Aligned { src, .. } => src,
            CorpusFiles::Tsv { tsv, .. } => tsv,
        }
    }

    /// The files read, in order (source then target, or the one TSV).
    pub fn paths(&self) -> Vec<&Path> {
        match self {
            CorpusFiles::Aligned { src, tgt } => vec![src.as_path(), tgt.as_path()],
            CorpusFiles::Tsv { tsv, .. } => vec![tsv.as_path()],
        }
    }
}

/// Streams the raw (not yet normalised) line pairs of a split, in file order, with the same
/// errors as [`read_corpus`]: an empty file, invalid UTF-8 (file and 1-based line), a missing
/// TSV column (file and line), aligned files of different lengths (both files and counts).
pub struct PairReader {
    inner: ReaderKind,
}

enum ReaderKind {
    Aligned { src: Lines, tgt: Lines, done: bool },
    Tsv { lines: Lines, src_col: usize, tgt_col: usize, needed: usize },
}

impl PairReader {
    /// Opens the files of a split.
    pub fn open(files: &CorpusFiles) -> Result<Self> {
        let inner = match files {
            CorpusFiles::Aligned { src, tgt } => {
                ReaderKind::Aligned { src: Lines::open(src)?, tgt: Lines::open(tgt)?, done: false }
            }
            CorpusFiles::Tsv { tsv, src_col, tgt_col } => ReaderKind::Tsv {
                lines: Lines::open(tsv)?,
                src_col: *src_col,
                tgt_col: *tgt_col,
                needed: src_col.max(tgt_col) + 1,
            },
        };
        Ok(Self { inner })
    }

    /// The next raw pair `(source line, target line)`, or `None` after the last one.
    pub fn next_pair(&mut self) -> Result<Option<(&str, &str)>> {
        match &mut self.inner {
            ReaderKind::Aligned { src, tgt, done } => {
                if *done {
                    return Ok(None);
                }
                // Read both lines first (the borrows end here), then look at them.
                let (a, b) = (src.advance()?, tgt.advance()?);
                match (a, b) {
                    (true, true) => Ok(Some((src.current()?, tgt.current()?))),
                    (false, false) => {
                        *done = true;
                        Ok(None)
                    }
                    _ => {
                        let (src_lines, tgt_lines) = (src.count_rest()?, tgt.count_rest()?);
                        Err(DataError::LineCountMismatch {
                            src_path: src.path.clone(),
                            src_lines,
                            tgt_path: tgt.path.clone(),
                            tgt_lines,
                        })
                    }
                }
            }
            ReaderKind::Tsv { lines, src_col, tgt_col, needed } => {
                if !lines.advance()? {
                    return Ok(None);
                }
                let line = lines.current()?;
                let mut cols = line.split('\t');
                let (mut s, mut t, mut found) = (None, None, 0);
                for (k, c) in cols.by_ref().enumerate() {
                    found = k + 1;
                    if k == *src_col {
                        s = Some(c);
                    }
                    if k == *tgt_col {
                        t = Some(c);
                    }
                }
                match (s, t) {
                    (Some(s), Some(t)) => Ok(Some((s, t))),
                    _ => Err(DataError::MissingColumn {
                        path: lines.path.clone(),
                        line: lines.line,
                        needed: *needed,
                        found,
                    }),
                }
            }
        }
    }

    /// Appends up to `max` raw pairs to `out`, returning how many; 0 means the end.
    pub fn read_chunk(&mut self, max: usize, out: &mut Vec<(String, String)>) -> Result<usize> {
        let mut n = 0;
        while n < max {
            match self.next_pair()? {
                Some((s, t)) => out.push((s.to_owned(), t.to_owned())),
                None => break,
            }
            n += 1;
        }
        Ok(n)
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

    /// Reads the next line into the buffer; false at the end of the file; an error naming the
    /// line when it is longer than [`MAX_LINE_BYTES`].
    fn advance(&mut self) -> Result<bool> {
        let read = line::read_line(&mut self.reader, &mut self.buf, MAX_LINE_BYTES)
            .map_err(|e| DataError::io(&self.path, e))?;
        if read == LineRead::End {
            return Ok(false);
        }
        self.line += 1;
        if read == LineRead::TooLong {
            return Err(DataError::LineTooLong {
                path: self.path.clone(),
                line: self.line,
                limit: MAX_LINE_BYTES,
            });
        }
        Ok(true)
    }

    /// The line last read by [`Lines::advance`], without `\n` / `\r\n`.
    fn current(&self) -> Result<&str> {
        let mut bytes = &self.buf[..];
        if let Some(b) = bytes.strip_suffix(b"\n") {
            bytes = b.strip_suffix(b"\r").unwrap_or(b);
        }
        std::str::from_utf8(bytes)
            .map_err(|_| DataError::InvalidUtf8 { path: self.path.clone(), line: self.line })
    }

    /// Counts the lines, those left included, without keeping them (for the line-count
    /// mismatch message).
    fn count_rest(&mut self) -> Result<usize> {
        let rest = line::count_lines(&mut self.reader).map_err(|e| DataError::io(&self.path, e))?;
        Ok(self.line + rest)
    }
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
    fn a_line_over_the_limit_is_an_error_naming_file_and_line() {
        // Line 2 of the source holds the limit and one byte more; the target is fine.
        let mut long = b"ein Hund .\n".to_vec();
        long.extend(std::iter::repeat_n(b'x', MAX_LINE_BYTES + 1));
        long.extend_from_slice(b"\nzwei Katzen .\n");
        let s = tmp("long.de", &long);
        let t = tmp("long.en", b"a dog .\nx\ntwo cats .\n");
        let e = read_corpus(&aligned(&s, &t), &ReadOptions::default()).unwrap_err();
        assert!(matches!(e, DataError::LineTooLong { line: 2, limit: MAX_LINE_BYTES, .. }), "{e}");
        let m = e.to_string();
        assert!(m.contains("long.de:2") && m.contains("one sentence per line"), "{m}");
        // The same in a TSV file; a line of exactly the limit is still read.
        let mut tsv = vec![b'y'; MAX_LINE_BYTES - 2];
        tsv.extend_from_slice(b"\tz\n");
        tsv.extend(std::iter::repeat_n(b'y', MAX_LINE_BYTES + 1));
        let p = tmp("long.tsv", &tsv);
        let files = CorpusFiles::Tsv { tsv: p, src_col: 0, tgt_col: 1 };
        let mut r = PairReader::open(&files).unwrap();
        assert!(matches!(r.next_pair(), Ok(Some(_))), "a line of exactly the limit is read");
        let e = r.next_pair().unwrap_err();
        assert!(e.to_string().contains("long.tsv:2"), "{e}");
    }

    #[test]
    fn a_line_count_mismatch_counts_long_lines_too() {
        let mut s = b"a\nb\n".to_vec();
        s.extend(std::iter::repeat_n(b'x', 2 * MAX_LINE_BYTES));
        let s = tmp("count.de", &s);
        let t = tmp("count.en", b"a\n");
        let e = read_corpus(&aligned(&s, &t), &ReadOptions::default()).unwrap_err();
        assert!(matches!(e, DataError::LineCountMismatch { src_lines: 3, tgt_lines: 1, .. }), "{e}");
    }

    #[test]
    fn missing_file_is_named() {
        let files = aligned(&PathBuf::from("/nonexistent/x.de"), &PathBuf::from("/nonexistent/x.en"));
        let e = read_corpus(&files, &ReadOptions::default()).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x.de"), "{e}");
    }
}
