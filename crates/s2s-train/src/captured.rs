//! Training on one fixed batch shape, step by step eagerly or replayed from a captured graph
//! (GPU): what `s2s bench --capture` times and what the tests hold equal (to the rounding
//! of a kernel choice: `tests/captured.rs`).
//!
//! A captured step ([`s2s_kernels::graph`]) is recorded once, after a warm-up step, and each
//! later step writes only what changes — its dropout seeds and Adam's coefficients
//! ([`s2s_kernels::step_scalars`]) — then replays the launches: forward, label-smoothed loss,
//! backward, global-norm clip and Adam, the parameters and moments updated in place. The
//! batch's buffers are the graph's inputs: a new batch of the same shape is written into them
//! (not done here: the batch is fixed). Nothing is read back inside a step; the loss of the
//! last step is read when asked.

use std::time::Instant;

use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Int, Tensor, TensorData};
use s2s_kernels::ops::{FusedAdam, clip_global_norm};
use s2s_models::{Model, Source};

use crate::bench::{BatchShape, random_ids};
use crate::loss::label_smoothed_loss;

/// One batch on the device, fixed for every step.
pub struct FixedBatch {
    src: Source,
    tgt_in: Tensor<2, Int>,
    tgt_out: Tensor<2, Int>,
    keep: Tensor<2>,
    tokens: usize,
}

impl FixedBatch {
    /// Random token ids of shape `b` (the benchmark's batch: full rows, no padding) on `device`.
    pub fn random(b: BatchShape, device: &Device) -> Self {
        let (n, s, t) = (b.sentences, b.src_len, b.tgt_len);
        let src_ids: Vec<u32> = random_ids(n * s, b.src_vocab, 1).into_iter().map(|i| i as u32).collect();
        let y = random_ids(n * (t + 1), b.tgt_vocab, 2);
        let tgt_in: Vec<i64> = (0..n).flat_map(|r| y[r * (t + 1)..r * (t + 1) + t].to_vec()).collect();
        let tgt_out: Vec<i64> = (0..n).flat_map(|r| y[r * (t + 1) + 1..(r + 1) * (t + 1)].to_vec()).collect();
        Self {
            src: Source::new(&src_ids, &vec![s; n], s, device),
            tgt_in: Tensor::from_data(TensorData::new(tgt_in, [n, t]), device),
            tgt_out: Tensor::from_data(TensorData::new(tgt_out, [n, t]), device),
            keep: Tensor::ones([n, t], device),
            tokens: n * t,
        }
    }

    /// Target tokens a step.
    pub fn tokens(&self) -> usize {
        self.tokens
    }
}

/// Seconds spent in each phase of eager steps: forward (with the loss), backward, clip, Adam.
pub type Phases = [f64; 4];

/// The optimisation of one model on one batch: the step count, the rate, the clip, the seed
/// each step's dropout draws from, and the captured step once there is one.
pub struct FixedBatchTrainer {
    model: Option<Model>,
    /// The model's (autodiff) device.
    device: Device,
    batch: FixedBatch,
    adam: FusedAdam,
    optim: ModuleOptimizer,
    lr: f64,
    clip: f64,
    seed: u64,
    /// Adam steps run so far.
    time: usize,
    /// The loss of the last step, on the device.
    loss: Option<Tensor<1>>,
    graph: Option<s2s_kernels::graph::StepGraph>,
}

impl FixedBatchTrainer {
    /// `model` (on an autodiff device) trained on `batch` by `adam` at rate `lr`, clipped at
    /// `clip`; step `k`'s dropout masks are drawn after reseeding with `seed + k`.
    pub fn new(
        model: Model,
        device: &Device,
        batch: FixedBatch,
        adam: FusedAdam,
        lr: f64,
        clip: f64,
        seed: u64,
    ) -> Self {
        let optim = ModuleOptimizer::from(adam.clone().batched());
        let device = device.clone();
        Self {
            model: Some(model),
            device,
            batch,
            adam,
            optim,
            lr,
            clip,
            seed,
            time: 0,
            loss: None,
            graph: None,
        }
    }

    fn step_seed(&self) -> u64 {
        self.seed.wrapping_add(self.time as u64 + 1)
    }

    /// One eager step (see the module doc); `read` reads the loss back (a synchronisation, as
    /// the trainer's logging does), `phases` adds each phase's seconds.
    fn eager(
        &mut self,
        read: bool,
        phases: Option<&mut Phases>,
    ) -> Result<(), s2s_kernels::graph::GraphError> {
        let model = self.model.take().expect("a model between steps");
        self.device.seed(self.step_seed());
        s2s_kernels::ops::reseed(self.step_seed());
        let (model, loss) = self.run(model, read, phases);
        self.model = Some(model);
        self.loss = Some(loss);
        self.time += 1;
        Ok(())
    }

    /// The step's operations on `model` (what eager steps run and a capture records).
    fn run(&mut self, model: Model, read: bool, phases: Option<&mut Phases>) -> (Model, Tensor<1>) {
        let mut spent = [0f64; 4];
        let mut lap = Instant::now();
        let mut done = |i: usize| {
            spent[i] += lap.elapsed().as_secs_f64();
            lap = Instant::now();
        };
        let b = &self.batch;
        let out = model.forward(&b.src, b.tgt_in.clone());
        let loss = label_smoothed_loss(out.logits, b.tgt_out.clone(), &b.keep, 0.1)
            .smoothed
            .div_scalar(b.tokens as f64);
        let value = loss.clone().inner();
        if read {
            let _ = value.clone().into_scalar::<f32>();
        }
        done(0);
        let mut grads = GradientsParams::from_grads(loss.backward(), &model);
        done(1);
        let _ = clip_global_norm(&model, &mut grads, self.clip);
        done(2);
        let model = s2s_kernels::ops::adam_step(&mut self.optim, self.lr, model, grads);
        done(3);
        if let Some(p) = phases {
            p.iter_mut().zip(spent).for_each(|(a, b)| *a += b);
        }
        (model, value)
    }

    /// One step: replayed once [`capture`](Self::capture)d, else eager.
    pub fn step(
        &mut self,
        read: bool,
        phases: Option<&mut Phases>,
    ) -> Result<(), s2s_kernels::graph::GraphError> {
        let Some(graph) = &self.graph else { return self.eager(read, phases) };
        graph.set_step(self.step_seed(), self.adam.coefficients(self.time + 1, self.lr));
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
    pub fn capture(&mut self) -> Result<f32, s2s_kernels::graph::GraphError> {
        let recorder = s2s_kernels::graph::Recorder::prepare(&self.device.clone().inner())?;
        self.eager(true, None)?;
        let warm = self.loss();
        let model = self.model.take().expect("a model between steps");
        let (graph, (model, loss)) = recorder.record(|| self.run(model, false, None))?;
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
