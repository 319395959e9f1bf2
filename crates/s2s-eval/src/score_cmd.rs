//! The logic of `s2s score`: read a hypothesis file (or standard input) and reference
//! files, compute BLEU and/or chrF, and format the result as the sacreBLEU command line
//! does in single-system mode (`sacrebleu REF... -i HYP -m bleu chrf -f text|json`).
//!
//! Lines are read as sacreBLEU reads them: split on `\n` only, each line stripped of
//! trailing whitespace (`line.rstrip()`); a final newline does not start an extra line.

use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::bleu::{BleuConfig, BleuScore, Smoothing};
use crate::chrf::{ChrfConfig, ChrfScore};
use crate::error::EvalError;
use crate::tokenize::{Tokenizer, py_rstrip};

/// A metric `s2s score` can compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Corpus BLEU.
    Bleu,
    /// Corpus chrF (chrF2, or chrF++ with a word order).
    Chrf,
}

impl Metric {
    /// The command-line name: `bleu` or `chrf`.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Bleu => "bleu",
            Metric::Chrf => "chrf",
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Metric {
    type Err = EvalError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "bleu" => Ok(Metric::Bleu),
            "chrf" => Ok(Metric::Chrf),
            _ => Err(EvalError::InvalidOption(format!("unknown metric {s:?} (expected bleu or chrf)"))),
        }
    }
}

/// Output format of `s2s score`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One line per metric: `BLEU|nrefs:1|...|version:0.1.0 = 38.4 66.9/44.1/...`.
    /// (sacreBLEU's own default is `json`.)
    #[default]
    Text,
    /// sacreBLEU's `-f json`: one object per metric; a list when there are several.
    Json,
}

impl FromStr for Format {
    type Err = EvalError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Format::Text),
            "json" => Ok(Format::Json),
            _ => Err(EvalError::InvalidOption(format!("unknown format {s:?} (expected text or json)"))),
        }
    }
}

/// What `s2s score` was asked to do.
#[derive(Clone, Debug, PartialEq)]
pub struct ScoreRequest {
    /// The hypothesis file; `None` reads standard input.
    pub hyp: Option<PathBuf>,
    /// One or more reference files, each aligned line by line with the hypotheses.
    pub refs: Vec<PathBuf>,
    /// Metrics to compute; empty means BLEU only (as sacreBLEU). Output is always in
    /// sacreBLEU's order (BLEU before chrF), duplicates are ignored.
    pub metrics: Vec<Metric>,
    /// Output format.
    pub format: Format,
    /// BLEU tokeniser.
    pub tokenize: Tokenizer,
    /// Lowercase before scoring. Unlike sacreBLEU's `-lc`, which affects BLEU only,
    /// this applies to chrF too (its signature then says `case:lc`).
    pub lowercase: bool,
    /// BLEU smoothing.
    pub smoothing: Smoothing,
    /// chrF word n-gram order: 0 for chrF2, 2 for chrF++.
    pub chrf_word_order: usize,
    /// Decimals of the score (sacreBLEU's `--width`, default 1).
    pub width: usize,
}

impl Default for ScoreRequest {
    fn default() -> Self {
        ScoreRequest {
            hyp: None,
            refs: Vec::new(),
            metrics: vec![Metric::Bleu],
            format: Format::Text,
            tokenize: Tokenizer::V13a,
            lowercase: false,
            smoothing: Smoothing::Exp,
            chrf_word_order: 0,
            width: 1,
        }
    }
}

const STDIN_NAME: &str = "<stdin>";

/// Splits `bytes` into lines as sacreBLEU reads a file: on `\n` only, then `rstrip()`.
fn split_lines(bytes: &[u8], path: &Path) -> Result<Vec<String>, EvalError> {
    let mut body = bytes;
    if let Some(stripped) = body.strip_suffix(b"\n") {
        body = stripped;
    }
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    body.split(|&b| b == b'\n')
        .enumerate()
        .map(|(i, line)| match std::str::from_utf8(line) {
            Ok(s) => Ok(py_rstrip(s).to_owned()),
            Err(_) => Err(EvalError::InvalidUtf8 { path: path.to_owned(), line: i + 1 }),
        })
        .collect()
}

