//! Training steps captured as graphs and replayed (GPU): the trainer's `capture` mode
//! ([`CapturedSteps`]) and the fixed-batch trainer `s2s bench --capture` times
//! ([`FixedBatchTrainer`]); `tests/captured.rs` holds both equal to eager training.
//!
//! A captured step ([`s2s_kernels::capture`]) is recorded once per batch shape, after a warm-up
//! step, and each later step of that shape writes only what changes — the batch's token ids
//! and masks into the graph's input buffers ([`DeviceBatch::write`]), its dropout seeds and
//! Adam's coefficients (kept on the device, `s2s_kernels::capture::require_in_place`) — then
//! replays the launches: forward, label-smoothed loss, backward, global-norm clip and Adam,
//! the parameters and moments updated in place. The loss is divided by the token count the device sums from the target
//! mask (a host scalar would be frozen at capture). The trainer pads each batch to a bucket
//! shape ([`s2s_data::bucket`]) so that a run meets few shapes; at most `capture_graphs`
//! graphs stay alive, the least recently used dropped past it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use burn::optim::ModuleOptimizer;
use burn::tensor::{Device, Tensor, TensorData};
use s2s_data::Batch;
use s2s_kernels::capture::{GraphError, LossSum, Recorder, StepGraph};
use s2s_kernels::ops::{FusedAdam, GradientSum};
use s2s_models::Model;
use serde::Serialize;

use crate::core_split::CoreSplit;
use crate::precision::LossScaler;
use crate::step::{self, DeviceBatch, Norm, StepSettings};

/// [`step_ops`] as a captured graph records it (and as its eager stand-in runs it): nothing read
/// back, no phase timing, no loss scaler (captured steps are f32); `sum` adds the loss to the
/// run's device sum.
fn graph_step(
    model: Model,
    inputs: &DeviceBatch,
    optim: &mut ModuleOptimizer,
    settings: StepSettings,
    sum: Option<&LossSum>,
) -> (Model, Tensor<1>) {
    step_ops(model, inputs, optim, settings, false, None, sum, None)
}

/// The operations of one training step on `inputs` — [`step::gradients`] (the loss divided by
/// the token count the device sums: a host number would be frozen at capture),
/// [`step::clipped`], [`step::apply`] — what eager steps run and a capture records. Returns the
/// model and the per-token loss (on the device). `read` reads the loss back before the
/// backward (a synchronisation, as the trainer's logging does); `spent`, when given, adds each
/// phase's seconds: forward (with the loss), backward, clip, Adam; `sum` adds the loss to a
/// captured run's device sum; `scaler`, mixed precision's loss scaler (eager steps only: a
/// step it skips leaves the model as it was).
#[allow(clippy::too_many_arguments)]
fn step_ops(
    model: Model,
    inputs: &DeviceBatch,
    optim: &mut ModuleOptimizer,
    StepSettings { lr, clip, label_smoothing: epsilon }: StepSettings,
    read: bool,
    spent: Option<&mut Phases>,
    sum: Option<&LossSum>,
    mut scaler: Option<&mut LossScaler>,
) -> (Model, Tensor<1>) {
    let mut laps = [0f64; 4];
    let mut lap = Instant::now();
    let mut done = |i: usize| {
        laps[i] += lap.elapsed().as_secs_f64();
        lap = Instant::now();
    };
    let mixed = scaler.as_ref().map(|s| s.scale());
    let Ok(g) = step::gradients(&model, inputs, epsilon, Norm::Device, mixed, |loss| {
        if read {
            let _ = loss.clone().into_scalar::<f32>();
        }
        done(0);
        Ok::<(), std::convert::Infallible>(())
    });
    done(1);
    if let (Some(sum), Some(tokens)) = (sum, g.device_tokens) {
        sum.add(g.loss.clone(), tokens);
    }
    let model = match step::clipped(&model, g.grads, clip, scaler.as_deref_mut()) {
        Some(grads) => {
            done(2);
            step::apply(optim, lr, model, grads)
        }
        None => model,
    };
    done(3);
    if let Some(p) = spent {
        p.iter_mut().zip(laps).for_each(|(a, b)| *a += b);
    }
    (model, g.loss)
}

