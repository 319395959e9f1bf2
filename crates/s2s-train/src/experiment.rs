//! Experiments: one file that names the data, the tokenisation, a list of models (a key given
//! a list of values makes a small grid), seeds, a shared training budget and the test
//! decoding; the runner trains every model in turn and keeps the report up to date.
//!
//! ```toml
//! name = "attention-scores"          # default: the file's stem
//! seeds = [1, 2]                     # default: [1]
//! [data]                             # as in a run config (built-in pair or files)
//! source = "builtin"
//! [tokenizer]
//! level = "word"                   # or file = "spm.model": a SentencePiece model or a tokenizer.json
//! [train]                            # shared by every model; `seed` comes from `seeds`
//! budget = { minutes = 3 }
//! [decode]                           # test-set decoding: beam = 1 is greedy
//! beam = 5
//! alpha = 0.6
//! average_last = 1                   # N > 1: test the average of the last N checkpoints
//! quantize = "none"                  # "int8": test with int8 products (CPU)
//! [[model]]
//! kind = "luong"
//! score = ["dot", "general"]         # → models luong-dot and luong-general
//! [[model]]
//! kind = "transformer"
//! train = { schedule = { kind = "noam", warmup = 1000 } }   # overrides [train] keys
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::tensor::Device;
use s2s_data::TokenizerConfig;
use s2s_decode::{BeamConfig, LengthPenalty};
use s2s_models::ModelSpec;
use s2s_report::{Entry, ExperimentIndex};
use serde::{Deserialize, Serialize};

use crate::config::TrainSpec;
use crate::error::TrainError;
use crate::evaluate::Search;
use crate::lock::DirLock;
use crate::pipeline::{RunOutcome, run_and_test};
use crate::run::{DataSpec, RunConfig, read_manifest};

/// Test-set decoding of an experiment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DecodeSpec {
    /// Beam size (1: greedy).
    pub beam: usize,
    /// Length-penalty exponent.
    pub alpha: f64,
    /// Length penalty.
    pub penalty: LengthPenalty,
    /// Test the average of each model's last N checkpoints instead of its best (1: the best);
    /// each model then keeps at least N checkpoints (`keep_last` is raised to N).
    pub average_last: usize,
    /// The test decoding's products: `none` (f32) or `int8` (int8 weights, as `s2s translate
    /// --quantize int8`; the CPU only). Validation while training stays f32.
    pub quantize: s2s_kernels::quantize::Quantize,
}

impl Default for DecodeSpec {
    fn default() -> Self {
        Self {
            beam: 5,
            alpha: 0.6,
            penalty: LengthPenalty::Gnmt,
            average_last: 1,
            quantize: s2s_kernels::quantize::Quantize::None,
        }
    }
}

impl DecodeSpec {
    /// The search, with the training spec's output length limit.
    pub fn search(&self, train: &TrainSpec) -> Search {
        if self.beam <= 1 {
            Search::Greedy { limit: train.max_output, attention: false }
        } else {
            Search::Beam(BeamConfig {
                beam: self.beam,
                alpha: self.alpha,
                penalty: self.penalty,
                nbest: 1,
                max_length: train.max_output,
                attention: false,
            })
        }
    }
}