/// Reads a file as sacreBLEU does (see [`split_lines`]).
fn read_lines(path: &Path) -> Result<Vec<String>, EvalError> {
    let bytes = std::fs::read(path).map_err(|source| EvalError::Read { path: path.to_owned(), source })?;
    split_lines(&bytes, path)
}

/// Python's `repr(float)`, as `json.dumps` writes floats.
fn py_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    // Shortest round-trip digits, in scientific form: "3.84e1", "1e-5".
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{x}");
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    }
}

/// One metric's result, before formatting.
struct Line {
    name: String,
    score: f64,
    signature: String,
    verbose: Option<String>,
}

impl Line {
    fn from_bleu(s: &BleuScore) -> Line {
        Line {
            name: "BLEU".into(),
            score: s.score,
            signature: s.signature.clone(),
            verbose: Some(s.verbose()),
        }
    }

    fn from_chrf(s: &ChrfScore) -> Line {
        Line { name: s.name.clone(), score: s.score, signature: s.signature.clone(), verbose: None }
    }

    /// sacreBLEU's `Score.format(width, signature=...)` for text.
    fn text(&self, width: usize) -> String {
        let mut out = format!("{}|{} = {:.*}", self.name, self.signature, width, self.score);
        if let Some(v) = &self.verbose {
            out.push(' ');
            out.push_str(v);
        }
        out
    }

    /// sacreBLEU's `Score.format(..., is_json=True)`: `json.dumps(d, indent=1, ensure_ascii=False)`.
    fn json(&self, width: usize) -> String {
        let q = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
        let rounded: f64 = format!("{:.*}", width, self.score).parse().unwrap_or(self.score);
        let mut fields = vec![
            ("name".to_owned(), q(&self.name)),
            ("score".to_owned(), py_float_repr(rounded)),
            ("signature".to_owned(), q(&self.signature)),
        ];
        if let Some(v) = &self.verbose {
            fields.push(("verbose_score".to_owned(), q(v)));
        }
        for param in self.signature.split('|') {
            if let Some((k, v)) = param.split_once(':') {
                fields.push((k.to_owned(), q(v)));
            }
        }
        let body: Vec<String> = fields.iter().map(|(k, v)| format!(" {}: {v}", q(k))).collect();
        format!("{{\n{}\n}}", body.join(",\n"))
    }
}

/// sacreBLEU's `print_single_results` for text: right-aligns the part before ` = `.
fn align_text(lines: &[String]) -> String {
    if lines.len() == 1 {
        return format!("{}\n", lines[0]);
    }
    // Position (in characters) of the space before the first '='.
    let cut = |l: &str| l.chars().position(|c| c == '=').map_or(0, |p| p.saturating_sub(1));
    let w = lines.iter().map(|l| cut(l)).max().unwrap_or(0);
    let mut out = String::new();
    for l in lines {
        let c = cut(l);
        let split = l.char_indices().nth(c).map_or(l.len(), |(i, _)| i);
        let (left, right) = l.split_at(split);
        out.push_str(&format!("{left:>w$}{right}\n"));
    }
    out
}

