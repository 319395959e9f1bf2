//! The one training loop, for every model: teacher forcing, label-smoothed loss, (accumulated)
//! gradients, global-norm clipping, Adam/AdamW with a schedule, periodic validation
//! (perplexity and greedy BLEU), early stopping, atomic checkpoints and exact resume.
//!
//! Determinism: batches depend only on (seed, epoch); dropout's random stream is reseeded
//! from (seed, step) before every step. A run resumed from a checkpoint therefore takes the
//! same steps as an uninterrupted one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use burn::module::Module;
use burn::optim::{AdamWConfig, ModuleOptimizer};
use burn::tensor::Device;
use indicatif::{ProgressBar, ProgressStyle};
use s2s_data::{EpochPlan, Example, PreparedDataset, StreamBatcher, Tokenizers};
use s2s_models::{Model, ModelSpec};

use crate::captured::{CaptureStats, CapturedSteps, StepAt};
use crate::checkpoint::{Checkpoints, TrainerState};
use crate::config::{Capture, OptimizerKind, StopMetric, TrainSpec};
use crate::core_split::{CoreSplit, row_ranges};
use crate::error::TrainError;
use crate::evaluate::{Search, detokenize, nll, translate};
use crate::interrupt::Faults;
use crate::metrics::{self, MetricsRow};
use crate::precision::{LossScaler, Precision};
use crate::step::{
    self, DeviceBatch, Outcome, Seeded, Spread, StepError, StepFaults, StepOptions, StepSettings, Update,
};
use crate::tensorboard::{self, EventWriter};
use s2s_kernels::ops::{FusedAdam, GradientNorm};

/// The data of a training run, already tokenised.
pub struct TrainData {
    /// Training examples, read batch by batch from their memory-mapped shards
    /// ([`StreamBatcher`]): memory does not grow with the corpus.
    pub train: PreparedDataset,
    /// Validation examples.
    pub valid: Vec<Example>,
    /// Validation references (plain text) for BLEU.
    pub valid_refs: Vec<String>,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct TrainOutcome {
    /// Steps taken in total.
    pub steps: u64,
    /// Best checkpoint's step.
    pub best_step: u64,
    /// Best validation metric (BLEU, or −perplexity).
    pub best: Option<f64>,
    /// Training seconds in total.
    pub wall: f64,
    /// The best checkpoint's directory.
    pub best_dir: PathBuf,
    /// Whether patience ran out before the budget.
    pub stopped_early: bool,
    /// Whether a stop was requested (SIGINT/SIGTERM): a checkpoint was written, rerun to
    /// resume.
    pub interrupted: bool,
    /// Batches skipped for a non-finite loss (`skip_nonfinite`).
    pub skipped_batches: u64,
    /// What captured steps did, when steps were captured (this process's share of the run).
    pub capture: Option<CaptureStats>,
    /// Mixed precision: the loss scale at the end and the steps skipped because their
    /// gradients overflowed (in the whole run).
    pub loss_scale: Option<(f64, u64)>,
}

/// Everything `train` needs.
pub struct TrainJob<'a> {
    /// The run directory (created).
    pub run_dir: &'a Path,
    /// The model.
    pub model: &'a ModelSpec,
    /// Training settings.
    pub spec: &'a TrainSpec,
    /// The run's tokenizers (for vocabulary sizes and BLEU detokenisation).
    pub tokenizers: &'a Tokenizers,
    /// Data.
    pub data: &'a TrainData,
    /// The (non-autodiff) devices, as many as `spec.devices`: the first holds the weights and
    /// the optimizer; each takes one batch of every micro-step (data parallelism, see
    /// [`step::Spread::Devices`]). Training uses their autodiff twins.
    pub devices: &'a [Device],
    /// Draw a progress bar on stderr.
    pub progress: bool,
}

/// The run's Adam, its step count read from `clock` (the trainer's; see
/// [`FusedAdam::with_clock`]).
fn adam(spec: &TrainSpec, clock: &Arc<AtomicUsize>) -> FusedAdam {
    FusedAdam::new(spec.beta1 as f32, spec.beta2 as f32, spec.epsilon as f32, spec.weight_decay as f32)
        .with_clock(clock.clone())
}