/// The dropout seed of part `i` of a step whose seed is `seed` (part 0's is the step's).
pub(crate) fn part_seed(seed: u64, i: usize) -> u64 {
    seed ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03)
}

/// [`step_ops`] with the forward and backward cut over the cores (`split`, one input per
/// part): the parts' gradients summed in part order, then the clip and Adam. The forward's
/// seconds are part 0's; the backward's the rest until the gradients are summed.
fn split_step_ops(
    model: Model,
    split: &CoreSplit,
    device: &Device,
    parts: &[(DeviceBatch, u64)],
    optim: &mut ModuleOptimizer,
    StepSettings { lr, clip, label_smoothing: epsilon }: StepSettings,
    spent: Option<&mut Phases>,
) -> (Model, Tensor<1>) {
    let start = Instant::now();
    let tokens: usize = parts.iter().map(|(p, _)| p.tokens).sum();
    let done = split.gradients(&model, device, parts, tokens as f64, epsilon);
    let forward = done[0].seconds[0];
    let mut acc = GradientSum::new();
    let loss_sum = crate::core_split::accumulate(done, &model, &mut acc);
    let backward = start.elapsed().as_secs_f64() - forward;
    let lap = Instant::now();
    let grads = step::clipped(&model, acc.take(), clip, None).expect("no loss scaler, no skipped step");
    let clipped = lap.elapsed().as_secs_f64();
    let model = step::apply(optim, lr, model, grads);
    if let Some(p) = spent {
        p.iter_mut()
            .zip([forward, backward, clipped, lap.elapsed().as_secs_f64() - clipped])
            .for_each(|(a, b)| *a += b);
    }
    let loss = Tensor::from_data(TensorData::new(vec![(loss_sum / tokens as f64) as f32], [1]), device);
    (model, loss)
}

/// Seconds spent in each phase of eager steps: forward (with the loss), backward, clip, Adam.
pub type Phases = [f64; 4];

/// The optimisation of one model on one batch: the step count, the rate, the clip, the seed
/// each step's dropout draws from, and the captured step once there is one.
pub struct FixedBatchTrainer {
    model: Option<Model>,
    /// The model's (autodiff) device.
    device: Device,
    batch: DeviceBatch,
    adam: FusedAdam,
    optim: ModuleOptimizer,
    settings: StepSettings,
    seed: u64,
    /// Adam steps run so far.
    time: usize,
    /// The loss of the last step, on the device.
    loss: Option<Tensor<1>>,
    graph: Option<StepGraph>,
    /// The step cut over the CPU's cores, and the batch's parts ([`crate::core_split`]).
    split: Option<(CoreSplit, Vec<DeviceBatch>)>,
    /// Mixed precision's loss scaler (eager GPU steps).
    scaler: Option<LossScaler>,
}

impl FixedBatchTrainer {
    /// `model` (on an autodiff device) trained on `batch` by `adam` with `settings` (rate,
    /// clip, label smoothing); step `k`'s dropout masks are drawn after reseeding with
    /// `seed + k`.
    pub fn new(
        model: Model,
        device: &Device,
        batch: DeviceBatch,
        adam: FusedAdam,
        settings: StepSettings,
        seed: u64,
    ) -> Self {
        let optim = ModuleOptimizer::from(adam.clone().batched());
        Self {
            model: Some(model),
            device: device.clone(),
            batch,
            adam,
            optim,
            settings,
            seed,
            time: 0,
            loss: None,
            graph: None,
            split: None,
            scaler: None,
        }
    }

    /// Steps in mixed precision (f16 products, dynamic loss scaling; eager steps on a GPU:
    /// [`capture`](Self::capture) refuses them).
    pub fn mixed(mut self) -> Self {
        self.scaler = Some(LossScaler::default());
        self
    }

    /// The loss scaler, in mixed precision.
    pub fn scaler(&self) -> Option<&LossScaler> {
        self.scaler.as_ref()
    }

