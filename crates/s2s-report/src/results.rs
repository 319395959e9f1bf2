//! Loading an experiment's runs and summarising them per model (mean ± std over seeds).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What can go wrong while reporting.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// File-system trouble.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file that does not parse.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

fn read(path: &Path) -> Result<String, ReportError> {
    std::fs::read_to_string(path).map_err(|source| ReportError::Io { path: path.to_path_buf(), source })
}

fn parse<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, ReportError> {
    serde_json::from_str(&read(path)?)
        .map_err(|e| ReportError::Parse { path: path.to_path_buf(), message: e.to_string() })
}

/// One planned run of an experiment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    /// Unique run name (model name, plus `-s<seed>` with several seeds).
    pub name: String,
    /// Model name (grid point), shared by its seeds.
    pub model: String,
    /// Model kind.
    pub kind: String,
    /// Seed.
    pub seed: u64,
    /// Run directory, relative to the experiment directory.
    pub dir: String,
}

/// `runs/NAME/experiment.json`: the experiment's runs in order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExperimentIndex {
    /// Experiment name.
    pub name: String,
    /// The experiment file it came from.
    pub source: String,
    /// Runs.
    pub entries: Vec<Entry>,
    /// The model the others are tested against (`baseline = "…"` in the experiment file;
    /// absent: the first model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
}

impl ExperimentIndex {
    /// The baseline model's name: the one named in the file, else the first model.
    pub fn baseline_model(&self) -> Option<&str> {
        self.baseline.as_deref().or_else(|| self.entries.first().map(|e| e.model.as_str()))
    }
}

/// One row of `metrics.csv`: one per validation (and at the end of training). Written by
/// the training loop (`s2s_train::metrics`), read here.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MetricsRow {
    /// Optimizer steps so far.
    pub step: u64,
    /// Epoch (0-based) the step belongs to.
    pub epoch: u64,
    /// Seconds of training so far (across resumes).
    pub wall: f64,
    /// Mean label-smoothed training loss per token since the previous row.
    pub train_loss: f64,
    /// Validation perplexity (teacher-forced).
    pub val_ppl: f64,
    /// Validation BLEU (greedy, sacreBLEU defaults).
    pub val_bleu: f64,
    /// Learning rate at the step.
    pub lr: f64,
    /// Target tokens per second since the previous row.
    pub tokens_per_s: f64,
}

#[derive(Deserialize)]
struct Bucket {
    bucket: String,
    sentences: usize,
    bleu: f64,
}

#[derive(Deserialize)]
struct Scores {
    bleu: f64,
    chrf: f64,
    ppl: f64,
    decoding: String,
    decode_sentences_per_s: f64,
    bleu_by_source_length: Vec<Bucket>,
}

#[derive(Deserialize)]
struct Manifest {
    params: usize,
    device: String,
}

/// One sentence's cross-attention (from `test/attention.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AttentionExample {
    /// Source tokens.
    pub src: Vec<String>,
    /// Output tokens.
    pub out: Vec<String>,
    /// `weights[t][i]`.
    pub weights: Vec<Vec<f32>>,
}

/// Everything measured about one run (test figures absent while unfinished).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunResult {
    /// The planned entry.
    pub entry: Entry,
    /// Parameters.
    pub params: usize,
    /// Device.
    pub device: String,
    /// Test BLEU, chrF, perplexity, decoding, sentences/s.
    pub bleu: Option<f64>,
    /// chrF2.
    pub chrf: Option<f64>,
    /// Test perplexity.
    pub ppl: Option<f64>,
    /// `greedy` / `beam-K`.
    pub decoding: Option<String>,
    /// Test decoding speed.
    pub decode_sentences_per_s: Option<f64>,
    /// Training wall time, seconds.
    pub train_seconds: f64,
    /// Mean training tokens/s over the logged windows.
    pub tokens_per_s: f64,
    /// (bucket, sentences, BLEU).
    pub by_length: Vec<(String, usize, f64)>,
    /// Validation curve.
    #[serde(skip)]
    pub curve: Vec<MetricsRow>,
    /// Attention examples.
    #[serde(skip)]
    pub attention: Vec<AttentionExample>,
    /// Test hypotheses and the references they were scored against (`test/hypotheses.txt`,
    /// `test/references.txt`), for the significance tests.
    #[serde(skip)]
    pub test_text: Option<(Vec<String>, Vec<String>)>,
    /// Half-width of the 95% bootstrap interval of the test BLEU (see [`significance`]).
    pub bleu_ci: Option<f64>,
    /// p-value of the paired bootstrap test against the baseline run of the same seed.
    pub p_vs_baseline: Option<f64>,
}