fn optimizer(spec: &TrainSpec, clock: &Arc<AtomicUsize>) -> ModuleOptimizer {
    match spec.optimizer {
        OptimizerKind::Adam => ModuleOptimizer::from(adam(spec, clock).batched()),
        OptimizerKind::AdamW => AdamWConfig::new()
            .with_beta_1(spec.beta1 as f32)
            .with_beta_2(spec.beta2 as f32)
            .with_epsilon(spec.epsilon as f32)
            .with_weight_decay(spec.weight_decay as f32)
            .init(),
    }
}

/// Builds the model of a run on `device` (fresh weights from `seed`).
pub fn build_model(
    spec: &ModelSpec,
    tok: &Tokenizers,
    seed: u64,
    device: &Device,
) -> Result<Model, TrainError> {
    device.seed(seed);
    Ok(spec.init_for(tok.src.vocab_size(), tok.tgt.vocab_size(), tok.joint, device)?)
}

/// Loads a checkpoint's model weights into a model built from `spec` (an int8 checkpoint's
/// dequantised: [`crate::quantized`]).
pub fn load_model(
    spec: &ModelSpec,
    tok: &Tokenizers,
    dir: &Path,
    device: &Device,
) -> Result<Model, TrainError> {
    // Every parameter comes from the checkpoint (a missing one is a validation error), so
    // none is drawn first.
    let model = spec.init_lazy(tok.src.vocab_size(), tok.tgt.vocab_size(), tok.joint, device)?;
    if dir.join(crate::quantized::FILE).is_file() {
        // An int8 checkpoint (`s2s quantize`), dequantised into the f32 model.
        return crate::quantized::load_into(model, dir, device);
    }
    Checkpoints::verify(dir, "model.bpk")?;
    let path = dir.join("model.bpk");
    model.try_load_file(&path).map_err(|e| checkpoint_error(dir, path, e))
}

/// A checkpoint file that burn could not read, with the remedy for its cause: one that does
/// not parse (the length and CRC-32 were not recorded, or matched a file damaged before they
/// were) is damaged; one that parses but whose tensors do not fit the model was written for
/// another configuration.
fn checkpoint_error(dir: &Path, path: PathBuf, e: burn::store::RecordError) -> TrainError {
    let message = match e {
        burn::store::RecordError::Validation(m) => format!(
            "written for another model configuration ({m}): load it with the configuration it was trained with (the run's run.json)"
        ),
        burn::store::RecordError::Io(m) => {
            format!(
                "not a readable checkpoint ({m}): damaged or not written by s2s; {}",
                Checkpoints::remedy_for_damage(dir)
            )
        }
    };
    TrainError::Checkpoint { path, message }
}

/// Captured steps leave their losses on the device; the trainer reads their sum this often
/// (and before validating), for the progress bar.
const LOSS_READ_EVERY: u64 = 25;

/// Adds the captured steps' device loss sum to the window (a synchronisation). A replayed
/// step has updated the weights by the time its loss is read, so a non-finite sum is an error
/// naming the steps it covers: the last checkpoint is intact.
fn fold_captured_loss(cap: &CapturedSteps, st: &mut TrainerState) -> Result<(), TrainError> {
    let (sum, tokens) = cap.take_loss();
    if !sum.is_finite() {
        return Err(TrainError::NonFinite { step: st.step, value: sum });
    }
    st.loss_window.0 += sum;
    st.loss_window.1 += tokens.round() as u64;
    Ok(())
}

/// The next batch's example indices, starting the next epoch when this one is done; counts it
/// in `st` (where a resumed run picks up).
fn next_batch<'a>(
    batches: &mut EpochPlan<'a>,
    batcher: &StreamBatcher<'a>,
    seed: u64,
    st: &mut TrainerState,
) -> Vec<usize> {
    let indices = batches.next().unwrap_or_else(|| {
        st.epoch += 1;
        st.batch_in_epoch = 0;
        *batches = batcher.epoch(seed, st.epoch);
        batches.next().expect("a non-empty dataset has a batch in every epoch")
    });
    st.batch_in_epoch += 1;
    indices
}

