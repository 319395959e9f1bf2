//! Argument groups shared by subcommands.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use s2s_data::CorpusFiles;

/// A parallel corpus: two aligned files or one TSV.
#[derive(Args, Debug, Clone, Default)]
pub struct CorpusArgs {
    /// Source-side file, one sentence per line (with --tgt).
    #[arg(long, requires = "tgt")]
    pub src: Option<PathBuf>,
    /// Target-side file, line-aligned with --src.
    #[arg(long, requires = "src")]
    pub tgt: Option<PathBuf>,
    /// One tab-separated file holding both sides (instead of --src/--tgt).
    #[arg(long, conflicts_with_all = ["src", "tgt"])]
    pub tsv: Option<PathBuf>,
    /// 0-based TSV column of the source sentence.
    #[arg(long, default_value_t = 0)]
    pub src_col: usize,
    /// 0-based TSV column of the target sentence.
    #[arg(long, default_value_t = 1)]
    pub tgt_col: usize,
}

impl CorpusArgs {
    /// The files, or `None` when no corpus was given (the built-in pair is used).
    pub fn files(&self) -> Result<Option<CorpusFiles>> {
        match (&self.src, &self.tgt, &self.tsv) {
            (Some(src), Some(tgt), None) => {
                Ok(Some(CorpusFiles::Aligned { src: src.clone(), tgt: tgt.clone() }))
            }
            (None, None, Some(tsv)) => {
                Ok(Some(CorpusFiles::Tsv { tsv: tsv.clone(), src_col: self.src_col, tgt_col: self.tgt_col }))
            }
            (None, None, None) => Ok(None),
            _ => bail!("give a corpus as --src FILE --tgt FILE, or as --tsv FILE"),
        }
    }
}

/// True when the error is a closed stdout (`s2s … | head`): not a failure.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A count of at least 1, for clap (`value_parser = args::at_least_one`): a 0 is refused with
/// the flag named instead of being replaced.
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A finite number of 0 or more, for clap (with `allow_negative_numbers`, so that `-1` gets
/// this message rather than "unexpected argument").
pub fn non_negative(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x.is_finite() && x >= 0.0 { Ok(x) } else { Err("must be a finite number of 0 or more".into()) }
}

/// A finite number above 0, for clap (with `allow_negative_numbers`).
pub fn positive(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x.is_finite() && x > 0.0 { Ok(x) } else { Err("must be a finite number above 0".into()) }
}

/// A probability in `[0, 1)` (a dropout rate), for clap (with `allow_negative_numbers`).
pub fn probability(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..1.0).contains(&x) { Ok(x) } else { Err("must be in [0, 1)".into()) }
}

/// A probability in `(0, 1]` (a nucleus mass), for clap (with `allow_negative_numbers`).
pub fn mass(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x > 0.0 && x <= 1.0 { Ok(x) } else { Err("must be in (0, 1]".into()) }
}

/// A tokenizer brought from a file instead of learned (`train`, `experiment run`, `data
/// prepare`): the flags replace the `[tokenizer]` table's `file`, `src_file` and `tgt_file`.
#[derive(Args, Debug, Clone, Default)]
pub struct TokenizerFileArgs {
    /// Tokenizer for both sides read from FILE instead of learned: a Hugging Face
    /// tokenizer.json (BPE, Unigram, WordPiece) or a SentencePiece .model; saved into the run.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["src_tokenizer", "tgt_tokenizer"])]
    pub tokenizer: Option<PathBuf>,
    /// The source side's tokenizer file (with --tgt-tokenizer).
    #[arg(long, value_name = "FILE", requires = "tgt_tokenizer")]
    pub src_tokenizer: Option<PathBuf>,
    /// The target side's tokenizer file (with --src-tokenizer).
    #[arg(long, value_name = "FILE", requires = "src_tokenizer")]
    pub tgt_tokenizer: Option<PathBuf>,
}

impl TokenizerFileArgs {
    /// Puts the files given into `cfg` (when any is) and reads every file `cfg` then names; an
    /// error names the flag, or else the key (`[tokenizer] file`, …) as `key` reports it.
    pub fn apply(
        &self,
        cfg: &mut s2s_data::TokenizerConfig,
        key: impl Fn(&str, &s2s_data::DataError) -> String,
    ) -> Result<()> {
        let given = self.tokenizer.is_some() || self.src_tokenizer.is_some();
        if given {
            cfg.file = self.tokenizer.clone();
            cfg.src_file = self.src_tokenizer.clone();
            cfg.tgt_file = self.tgt_tokenizer.clone();
        }
        let Err((k, e)) = cfg.check_files() else { return Ok(()) };
        let k = k.unwrap_or("file");
        if given {
            let flag = match k {
                "src_file" => "--src-tokenizer",
                "tgt_file" => "--tgt-tokenizer",
                _ => "--tokenizer",
            };
            bail!("{flag}: {e}");
        }
        bail!("{}", key(k, &e))
    }
}
