//! One run from configuration to test scores — what `s2s train` does and what `s2s
//! experiment` does for each of its models: prepare the data, write `run.json`, train (or
//! resume), mark the run finished, evaluate the best checkpoint on the test split.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::Device;

use crate::average::average_last as average_last_into;
use crate::checkpoint::Checkpoints;
use crate::error::TrainError;
use crate::evaluate::Search;
use crate::lock::DirLock;
use crate::run::{Prepared, RunConfig, RunManifest, prepare, read_manifest, write_manifest};
use crate::testset::{TestScores, evaluate_test, test_batch_sentences};
use crate::trainer::{TrainJob, TrainOutcome, build_model, load_model, train};

/// What a finished run reports.
pub struct RunOutcome {
    /// Training outcome.
    pub train: TrainOutcome,
    /// Test-split scores, when the corpus has a test split.
    pub test: Option<TestScores>,
    /// Trainable parameters.
    pub params: usize,
}

/// The checkpoint a run's test split scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tested {
    /// The best one by the run's `stop_metric` (what `s2s train` and experiments test).
    Best,
    /// The last one: the model after its whole step budget (the course's runs, compared "after N
    /// steps", where a best checkpoint picked by a metric near 0 would be noise).
    Last,
    /// The average of the last N kept ([`crate::average`]; the best one when only one was kept).
    Average(usize),
}

impl Tested {
    /// An experiment's `average_last`: 1 is the best checkpoint, N > 1 the average of the last N.
    pub fn average_last(n: usize) -> Self {
        if n <= 1 { Tested::Best } else { Tested::Average(n) }
    }
}

thread_local! {
    static TEST_QUANTIZE: std::cell::Cell<s2s_kernels::quantize::Quantize> =
        const { std::cell::Cell::new(s2s_kernels::quantize::Quantize::None) };
}