/// Captured steps, when `spec.capture` asks for them and the run allows them: one GPU device,
/// one batch a step, Adam (ours: it updates in place), a non-finite loss an error (a replayed
/// step has updated the weights by the time its loss is read, so it cannot be skipped).
/// `auto` turns them on for a physical GPU only: on a software adapter (lavapipe) the device
/// is the CPU, which pays for the padding and gains little from fewer host launches.
fn captured_steps(
    spec: &TrainSpec,
    devices: &[Device],
    clock: &Arc<AtomicUsize>,
) -> Result<Option<CapturedSteps>, TrainError> {
    if spec.capture == Capture::Off {
        return Ok(None);
    }
    let on_gpu = !s2s_kernels::ops::is_cpu(&devices[0]) && !cfg!(feature = "gpu-tuned");
    let blockers: Vec<&str> = [
        (!on_gpu, "a GPU device (--device wgpu; the CPU backend launches no kernels)"),
        (devices.len() > 1, "devices = 1"),
        (spec.accumulate > 1, "accumulate = 1"),
        (spec.optimizer != OptimizerKind::Adam, "optimizer = \"adam\""),
        (spec.skip_nonfinite, "skip_nonfinite = false"),
        (spec.precision != Precision::F32, "precision = \"f32\""),
    ]
    .into_iter()
    .filter_map(|(blocked, need)| blocked.then_some(need))
    .collect();
    if spec.capture == Capture::On && !blockers.is_empty() {
        return Err(TrainError::Config(format!(
            "capture = \"on\" needs {}; set capture = \"off\" (or \"auto\")",
            blockers.join(", ")
        )));
    }
    if !blockers.is_empty() || (spec.capture == Capture::Auto && Device::enumerate_physical().is_empty()) {
        return Ok(None);
    }
    Ok(Some(CapturedSteps::new(&devices[0], adam(spec, clock), clock.clone(), spec.capture_graphs)))
}

/// Trains (or resumes) one model in `job.run_dir`: resume from the last checkpoint, then
/// steps (eager or captured) until the budget, patience or a stop request ends the run, with
/// validation and a checkpoint every `valid_every` steps, then the finish. The caller holds
/// the run directory's lock ([`crate::lock::DirLock`]; [`crate::pipeline::run_and_test`] does).
pub fn train(job: TrainJob<'_>) -> Result<TrainOutcome, TrainError> {
    let spec = job.spec;
    spec.validate().map_err(|e| TrainError::Config(e.to_string()))?;
    if job.devices.len() != spec.devices as usize {
        return Err(TrainError::Config(format!(
            "devices = {} but {} device(s) were selected",
            spec.devices,
            job.devices.len()
        )));
    }
    spec.precision.check_device(&job.devices[0]).map_err(|e| TrainError::Config(e.to_string()))?;
    let devices: Vec<Device> = job.devices.iter().map(|d| d.clone().autodiff()).collect();
    // Adam's step count: the trainer's, which a checkpoint saves (a replayed step leaves the
    // optimizer's per-parameter counts where the capture left them).
    let clock = Arc::new(AtomicUsize::new(0));
    let mut captured = captured_steps(spec, &devices, &clock)?;
    let mut run = Run::resume(&job, devices, clock, Faults::from_env())?;
    if run.st.finished {
        return run.outcome(Ending::Budget, None);
    }
    let ending = run.steps(captured.as_mut())?;
    if let Some(cap) = &captured {
        fold_captured_loss(cap, &mut run.st)?;
    }
    run.finish(ending == Ending::Interrupted)?;
    run.outcome(ending, captured.map(|c| c.stats.clone()))
}

/// Why the steps stopped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The step or time budget is spent (or a finished run was resumed).
    Budget,
    /// Patience ran out: validation stopped improving.
    Patience,
    /// A stop was requested (Ctrl-C); the run resumes from here.
    Interrupted,
}

/// The step budget: `budget.steps`, or the steps of `budget.epochs` whole passes over the
/// training data, whichever ends first. Epochs of token-filled batches from shuffled pools
/// differ by a few batches, so each pass is counted with its own length, `epoch_len(e)`
/// batches (a planning pass over the lengths), `per_step` batches to a step; passes past the
/// step budget are not planned. As with fairseq's `--max-epoch`, training stops at the end of
/// the last pass (with `per_step > 1`, its last step takes what it lacks from the next pass,
/// as every step does at an epoch's end). Known before the first step: the progress bar and
/// the captured steps' last loss read need it.
fn max_steps(spec: &TrainSpec, per_step: u64, mut epoch_len: impl FnMut(u64) -> u64) -> u64 {
    let steps = spec.budget.steps.unwrap_or(u64::MAX);
    let Some(epochs) = spec.budget.epochs else { return steps };
    let mut batches = 0u64;
    for e in 0..epochs {
        batches += epoch_len(e);
        if batches.div_ceil(per_step) >= steps {
            return steps;
        }
    }
    batches.div_ceil(per_step)
}