/// Runs `s2s score`: reads the files named in `req` (standard input from `stdin` when
/// `req.hyp` is `None`), scores them and returns the text to print (newline-terminated;
/// print it with `print!`).
///
/// Errors name the file: unreadable file, invalid UTF-8 (with the 1-based line), or a
/// reference whose line count differs from the hypotheses'
/// (`hyp.txt has 10 lines but ref.txt has 12`). An empty hypothesis file with empty
/// references scores 0 (sacreBLEU's command line refuses it instead).
pub fn run_score(req: &ScoreRequest, mut stdin: impl BufRead) -> Result<String, EvalError> {
    if req.refs.is_empty() {
        return Err(EvalError::NoReferences);
    }
    let (hyp_name, hyps) = match &req.hyp {
        Some(p) => (p.clone(), read_lines(p)?),
        None => {
            let name = PathBuf::from(STDIN_NAME);
            let mut bytes = Vec::new();
            stdin.read_to_end(&mut bytes).map_err(|source| EvalError::Read { path: name.clone(), source })?;
            let lines = split_lines(&bytes, &name)?;
            (name, lines)
        }
    };
    let mut refs = Vec::with_capacity(req.refs.len());
    for path in &req.refs {
        let lines = read_lines(path)?;
        if lines.len() != hyps.len() {
            return Err(EvalError::LineCountMismatch {
                hyp: hyp_name.clone(),
                hyp_lines: hyps.len(),
                reference: path.clone(),
                ref_lines: lines.len(),
            });
        }
        refs.push(lines);
    }

    let mut metrics = if req.metrics.is_empty() { vec![Metric::Bleu] } else { req.metrics.clone() };
    metrics.sort();
    metrics.dedup();

    let mut lines = Vec::new();
    for m in metrics {
        match m {
            Metric::Bleu => {
                let cfg = BleuConfig {
                    tokenize: req.tokenize,
                    lowercase: req.lowercase,
                    smoothing: req.smoothing,
                    effective_order: false,
                };
                lines.push(Line::from_bleu(&cfg.corpus_score(&hyps, &refs)?));
            }
            Metric::Chrf => {
                let cfg = ChrfConfig {
                    lowercase: req.lowercase,
                    word_order: req.chrf_word_order,
                    ..ChrfConfig::default()
                };
                lines.push(Line::from_chrf(&cfg.corpus_score(&hyps, &refs)?));
            }
        }
    }

    Ok(match req.format {
        Format::Text => {
            let texts: Vec<String> = lines.iter().map(|l| l.text(req.width)).collect();
            align_text(&texts)
        }
        Format::Json => {
            let objs: Vec<String> = lines.iter().map(|l| l.json(req.width)).collect();
            if objs.len() > 1 { format!("[\n{}\n]\n", objs.join(",\n")) } else { format!("{}\n", objs[0]) }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_repr() {
        // python -c "print([repr(x) for x in [38.4, 100.0, 0.0, 1e-05, 0.0001, 1e16, 12345.678, 0.1]])"
        let cases = [
            (38.4, "38.4"),
            (100.0, "100.0"),
            (0.0, "0.0"),
            (1e-05, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (12345.678, "12345.678"),
            (0.1, "0.1"),
            (1.5e-7, "1.5e-07"),
        ];
        for (x, want) in cases {
            assert_eq!(py_float_repr(x), want);
        }
    }

    #[test]
    fn fixed_point_rounding_matches_python() {
        // python -c "print([f'{x:.1f}' for x in [0.25, 0.35, 2.5, 0.05, 66.93766937669376]], f'{0.125:.2f}', f'{2.5:.0f}', f'{1.0005:.3f}')"
        // -> ['0.2', '0.3', '2.5', '0.1', '66.9'] 0.12 2 1.000
        let got: Vec<String> =
            [0.25, 0.35, 2.5, 0.05, 66.93766937669376].iter().map(|x| format!("{x:.1}")).collect();
        assert_eq!(got, ["0.2", "0.3", "2.5", "0.1", "66.9"]);
        assert_eq!(format!("{:.2}", 0.125), "0.12");
        assert_eq!(format!("{:.0}", 2.5), "2");
        assert_eq!(format!("{:.3}", 1.0005), "1.000");
    }

    #[test]
    fn lines_are_read_like_sacrebleu() {
        let p = Path::new("x");
        assert_eq!(split_lines(b"", p).unwrap(), Vec::<String>::new());
        assert_eq!(split_lines(b"\n", p).unwrap(), [""]);
        assert_eq!(split_lines(b"a \r\nb", p).unwrap(), ["a", "b"]);
        assert_eq!(split_lines(b"a\n\n", p).unwrap(), ["a", ""]);
        assert_eq!(split_lines(b" a\x0cb\xc2\xa0\n", p).unwrap(), [" a\x0cb"]);
        match split_lines(b"ok\nbad \xff\n", p) {
            Err(EvalError::InvalidUtf8 { line, .. }) => assert_eq!(line, 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn text_alignment() {
        let lines = vec!["BLEU|a = 1.0 x".to_owned(), "chrF2|abc = 2.0".to_owned()];
        // res=['BLEU|a = 1.0 x','chrF2|abc = 2.0']; lens=[l.index('=')-1 for l in res]; w=max(lens)
        // print('\n'.join(f'{l[:n]:>{w}}{l[n:]}' for n,l in zip(lens,res)))   (sacrebleu/utils.py)
        assert_eq!(align_text(&lines), "   BLEU|a = 1.0 x\nchrF2|abc = 2.0\n");
    }
}
