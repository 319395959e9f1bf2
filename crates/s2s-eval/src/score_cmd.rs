//! The logic of `s2s score`: read hypothesis files (or standard input) and reference
//! files, compute BLEU, chrF and/or TER, and format the result as the sacreBLEU command
//! line does: one system (`sacrebleu REF... -i HYP -m bleu chrf ter -f text|json`),
//! several systems (`-i A B C`, a table), or a paired significance test of several systems
//! against the first (`--paired-bs`, `--paired-ar`; see [`crate::significance`]).
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
use crate::significance::{
    MetricConfig, PairedColumn, PairedOptions, PairedResult, PairedTest, Seed, paired_test,
};
use crate::ter::{TerConfig, TerScore};
use crate::tokenize::{Tokenizer, py_rstrip};

/// A metric `s2s score` can compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Corpus BLEU.
    Bleu,
    /// Corpus chrF (chrF2, or chrF++ with a word order).
    Chrf,
    /// Corpus TER.
    Ter,
}

impl Metric {
    /// The command-line name: `bleu`, `chrf` or `ter`.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Bleu => "bleu",
            Metric::Chrf => "chrf",
            Metric::Ter => "ter",
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
            "ter" => Ok(Metric::Ter),
            _ => Err(EvalError::InvalidOption(format!("unknown metric {s:?} (expected bleu, chrf or ter)"))),
        }
    }
}

/// Output format of `s2s score`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One line per metric: `BLEU|nrefs:1|...|version:2.6.0+s2s-0.1.0 = 38.4 66.9/44.1/...`; for
    /// several systems, sacreBLEU's table (its `fancy_grid`, without colours) and the
    /// signatures. (sacreBLEU's own default is `json`.)
    #[default]
    Text,
    /// sacreBLEU's `-f json`: one object per metric; a list when there are several. For
    /// several systems, a list of one object per system.
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
    /// Hypothesis files, one per system (named by the path as given); empty reads one
    /// system from standard input. In a paired test the first is the baseline, and a
    /// later repetition of it is ignored; any other repeated file is an error.
    pub hyps: Vec<PathBuf>,
    /// One or more reference files, each aligned line by line with the hypotheses.
    pub refs: Vec<PathBuf>,
    /// Metrics to compute; empty means BLEU only (as sacreBLEU); duplicates are ignored.
    /// Output is in sacreBLEU's order (BLEU, chrF, TER), except in paired tests, where
    /// sacreBLEU keeps the order given.
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
    /// TER options (sacreBLEU's `--ter-*`).
    pub ter: TerConfig,
    /// A paired significance test of the systems against the first (two or more systems).
    pub paired: Option<PairedTest>,
    /// Bootstrap resamples (`--paired-bs-n`, default 1000; 0 means the default).
    pub paired_bs_n: usize,
    /// Approximate randomization trials (`--paired-ar-n`, default 10000; 0 means the
    /// default).
    pub paired_ar_n: usize,
    /// The tests' random seed (default 12345; [`Seed::from_env`] reads `SACREBLEU_SEED`
    /// as sacreBLEU does).
    pub seed: Seed,
}

impl Default for ScoreRequest {
    fn default() -> Self {
        ScoreRequest {
            hyps: Vec::new(),
            refs: Vec::new(),
            metrics: vec![Metric::Bleu],
            format: Format::Text,
            tokenize: Tokenizer::V13a,
            lowercase: false,
            smoothing: Smoothing::Exp,
            chrf_word_order: 0,
            width: 1,
            ter: TerConfig::default(),
            paired: None,
            paired_bs_n: PairedTest::Bootstrap.default_samples(),
            paired_ar_n: PairedTest::ApproximateRandomization.default_samples(),
            seed: Seed::default(),
        }
    }
}