fn one_seed() -> Vec<u64> {
    vec![1]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExperimentFile {
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    data: DataSpec,
    #[serde(default)]
    tokenizer: TokenizerConfig,
    #[serde(default)]
    train: Option<toml::Table>,
    #[serde(default)]
    decode: DecodeSpec,
    #[serde(default = "one_seed")]
    seeds: Vec<u64>,
    #[serde(default)]
    baseline: Option<String>,
    #[serde(rename = "model")]
    models: Vec<toml::Table>,
}

/// A loaded experiment.
#[derive(Debug, Clone)]
pub struct Experiment {
    /// Name (the runs go to `runs/NAME`).
    pub name: String,
    /// One-line description.
    pub description: Option<String>,
    /// The file it was read from.
    pub source: PathBuf,
    /// Corpus.
    pub data: DataSpec,
    /// Tokenisation.
    pub tokenizer: TokenizerConfig,
    /// Shared training settings.
    pub train: TrainSpec,
    /// Test decoding.
    pub decode: DecodeSpec,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Models after grid expansion, with their names and training settings (`[train]` with
    /// the model's own `train = {...}` keys on top).
    pub models: Vec<(String, ModelSpec, TrainSpec)>,
    /// The model the report tests the others against (`baseline = "name"`; absent: the first).
    pub baseline: Option<String>,
}

/// Where an experiment file sets its names and each model's keys, for errors that name the
/// line; read beside [`ExperimentFile`] (empty if the file does not parse).
#[derive(Deserialize, Default)]
struct Spans {
    #[serde(default)]
    name: Option<toml::Spanned<toml::Value>>,
    #[serde(default)]
    model: Vec<BTreeMap<String, toml::Spanned<toml::Value>>>,
}

/// An experiment file being read: its errors name the file, and the line where they can.
struct Errors<'a> {
    path: &'a Path,
    text: &'a str,
    spans: Spans,
}

impl Errors<'_> {
    /// An error in the file as a whole.
    fn bad(&self, m: String) -> TrainError {
        TrainError::Config(format!("{}: {m}", self.path.display()))
    }

    /// An error at the line where `span` starts.
    fn at(&self, span: std::ops::Range<usize>, m: String) -> TrainError {
        let line = self.text[..span.start.min(self.text.len())].matches('\n').count() + 1;
        TrainError::Config(format!("{}:{line}: {m}", self.path.display()))
    }

    /// An error about key `key` of the `i`th `[[model]]` table, at its line when it is known.
    fn in_model(&self, i: usize, key: &str, m: String) -> TrainError {
        let what = format!("[[model]] #{} `{key}`: {m}", i + 1);
        match self.spans.model.get(i).and_then(|t| t.get(key)) {
            Some(v) => self.at(v.span(), what),
            None => self.bad(what),
        }
    }

    /// Checks a model's (grid-expanded) `name` against the name rule; an error names the key
    /// whose value made it: `name` (or `kind`, without one), else a list one of whose strings
    /// breaks the rule by itself.
    fn check_model_name(&self, i: usize, table: &toml::Table, name: &str) -> Result<(), TrainError> {
        let Err(e) = s2s_report::name::check(name) else { return Ok(()) };
        let breaks = |v: &toml::Value| v.as_str().is_some_and(|s| s2s_report::name::check(s).is_err());
        let base = if table.contains_key("name") { "name" } else { "kind" };
        let listed = table.iter().find(|(_, v)| v.as_array().is_some_and(|vs| vs.iter().any(breaks)));
        let key = match listed {
            Some((k, _)) if !table.get(base).is_some_and(breaks) => k.as_str(),
            _ => base,
        };
        Err(self.in_model(i, key, e.to_string()))
    }

    /// A section's error, at the line of the key it names when that key is in one of the
    /// `tables` (header and which of that name) of the file.
    fn bad_in(&self, tables: &[(&str, usize)], what: &str, e: String) -> TrainError {
        let key = unknown_key(&e).map(str::to_string);
        self.bad_at(tables, key.as_deref(), what, e)
    }

    /// A section's error about `key`, at its line when it is set in one of the `tables`.
    fn bad_at(&self, tables: &[(&str, usize)], key: Option<&str>, what: &str, e: String) -> TrainError {
        let line = key.and_then(|key| tables.iter().find_map(|&(h, n)| key_line(self.text, h, n, key)));
        match line {
            Some(line) => TrainError::Config(format!("{}:{line}: {what}: {e}", self.path.display())),
            None => self.bad(format!("{what}: {e}")),
        }
    }

    /// The training settings of table `t` (section `what`, set in `tables`), checked.
    fn train_spec(
        &self,
        t: toml::Table,
        what: &str,
        tables: &[(&str, usize)],
    ) -> Result<TrainSpec, TrainError> {
        let spec: TrainSpec =
            toml::Value::Table(t).try_into().map_err(|e| self.bad_in(tables, what, e.to_string()))?;
        spec.validate().map_err(|e| self.bad(format!("{what}: {e}")))?;
        Ok(spec)
    }

    /// Every model of the `[[model]]` tables, lists expanded into a grid ([`expand`]), with its
    /// training settings: `shared_train` overridden by the model's own `train` table.
    fn models(
        &self,
        tables: &[toml::Table],
        shared_train: &toml::Table,
    ) -> Result<Vec<(String, ModelSpec, TrainSpec)>, TrainError> {
        // Counted before anything is expanded: a few lists of a few dozen values each would
        // otherwise make billions of tables.
        let mut total = 0usize;
        for (i, table) in tables.iter().enumerate() {
            let grid = grid_size(table);
            total = total.saturating_add(grid);
            if total > MAX_MODELS {
                return Err(self.bad(format!(
                    "[[model]] #{}: its lists make a grid of {grid} models, {total} with the tables \
                     before it; an experiment holds at most {MAX_MODELS}: split the grid over \
                     several experiment files",
                    i + 1
                )));
            }
        }
        let mut models: Vec<(String, ModelSpec, TrainSpec)> = Vec::new();
        for (i, table) in tables.iter().enumerate() {
            let mut table = table.clone();
            let own_train = match table.remove("train") {
                Some(toml::Value::Table(t)) => t,
                Some(_) => return Err(self.bad(format!("[[model]] #{}: `train` must be a table", i + 1))),
                None => toml::Table::new(),
            };
            if table.get("name").is_some_and(|v| !v.is_str()) {
                return Err(self.in_model(i, "name", "must be a string".into()));
            }
            let mut merged = shared_train.clone();
            merged.extend(own_train);
            for (name, t) in expand(&table) {
                self.check_model_name(i, &table, &name)?;
                let what = format!("[[model]] #{} ({name})", i + 1);
                let spec: ModelSpec = toml::Value::Table(t)
                    .try_into()
                    .map_err(|e| self.bad_in(&[("[[model]]", i)], &what, e.to_string()))?;
                spec.validate()
                    .map_err(|e| self.bad_at(&[("[[model]]", i)], e.field(), &what, e.to_string()))?;
                let model_train = self.train_spec(
                    merged.clone(),
                    &format!("[[model]] #{} ({name}) train", i + 1),
                    &[("[[model]]", i), ("[train]", 0)],
                )?;
                if models.iter().any(|(n, _, _)| n == &name) {
                    return Err(self
                        .bad(format!("two models are named `{name}`: give one of them a `name = \"...\"`")));
                }
                models.push((name, spec, model_train));
            }
        }
        Ok(models)
    }
}