/// A run in progress: the model and optimizer, the trainer's state, and where it writes.
struct Run<'j, 'a> {
    job: &'j TrainJob<'a>,
    /// The autodiff twins of `job.devices`; the first holds the weights.
    devices: Vec<Device>,
    ckpts: Checkpoints,
    metrics_path: PathBuf,
    /// The same rows' scalars as TensorBoard events (`RUN/tensorboard/`).
    tensorboard: EventWriter,
    /// The last applied eager step's gradient norm (before clipping), for the next row.
    grad_norm: Option<GradientNorm>,
    /// Adam's step count (see [`train`]).
    clock: Arc<AtomicUsize>,
    /// The model; taken out for the moment a step consumes it (so that Adam, holding the only
    /// handle, updates the weights in place), put back with the step's result.
    model: Option<Model>,
    optim: ModuleOptimizer,
    st: TrainerState,
    /// The learning rate of the last step.
    last_lr: f64,
    /// Non-finite batches skipped in a row (`skip_nonfinite`).
    consecutive_skips: u32,
    bar: Option<ProgressBar>,
    /// When the current window of the progress message and the metrics row began (instant,
    /// training seconds).
    window_start: (Instant, f64),
    /// Eager CPU steps cut over the cores (`core_split` > 1, one CPU device).
    split: Option<CoreSplit>,
    /// Fault injection (tests), read when the run started.
    faults: Faults,
}

impl<'j, 'a> Run<'j, 'a> {
    /// A fresh model and optimizer, or the last checkpoint's with the trainer's state (the
    /// metrics file cut back to its step).
    fn resume(
        job: &'j TrainJob<'a>,
        devices: Vec<Device>,
        clock: Arc<AtomicUsize>,
        faults: Faults,
    ) -> Result<Self, TrainError> {
        let spec = job.spec;
        let ad = devices[0].clone();
        let ckpts = Checkpoints::new(job.run_dir)
            .keeping(spec.keep_last as usize)
            .aborting_at(faults.abort_in_checkpoint);
        let metrics_path = job.run_dir.join("metrics.csv");
        let mut model = build_model(job.model, job.tokenizers, spec.seed, &ad)?;
        let mut optim = optimizer(spec, &clock);
        let mut st = TrainerState::start(spec.schedule.start());
        st.loss_scaler = (spec.precision == Precision::Mixed).then(LossScaler::default);
        if let Some(dir) = ckpts.pointed("last")? {
            st = Checkpoints::read_state(&dir)?;
            model = load_model(job.model, job.tokenizers, &dir, &ad)?;
            let opath = dir.join("optimizer.bpk");
            Checkpoints::verify(&dir, "optimizer.bpk")?;
            optim = optim
                .load(&opath)
                .map_err(|e| TrainError::Checkpoint { path: opath.clone(), message: e.to_string() })?;
            metrics::truncate_after(&metrics_path, st.step).map_err(|e| TrainError::io(&metrics_path, e))?;
            eprintln!("resuming from {} (step {}, epoch {})", dir.display(), st.step, st.epoch);
        }
        let tensorboard = EventWriter::open(job.run_dir, st.step)
            .map_err(|e| TrainError::io(&tensorboard::dir(job.run_dir), e))?;
        let window_start = (Instant::now(), st.wall);
        let split = (spec.core_split > 1 && devices.len() == 1 && s2s_kernels::ops::is_cpu(&devices[0]))
            .then(|| CoreSplit::new(spec.core_split as usize));
        Ok(Self {
            job,
            devices,
            ckpts,
            metrics_path,
            tensorboard,
            grad_norm: None,
            clock,
            model: Some(model),
            optim,
            st,
            last_lr: spec.lr,
            consecutive_skips: 0,
            bar: None,
            window_start,
            split,
            faults,
        })
    }