    /// Eager steps cut over the CPU's cores, as the trainer's are ([`crate::core_split`]):
    /// `parts` are the batch's rows cut in order. One part, or a GPU, leaves the step whole.
    pub fn with_core_split(mut self, parts: Vec<DeviceBatch>) -> Self {
        if parts.len() > 1 && s2s_kernels::ops::is_cpu(&self.device) {
            self.split = Some((CoreSplit::new(parts.len()), parts));
        }
        self
    }

    fn step_seed(&self) -> u64 {
        self.seed.wrapping_add(self.time as u64 + 1)
    }

    /// One eager step; `read` reads the loss back (a synchronisation, as the trainer's
    /// logging does), `phases` adds each phase's seconds.
    fn eager(&mut self, read: bool, phases: Option<&mut Phases>) {
        let model = self.model.take().expect("a model between steps");
        self.device.seed(self.step_seed());
        s2s_kernels::ops::reseed(self.step_seed());
        let s = self.settings;
        let (model, loss) = match &self.split {
            None => {
                step_ops(model, &self.batch, &mut self.optim, s, read, phases, None, self.scaler.as_mut())
            }
            Some((split, parts)) => {
                let seeded: Vec<(DeviceBatch, u64)> = parts
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (p.clone(), part_seed(self.step_seed(), i)))
                    .collect();
                split_step_ops(model, split, &self.device, &seeded, &mut self.optim, s, phases)
            }
        };
        self.model = Some(model);
        self.loss = Some(loss);
        self.time += 1;
    }

    /// One step: replayed once [`capture`](Self::capture)d, else eager.
    pub fn step(&mut self, read: bool, phases: Option<&mut Phases>) -> Result<(), GraphError> {
        let Some(graph) = &self.graph else {
            self.eager(read, phases);
            return Ok(());
        };
        graph.set_step(self.step_seed(), self.adam.coefficients(self.time + 1, self.settings.lr));
        // SAFETY: the recorded step's buffers are the batch's and the loss's (held by `self`),
        // the parameters and moments (updated in place, held by the model and the optimizer
        // in `self`) and intermediates the graph pins itself; nothing else runs on the stream.
        unsafe { graph.replay() }?;
        self.time += 1;
        if read {
            let _ = self.loss();
        }
        Ok(())
    }

    /// Captures the step: one eager warm-up step (a real step; its loss is returned), then the
    /// step recorded. From then on [`step`](Self::step) replays it.
    pub fn capture(&mut self) -> Result<f32, GraphError> {
        let recorder = Recorder::prepare(&self.device.clone().inner())?;
        self.eager(true, None);
        let warm = self.loss();
        let model = self.model.take().expect("a model between steps");
        let (batch, optim, s) = (&self.batch, &mut self.optim, self.settings);
        let (graph, (model, loss)) = recorder.record(|| graph_step(model, batch, optim, s, None))?;
        self.model = Some(model);
        self.loss = Some(loss);
        self.graph = Some(graph);
        Ok(warm)
    }

    /// Whether steps are replayed.
    pub fn captured(&self) -> bool {
        self.graph.is_some()
    }

    /// The last step's loss (read back).
    pub fn loss(&self) -> f32 {
        self.loss.as_ref().map_or(f32::NAN, |l| l.clone().into_scalar::<f32>())
    }

    /// Waits for the queued steps.
    pub fn sync(&self) {
        let _ = self.loss();
    }

    /// The model (for decoding after training).
    pub fn model(&self) -> &Model {
        self.model.as_ref().expect("a model between steps")
    }

    /// The model, ending the training.
    pub fn into_model(self) -> Model {
        self.model.expect("a model between steps")
    }
}

