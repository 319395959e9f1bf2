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
}

/// Loads the experiment under `dir` (runs without `run.json` yet are left out).
pub fn load(dir: &Path) -> Result<(ExperimentIndex, Vec<RunResult>), ReportError> {
    let index: ExperimentIndex = parse(&dir.join("experiment.json"))?;
    let mut out = Vec::new();
    for e in &index.entries {
        let run = dir.join(&e.dir);
        if !run.join("run.json").exists() {
            continue;
        }
        let m: Manifest = parse(&run.join("run.json"))?;
        let mut curve = Vec::new();
        let mpath = run.join("metrics.csv");
        if mpath.exists() {
            let mut r = csv::Reader::from_path(&mpath)
                .map_err(|e| ReportError::Parse { path: mpath.clone(), message: e.to_string() })?;
            for row in r.deserialize::<MetricsRow>() {
                curve.push(
                    row.map_err(|e| ReportError::Parse { path: mpath.clone(), message: e.to_string() })?,
                );
            }
        }
        let spath = run.join("test/scores.json");
        let scores: Option<Scores> = if spath.exists() { Some(parse(&spath)?) } else { None };
        let apath = run.join("test/attention.json");
        let attention: Vec<AttentionExample> = if apath.exists() { parse(&apath)? } else { Vec::new() };
        let logged: Vec<f64> =
            curve.iter().map(|r| r.tokens_per_s).filter(|t| t.is_finite() && *t > 0.0).collect();
        out.push(RunResult {
            entry: e.clone(),
            params: m.params,
            device: m.device,
            bleu: scores.as_ref().map(|s| s.bleu),
            chrf: scores.as_ref().map(|s| s.chrf),
            ppl: scores.as_ref().map(|s| s.ppl),
            decoding: scores.as_ref().map(|s| s.decoding.clone()),
            decode_sentences_per_s: scores.as_ref().map(|s| s.decode_sentences_per_s),
            train_seconds: curve.last().map_or(0.0, |r| r.wall),
            tokens_per_s: if logged.is_empty() {
                0.0
            } else {
                logged.iter().sum::<f64>() / logged.len() as f64
            },
            by_length: scores
                .map(|s| {
                    s.bleu_by_source_length.into_iter().map(|b| (b.bucket, b.sentences, b.bleu)).collect()
                })
                .unwrap_or_default(),
            curve,
            attention,
        });
    }
    Ok((index, out))
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
}

/// Summaries per model, in the experiment's order (finished runs only).
pub fn summarize(runs: &[RunResult]) -> Vec<Summary> {
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