/// The key an "unknown field `key`" error names.
fn unknown_key(error: &str) -> Option<&str> {
    let rest = &error[error.find("unknown field `")? + "unknown field `".len()..];
    Some(&rest[..rest.find('`')?])
}

/// The line (1-based) where `key` is set in the `nth` (0-based) table headed `header` of the
/// TOML `text`, or in one of its sub-tables (`[model.train]`) or inline tables.
pub fn key_line(text: &str, header: &str, nth: usize, key: &str) -> Option<usize> {
    let name = header.trim_matches(|c| c == '[' || c == ']');
    let (mut seen, mut inside) = (0, false);
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            if line == header {
                inside = seen == nth;
                seen += 1;
            } else {
                let table = line.trim_matches(|c| c == '[' || c == ']');
                inside &= table.starts_with(name) && table[name.len()..].starts_with('.');
            }
        } else if inside
            && line.split(['{', ',']).any(|part| {
                part.trim_start().strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('='))
            })
        {
            return Some(i + 1);
        }
    }
    None
}

/// Models an experiment holds at most, grids expanded (each trains for minutes at least).
pub const MAX_MODELS: usize = 1000;

/// How many models [`expand`] makes of `table`: the product of its lists' lengths (`name`'s
/// aside), saturating.
fn grid_size(table: &toml::Table) -> usize {
    table
        .iter()
        .filter(|(key, _)| *key != "name")
        .filter_map(|(_, v)| v.as_array().filter(|a| !a.is_empty()).map(Vec::len))
        .fold(1usize, usize::saturating_mul)
}

/// Expands list-valued keys of a model table into one table per combination, named
/// `base-value` (strings) or `base-key=value` (other values).
fn expand(table: &toml::Table) -> Vec<(String, toml::Table)> {
    let base = table
        .get("name")
        .and_then(|v| v.as_str())
        .or_else(|| table.get("kind").and_then(|v| v.as_str()))
        .unwrap_or("model")
        .to_string();
    let mut out = vec![(base, toml::Table::new())];
    for (key, value) in table {
        if key == "name" {
            continue;
        }
        match value {
            toml::Value::Array(values) if !values.is_empty() => {
                let mut next = Vec::with_capacity(out.len() * values.len());
                for (name, t) in &out {
                    for v in values {
                        let mut t = t.clone();
                        t.insert(key.clone(), v.clone());
                        let label = match v {
                            toml::Value::String(s) => s.clone(),
                            other => format!("{key}={other}"),
                        };
                        next.push((format!("{name}-{label}"), t));
                    }
                }
                out = next;
            }
            v => {
                for (_, t) in out.iter_mut() {
                    t.insert(key.clone(), v.clone());
                }
            }
        }
    }
    out
}