/// Loads the experiment under `dir` (runs without `run.json` yet are left out). An entry whose
/// run directory or model name is no name ([`crate::name`]: they become paths under `dir`) is
/// refused.
pub fn load(dir: &Path) -> Result<(ExperimentIndex, Vec<RunResult>), ReportError> {
    let path = dir.join("experiment.json");
    let index: ExperimentIndex = parse(&path)?;
    for (i, e) in index.entries.iter().enumerate() {
        for (key, value) in [("dir", &e.dir), ("model", &e.model)] {
            crate::name::check(value).map_err(|err| ReportError::Parse {
                path: path.clone(),
                message: format!("entry #{} `{key}`: {err}", i + 1),
            })?;
        }
    }
    let mut out = Vec::new();
    for e in &index.entries {
        let run = dir.join(&e.dir);
        if !run.join("run.json").exists() {
            continue;
        }
        out.push(load_run(e, &run)?);
    }
    significance(&index, &mut out);
    Ok((index, out))
}

/// The results of `e`, read from its run directory `run` (significance figures left `None`).
fn load_run(e: &Entry, run: &Path) -> Result<RunResult, ReportError> {
    let m: Manifest = parse(&run.join("run.json"))?;
    let curve = read_curve(&run.join("metrics.csv"))?;
    let spath = run.join("test/scores.json");
    let scores: Option<Scores> = if spath.exists() { Some(parse(&spath)?) } else { None };
    let apath = run.join("test/attention.json");
    let attention: Vec<AttentionExample> = if apath.exists() { parse(&apath)? } else { Vec::new() };
    let test_text = match (
        read_lines(&run.join("test/hypotheses.txt"))?,
        read_lines(&run.join("test/references.txt"))?,
    ) {
        (Some(h), Some(r)) if h.len() == r.len() => Some((h, r)),
        _ => None,
    };
    Ok(RunResult {
        entry: e.clone(),
        params: m.params,
        device: m.device,
        bleu: scores.as_ref().map(|s| s.bleu),
        chrf: scores.as_ref().map(|s| s.chrf),
        ppl: scores.as_ref().map(|s| s.ppl),
        decoding: scores.as_ref().map(|s| s.decoding.clone()),
        decode_sentences_per_s: scores.as_ref().map(|s| s.decode_sentences_per_s),
        train_seconds: curve.last().map_or(0.0, |r| r.wall),
        tokens_per_s: mean_tokens_per_s(&curve),
        by_length: scores
            .map(|s| s.bleu_by_source_length.into_iter().map(|b| (b.bucket, b.sentences, b.bleu)).collect())
            .unwrap_or_default(),
        curve,
        attention,
        test_text,
        bleu_ci: None,
        p_vs_baseline: None,
    })
}

/// The rows of the `metrics.csv` at `mpath` (none when it does not exist).
fn read_curve(mpath: &Path) -> Result<Vec<MetricsRow>, ReportError> {
    let mut curve = Vec::new();
    if mpath.exists() {
        let mut r = csv::Reader::from_path(mpath)
            .map_err(|e| ReportError::Parse { path: mpath.to_path_buf(), message: e.to_string() })?;
        for row in r.deserialize::<MetricsRow>() {
            curve.push(
                row.map_err(|e| ReportError::Parse { path: mpath.to_path_buf(), message: e.to_string() })?,
            );
        }
    }
    Ok(curve)
}

/// The lines of the text file `p` (a final newline ends the last one); `None` if it is absent.
fn read_lines(p: &Path) -> Result<Option<Vec<String>>, ReportError> {
    if !p.exists() {
        return Ok(None);
    }
    let text = read(p)?;
    let body = text.strip_suffix('\n').unwrap_or(&text);
    Ok(Some(if text.is_empty() { Vec::new() } else { body.split('\n').map(str::to_string).collect() }))
}

/// The mean of the curve's logged training tokens/s (finite and positive ones only; 0 for none).
fn mean_tokens_per_s(curve: &[MetricsRow]) -> f64 {
    let logged: Vec<f64> =
        curve.iter().map(|r| r.tokens_per_s).filter(|t| t.is_finite() && *t > 0.0).collect();
    if logged.is_empty() { 0.0 } else { logged.iter().sum::<f64>() / logged.len() as f64 }
}