    /// Steps, eager or `captured`, from where the run stands until it ends; validates and
    /// checkpoints every `valid_every` steps. A resumed run continues its epoch with the
    /// batches an uninterrupted one would take.
    fn steps(&mut self, mut captured: Option<&mut CapturedSteps>) -> Result<Ending, TrainError> {
        let spec = self.job.spec;
        let batcher = StreamBatcher::new(&self.job.data.train, spec.batch);
        let max_steps = max_steps(spec, self.per_step() as u64, |e| batcher.epoch_len(spec.seed, e) as u64);
        self.bar = progress_bar(self.job.progress, max_steps, self.st.step);
        let (started, wall0) = (Instant::now(), self.st.wall);
        let wall = || wall0 + started.elapsed().as_secs_f64();
        let mut batches = batcher.resume(spec.seed, self.st.epoch, self.st.batch_in_epoch);
        self.window_start = (Instant::now(), self.st.wall);
        let ending = loop {
            if crate::interrupt::stop_requested() {
                break Ending::Interrupted;
            }
            let out_of_time = spec.budget.minutes.is_some_and(|m| wall() >= m * 60.0);
            if self.st.step >= max_steps || out_of_time {
                break Ending::Budget;
            }
            let indices: Vec<Vec<usize>> = (0..self.per_step())
                .map(|_| next_batch(&mut batches, &batcher, spec.seed, &mut self.st))
                .collect();
            let stepped = match captured.as_deref_mut() {
                Some(cap) => self.captured_step(cap, &indices[0], max_steps).map(|()| true)?,
                None => self.eager_step(&indices)?,
            };
            if !stepped {
                continue;
            }
            self.show_progress();
            if self.st.step.is_multiple_of(spec.valid_every) {
                self.st.wall = wall();
                if self.validate()? {
                    break Ending::Patience;
                }
            }
        };
        self.st.wall = wall();
        Ok(ending)
    }

    /// The model between steps.
    fn model(&self) -> &Model {
        self.model.as_ref().expect("the model is back after every step")
    }

    /// Batches a step reads: `accumulate × devices`. Each batch's loss is a per-token mean
    /// divided by that count, so N devices take the step `accumulate = N` takes on one.
    fn per_step(&self) -> usize {
        self.job.spec.accumulate as usize * self.devices.len()
    }

    /// One optimizer step over `accumulate` micro-steps of one batch per device (`indices`,
    /// micro-step by micro-step, device by device), or of one batch cut over the cores:
    /// [`step::take`]. Returns false when the step was skipped: a non-finite loss
    /// (`skip_nonfinite`), or gradients that overflowed under mixed precision.
    fn eager_step(&mut self, indices: &[Vec<usize>]) -> Result<bool, TrainError> {
        let spec = self.job.spec;
        let step = self.st.step + 1;
        let micro_steps = self.micro_steps(indices)?;
        let seeded: Vec<Vec<Seeded<'_>>> = micro_steps
            .iter()
            .map(|batches| batches.iter().map(|(batch, seed)| Seeded { batch, seed: *seed }).collect())
            .collect();
        let spread = match &self.split {
            Some(split) => Spread::Cores(split, &self.devices[0]),
            None => Spread::Devices(&self.devices),
        };
        let faults = StepFaults {
            nan_loss: self.faults.nan_now(step),
            overflow: self.st.loss_scaler.is_some() && self.faults.overflow_now(step),
        };
        let lr = spec.schedule.lr(spec.lr, step, &self.st.schedule);
        let settings = StepSettings { lr, clip: spec.clip_norm, label_smoothing: spec.label_smoothing };
        let update = Update { optim: &mut self.optim, settings, scaler: self.st.loss_scaler.as_mut() };
        let options = StepOptions { read_loss: true, faults, ..Default::default() };
        self.clock.store(step as usize, Ordering::Relaxed);
        let model = self.model.take().expect("the model is back after every step");
        let stepped = step::take(model, &seeded, spread, update, options).map_err(|e| match e {
            StepError::Device(message) => TrainError::Device { step, message },
            StepError::Graph(e) => TrainError::Config(format!("eager step: {e}")),
        })?;
        self.model = Some(stepped.model);
        match stepped.outcome {
            Outcome::NonFinite(loss) => return self.skip_nonfinite(loss).map(|()| false),
            Outcome::Overflow => {
                self.consecutive_skips = 0;
                return self.skip_overflow().map(|()| false);
            }
            Outcome::Applied => {}
        }
        self.consecutive_skips = 0;
        self.st.step = step;
        self.last_lr = lr;
        self.grad_norm = stepped.grad_norm;
        self.st.loss_window.0 += stepped.loss_sum;
        self.st.loss_window.1 += stepped.tokens;
        Ok(true)
    }

