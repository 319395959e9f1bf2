//! Training steps captured as graphs and replayed (GPU): the trainer's `capture` mode
//! ([`CapturedSteps`]) and the fixed-batch trainer `s2s bench` times ([`FixedBatchTrainer`],
//! eager or captured); `tests/captured.rs` holds both equal to eager training.
//!
//! A captured step ([`s2s_kernels::capture`]) is [`step::take`] recorded once per batch shape,
//! after a warm-up step, and each later step of that shape writes only what changes — the
//! batch's token ids, masks and token count into the graph's input buffers
//! ([`DeviceBatch::write`]), its dropout seeds and Adam's coefficients (kept on the device,
//! `s2s_kernels::capture::require_in_place`) — then replays the launches: forward,
//! label-smoothed loss, backward, global-norm clip and Adam, the parameters and moments updated
//! in place. The trainer pads each batch to a bucket shape ([`s2s_data::bucket`]) so that a
//! run meets few shapes; at most `capture_graphs` graphs stay alive, the least recently used
//! dropped past it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::optim::ModuleOptimizer;
use burn::tensor::{Device, Tensor};
use s2s_data::Batch;
use s2s_kernels::capture::{GraphError, LossSum, Recorder, StepGraph};
use s2s_kernels::ops::FusedAdam;
use s2s_models::Model;
use serde::Serialize;

use crate::core_split::CoreSplit;
use crate::precision::LossScaler;
use crate::step::{
    self, DeviceBatch, Phases, Seeded, Spread, StepError, StepOptions, StepSettings, Update, dropout_seed,
};

/// A step on one batch on one device as a captured graph records it (and as its eager stand-in
/// runs it): nothing read back, f32 (captured steps have no loss scaler); `sum` adds the loss
/// to the run's device sum. Returns the model and the loss (the graph's output buffer).
fn graph_step(
    model: Model,
    inputs: &DeviceBatch,
    seed: u64,
    device: &Device,
    update: Update<'_>,
    sum: Option<&LossSum>,
) -> (Model, Tensor<1>) {
    let batches = [vec![Seeded { batch: inputs, seed }]];
    let options = StepOptions { device_sum: sum, ..Default::default() };
    let stepped = step::take(model, &batches, Spread::Devices(std::slice::from_ref(device)), update, options)
        .expect("a step that reads nothing back cannot fail");
    (stepped.model, stepped.loss)
}

/// The last step's loss.
enum LastLoss {
    /// Read back (eager steps that read it).
    Read(f32),
    /// On the device (a captured step's buffer, or a step that read nothing).
    OnDevice(Tensor<1>),
}

/// The optimisation of one model on one batch, step by step as the trainer takes them
/// ([`step::take`], with the trainer's seeds and, on the CPU, its cut over the cores): the step
/// count, the rate, the clip, the run seed the dropout masks are drawn from, and the captured
/// step once there is one.
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
    loss: Option<LastLoss>,
    graph: Option<StepGraph>,
    /// The step cut over the CPU's cores, and the batch's parts ([`crate::core_split`]).
    split: Option<(CoreSplit, Vec<DeviceBatch>)>,
    /// Mixed precision's loss scaler (eager GPU steps).
    scaler: Option<LossScaler>,
}