impl Experiment {
    /// Reads and checks an experiment file; errors name the file and the key.
    pub fn load(path: &Path) -> Result<Self, TrainError> {
        let text = std::fs::read_to_string(path).map_err(|e| TrainError::io(path, e))?;
        let spans = toml::from_str(&text).unwrap_or_default();
        let at = Errors { path, text: &text, spans };
        let file: ExperimentFile = toml::from_str(&text).map_err(|e| at.bad(e.to_string()))?;
        let shared_train = file.train.clone().unwrap_or_default();
        let train = at.train_spec(shared_train.clone(), "[train]", &[("[train]", 0)])?;
        if file.models.is_empty() {
            return Err(at.bad("no [[model]] tables: list at least one model".into()));
        }
        if file.seeds.is_empty() {
            return Err(at.bad("`seeds` is empty".into()));
        }
        if file.decode.average_last == 0 {
            return Err(at.bad("[decode] average_last must be at least 1 (1: the best checkpoint)".into()));
        }
        if file.decode.beam == 0 {
            return Err(at.bad("[decode] beam must be at least 1".into()));
        }
        if !(file.decode.alpha.is_finite() && file.decode.alpha >= 0.0) {
            let e = format!("alpha must be a finite number of 0 or more, got {}", file.decode.alpha);
            return Err(at.bad_at(&[("[decode]", 0)], Some("alpha"), "[decode]", e));
        }
        file.tokenizer
            .check_files()
            .map_err(|(key, e)| at.bad_at(&[("[tokenizer]", 0)], key, "[tokenizer]", e.to_string()))?;
        let models = at.models(&file.models, &shared_train)?;
        if let Some(b) = &file.baseline
            && !models.iter().any(|(n, _, _)| n == b)
        {
            let names: Vec<&str> = models.iter().map(|(n, _, _)| n.as_str()).collect();
            return Err(at.bad(format!("baseline = \"{b}\" names no model (models: {})", names.join(", "))));
        }
        let name = match file.name {
            Some(name) => {
                s2s_report::name::check(&name).map_err(|e| {
                    let m = format!("`name`: {e}");
                    at.spans.name.as_ref().map_or_else(|| at.bad(m.clone()), |v| at.at(v.span(), m.clone()))
                })?;
                name
            }
            None => {
                let stem = path.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
                s2s_report::name::check(&stem).map_err(|e| {
                    at.bad(format!(
                        "the experiment's name comes from the file's, without `.toml`: {e}; set `name = \"...\"` in the file"
                    ))
                })?;
                stem
            }
        };
        Ok(Self {
            name,
            description: file.description,
            source: path.to_path_buf(),
            data: file.data,
            tokenizer: file.tokenizer,
            train,
            decode: file.decode,
            seeds: file.seeds,
            models,
            baseline: file.baseline,
        })
    }

    /// The most devices any of its runs trains on.
    pub fn max_devices(&self) -> u32 {
        self.entries().iter().map(|(_, c)| c.train.devices).max().unwrap_or(1)
    }

    /// The runs, in order: every model for every seed.
    pub fn entries(&self) -> Vec<(Entry, RunConfig)> {
        let mut out = Vec::new();
        for (name, spec, train) in &self.models {
            for &seed in &self.seeds {
                let run = if self.seeds.len() > 1 { format!("{name}-s{seed}") } else { name.clone() };
                let cfg = RunConfig {
                    data: self.data.clone(),
                    tokenizer: self.tokenizer.clone(),
                    model: spec.clone(),
                    train: TrainSpec {
                        seed,
                        keep_last: train.keep_last.max(self.decode.average_last as u32),
                        ..train.clone()
                    },
                };
                let entry = Entry {
                    name: run.clone(),
                    model: name.clone(),
                    kind: spec.kind().into(),
                    seed,
                    dir: run,
                };
                out.push((entry, cfg));
            }
        }
        out
    }
}

/// True when `run_dir` holds a finished, evaluated run.
pub fn finished(run_dir: &Path) -> bool {
    run_dir.join("test/scores.json").exists() && read_manifest(run_dir).is_ok_and(|m| m.status == "finished")
}