impl ScoreRequest {
    /// The configuration of `metric` under this request's options.
    pub fn metric_config(&self, metric: Metric) -> MetricConfig {
        match metric {
            Metric::Bleu => MetricConfig::Bleu(BleuConfig {
                tokenize: self.tokenize,
                lowercase: self.lowercase,
                smoothing: self.smoothing,
                effective_order: false,
            }),
            Metric::Chrf => MetricConfig::Chrf(ChrfConfig {
                lowercase: self.lowercase,
                word_order: self.chrf_word_order,
                ..ChrfConfig::default()
            }),
            Metric::Ter => MetricConfig::Ter(self.ter),
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

    fn from_ter(s: &TerScore) -> Line {
        Line { name: "TER".into(), score: s.score, signature: s.signature.clone(), verbose: None }
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

/// Runs `s2s score`: reads the files named in `req` (one system from `stdin` when
/// `req.hyps` is empty), scores them and returns the text to print (newline-terminated;
/// print it with `print!`).
///
/// One system gives sacreBLEU's single-system lines; several systems its table, and with
/// `req.paired` its paired significance test against the first system.
///
/// Errors name the file: unreadable file, invalid UTF-8 (with the 1-based line), or a
/// reference whose line count differs from a system's
/// (`hyp.txt has 10 lines but ref.txt has 12`); a paired test of fewer than two systems
/// (the baseline given again is ignored, but said to be given twice when nothing else is
/// left), or the same file given twice (other than the baseline again in a paired test), is
/// an [`EvalError::InvalidOption`]. An empty hypothesis file with empty references scores 0
/// (sacreBLEU's command line refuses it instead).
pub fn run_score(req: &ScoreRequest, stdin: impl BufRead) -> Result<String, EvalError> {
    if req.refs.is_empty() {
        return Err(EvalError::NoReferences);
    }
    let systems = read_systems(req, stdin)?;
    if req.paired.is_some() && systems.len() < 2 {
        // Every other --hyp was the baseline again (ignored, as sacreBLEU does): say so, since
        // the user did give two or more.
        if req.hyps.len() >= 2 {
            return Err(EvalError::InvalidOption(format!(
                "{} is given twice as a hypothesis file, and a paired test needs another system to \
                 test against that baseline (the first --hyp): add a different hypothesis file",
                req.hyps[0].display()
            )));
        }
        return Err(EvalError::InvalidOption(
            "paired tests need two or more hypothesis files (the first is the baseline)".into(),
        ));
    }
    let refs = read_refs(req, &systems)?;

    let metrics = requested_metrics(req);

    if systems.len() == 1 {
        return single_system(req, &metrics, &systems[0].lines, &refs);
    }
    several_systems(req, &metrics, &systems, &refs)
}

/// One system's hypotheses: the name it is reported under and its lines.
struct System {
    name: PathBuf,
    lines: Vec<String>,
}

/// The systems to score: one from `stdin` when `req.hyps` is empty, else one per file, in order.
fn read_systems(req: &ScoreRequest, mut stdin: impl BufRead) -> Result<Vec<System>, EvalError> {
    let mut systems: Vec<System> = Vec::new();
    if req.hyps.is_empty() {
        let name = PathBuf::from(STDIN_NAME);
        let mut bytes = Vec::new();
        stdin.read_to_end(&mut bytes).map_err(|source| EvalError::Read { path: name.clone(), source })?;
        let lines = split_lines(&bytes, &name)?;
        systems.push(System { name, lines });
    } else {
        for path in &req.hyps {
            if let Some(pos) = systems.iter().position(|s| s.name == *path) {
                // sacreBLEU ignores the baseline given again in a paired test.
                if req.paired.is_some() && pos == 0 {
                    continue;
                }
                return Err(EvalError::InvalidOption(format!(
                    "{} is given twice as a hypothesis file",
                    path.display()
                )));
            }
            systems.push(System { name: path.clone(), lines: read_lines(path)? });
        }
    }
    Ok(systems)
}

/// The reference files' lines, each file checked to have as many lines as every system.
fn read_refs(req: &ScoreRequest, systems: &[System]) -> Result<Vec<Vec<String>>, EvalError> {
    let mut refs = Vec::with_capacity(req.refs.len());
    for path in &req.refs {
        let lines = read_lines(path)?;
        for sys in systems {
            if lines.len() != sys.lines.len() {
                return Err(EvalError::LineCountMismatch {
                    hyp: sys.name.clone(),
                    hyp_lines: sys.lines.len(),
                    reference: path.clone(),
                    ref_lines: lines.len(),
                });
            }
        }
        refs.push(lines);
    }
    Ok(refs)
}

/// The metrics to compute: BLEU when none is given, without duplicates, sorted unless paired.
fn requested_metrics(req: &ScoreRequest) -> Vec<Metric> {
    let mut metrics: Vec<Metric> = Vec::new();
    for &m in if req.metrics.is_empty() { &[Metric::Bleu][..] } else { &req.metrics[..] } {
        if !metrics.contains(&m) {
            metrics.push(m);
        }
    }
    if req.paired.is_none() {
        metrics.sort();
    }
    metrics
}

/// sacreBLEU's output for several systems: their table, or the paired test against the first.
fn several_systems(
    req: &ScoreRequest,
    metrics: &[Metric],
    systems: &[System],
    refs: &[Vec<String>],
) -> Result<String, EvalError> {
    let configs: Vec<MetricConfig> = metrics.iter().map(|&m| req.metric_config(m)).collect();
    let mut names: Vec<String> = systems.iter().map(|s| s.name.display().to_string()).collect();
    let hyps: Vec<&[String]> = systems.iter().map(|s| s.lines.as_slice()).collect();
    let (columns, test) = match req.paired {
        Some(test) => {
            names[0] = format!("Baseline: {}", names[0]);
            let samples = match test {
                PairedTest::Bootstrap => req.paired_bs_n,
                PairedTest::ApproximateRandomization => req.paired_ar_n,
            };
            let opts = PairedOptions { test, samples, seed: req.seed };
            (paired_test(&hyps, refs, &configs, &opts)?, Some((test, opts.effective_samples())))
        }
        None => (plain_columns(&hyps, refs, &configs)?, None),
    };
    Ok(format_systems(&names, &columns, test, req.format, req.width))
}

/// One column per metric of every system's corpus score, without test figures.
fn plain_columns(
    hyps: &[&[String]],
    refs: &[Vec<String>],
    configs: &[MetricConfig],
) -> Result<Vec<PairedColumn>, EvalError> {
    let mut columns = Vec::with_capacity(configs.len());
    for cfg in configs {
        let results = hyps
            .iter()
            .map(|h| {
                let score = cfg.corpus_score(h, refs)?;
                Ok(PairedResult { score, p_value: None, mean: None, ci: None })
            })
            .collect::<Result<Vec<_>, EvalError>>()?;
        columns.push(PairedColumn { name: cfg.name(), signature: cfg.signature(refs.len()), results });
    }
    Ok(columns)
}

/// sacreBLEU's single-system output.
fn single_system(
    req: &ScoreRequest,
    metrics: &[Metric],
    hyps: &[String],
    refs: &[Vec<String>],
) -> Result<String, EvalError> {
    let mut lines = Vec::new();
    for &m in metrics {
        match req.metric_config(m) {
            MetricConfig::Bleu(cfg) => lines.push(Line::from_bleu(&cfg.corpus_score(hyps, refs)?)),
            MetricConfig::Chrf(cfg) => lines.push(Line::from_chrf(&cfg.corpus_score(hyps, refs)?)),
            MetricConfig::Ter(cfg) => lines.push(Line::from_ter(&cfg.corpus_score(hyps, refs)?)),
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

// ---------------------------------------------------------------------------------------
// Several systems: sacreBLEU's `print_results_table`

/// The report of several systems, as sacreBLEU's command line prints it
/// (`print_results_table`): `names` are the systems (with `Baseline: ` before the first in
/// a paired test), `columns` one metric each, `test` the paired test and its number of
/// resamples or trials (`None`: plain scores).
///
/// Text is sacreBLEU's `fancy_grid` table (tabulate: right-aligned names, centred cells,
/// cell widths in terminal columns), without colours, then in a paired test its legend,
/// then the metric signatures. JSON is sacreBLEU's `json.dumps(..., indent=4)` list of one
/// object per system: the scores as formatted strings, or in a paired test objects with
/// `score`, `p_value`, `mean` and `ci` (sacreBLEU 2.6 under numpy 2 fails to write these
/// because some are `float32`; here they are written as numbers).
pub fn format_systems(
    names: &[String],
    columns: &[PairedColumn],
    test: Option<(PairedTest, usize)>,
    format: Format,
    width: usize,
) -> String {
    match format {
        Format::Text => systems_text(names, columns, test, width),
        Format::Json => systems_json(names, columns, test.is_some(), width),
    }
}

fn systems_text(
    names: &[String],
    columns: &[PairedColumn],
    test: Option<(PairedTest, usize)>,
    width: usize,
) -> String {
    // `_format_score_lines`; its bootstrap flag, once set, stays set for later columns.
    let mut headers = vec!["System".to_owned()];
    let mut cells: Vec<Vec<String>> = vec![names.to_vec()];
    let mut is_bootstrap = false;
    for col in columns {
        let mut vals = Vec::with_capacity(col.results.len());
        for r in &col.results {
            let mut s = format!("{:.*}", width, r.score);
            if let (Some(mean), Some(ci)) = (r.mean, r.ci) {
                is_bootstrap = true;
                s.push_str(&format!(" ({mean:.width$} ± {ci:.width$})"));
            }
            if let Some(p) = r.p_value {
                s.push('\n');
                s.push_str(&format!("(p = {p:.4})"));
                if p <= 0.05 {
                    s.push('*');
                }
            }
            vals.push(s);
        }
        headers.push(if is_bootstrap { format!("{} (μ ± 95% CI)", col.name) } else { col.name.clone() });
        cells.push(vals);
    }
    let mut out = fancy_grid(&headers, &cells);
    out.push_str("\n\n");

    if let Some((test, n)) = test {
        let (kind, unit) = match test {
            PairedTest::Bootstrap => ("bootstrap resampling", "resampling trials"),
            PairedTest::ApproximateRandomization => ("approximate randomization", "trials"),
        };
        let msg = format!("Paired {kind} test with {n} {unit}");
        let rule = "-".repeat(msg.chars().count());
        let baseline = names.first().map_or("", String::as_str);
        out.push_str(&format!("{rule}\n{msg}\n{rule}\n"));
        out.push_str(&format!(" - Each system is pairwise compared to {baseline}.\n"));
        out.push_str(match test {
            PairedTest::Bootstrap => {
                "   Actual system score / bootstrap estimated true mean / 95% CI are provided for each metric.\n"
            }
            PairedTest::ApproximateRandomization => "   Actual system score is provided for each metric.\n",
        });
        out.push_str(LEGEND);
    }

    out.push_str("-----------------\nMetric signatures\n-----------------\n");
    for col in columns {
        let pad = 10usize.saturating_sub(col.name.chars().count());
        out.push_str(&format!(" - {}{} {}\n", col.name, " ".repeat(pad), col.signature));
    }
    out
}

/// The part of sacreBLEU's paired-test legend that does not depend on the test.
const LEGEND: &str = "
 - Null hypothesis: the system and the baseline translations are essentially
   generated by the same underlying process. For a given system and the baseline,
   the p-value is roughly the probability of the absolute score difference (delta)
   or higher occurring due to chance, under the assumption that the null hypothesis is correct.

 - Assuming a significance threshold of 0.05, the null hypothesis can be rejected
   for p-values < 0.05 (marked with \"*\"). This means that the delta is unlikely to be attributed
   to chance, hence the system is significantly \"different\" than the baseline.
   Otherwise, the p-values are highlighted in red.

 - NOTE: Significance does not tell whether a system is \"better\" than the baseline but rather
   emphasizes the \"difference\" of the systems in terms of the replicability of the delta.

";

/// Terminal columns of `c`, as `wcwidth` counts them (0 for combining marks and
/// zero-width characters, 2 for East Asian wide and full-width characters); an
/// approximation of its tables that covers the common blocks.
fn char_width(c: char) -> usize {
    let u = u32::from(c);
    match u {
        0x0300..=0x036F
        | 0x0483..=0x0489
        | 0x0591..=0x05BD
        | 0x0610..=0x061A
        | 0x064B..=0x065F
        | 0x200B..=0x200F
        | 0x20D0..=0x20FF
        | 0xFE00..=0xFE0F
        | 0xFE20..=0xFE2F => 0,
        0x1100..=0x115F
        | 0x2E80..=0x303E
        | 0x3041..=0x33FF
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xA000..=0xA4CF
        | 0xAC00..=0xD7A3
        | 0xF900..=0xFAFF
        | 0xFE30..=0xFE4F
        | 0xFF00..=0xFF60
        | 0xFFE0..=0xFFE6
        | 0x1F300..=0x1F64F
        | 0x1F900..=0x1F9FF
        | 0x20000..=0x3FFFD => 2,
        _ => 1,
    }
}

fn display_width(s: &str) -> usize {
    s.chars().map(char_width).sum()
}

/// Python's `'{0:^w}'.format(s)` / `'{0:>w}'`, by terminal columns.
fn pad(s: &str, w: usize, right: bool) -> String {
    let extra = w.saturating_sub(display_width(s));
    let (left, r) = if right { (extra, 0) } else { (extra / 2, extra - extra / 2) };
    format!("{}{s}{}", " ".repeat(left), " ".repeat(r))
}

/// tabulate's `fancy_grid` with the first column right-aligned and the others centred,
/// cells possibly spanning several lines (top-aligned); `columns[c][r]` is row `r` of
/// column `c`, and each header is padded by at least two columns.
fn fancy_grid(headers: &[String], columns: &[Vec<String>]) -> String {
    let widths: Vec<usize> = headers
        .iter()
        .zip(columns)
        .map(|(h, col)| {
            let cell = col.iter().flat_map(|c| c.split('\n')).map(display_width).max().unwrap_or(0);
            cell.max(display_width(h) + 2)
        })
        .collect();
    let rule = |l: &str, fill: &str, mid: &str, r: &str| -> String {
        let parts: Vec<String> = widths.iter().map(|w| fill.repeat(w + 2)).collect();
        format!("{l}{}{r}\n", parts.join(mid))
    };
    let line = |cells: &[String]| -> String {
        let parts: Vec<String> =
            cells.iter().enumerate().map(|(c, s)| format!(" {} ", pad(s, widths[c], c == 0))).collect();
        format!("│{}│\n", parts.join("│"))
    };
    let mut out = rule("╒", "═", "╤", "╕");
    out.push_str(&line(headers));
    out.push_str(&rule("╞", "═", "╪", "╡"));
    let rows = columns.first().map_or(0, Vec::len);
    for r in 0..rows {
        let split: Vec<Vec<&str>> = columns.iter().map(|col| col[r].split('\n').collect()).collect();
        let height = split.iter().map(Vec::len).max().unwrap_or(1);
        for k in 0..height {
            let cells: Vec<String> =
                split.iter().map(|l| l.get(k).copied().unwrap_or("").to_owned()).collect();
            out.push_str(&line(&cells));
        }
        if r + 1 < rows {
            out.push_str(&rule("├", "─", "┼", "┤"));
        }
    }
    out.push_str(&rule("╘", "═", "╧", "╛"));
    // `print(table)` ends the table without a newline of its own; the caller adds it.
    out.pop();
    out
}

/// Python's `json.dumps` of a string (`ensure_ascii=True`).
fn py_json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn systems_json(names: &[String], columns: &[PairedColumn], paired: bool, width: usize) -> String {
    let opt = |x: Option<f64>| x.map_or_else(|| "null".to_owned(), py_float_repr);
    let mut systems = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let mut fields = vec![format!("        \"system\": {}", py_json_str(name))];
        for col in columns {
            let Some(r) = col.results.get(i) else { continue };
            let value = if paired {
                format!(
                    "{{\n            \"score\": {},\n            \"p_value\": {},\n            \"mean\": {},\n            \"ci\": {}\n        }}",
                    py_float_repr(r.score),
                    opt(r.p_value),
                    opt(r.mean),
                    opt(r.ci)
                )
            } else {
                py_json_str(&format!("{:.*}", width, r.score))
            };
            fields.push(format!("        {}: {value}", py_json_str(&col.name)));
        }
        systems.push(format!("    {{\n{}\n    }}", fields.join(",\n")));
    }
    format!("[\n{}\n]\n", systems.join(",\n"))
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
    fn systems_table_marks_p_values_up_to_0_05() {
        use crate::significance::{PairedColumn, PairedResult, PairedTest};
        let r = |score, p: Option<f64>| PairedResult { score, p_value: p, mean: None, ci: None };
        let col = PairedColumn {
            name: "BLEU".into(),
            signature: "nrefs:1|ar:3|seed:1|v".into(),
            results: vec![r(30.0, None), r(31.0, Some(0.05)), r(29.0, Some(0.0501))],
        };
        let names = ["Baseline: a".to_owned(), "b".to_owned(), "c".to_owned()];
        let test = Some((PairedTest::ApproximateRandomization, 3));
        let out = format_systems(&names, &[col], test, Format::Text, 1);
        assert!(out.contains("│ (p = 0.0500)* │"), "{out}");
        assert!(out.contains("│ (p = 0.0501)  │"), "{out}");
        assert!(
            out.starts_with("╒═════════════╤═══════════════╕\n│      System │     BLEU      │\n"),
            "{out}"
        );
        assert!(out.contains("Paired approximate randomization test with 3 trials\n"), "{out}");
        assert!(out.ends_with(" - BLEU       nrefs:1|ar:3|seed:1|v\n"), "{out}");
    }

    #[test]
    fn python_json_strings() {
        // json.dumps('a"b\\c\né€😀\x7f')
        assert_eq!(py_json_str("a\"b\\c\né€😀\u{7f}"), r#""a\"b\\c\n\u00e9\u20ac\ud83d\ude00\u007f""#);
        assert_eq!(display_width("中文 ab"), 7);
    }

    #[test]
    fn text_alignment() {
        let lines = vec!["BLEU|a = 1.0 x".to_owned(), "chrF2|abc = 2.0".to_owned()];
        // res=['BLEU|a = 1.0 x','chrF2|abc = 2.0']; lens=[l.index('=')-1 for l in res]; w=max(lens)
        // print('\n'.join(f'{l[:n]:>{w}}{l[n:]}' for n,l in zip(lens,res)))   (sacrebleu/utils.py)
        assert_eq!(align_text(&lines), "   BLEU|a = 1.0 x\nchrF2|abc = 2.0\n");
    }
}