    /// The batches of the next step (`indices`, micro-step by micro-step) on their devices with
    /// their dropout seeds: one per device, each its loss divided by its own tokens times the
    /// batches a step sums; or, cut over the cores ([`crate::core_split`]), the parts of one
    /// batch, each divided by the whole batch's tokens times the batches a step sums.
    fn micro_steps(&self, indices: &[Vec<usize>]) -> Result<Vec<Vec<(DeviceBatch, u64)>>, TrainError> {
        let (spec, data, per_step) = (self.job.spec, &self.job.data.train, self.per_step());
        let seed = |batch: usize, part: usize| step::dropout_seed(spec.seed, self.st.step, batch, part);
        let n = self.devices.len();
        indices
            .chunks(n)
            .enumerate()
            .map(|(micro, batches)| -> Result<Vec<_>, TrainError> {
                let Some(split) = &self.split else {
                    let on_devices = batches.iter().zip(&self.devices).enumerate();
                    return on_devices
                        .map(|(d, (rows, device))| -> Result<_, TrainError> {
                            let b = DeviceBatch::new(&data.collate(rows)?, device);
                            let tokens = b.tokens * per_step;
                            Ok((b.with_step_tokens(tokens), seed(micro * n + d, 0)))
                        })
                        .collect();
                };
                let rows = &batches[0];
                let mut parts = Vec::with_capacity(split.parts());
                for (i, r) in row_ranges(rows.len(), split.parts()).into_iter().enumerate() {
                    parts
                        .push((DeviceBatch::new(&data.collate(&rows[r])?, &self.devices[0]), seed(micro, i)));
                }
                let tokens: usize = parts.iter().map(|(p, _)| p.tokens).sum();
                Ok(parts.into_iter().map(|(p, s)| (p.with_step_tokens(tokens * per_step), s)).collect())
            })
            .collect()
    }

    /// A batch whose loss is not finite: skipped and counted with `skip_nonfinite` (an error
    /// after 100 in a row), an error without it.
    fn skip_nonfinite(&mut self, loss: f64) -> Result<(), TrainError> {
        let step = self.st.step + 1;
        if !self.job.spec.skip_nonfinite {
            return Err(TrainError::NonFinite { step, value: loss });
        }
        self.st.skipped_batches += 1;
        self.consecutive_skips += 1;
        if self.consecutive_skips > 100 {
            return Err(TrainError::NonFinite { step, value: loss });
        }
        self.say(&format!("skipped a batch with a {loss} loss before step {step}"));
        Ok(())
    }

    /// A step whose gradients overflowed under mixed precision: skipped (the scaler halved its
    /// scale), said under the progress bar; an error once the scale is below its floor (the
    /// loss itself is exploding).
    fn skip_overflow(&mut self) -> Result<(), TrainError> {
        let step = self.st.step + 1;
        let scaler = self.st.loss_scaler.as_ref().expect("only a loss scaler skips a step");
        if scaler.below_floor() {
            return Err(TrainError::LossScale { step, scale: scaler.scale() });
        }
        self.say(&format!(
            "gradient overflow before step {step}: skipped, loss scale now {}",
            scaler.scale()
        ));
        Ok(())
    }

    /// One captured step (replayed after its shape's first) on the batch `indices`; its loss
    /// stays on the device until the trainer logs or validates.
    fn captured_step(
        &mut self,
        cap: &mut CapturedSteps,
        indices: &[usize],
        max_steps: u64,
    ) -> Result<(), TrainError> {
        let spec = self.job.spec;
        let batch = self.job.data.train.collate(indices)?;
        let step = self.st.step + 1;
        let lr = spec.schedule.lr(spec.lr, step, &self.st.schedule);
        let at = StepAt {
            time: step as usize,
            seed: step::dropout_seed(spec.seed, self.st.step, 0, 0),
            settings: StepSettings { lr, clip: spec.clip_norm, label_smoothing: spec.label_smoothing },
        };
        let model = self.model.take().expect("the model is back after every step");
        let model = cap
            .step(model, &mut self.optim, &batch, at)
            .map_err(|e| TrainError::Config(format!("captured step: {e}; train with --capture off")))?;
        self.model = Some(model);
        if self.faults.nan_now(step) {
            return Err(TrainError::NonFinite { step, value: f64::NAN });
        }
        self.st.step = step;
        self.last_lr = lr;
        self.grad_norm = None; // on the device, inside the graph: not read
        if step.is_multiple_of(LOSS_READ_EVERY) || step.is_multiple_of(spec.valid_every) || step >= max_steps
        {
            fold_captured_loss(cap, &mut self.st)?;
        }
        Ok(())
    }