/// Trains every run of `exp` (or those whose model or run name is `only`) under `root`,
/// skipping finished ones and resuming interrupted ones, and regenerates the report after
/// each, on the first `train.devices` of `devices`. Returns the report's files. `root` is
/// locked throughout, and each run directory while it trains ([`DirLock`]).
pub fn run_experiment(
    exp: &Experiment,
    root: &Path,
    devices: &[Device],
    device_name: &str,
    only: Option<&str>,
    progress: bool,
) -> Result<Vec<PathBuf>, TrainError> {
    let entries = exp.entries();
    check_only(exp, &entries, only)?;
    let _lock = DirLock::create(root)?;
    write_index(exp, &entries, root)?;
    let todo: Vec<usize> = (0..entries.len())
        .filter(|&i| only.is_none_or(|o| entries[i].0.model == o || entries[i].0.name == o))
        .collect();
    let started = Instant::now();
    let mut trained = 0usize;
    for (k, &i) in todo.iter().enumerate() {
        let (entry, cfg) = &entries[i];
        let dir = root.join(&entry.dir);
        if finished(&dir) {
            eprintln!("[{}/{}] {}: finished earlier, skipped", k + 1, todo.len(), entry.name);
            continue;
        }
        let eta = time_left(exp.train.budget.minutes, trained, started, todo.len() - k);
        eprintln!("[{}/{}] {} ({}, seed {}) · {eta}", k + 1, todo.len(), entry.name, entry.kind, entry.seed);
        let out = train_entry(exp, cfg, &dir, devices, device_name, progress)?;
        trained += 1;
        if out.train.interrupted {
            eprintln!("experiment interrupted: rerun the same command to resume");
            break;
        }
        if let Some(t) = &out.test {
            eprintln!("  test: BLEU {:.2}, chrF {:.2}, ppl {:.2} ({})", t.bleu, t.chrf, t.ppl, t.decoding);
        }
        write_report(root)?;
    }
    write_report(root)
}

/// Writes the experiment's index of runs (`experiment.json`) into `root` (created), under
/// `root`'s lock, released on return: for runs trained elsewhere ([`train_one`], a cluster's
/// tasks) and reported later (`s2s report`).
pub fn write_index_locked(exp: &Experiment, root: &Path) -> Result<(), TrainError> {
    let entries = exp.entries();
    let _lock = DirLock::create(root)?;
    write_index(exp, &entries, root)
}

/// Trains and tests the run named `run` of `exp` into its directory under `root` with the
/// function [`run_experiment`] trains each run with, so its files are those of the same run
/// trained there. `root`'s lock is not taken (the experiment's other runs train beside it, each
/// run directory locked while it trains) and no report is written. A finished run is left as it
/// is (`Ok(None)`).
pub fn train_one(
    exp: &Experiment,
    root: &Path,
    run: &str,
    devices: &[Device],
    device_name: &str,
    progress: bool,
) -> Result<Option<RunOutcome>, TrainError> {
    let entries = exp.entries();
    let Some((entry, cfg)) = entries.iter().find(|(e, _)| e.name == run) else {
        let names: Vec<&str> = entries.iter().map(|(e, _)| e.name.as_str()).collect();
        return Err(TrainError::Config(format!(
            "{}: no run named `{run}` (runs: {})",
            exp.source.display(),
            names.join(", ")
        )));
    };
    let dir = root.join(&entry.dir);
    if finished(&dir) {
        eprintln!("{}: finished earlier, skipped", entry.name);
        return Ok(None);
    }
    eprintln!("{} ({}, seed {}) into {}", entry.name, entry.kind, entry.seed, dir.display());
    let out = train_entry(exp, cfg, &dir, devices, device_name, progress)?;
    if let Some(t) = &out.test {
        eprintln!("  test: BLEU {:.2}, chrF {:.2}, ppl {:.2} ({})", t.bleu, t.chrf, t.ppl, t.decoding);
    }
    Ok(Some(out))
}

/// Refuses an `only` that names neither a model nor a run of `entries`.
fn check_only(
    exp: &Experiment,
    entries: &[(Entry, RunConfig)],
    only: Option<&str>,
) -> Result<(), TrainError> {
    if let Some(o) = only {
        if !entries.iter().any(|(e, _)| e.model == o || e.name == o) {
            let names: Vec<&str> = exp.models.iter().map(|(n, _, _)| n.as_str()).collect();
            return Err(TrainError::Config(format!(
                "--only {o}: no such model (models: {})",
                names.join(", ")
            )));
        }
    }
    Ok(())
}

/// Creates `root` and writes the experiment's index of runs (`experiment.json`) into it.
fn write_index(exp: &Experiment, entries: &[(Entry, RunConfig)], root: &Path) -> Result<(), TrainError> {
    s2s_data::create_dir_all(root)?;
    let index = ExperimentIndex {
        name: exp.name.clone(),
        source: exp.source.display().to_string(),
        entries: entries.iter().map(|(e, _)| e.clone()).collect(),
        baseline: exp.baseline.clone(),
    };
    let json = serde_json::to_vec_pretty(&index).expect("index serialises");
    s2s_data::write_atomic(&root.join("experiment.json"), &json)?;
    Ok(())
}