/// Runs `f` (a [`run_and_test`]) with its test decoding's products `q` (an experiment's
/// `[decode] quantize`); training and its validations stay f32.
pub fn with_test_quantize<T>(q: s2s_kernels::quantize::Quantize, f: impl FnOnce() -> T) -> T {
    struct Restore(s2s_kernels::quantize::Quantize);
    impl Drop for Restore {
        fn drop(&mut self) {
            TEST_QUANTIZE.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(TEST_QUANTIZE.with(|c| c.replace(q)));
    f()
}

/// Trains `cfg` into `run_dir` on `devices` (as many as `cfg.train.devices`; the first also
/// evaluates) and evaluates the checkpoint `tested` names with `search`. `log` receives progress
/// lines. The run directory is locked for the whole of it ([`DirLock`]): another process
/// writing it already is an error, before anything is read or written.
#[allow(clippy::too_many_arguments)]
pub fn run_and_test(
    cfg: &RunConfig,
    run_dir: &Path,
    devices: &[Device],
    device_name: &str,
    progress: bool,
    search: &Search,
    tested: Tested,
    log: &dyn Fn(&str),
) -> Result<RunOutcome, TrainError> {
    let _lock = DirLock::create(run_dir)?;
    check_resume_config(cfg, run_dir)?;
    let device = devices.first().ok_or_else(|| TrainError::Config("no device selected".into()))?;
    for ablation in cfg.model.ablations() {
        log(&format!("warning: a teaching ablation: {ablation}"));
    }
    let prepared = prepare(cfg, run_dir)?;
    log_prepared(&prepared, log);
    // A test decoding that cannot fit in memory is refused now, not after the training.
    if let Some(test) = &prepared.test {
        let sources: Vec<Vec<u32>> =
            s2s_data::encode_pairs(&prepared.tokenizers, test).into_iter().map(|e| e.src).collect();
        test_batch_sentences(&cfg.model, &prepared.tokenizers, &sources, search)?;
    }
    let params = build_model(&cfg.model, &prepared.tokenizers, cfg.train.seed, device)?.num_params();
    log(&format!("model: {} with {params} parameters", cfg.model.kind()));
    let mut manifest = training_manifest(cfg, device_name, params, &prepared);
    write_manifest(run_dir, &manifest)?;
    let outcome = train(TrainJob {
        run_dir,
        model: &cfg.model,
        spec: &cfg.train,
        tokenizers: &prepared.tokenizers,
        data: &prepared.data,
        devices,
        progress,
    })?;
    if outcome.interrupted {
        manifest.status = "interrupted".into();
        write_manifest(run_dir, &manifest)?;
        log(&format!(
            "interrupted at step {}: checkpoint written; run the same command again to resume",
            outcome.steps
        ));
        return Ok(RunOutcome { train: outcome, test: None, params });
    }
    manifest.status = "finished".into();
    write_manifest(run_dir, &manifest)?;
    log_outcome(&outcome, log);
    let test = test_scores(cfg, run_dir, &prepared, &outcome, search, tested, device, log)?;
    Ok(RunOutcome { train: outcome, test, params })
}

/// The manifest of a run about to train: its configuration, device, versions, parameters and
/// data reports, status `training`.
fn training_manifest(cfg: &RunConfig, device_name: &str, params: usize, prepared: &Prepared) -> RunManifest {
    RunManifest {
        config: cfg.clone(),
        device: device_name.to_string(),
        version: env!("CARGO_PKG_VERSION").into(),
        burn: "0.22.1".into(),
        commit: option_env!("S2S_GIT_COMMIT").map(String::from),
        params,
        status: "training".into(),
        data_report: prepared.reports.clone(),
        filter_report: prepared.filter,
        prepared: Some(prepared.data.train.dir().to_path_buf()),
    }
}

/// The test split's scores with `search` of the checkpoint [`tested_checkpoint`] picks, on
/// `device`; `None` when the corpus has no test split.
#[allow(clippy::too_many_arguments)]
fn test_scores(
    cfg: &RunConfig,
    run_dir: &Path,
    prepared: &Prepared,
    outcome: &TrainOutcome,
    search: &Search,
    tested: Tested,
    device: &Device,
    log: &dyn Fn(&str),
) -> Result<Option<TestScores>, TrainError> {
    let test = match &prepared.test {
        Some(test) => {
            let dir = tested_checkpoint(cfg, run_dir, prepared, outcome, tested, log)?;
            let model =
                load_model(&cfg.model, &prepared.tokenizers, &dir, &device.clone().autodiff())?.valid();
            let tok = &prepared.tokenizers;
            let q = TEST_QUANTIZE.with(std::cell::Cell::get);
            Some(s2s_kernels::quantize::with_quantize(q, || {
                evaluate_test(run_dir, &model, &cfg.model, tok, test, cfg.train.batch, search, device)
            })?)
        }
        None => None,
    };
    Ok(test)
}

/// Logs what preparing the data read, dropped and wrote.
fn log_prepared(prepared: &Prepared, log: &dyn Fn(&str)) {
    for (split, r) in &prepared.reports {
        log(&format!("{split}: {r}"));
    }
    if prepared.filter.dropped() > 0 {
        log(&format!("train filters: {}", prepared.filter));
    }
    log(&format!("prepared training data: {}", prepared.data.train.dir().display()));
}

/// Logs how a finished training run went: skipped batches, captured steps, steps and time.
fn log_outcome(outcome: &TrainOutcome, log: &dyn Fn(&str)) {
    if outcome.skipped_batches > 0 {
        log(&format!("skipped {} batches with a non-finite loss", outcome.skipped_batches));
    }
    if let Some((scale, skipped)) = outcome.loss_scale {
        log(&format!("mixed precision: loss scale {scale} at the end, {skipped} overflow steps skipped"));
    }
    if let Some(c) = &outcome.capture {
        let (batches, buckets) = c.padding();
        log(&format!(
            "captured steps: {} replayed, {} eager ({} graphs recorded, {} put off, {} dropped, at most {} \
             alive; device memory {:.0} MiB); positions per real token {:.2} as batched, {:.2} padded \
             to bucket shapes",
            c.replayed,
            c.eager,
            c.captures,
            c.deferred,
            c.evictions,
            c.graphs_alive,
            c.device_bytes as f64 / (1u64 << 20) as f64,
            batches,
            buckets
        ));
    }
    log(&format!(
        "trained {} steps in {:.0} s{}; best checkpoint: step {}",
        outcome.steps,
        outcome.wall,
        if outcome.stopped_early { " (early stop)" } else { "" },
        outcome.best_step
    ));
}

/// The checkpoint the test split scores ([`Tested`]); an average is written beside the ones it
/// averages.
fn tested_checkpoint(
    cfg: &RunConfig,
    run_dir: &Path,
    prepared: &Prepared,
    outcome: &TrainOutcome,
    tested: Tested,
    log: &dyn Fn(&str),
) -> Result<PathBuf, TrainError> {
    let average_last = match tested {
        Tested::Best => return Ok(outcome.best_dir.clone()),
        Tested::Last => {
            return Checkpoints::new(run_dir).pointed("last")?.ok_or_else(|| {
                TrainError::Config(format!("{}: no last checkpoint to test", run_dir.display()))
            });
        }
        Tested::Average(n) => n,
    };
    let kept = Checkpoints::new(run_dir).recent(average_last)?.len();
    if kept <= 1 {
        log("one checkpoint kept: testing the best one, not an average");
        return Ok(outcome.best_dir.clone());
    }
    let (avg, record) = average_last_into(run_dir, &cfg.model, &prepared.tokenizers, kept)?;
    let steps: Vec<String> = record.steps.iter().map(|s| s.to_string()).collect();
    log(&format!("testing the average of the checkpoints of steps {}", steps.join(", ")));
    Ok(avg)
}

/// Refuses to resume a run directory that has checkpoints with a different data, tokenizer or
/// model configuration (the training budget and other `[train]` keys may change), naming the
/// keys that differ, before anything in the directory is touched.
pub fn check_resume_config(cfg: &RunConfig, run_dir: &Path) -> Result<(), TrainError> {
    if !run_dir.join("run.json").exists() || Checkpoints::new(run_dir).pointed("last")?.is_none() {
        return Ok(());
    }
    let old = read_manifest(run_dir)?.config;
    let (a, b) = (serde_json::to_value(&old).expect("config"), serde_json::to_value(cfg).expect("config"));
    let mut diffs = Vec::new();
    for section in ["data", "tokenizer", "model"] {
        diff(section, &a[section], &b[section], &mut diffs);
    }
    if diffs.is_empty() {
        return Ok(());
    }
    Err(TrainError::Config(format!(
        "{} already holds checkpoints of another configuration ({}); use a new --run directory, \
         or the run's own settings to resume it",
        run_dir.display(),
        diffs.join("; ")
    )))
}

fn diff(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    match (a, b) {
        (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let null = serde_json::Value::Null;
                diff(&format!("{path}.{k}"), x.get(k).unwrap_or(&null), y.get(k).unwrap_or(&null), out);
            }
        }
        _ if a != b => out.push(format!("{path}: {a} in run.json, {b} now")),
        _ => {}
    }
}