    /// The progress bar's position and message: loss, tokens a second, learning rate, epoch.
    fn show_progress(&self) {
        let Some(bar) = &self.bar else { return };
        bar.set_position(self.st.step);
        let secs = self.window_start.0.elapsed().as_secs_f64().max(1e-9);
        bar.set_message(format!(
            "loss {:.3} · {:.0} tok/s · lr {:.2e} · epoch {}",
            self.st.loss_window.0 / self.st.loss_window.1.max(1) as f64,
            self.st.loss_window.1 as f64 / secs,
            self.last_lr,
            self.st.epoch
        ));
    }

    /// Validates and checkpoints, printing the figures under the progress bar; true when
    /// patience has run out.
    fn validate(&mut self) -> Result<bool, TrainError> {
        let (stop, ppl, bleu) = self.validate_and_checkpoint()?;
        let scale = match &self.st.loss_scaler {
            Some(s) => format!(", loss scale {} ({} overflow steps skipped)", s.scale(), s.skipped),
            None => String::new(),
        };
        self.say(&format!(
            "step {}: val ppl {ppl:.2}, val BLEU {bleu:.2}{}{scale}",
            self.st.step,
            if self.st.best_step == self.st.step { " (best)" } else { "" }
        ));
        Ok(stop)
    }

    /// A line for the person watching the run: under the progress bar on a terminal, on
    /// stderr when the bar is hidden (stderr redirected: `2> log`, nohup, CI), so no line the
    /// terminal would show is lost; nothing without progress output.
    fn say(&self, line: &str) {
        match &self.bar {
            Some(bar) if !bar.is_hidden() => bar.println(line),
            Some(_) => eprintln!("{line}"),
            None => {}
        }
    }

    /// An interrupted run only checkpoints where it stands; a finished one validates its last
    /// step (unless that just happened) and is marked finished.
    fn finish(&mut self, interrupted: bool) -> Result<(), TrainError> {
        if !interrupted && (!self.st.step.is_multiple_of(self.job.spec.valid_every) || self.st.step == 0) {
            self.validate_and_checkpoint()?;
        }
        self.st.finished = !interrupted;
        save(&self.ckpts, &self.st, false, self.model(), &self.optim)?;
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        Ok(())
    }

    /// How the run ended. An interruption before the first validation has no best checkpoint
    /// yet: the last one stands in.
    fn outcome(&self, ending: Ending, capture: Option<CaptureStats>) -> Result<TrainOutcome, TrainError> {
        let best_dir = match self.ckpts.pointed("best")? {
            Some(dir) => dir,
            None => self.ckpts.pointed("last")?.expect("a checkpoint was written"),
        };
        Ok(TrainOutcome {
            steps: self.st.step,
            best_step: self.st.best_step,
            best: self.st.best,
            wall: self.st.wall,
            best_dir,
            stopped_early: ending == Ending::Patience,
            interrupted: ending == Ending::Interrupted,
            skipped_batches: self.st.skipped_batches,
            capture,
            loss_scale: self.st.loss_scaler.as_ref().map(|s| (s.scale(), s.skipped)),
        })
    }

    /// Validates, logs a metrics row, checkpoints; returns (stop early?, ppl, BLEU).
    fn validate_and_checkpoint(&mut self) -> Result<(bool, f64, f64), TrainError> {
        let (ppl, bleu) = self.score()?;
        let spec = self.job.spec;
        let st = &mut self.st;
        let metric = match spec.stop_metric {
            StopMetric::Bleu => bleu,
            StopMetric::Ppl => -ppl,
        };
        let improved = st.best.is_none_or(|b| metric > b);
        if improved {
            st.best = Some(metric);
            st.best_step = st.step;
            st.bad_validations = 0;
        } else {
            st.bad_validations += 1;
        }
        spec.schedule.after_validation(improved, &mut st.schedule);
        let secs = (st.wall - self.window_start.1).max(1e-9);
        let row = MetricsRow {
            step: st.step,
            epoch: st.epoch,
            wall: st.wall,
            train_loss: st.loss_window.0 / st.loss_window.1.max(1) as f64,
            val_ppl: ppl,
            val_bleu: bleu,
            lr: self.last_lr,
            tokens_per_s: st.loss_window.1 as f64 / secs,
        };
        st.loss_window = (0.0, 0);
        metrics::append(&self.metrics_path, &row).map_err(|e| TrainError::io(&self.metrics_path, e))?;
        let mut scalars = vec![
            ("train/loss", row.train_loss),
            ("valid/perplexity", ppl),
            ("valid/bleu", bleu),
            ("train/learning_rate", row.lr),
            ("train/tokens_per_s", row.tokens_per_s),
        ];
        // Read once a validation (on a GPU, a synchronisation); a captured step's stays unread.
        if let Some(norm) = self.grad_norm.take() {
            scalars.push(("train/grad_norm", norm.value()));
        }
        if let Some(s) = &self.st.loss_scaler {
            scalars.push(("train/loss_scale", s.scale()));
        }
        let tb = self.tensorboard.path().to_path_buf();
        self.tensorboard.scalars(row.step, &scalars).map_err(|e| TrainError::io(&tb, e))?;
        save(&self.ckpts, &self.st, improved, self.model(), &self.optim)?;
        self.window_start = (Instant::now(), self.st.wall);
        let stop = spec.patience > 0 && self.st.bad_validations >= spec.patience;
        Ok((stop, ppl, bleu))
    }