impl FixedBatchTrainer {
    /// `model` (on an autodiff device) trained on `batch` by `adam` with `settings` (rate,
    /// clip, label smoothing); step `k`'s dropout masks are drawn from
    /// [`dropout_seed`]`(seed, k, …)`, as the trainer's.
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
            let tokens = parts.iter().map(|p| p.tokens).sum();
            let parts: Vec<DeviceBatch> = parts.into_iter().map(|p| p.with_step_tokens(tokens)).collect();
            self.split = Some((CoreSplit::new(parts.len()), parts));
        }
        self
    }

    /// The dropout seed of part `part` of the next step.
    fn seed_of(&self, part: usize) -> u64 {
        dropout_seed(self.seed, self.time as u64, 0, part)
    }

    /// One eager step, [`step::take`]; `read` reads the loss back (a synchronisation, as the
    /// trainer's eager steps do), `phases` adds each phase's seconds.
    fn eager(&mut self, read: bool, phases: Option<&mut Phases>) -> Result<(), StepError> {
        let model = self.model.take().expect("a model between steps");
        let (batches, spread) = match &self.split {
            None => {
                let whole = vec![Seeded { batch: &self.batch, seed: self.seed_of(0) }];
                (whole, Spread::Devices(std::slice::from_ref(&self.device)))
            }
            Some((split, parts)) => {
                let parts = parts.iter().enumerate().map(|(i, p)| Seeded { batch: p, seed: self.seed_of(i) });
                (parts.collect(), Spread::Cores(split, &self.device))
            }
        };
        let update = Update { optim: &mut self.optim, settings: self.settings, scaler: self.scaler.as_mut() };
        let options = StepOptions { read_loss: read, phases, ..Default::default() };
        let stepped = step::take(model, &[batches], spread, update, options)?;
        self.model = Some(stepped.model);
        self.loss = Some(match read {
            true => LastLoss::Read((stepped.loss_sum / stepped.tokens as f64) as f32),
            false => LastLoss::OnDevice(stepped.loss),
        });
        self.time += 1;
        Ok(())
    }

    /// One step: replayed once [`capture`](Self::capture)d, else eager.
    pub fn step(&mut self, read: bool, phases: Option<&mut Phases>) -> Result<(), StepError> {
        let Some(graph) = &self.graph else {
            return self.eager(read, phases);
        };
        graph.set_step(self.seed_of(0), self.adam.coefficients(self.time + 1, self.settings.lr));
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
    pub fn capture(&mut self) -> Result<f32, StepError> {
        let recorder = Recorder::prepare(&self.device.clone().inner())?;
        self.eager(true, None)?;
        let warm = self.loss();
        let model = self.model.take().expect("a model between steps");
        let seed = self.seed_of(0);
        let update = Update { optim: &mut self.optim, settings: self.settings, scaler: None };
        let (batch, device) = (&self.batch, &self.device);
        let (graph, (model, loss)) =
            recorder.record(|| graph_step(model, batch, seed, device, update, None))?;
        self.model = Some(model);
        self.loss = Some(LastLoss::OnDevice(loss));
        self.graph = Some(graph);
        Ok(warm)
    }

    /// Whether steps are replayed.
    pub fn captured(&self) -> bool {
        self.graph.is_some()
    }

    /// The last step's loss (read back).
    pub fn loss(&self) -> f32 {
        match &self.loss {
            Some(LastLoss::Read(loss)) => *loss,
            Some(LastLoss::OnDevice(loss)) => loss.clone().into_scalar::<f32>(),
            None => f32::NAN,
        }
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
    max_graphs: usize,
    entries: Vec<Entry>,
    uses: u64,
    /// The losses of the steps since the last [`take_loss`](Self::take_loss), on the device.
    sum: Option<LossSum>,
    /// What it did so far.
    pub stats: CaptureStats,
}

/// Which step a captured step is: Adam's step count (from 1), the dropout seed, and the rate,
/// clip and label smoothing.
#[derive(Clone, Copy, Debug)]
pub struct StepAt {
    /// Adam's step count, from 1.
    pub time: usize,
    /// The dropout seed ([`dropout_seed`]).
    pub seed: u64,
    /// Rate, clip, label smoothing.
    pub settings: StepSettings,
}

impl CapturedSteps {
    /// Steps on `device` (autodiff) with `adam` (the optimizer's, sharing `clock`), at most
    /// `max_graphs` graphs alive (0: padded eager steps).
    pub fn new(device: &Device, adam: FusedAdam, clock: Arc<AtomicUsize>, max_graphs: usize) -> Self {
        Self {
            device: device.clone(),
            adam,
            clock,
            max_graphs,
            entries: Vec::new(),
            uses: 0,
            sum: None,
            stats: CaptureStats::default(),
        }
    }

    /// Step `at` on `batch`: replayed if a graph of the batch's bucket shape exists, else eager
    /// ([`step::take`]) and recorded for the next batch of that shape. Returns the model; the
    /// loss is added on the device ([`take_loss`](Self::take_loss)), nothing is read back.
    pub fn step(
        &mut self,
        model: Model,
        optim: &mut ModuleOptimizer,
        batch: &Batch,
        at: StepAt,
    ) -> Result<Model, GraphError> {
        let (shape, padded) = self.admit(batch, at.time);
        if self.replay(shape, &padded, at)? {
            return Ok(model);
        }
        let inputs = DeviceBatch::graph_input(&padded, &self.device);
        self.stats.eager += 1;
        let (device, sum) = (self.device.clone(), self.sum.as_ref());
        let eager = |model, optim: &mut ModuleOptimizer| {
            let update = Update { optim, settings: at.settings, scaler: None };
            graph_step(model, &inputs, at.seed, &device, update, sum).0
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
        self.record(recorder, model, optim, (shape, inputs), at)
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

    /// Replays the graph of bucket shape `shape` on `padded` as step `at`, if one is alive:
    /// returns whether it did.
    fn replay(
        &mut self,
        shape: (usize, usize, usize),
        padded: &Batch,
        at: StepAt,
    ) -> Result<bool, GraphError> {
        let Some(e) = self.entries.iter_mut().find(|e| e.shape == shape) else {
            return Ok(false);
        };
        e.inputs.write(padded);
        e.last_used = self.uses;
        e.graph.set_step(at.seed, self.adam.coefficients(at.time, at.settings.lr));
        // SAFETY: the recorded step's buffers are the inputs' and the loss's (held by the
        // entry), the parameters and moments (updated in place — eager steps too, asserted
        // by Adam while graphs live — held by the model and the optimizer the caller
        // passes every step) and intermediates the graph pins itself.
        unsafe { e.graph.replay() }?;
        self.stats.replayed += 1;
        Ok(true)
    }

    /// Records step `at` on `inputs` (bucket shape `shape`) with `recorder`, after its warm-up,
    /// as a graph kept for the shape's later steps, dropping the least recently used one past
    /// `max_graphs`. Returns the model.
    fn record(
        &mut self,
        recorder: Recorder,
        model: Model,
        optim: &mut ModuleOptimizer,
        (shape, inputs): ((usize, usize, usize), DeviceBatch),
        at: StepAt,
    ) -> Result<Model, GraphError> {
        if self.entries.len() >= self.max_graphs {
            let lru = (0..self.entries.len()).min_by_key(|&i| self.entries[i].last_used).expect("an entry");
            self.entries.swap_remove(lru);
            self.stats.evictions += 1;
        }
        let (device, sum) = (&self.device, self.sum.as_ref());
        let (graph, (model, loss)) = recorder.record(|| {
            let update = Update { optim, settings: at.settings, scaler: None };
            graph_step(model, &inputs, at.seed, device, update, sum)
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