/// The time left with `left` runs to go (the next one included): from the budget's `minutes`
/// when set, else from the time the `trained` runs since `started` took.
fn time_left(minutes: Option<f64>, trained: usize, started: Instant, left: usize) -> String {
    match (minutes, trained) {
        (Some(m), _) => format!("about {:.0} min of training left", m * left as f64),
        (None, 0) => "ETA after the first model".into(),
        (None, n) => {
            format!("ETA {:.0} min", started.elapsed().as_secs_f64() / n as f64 * left as f64 / 60.0)
        }
    }
}

/// Trains and tests one run (`cfg`) of `exp` into `dir` on the first `cfg.train.devices` of
/// `devices`, with the experiment's test decoding; its progress lines go to stderr, indented.
fn train_entry(
    exp: &Experiment,
    cfg: &RunConfig,
    dir: &Path,
    devices: &[Device],
    device_name: &str,
    progress: bool,
) -> Result<RunOutcome, TrainError> {
    let search = exp.decode.search(&cfg.train);
    let n = (cfg.train.devices as usize).min(devices.len());
    let tested = crate::pipeline::Tested::average_last(exp.decode.average_last);
    let quantize = exp.decode.quantize;
    if quantize == s2s_kernels::quantize::Quantize::Int8 && !devices.iter().all(s2s_kernels::ops::is_cpu) {
        return Err(TrainError::Config(
            "[decode] quantize = \"int8\" decodes on the CPU only: run the experiment with --device cpu"
                .into(),
        ));
    }
    crate::pipeline::with_test_quantize(quantize, || {
        run_and_test(cfg, dir, &devices[..n], device_name, progress, &search, tested, &|m| eprintln!("  {m}"))
    })
}