/// What captured training did: how often it replayed, and what the padding to bucket shapes
/// cost (in `run.json` and the end-of-training line).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CaptureStats {
    /// Steps replayed from a graph.
    pub replayed: u64,
    /// Steps run eagerly (each capture's warm-up, and every step with `capture_graphs = 0`).
    pub eager: u64,
    /// Graphs recorded.
    pub captures: u64,
    /// Graphs dropped to stay within `capture_graphs`.
    pub evictions: u64,
    /// Captures put off to the shape's next step because the warm-up grew the memory pools.
    pub deferred: u64,
    /// Bytes the device's memory held at the end (graphs pin the pages they recorded on).
    pub device_bytes: u64,
    /// Most graphs alive at once.
    pub graphs_alive: usize,
    /// Real source and target tokens.
    pub real_tokens: u64,
    /// Positions of the batches as the batcher made them (rows × (source + target length)).
    pub batch_slots: u64,
    /// Positions after padding to bucket shapes.
    pub bucket_slots: u64,
}

impl CaptureStats {
    /// Positions computed per real token: the batcher's and the buckets'.
    pub fn padding(&self) -> (f64, f64) {
        let r = self.real_tokens.max(1) as f64;
        (self.batch_slots as f64 / r, self.bucket_slots as f64 / r)
    }
}

/// One bucket shape's inputs and graph.
struct Entry {
    shape: (usize, usize, usize),
    inputs: DeviceBatch,
    graph: StepGraph,
    /// The recorded step's loss (its buffer, which the graph writes).
    _loss: Tensor<1>,
    last_used: u64,
}

/// The trainer's captured steps: one graph per bucket shape, at most `max_graphs` alive.
pub struct CapturedSteps {
    /// The model's (autodiff) device.
    device: Device,
    adam: FusedAdam,
    /// The Adam step count every step reads (see [`FusedAdam::with_clock`]).
    clock: Arc<AtomicUsize>,
    epsilon: f64,
    max_graphs: usize,
    entries: Vec<Entry>,
    uses: u64,
    /// The losses of the steps since the last [`take_loss`](Self::take_loss), on the device.
    sum: Option<LossSum>,
    /// What it did so far.
    pub stats: CaptureStats,
}

impl CapturedSteps {
    /// Steps on `device` (autodiff) with `adam` (the optimizer's, sharing `clock`), label
    /// smoothing `epsilon`, at most `max_graphs` graphs alive (0: padded eager steps).
    pub fn new(
        device: &Device,
        adam: FusedAdam,
        clock: Arc<AtomicUsize>,
        epsilon: f64,
        max_graphs: usize,
    ) -> Self {
        Self {
            device: device.clone(),
            adam,
            clock,
            epsilon,
            max_graphs,
            entries: Vec::new(),
            uses: 0,
            sum: None,
            stats: CaptureStats::default(),
        }
    }