    /// The model's validation perplexity and its greedy BLEU on the first
    /// `valid_bleu_sentences` validation pairs (all of them when 0).
    fn score(&self) -> Result<(f64, f64), TrainError> {
        let valid_model = self.model().valid();
        let (job, spec) = (self.job, self.job.spec);
        let (sum, tokens) = nll(&valid_model, &job.data.valid, spec.batch, &job.devices[0]);
        let ppl = s2s_eval::perplexity(sum, tokens);
        let n = match spec.valid_bleu_sentences {
            0 => job.data.valid.len(),
            n => n.min(job.data.valid.len()),
        };
        let sources: Vec<Vec<u32>> = job.data.valid[..n].iter().map(|e| e.src.clone()).collect();
        let search = Search::Greedy { limit: spec.max_output, attention: false };
        let hyps = translate(&valid_model, &sources, spec.batch, &search, &job.devices[0], false);
        let text = detokenize(&job.tokenizers.tgt, &hyps);
        let bleu = s2s_eval::corpus_bleu(&text, &[&job.data.valid_refs[..n]])?.score;
        Ok((ppl, bleu))
    }
}

fn progress_bar(show: bool, max_steps: u64, pos: u64) -> Option<ProgressBar> {
    if !show {
        return None;
    }
    let bar = if max_steps == u64::MAX { ProgressBar::new_spinner() } else { ProgressBar::new(max_steps) };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} steps · ETA {eta} · {msg}",
        )
        .expect("valid template"),
    );
    bar.set_position(pos);
    Some(bar)
}

fn save(
    ckpts: &Checkpoints,
    st: &TrainerState,
    best: bool,
    model: &Model,
    optim: &ModuleOptimizer,
) -> Result<PathBuf, TrainError> {
    ckpts.save(st, best, |dir| {
        let mpath = dir.join("model.bpk");
        model
            .clone()
            .save_file(&mpath)
            .map_err(|e| TrainError::Checkpoint { path: mpath.clone(), message: e.to_string() })?;
        let opath = dir.join("optimizer.bpk");
        optim.save(&opath).map_err(|e| TrainError::Checkpoint { path: opath.clone(), message: e.to_string() })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Budget;

    /// An epoch budget counts each pass's own batches, `per_step` to a step, and stops at the
    /// step budget without planning the passes past it.
    #[test]
    fn an_epoch_budget_ends_with_the_last_pass() {
        let spec = |steps, epochs| TrainSpec {
            budget: Budget { steps, epochs, minutes: None },
            ..Default::default()
        };
        let lens = [10u64, 9, 11, 8];
        let len = |e: u64| lens[e as usize];
        assert_eq!(max_steps(&spec(None, Some(3)), 1, len), 30);
        assert_eq!(max_steps(&spec(None, Some(2)), 1, len), 19);
        assert_eq!(max_steps(&spec(None, Some(2)), 2, len), 10);
        assert_eq!(max_steps(&spec(Some(25), Some(3)), 1, len), 25);
        assert_eq!(max_steps(&spec(Some(40), Some(3)), 1, len), 30);
        assert_eq!(max_steps(&spec(Some(7), None), 1, len), 7);
        let mut planned = vec![];
        assert_eq!(
            max_steps(&spec(Some(12), Some(4)), 1, |e| {
                planned.push(e);
                len(e)
            }),
            12
        );
        assert_eq!(planned, [0, 1], "passes past the step budget are not planned");
    }
}