/// Regenerates the experiment's report under `root`; returns its files.
fn write_report(root: &Path) -> Result<Vec<PathBuf>, TrainError> {
    s2s_report::write_report(root).map_err(|e| TrainError::Config(format!("writing the report: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Experiment, TrainError> {
        // A directory per call: tests run side by side.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("s2s-exp-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("grid.toml");
        std::fs::write(&p, text).unwrap();
        Experiment::load(&p)
    }

    #[test]
    fn lists_make_a_grid_with_readable_names() {
        let e = load(
            "seeds = [1, 2]\n[train]\nbudget = { steps = 3 }\n[[model]]\nkind = \"lstm\"\n\
             [[model]]\nkind = \"luong\"\nscore = [\"dot\", \"general\"]\ninput_feeding = [true, false]\n",
        )
        .unwrap();
        let names: Vec<&str> = e.models.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "lstm",
                "luong-input_feeding=true-dot",
                "luong-input_feeding=true-general",
                "luong-input_feeding=false-dot",
                "luong-input_feeding=false-general"
            ]
        );
        assert_eq!(e.name, "grid");
        let entries = e.entries();
        assert_eq!(entries.len(), 10);
        assert_eq!(entries[1].0.name, "lstm-s2");
        assert_eq!(entries[1].1.train.seed, 2);
    }

    #[test]
    fn a_model_can_override_training_keys() {
        let e = load(
            "[train]\nlr = 0.002\nbudget = { steps = 3 }\n[[model]]\nkind = \"lstm\"\n\
             [[model]]\nkind = \"transformer\"\ntrain = { lr = 0.0005, schedule = { kind = \"noam\", warmup = 10 } }\n",
        )
        .unwrap();
        assert_eq!(e.models[0].2.lr, 0.002);
        assert_eq!(e.models[1].2.lr, 0.0005);
        assert_eq!(e.models[1].2.budget.steps, Some(3));
        let err =
            load("[train]\nbudget = { steps = 3 }\n[[model]]\nkind = \"lstm\"\ntrain = { lr = \"fast\" }\n")
                .unwrap_err()
                .to_string();
        assert!(err.contains("lstm") && err.contains("train"), "{err}");
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_file_and_key() {
        let err = load("[train]\nbudget = { steps = 3 }\n[[model]]\nkind = \"lstm\"\nhiden = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("grid.toml") && err.contains("hiden") && err.contains("#1"), "{err}");
        let err = load(
            "[train]\nbudget = { steps = 3 }\n[[model]]\nkind = \"luong\"\nscore = [\"dot\", \"cosine\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("cosine") && err.contains("luong-cosine"), "{err}");
        let err = load("[[model]]\nkind = \"lstm\"\n[train]\nbudget = {}\n").unwrap_err().to_string();
        assert!(err.contains("budget"), "{err}");
        let err = load("sedes = [1]\n[[model]]\nkind = \"lstm\"\n").unwrap_err().to_string();
        assert!(err.contains("sedes"), "{err}");
    }

    #[test]
    fn a_grid_past_the_cap_is_refused_before_it_is_expanded() {
        // 40^6 = 4.1e9 tables if expanded.
        let list = format!("[{}]", (1..=40).map(|i| i.to_string()).collect::<Vec<_>>().join(", "));
        let keys = ["emb", "hidden", "layers", "a", "b", "c"];
        let grid: String = keys.iter().map(|k| format!("{k} = {list}\n")).collect();
        let text = format!("[train]\nbudget = {{ steps = 1 }}\n[[model]]\nkind = \"lstm\"\n{grid}");
        let err = load(&text).unwrap_err().to_string();
        assert!(err.contains("grid.toml: [[model]] #1: its lists make a grid of 4096000000 models"), "{err}");
        assert!(err.contains("at most 1000") && err.contains("split the grid"), "{err}");
        // Over several tables: the one that passes the cap is named.
        let ten = "[[model]]\nkind = \"lstm\"\nhidden = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nemb = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n";
        let text = format!("[train]\nbudget = {{ steps = 1 }}\n{}", ten.repeat(11));
        let err = load(&text).unwrap_err().to_string();
        assert!(err.contains("[[model]] #11: its lists make a grid of 100 models, 1100 with"), "{err}");
        // A grid at the cap loads.
        let named: String = (0..10).map(|i| ten.replace("kind", &format!("name = \"m{i}\"\nkind"))).collect();
        let e = load(&format!("[train]\nbudget = {{ steps = 1 }}\n{named}")).unwrap();
        assert_eq!(e.models.len(), 1000);
    }

    /// An unknown key in a section names its line: in `[train]`, in the second `[[model]]`, and
    /// in a model's inline `train` table.
    #[test]
    fn an_unknown_key_names_its_line() {
        let err =
            load("[train]\nbudget = { steps = 3 }\nbogus = 1\n[[model]]\nkind = \"lstm\"\n").unwrap_err();
        assert!(err.to_string().contains("grid.toml:3: [train]: unknown field `bogus`"), "{err}");
        let two = "[train]\nbudget = { steps = 3 }\n[[model]]\nkind = \"lstm\"\nhidden = 8\n[[model]]\nkind = \"lstm\"\nhidden = 8 # the same\nhiden = 3\n";
        let err = load(two).unwrap_err();
        assert!(err.to_string().contains("grid.toml:9: [[model]] #2"), "{err}");
        let inline =
            "[train]\nbudget = { steps = 3 }\n[[model]]\nkind = \"lstm\"\ntrain = { lr = 0.1, lrr = 2 }\n";
        let err = load(inline).unwrap_err();
        assert!(err.to_string().contains("grid.toml:5: [[model]] #1 (lstm) train"), "{err}");
        assert_eq!(super::key_line("[a]\nx = 1\n[b]\nx = 2\n", "[b]", 0, "x"), Some(4));
        assert_eq!(super::key_line("[a]\nxy = 1\n", "[a]", 0, "x"), None);
    }

    /// A tokenizer file that is missing, or no tokenizer, is refused at its `[tokenizer]` line,
    /// naming the file; so are keys that do not go together.
    #[test]
    fn a_bad_tokenizer_file_names_its_line() {
        let dir = std::env::temp_dir().join(format!("s2s-exp-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.model");
        std::fs::write(&junk, "not a model\n").unwrap();
        let text = |key: &str, path: &Path| {
            format!(
                "[train]\nbudget = {{ steps = 3 }}\n[tokenizer]\n{key} = {:?}\n[[model]]\nkind = \"lstm\"\n",
                path.display().to_string()
            )
        };
        let err = load(&text("file", &dir.join("missing.model"))).unwrap_err().to_string();
        assert!(err.contains("grid.toml:4: [tokenizer]") && err.contains("missing.model"), "{err}");
        let err = load(&text("file", &junk)).unwrap_err().to_string();
        assert!(err.contains("grid.toml:4: [tokenizer]") && err.contains("junk.model"), "{err}");
        let err = load(&text("src_file", &junk)).unwrap_err().to_string();
        assert!(err.contains("grid.toml: [tokenizer]") && err.contains("tgt_file"), "{err}");
    }

    /// A name that is no file name is refused at the line that set it: a model's `name` (in a
    /// table or an inline array of tables), a grid value that makes one, the experiment's `name`;
    /// a file whose name is none asks for a `name`.
    #[test]
    fn a_name_that_is_no_file_name_names_its_line() {
        let model = |name: &str| {
            format!(
                "[train]\nbudget = {{ steps = 3 }}\n[[model]]\nkind = \"lstm\"\n[[model]]\nkind = \"lstm\"\nhidden = 8\nname = {name}\n"
            )
        };
        for (name, says) in [
            ("\"../../escaped\"", "`../../escaped` is not a name (it holds '/')"),
            ("\"\"", "`` is not a name (it is empty)"),
            ("\"a/b\"", "`a/b` is not a name (it holds '/')"),
            ("\".\"", "`.` is not a name (it starts with `.`)"),
            ("\"a b\"", "`a b` is not a name (it holds ' ')"),
            ("3", "must be a string"),
        ] {
            let err = load(&model(name)).unwrap_err().to_string();
            assert!(err.contains(&format!("grid.toml:8: [[model]] #2 `name`: {says}")), "{err}");
        }
        let inline = "model = [{ kind = \"lstm\" },\n  { kind = \"lstm\", name = \"../x\" }]\n[train]\nbudget = { steps = 3 }\n";
        let err = load(inline).unwrap_err().to_string();
        assert!(err.contains("grid.toml:2: [[model]] #2 `name`: `../x` is not a name"), "{err}");
        let grid =
            "[train]\nbudget = { steps = 3 }\n[[model]]\nkind = \"lstm\"\ncell = [\"gru\", \"../x\"]\n";
        let err = load(grid).unwrap_err().to_string();
        assert!(err.contains("grid.toml:5: [[model]] #1 `cell`: `lstm-../x` is not a name"), "{err}");
        let long = model(&format!("\"{}\"", "m".repeat(201)));
        assert!(load(&long).unwrap_err().to_string().contains("grid.toml:8: [[model]] #2 `name`: `mmm"));
        let exp = "# a comment\nname = \"../../e\"\n[[model]]\nkind = \"lstm\"\n";
        let err = load(exp).unwrap_err().to_string();
        assert!(err.contains("grid.toml:2: `name`: `../../e` is not a name (it holds '/')"), "{err}");
        let dir = std::env::temp_dir().join(format!("s2s-exp-stem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("my grid.toml");
        std::fs::write(&p, "[train]\nbudget = { steps = 3 }\n[[model]]\nkind = \"lstm\"\n").unwrap();
        let err = Experiment::load(&p).unwrap_err().to_string();
        assert!(err.contains("`my grid` is not a name") && err.contains("set `name = \"...\"`"), "{err}");
        std::fs::write(&p, "name = \"mine\"\n[train]\nbudget = { steps = 3 }\n[[model]]\nkind = \"lstm\"\n")
            .unwrap();
        assert_eq!(Experiment::load(&p).unwrap().name, "mine");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A size that cannot be built is refused at load, at its line, before anything trains
    /// (`hidden = 0` used to panic building the model): in the second model, in a grid, and a
    /// Transformer's heads that do not divide its width; and a NaN `[decode]` alpha or budget.
    #[test]
    fn bad_model_sizes_and_a_bad_alpha_name_their_line() {
        let head = "[train]\nbudget = { steps = 3 }\n[[model]]\nkind = \"lstm\"\n";
        let err = load(&format!("{head}[[model]]\nkind = \"lstm\"\nname = \"b\"\nhidden = 0\n")).unwrap_err();
        assert!(
            err.to_string().contains("grid.toml:8: [[model]] #2 (b): hidden must be at least 1, got 0"),
            "{err}"
        );
        let err = load(&format!("{head}layers = [1, 0]\n")).unwrap_err();
        assert!(
            err.to_string().contains("grid.toml:5: [[model]] #1 (lstm-layers=0): layers must be at least 1"),
            "{err}"
        );
        let err =
            load(&format!("{head}[[model]]\nkind = \"transformer\"\nd_model = 64\nheads = 3\n")).unwrap_err();
        assert!(
            err.to_string()
                .contains("grid.toml:8: [[model]] #2 (transformer): heads (3) must divide d_model (64)"),
            "{err}"
        );
        let err = load(&format!("[decode]\nbeam = 4\nalpha = nan\n{head}")).unwrap_err();
        assert!(
            err.to_string()
                .contains("grid.toml:3: [decode]: alpha must be a finite number of 0 or more, got NaN"),
            "{err}"
        );
        let err = load("[train]\nbudget = { minutes = nan }\n[[model]]\nkind = \"lstm\"\n").unwrap_err();
        assert!(
            err.to_string().contains("[train]: budget minutes must be a positive number, got NaN"),
            "{err}"
        );
        let err = load(&format!("{head}dropout = 1.5\n")).unwrap_err();
        assert!(
            err.to_string().contains("grid.toml:5: [[model]] #1 (lstm): dropout must be in [0, 1)"),
            "{err}"
        );
    }
}