    /// Adam step `time` (from 1) on `batch` at rate `lr`, clipped at `clip`, dropout drawn
    /// after reseeding with `seed` (as the eager trainer does): replayed if a graph of the
    /// batch's bucket shape exists, else eager and recorded for the next batch of that shape.
    /// Returns the model; the loss is added on the device ([`take_loss`](Self::take_loss)),
    /// nothing is read back.
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &mut self,
        model: Model,
        optim: &mut ModuleOptimizer,
        batch: &Batch,
        seed: u64,
        time: usize,
        lr: f64,
        clip: f64,
    ) -> Result<Model, GraphError> {
        let (shape, padded) = self.admit(batch, time);
        if self.replay(shape, &padded, seed, time, lr)? {
            return Ok(model);
        }
        let inputs = DeviceBatch::graph_input(&padded, &self.device);
        self.stats.eager += 1;
        let (device, eps, sum) = (self.device.clone(), self.epsilon, self.sum.as_ref());
        let eager = |model, optim: &mut ModuleOptimizer| {
            device.seed(seed);
            s2s_kernels::ops::reseed(seed);
            graph_step(model, &inputs, optim, StepSettings { lr, clip, label_smoothing: eps }, sum).0
        };
        if self.max_graphs == 0 {
            return Ok(eager(model, optim));
        }
        let recorder = Recorder::prepare(&device.clone().inner())?;
        let model = eager(model, optim);
        if recorder.warm_up_grew_pools() {
            // Recording now would run out of room: capture at this shape's next step.
            recorder.cancel();
            self.stats.deferred += 1;
            return Ok(model);
        }
        self.record(recorder, model, optim, inputs, shape, lr, clip)
    }

    /// Counts a step on `batch` (its padding, a use) with Adam step `time`, the loss's sum
    /// made on the first: returns the batch's bucket shape and the batch padded to it.
    fn admit(&mut self, batch: &Batch, time: usize) -> ((usize, usize, usize), Batch) {
        if self.sum.is_none() {
            self.sum = LossSum::new(&Tensor::zeros([1], &self.device.clone().inner()));
        }
        let (rows, s, t) = s2s_data::bucket(batch.size(), batch.src_len, batch.tgt_len);
        let padded = batch.padded_to(rows, s, t);
        let (real, slots) = batch.padding();
        self.stats.real_tokens += real as u64;
        self.stats.batch_slots += slots as u64;
        self.stats.bucket_slots += (rows * (s + t)) as u64;
        self.uses += 1;
        self.clock.store(time, Ordering::Relaxed);
        ((rows, s, t), padded)
    }

    /// Replays the graph of bucket shape `shape` on `padded` (Adam step `time` at rate `lr`,
    /// dropout seed `seed`), if one is alive: returns whether it did.
    fn replay(
        &mut self,
        shape: (usize, usize, usize),
        padded: &Batch,
        seed: u64,
        time: usize,
        lr: f64,
    ) -> Result<bool, GraphError> {
        let Some(e) = self.entries.iter_mut().find(|e| e.shape == shape) else {
            return Ok(false);
        };
        e.inputs.write(padded);
        e.last_used = self.uses;
        e.graph.set_step(seed, self.adam.coefficients(time, lr));
        // SAFETY: the recorded step's buffers are the inputs' and the loss's (held by the
        // entry), the parameters and moments (updated in place — eager steps too, asserted
        // by Adam while graphs live — held by the model and the optimizer the caller
        // passes every step) and intermediates the graph pins itself.
        unsafe { e.graph.replay() }?;
        self.stats.replayed += 1;
        Ok(true)
    }

    /// Records the step on `inputs` (bucket shape `shape`) with `recorder`, after its warm-up,
    /// as a graph kept for the shape's later steps, dropping the least recently used one past
    /// `max_graphs`. Returns the model.
    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        recorder: Recorder,
        model: Model,
        optim: &mut ModuleOptimizer,
        inputs: DeviceBatch,
        shape: (usize, usize, usize),
        lr: f64,
        clip: f64,
    ) -> Result<Model, GraphError> {
        if self.entries.len() >= self.max_graphs {
            let lru = (0..self.entries.len()).min_by_key(|&i| self.entries[i].last_used).expect("an entry");
            self.entries.swap_remove(lru);
            self.stats.evictions += 1;
        }
        let (eps, sum) = (self.epsilon, self.sum.as_ref());
        let (graph, (model, loss)) = recorder.record(|| {
            graph_step(model, &inputs, optim, StepSettings { lr, clip, label_smoothing: eps }, sum)
        })?;
        self.entries.push(Entry { shape, inputs, graph, _loss: loss, last_used: self.uses });
        self.stats.captures += 1;
        self.stats.graphs_alive = self.stats.graphs_alive.max(self.entries.len());
        self.stats.device_bytes =
            s2s_kernels::capture::device_bytes_reserved(&self.device.clone().inner()).unwrap_or(0);
        s2s_kernels::capture::require_in_place(true);
        Ok(model)
    }

    /// `(Σ loss·tokens, Σ tokens)` of the steps since the last call, read back (a
    /// synchronisation: the trainer calls it when it logs or validates).
    pub fn take_loss(&self) -> (f64, f64) {
        self.sum.as_ref().map_or((0.0, 0.0), LossSum::take)
    }
}

impl Drop for CapturedSteps {
    fn drop(&mut self) {
        s2s_kernels::capture::require_in_place(false);
    }
}