/// sacreBLEU's paired bootstrap (1,000 resamples, seed 12345) over each seed's finished
/// runs that were tested on the same references: every run's 95% interval of test BLEU, and
/// each non-baseline run's p-value against the baseline model's run of the same seed. Runs
/// without saved hypotheses and references (older runs) keep `None`.
pub fn significance(index: &ExperimentIndex, runs: &mut [RunResult]) {
    use s2s_eval::{BleuConfig, MetricConfig, PairedOptions, PairedTest, Seed};
    let Some(baseline) = index.baseline_model().map(str::to_string) else { return };
    let mut seeds: Vec<u64> = runs.iter().map(|r| r.entry.seed).collect();
    seeds.sort_unstable();
    seeds.dedup();
    let opts = PairedOptions { test: PairedTest::Bootstrap, samples: 0, seed: Seed::default() };
    let metrics = [MetricConfig::Bleu(BleuConfig::default())];
    // Runs `group` (the first is the one the others are tested against) on their shared
    // references; a run alone is paired with itself, for its interval only.
    let test = |group: &[usize], runs: &mut [RunResult]| {
        let text = |i: usize| runs[i].test_text.as_ref().expect("grouped runs have text");
        let mut systems: Vec<&[String]> = group.iter().map(|&i| text(i).0.as_slice()).collect();
        if systems.len() == 1 {
            systems.push(systems[0]);
        }
        let refs = [text(group[0]).1.as_slice()];
        let Ok(columns) = s2s_eval::paired_test(&systems, &refs, &metrics, &opts) else { return };
        let Some(column) = columns.first() else { return };
        for (k, &i) in group.iter().enumerate() {
            runs[i].bleu_ci = column.results[k].ci;
            runs[i].p_vs_baseline = if k > 0 { column.results[k].p_value } else { None };
        }
    };
    for seed in seeds {
        let with_text: Vec<usize> =
            (0..runs.len()).filter(|&i| runs[i].entry.seed == seed && runs[i].test_text.is_some()).collect();
        let base = with_text.iter().copied().find(|&i| runs[i].entry.model == baseline);
        let same_refs = |i: usize| {
            base.is_some_and(|b| {
                runs[i].test_text.as_ref().map(|t| &t.1) == runs[b].test_text.as_ref().map(|t| &t.1)
            })
        };
        let group: Vec<usize> = base
            .into_iter()
            .chain(with_text.iter().copied().filter(|&i| Some(i) != base && same_refs(i)))
            .collect();
        let alone: Vec<usize> = with_text.iter().copied().filter(|i| !group.contains(i)).collect();
        if !group.is_empty() {
            test(&group, runs);
        }
        for i in alone {
            test(&[i], runs);
        }
    }
}

/// Mean and sample standard deviation (0 for one value).
pub fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 { v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    (mean, var.sqrt())
}

/// One model's figures over its finished seeds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Model name.
    pub model: String,
    /// Kind.
    pub kind: String,
    /// Finished seeds.
    pub seeds: usize,
    /// Parameters.
    pub params: usize,
    /// (mean, std) of test BLEU.
    pub bleu: (f64, f64),
    /// (mean, std) of chrF.
    pub chrf: (f64, f64),
    /// (mean, std) of perplexity.
    pub ppl: (f64, f64),
    /// Mean training minutes.
    pub train_minutes: f64,
    /// Mean training tokens/s.
    pub tokens_per_s: f64,
    /// Mean test decoding sentences/s.
    pub decode_sentences_per_s: f64,
    /// Decoding used on the test set.
    pub decoding: String,
    /// Mean over seeds of the 95% bootstrap interval's half-width of test BLEU.
    pub bleu_ci: Option<f64>,
    /// p-values against the baseline, one per seed (empty for the baseline itself).
    pub p_vs_baseline: Vec<f64>,
    /// True for the baseline model.
    pub baseline: bool,
}

/// Summaries per model, in the experiment's order (finished runs only); `baseline` is the
/// model the significance tests compare with.
pub fn summarize(runs: &[RunResult], baseline: Option<&str>) -> Vec<Summary> {
    let mut models: Vec<&str> = Vec::new();
    for r in runs {
        if !models.contains(&r.entry.model.as_str()) {
            models.push(&r.entry.model);
        }
    }
    models
        .into_iter()
        .filter_map(|m| {
            let done: Vec<&RunResult> =
                runs.iter().filter(|r| r.entry.model == m && r.bleu.is_some()).collect();
            let first = done.first()?;
            let col = |f: &dyn Fn(&RunResult) -> f64| done.iter().map(|r| f(r)).collect::<Vec<f64>>();
            let mean = |f: &dyn Fn(&RunResult) -> f64| mean_std(&col(f)).0;
            Some(Summary {
                model: m.to_string(),
                kind: first.entry.kind.clone(),
                seeds: done.len(),
                params: first.params,
                bleu: mean_std(&col(&|r| r.bleu.unwrap_or(0.0))),
                chrf: mean_std(&col(&|r| r.chrf.unwrap_or(0.0))),
                ppl: mean_std(&col(&|r| r.ppl.unwrap_or(0.0))),
                train_minutes: mean(&|r| r.train_seconds / 60.0),
                tokens_per_s: mean(&|r| r.tokens_per_s),
                decode_sentences_per_s: mean(&|r| r.decode_sentences_per_s.unwrap_or(0.0)),
                decoding: first.decoding.clone().unwrap_or_default(),
                bleu_ci: {
                    let cis: Vec<f64> = done.iter().filter_map(|r| r.bleu_ci).collect();
                    (!cis.is_empty()).then(|| cis.iter().sum::<f64>() / cis.len() as f64)
                },
                p_vs_baseline: done.iter().filter_map(|r| r.p_vs_baseline).collect(),
                baseline: baseline == Some(m),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_std() {
        assert_eq!(mean_std(&[2.0]), (2.0, 0.0));
        let (m, s) = mean_std(&[1.0, 2.0, 3.0]);
        assert!((m - 2.0).abs() < 1e-12 && (s - 1.0).abs() < 1e-12);
    }
}
