//! One training step, as every path takes it — the trainer (eager, data parallel, or cut over
//! the cores), captured steps and the bench all call [`take`]:
//!
//! 1. the step's batches ([`DeviceBatch`], each with its dropout seed: [`Seeded`],
//!    [`dropout_seed`]), micro-step by micro-step, brought by the caller — collated from the
//!    dataset (the trainer), one fixed batch (the bench), a bucket's graph inputs (captured
//!    steps);
//! 2. each micro-step's batches computed where the [`Spread`] says — one per device, each in its
//!    own thread, or the parts of one batch at once over the CPU's cores — each one forward,
//!    the label-smoothed loss over its real target tokens divided by the step's token count,
//!    times the loss scale under mixed precision, and backward; their gradients summed in order;
//! 3. the summed gradients unscaled (mixed precision: a gradient that is not finite skips the
//!    step and halves the scale, [`LossScaler`]) and clipped to their global norm;
//! 4. the optimizer's update at the step's rate.
//!
//! What a path adds is its own: where the batches come from, how they are spread, and what is
//! recorded ([`StepOptions`]: the loss read back, phase timing, a captured run's device sum).
//!
//! The loss a step optimises is the mean over the step's target tokens: each batch's
//! label-smoothed sum divided by its token count times the batches a step sums (`accumulate
//! × devices`; the parts of a batch cut over the cores divide by the whole batch's count), so the
//! summed gradient of N batches is the mean of their per-token means — fairseq's per-token
//! normalisation. The divisor is one number a batch carries to the device beside its tokens
//! ([`DeviceBatch::step_tokens`]): a captured step reads it from its input buffer, which each
//! batch rewrites, where a host number would be frozen in the graph.

use std::time::Instant;

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Int, Tensor, TensorData};
use s2s_data::Batch;
use s2s_kernels::capture::LossSum;
use s2s_kernels::ops::{GradientNorm, GradientSum};
use s2s_models::{Model, Source};

use crate::core_split::CoreSplit;
use crate::loss::label_smoothed_loss;
use crate::precision::{LossScaler, Precision};

/// One padded batch on a device: a step's inputs (in a captured step the graph's input
/// buffers, rewritten in place for every batch of their shape: [`write`](Self::write)).
///
/// # Shapes
/// - `src`: `[rows, src_len]`; `tgt_in`, `tgt_out`, `keep`: `[rows, tgt_len]`
#[derive(Clone)]
pub struct DeviceBatch {
    /// The source.
    pub src: Source,
    /// Decoder input (`<s> y₁ … y_{T−1}`).
    pub tgt_in: Tensor<2, Int>,
    /// Targets (`y₁ … y_T </s>`).
    pub tgt_out: Tensor<2, Int>,
    /// 1 on real target positions, 0 on padding.
    pub keep: Tensor<2>,
    /// Real target tokens (with `</s>`).
    pub tokens: usize,
    /// The step's target tokens, which this batch's loss sum is divided by (the module doc):
    /// its own [`tokens`](Self::tokens) unless [`with_step_tokens`](Self::with_step_tokens)
    /// says otherwise.
    step_tokens: usize,
    /// The same number on the device, `[1]`: what the loss divides by.
    step_tokens_on_device: Tensor<1>,
}

impl DeviceBatch {
    /// Moves a collated batch to `device`.
    pub fn new(b: &Batch, device: &Device) -> Self {
        let ids = |v: &[u32]| -> Vec<i64> { v.iter().map(|&i| i as i64).collect() };
        let n = b.size();
        let keep: Vec<f32> = b.tgt_mask().into_iter().map(|k| if k { 1.0 } else { 0.0 }).collect();
        Self::from_tensors(
            Source::new(&b.src, &b.src_lens, b.src_len, device),
            Tensor::from_data(TensorData::new(ids(&b.tgt_in), [n, b.tgt_len]), device),
            Tensor::from_data(TensorData::new(ids(&b.tgt_out), [n, b.tgt_len]), device),
            Tensor::from_data(TensorData::new(keep, [n, b.tgt_len]), device),
            b.tgt_tokens(),
        )
    }

    /// A batch of tensors already on their device (`keep`'s), `tokens` real target tokens.
    pub fn from_tensors(
        src: Source,
        tgt_in: Tensor<2, Int>,
        tgt_out: Tensor<2, Int>,
        keep: Tensor<2>,
        tokens: usize,
    ) -> Self {
        let step_tokens_on_device = Self::on_device(tokens, &keep.device());
        Self { src, tgt_in, tgt_out, keep, tokens, step_tokens: tokens, step_tokens_on_device }
    }

    fn on_device(n: usize, device: &Device) -> Tensor<1> {
        Tensor::from_data(TensorData::new(vec![n as f32], [1]), device)
    }

    /// This batch in a step of `step_tokens` target tokens (times the batches a step sums),
    /// which its loss sum is divided by.
    pub fn with_step_tokens(mut self, step_tokens: usize) -> Self {
        if step_tokens != self.step_tokens {
            self.step_tokens = step_tokens;
            self.step_tokens_on_device = Self::on_device(step_tokens, &self.keep.device());
        }
        self
    }

    /// The step's target tokens this batch's loss sum is divided by.
    pub fn step_tokens(&self) -> usize {
        self.step_tokens
    }

    /// `b` on `device`, as a captured step's inputs (its source claims no dense prefix:
    /// [`s2s_decode::captured::graph_source`]).
    pub fn graph_input(b: &Batch, device: &Device) -> Self {
        let src = s2s_decode::captured::graph_source(&b.src, &b.src_lens, b.src_len, device);
        Self { src, ..Self::new(b, device) }
    }

    /// Writes `b` (of this shape, a step of its own) into these buffers, for the next replay.
    pub fn write(&mut self, b: &Batch) {
        use s2s_kernels::capture::{write_floats, write_ids};
        let [rows, s] = self.src.ids.dims();
        assert_eq!(
            (b.size(), b.src_len, b.tgt_len),
            (rows, s, self.keep.dims()[1]),
            "a batch of another shape"
        );
        let (tgt_keep, _) = Source::masks(&b.tgt_lens, b.tgt_len);
        s2s_decode::captured::write_source(&mut self.src, &b.src, &b.src_lens);
        write_ids(&self.tgt_in, &b.tgt_in);
        write_ids(&self.tgt_out, &b.tgt_out);
        write_floats(&self.keep, &tgt_keep);
        self.tokens = b.tgt_tokens();
        self.step_tokens = self.tokens;
        write_floats(&self.step_tokens_on_device, &[self.tokens as f32]);
    }
}

/// A step's settings besides the batch: the rate, the clip's global norm (0: none) and the
/// label smoothing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepSettings {
    /// Learning rate.
    pub lr: f64,
    /// Global norm the gradients are clipped to.
    pub clip: f64,
    /// Label smoothing ε.
    pub label_smoothing: f64,
}

/// The dropout seed of part `part` of batch `batch` of the step after `step` (steps taken) in a
/// run seeded `seed`: the one seed every path draws a batch's dropout masks from (part 0's is
/// the batch's; a batch cut over the cores gives each part its own).
pub fn dropout_seed(seed: u64, step: u64, batch: usize, part: usize) -> u64 {
    let batch_seed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (step << 8) ^ batch as u64;
    batch_seed ^ (part as u64).wrapping_mul(0xD1B5_4A32_D192_ED03)
}

/// One batch of a step and the seed its dropout masks are drawn from ([`dropout_seed`]).
#[derive(Clone, Copy)]
pub struct Seeded<'b> {
    /// The batch.
    pub batch: &'b DeviceBatch,
    /// Its dropout seed.
    pub seed: u64,
}

/// Where the batches of one micro-step are computed: what a path adds to the step.
#[derive(Clone, Copy)]
pub enum Spread<'a> {
    /// Batch `d` on `devices[d]` (the model's on `devices[0]`): with one device, on the model
    /// itself; with more, each in its own thread on its own copy of the weights (burn's
    /// `Module::fork`), the gradients brought back to `devices[0]` — the main-device scheme of
    /// burn-train's multi-device strategy (docs/scaling.md). Each device's generator is seeded
    /// with its batch's seed (burn's own dropout draws from it).
    Devices(&'a [Device]),
    /// The parts of one batch at once over the CPU's cores ([`crate::core_split`]), part `i` on
    /// part `i`'s pool, the others on replicas sharing the weights on the model's `device`
    /// (`Module::fork`: leaves of their own, so the graphs stay apart); the parts' losses are
    /// summed, as one batch's, before they join the step's.
    Cores(&'a CoreSplit, &'a Device),
}

/// What a path asks of a step besides its batches and its update.
#[derive(Default)]
pub struct StepOptions<'a> {
    /// Read each batch's loss back after its forward (a synchronisation, where a device that
    /// failed says so): the trainer's eager steps log it and skip a step whose loss is not
    /// finite; the bench reads it as they do. A captured step reads nothing.
    pub read_loss: bool,
    /// Adds each phase's seconds: forward (with the loss, and reading it back), backward, clip,
    /// optimizer (the bench).
    pub phases: Option<&'a mut Phases>,
    /// Adds each batch's loss, weighted by its step's tokens, to a captured run's sum on the
    /// device.
    pub device_sum: Option<&'a LossSum>,
    /// Fault injection for the crash tests ([`crate::interrupt::Faults`]).
    pub faults: StepFaults,
}

/// The faults a step is asked to inject (tests): none by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepFaults {
    /// The loss read back is taken as NaN.
    pub nan_loss: bool,
    /// Mixed precision: the loss is scaled by infinity, so that the gradients overflow.
    pub overflow: bool,
}

/// Seconds spent in each phase of steps: forward (with the loss), backward, clip, optimizer.
pub type Phases = [f64; 4];

/// A step's update: the optimizer, the rate, clip and label smoothing, and mixed precision's
/// loss scaler (`None`: f32).
pub struct Update<'a> {
    /// The optimizer (Adam updates in place: the step hands it the model's only handle).
    pub optim: &'a mut ModuleOptimizer,
    /// Rate, clip, label smoothing.
    pub settings: StepSettings,
    /// Mixed precision's loss scaler.
    pub scaler: Option<&'a mut LossScaler>,
}

/// What became of a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// The update was applied.
    Applied,
    /// The loss read back was not finite (this value): nothing was applied.
    NonFinite(f64),
    /// Mixed precision: a gradient was not finite; nothing was applied, the scale was halved.
    Overflow,
}

/// A step taken (or skipped): the model and what the step computed.
pub struct Stepped {
    /// The model, updated when the step was [`Outcome::Applied`].
    pub model: Model,
    /// Whether the update was applied.
    pub outcome: Outcome,
    /// With [`StepOptions::read_loss`]: the label-smoothed loss summed over the step's target
    /// tokens (each batch's per-token loss, as read back, times its divisor); 0 otherwise.
    pub loss_sum: f64,
    /// The step's real target tokens.
    pub tokens: u64,
    /// The last batch's per-token loss (divided by its step's tokens, not scaled), on the
    /// device: a captured step's loss buffer.
    pub loss: Tensor<1>,
    /// The gradients' global norm before clipping (unscaled), when the update was applied: on
    /// a GPU still on the device until read.
    pub grad_norm: Option<GradientNorm>,
}

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A device failed computing a batch (said where its loss was read back): the innermost
    /// cause of its report.
    #[error("{0}")]
    Device(String),
    /// A captured step could not be recorded or replayed.
    #[error(transparent)]
    Graph(#[from] s2s_kernels::capture::GraphError),
}

/// The one training step of `model` (on an autodiff device): the batches of `micro_steps`,
/// each micro-step's computed where `spread` says, their gradients summed in order, then
/// unscaled and clipped, then `update`'s optimizer step — the module doc. `options` says what is
/// read back and recorded. On an error the model is dropped: the caller stops training.
pub fn take(
    model: Model,
    micro_steps: &[Vec<Seeded<'_>>],
    spread: Spread<'_>,
    update: Update<'_>,
    options: StepOptions<'_>,
) -> Result<Stepped, StepError> {
    let Update { optim, settings, mut scaler } = update;
    let scale = scaler.as_ref().map(|s| if options.faults.overflow { f64::INFINITY } else { s.scale() });
    let start = Instant::now();
    let mut acc = GradientSum::new();
    let (mut loss_sum, mut tokens, mut forward) = (0.0, 0u64, 0.0);
    let mut last = None;
    for batches in micro_steps {
        let done = spread.gradients(&model, batches, settings.label_smoothing, scale, options.read_loss)?;
        forward += done[0].seconds[0];
        let sums = done.iter().map(|g| g.loss_sum);
        match spread {
            Spread::Cores(..) => loss_sum += sums.fold(0.0, |a, b| a + b),
            Spread::Devices(_) => sums.for_each(|s| loss_sum += s),
        }
        for (g, b) in done.into_iter().zip(batches) {
            tokens += b.batch.tokens as u64;
            if let Some(sum) = options.device_sum {
                sum.add(g.loss.clone(), b.batch.step_tokens_on_device.clone().inner());
            }
            acc.add(&model, g.grads);
            last = Some(g.loss);
        }
    }
    let loss = last.expect("a step has a batch");
    let gradients_s = start.elapsed().as_secs_f64();
    if options.faults.nan_loss {
        loss_sum = f64::NAN;
    }
    let stepped =
        |model, outcome, grad_norm| Ok(Stepped { model, outcome, loss_sum, tokens, loss, grad_norm });
    if options.read_loss && !loss_sum.is_finite() {
        return stepped(model, Outcome::NonFinite(loss_sum), None);
    }
    let lap = Instant::now();
    let Some((grads, norm)) = clipped(&model, acc.take(), settings.clip, scaler.as_deref_mut()) else {
        return stepped(model, Outcome::Overflow, None);
    };
    let clip_s = lap.elapsed().as_secs_f64();
    let model = s2s_kernels::ops::adam_step(optim, settings.lr, model, grads);
    if let Some(p) = options.phases {
        let laps = [forward, gradients_s - forward, clip_s, lap.elapsed().as_secs_f64() - clip_s];
        p.iter_mut().zip(laps).for_each(|(a, b)| *a += b);
    }
    stepped(model, Outcome::Applied, Some(norm))
}

/// One batch's part of a step.
struct BatchGradients {
    /// Gradients of its loss (divided by the step's tokens, times the loss scale).
    grads: GradientsParams,
    /// The per-token loss as optimised (divided, not scaled), on the device.
    loss: Tensor<1>,
    /// The loss read back times the divisor (0 when not read).
    loss_sum: f64,
    /// Seconds of its forward (with the loss) and of its backward.
    seconds: [f64; 2],
}

impl Spread<'_> {
    /// The gradients of one micro-step's `batches` (on the model's device), in order.
    fn gradients(
        &self,
        model: &Model,
        batches: &[Seeded<'_>],
        epsilon: f64,
        scale: Option<f64>,
        read: bool,
    ) -> Result<Vec<BatchGradients>, StepError> {
        let one = |model: &Model, b: &Seeded<'_>| batch_gradients(model, b, epsilon, scale, read);
        match *self {
            Spread::Devices(devices) => {
                assert!(batches.len() <= devices.len(), "at most one batch a device");
                for (device, b) in devices.iter().zip(batches) {
                    device.seed(b.seed);
                }
                if batches.len() == 1 {
                    return Ok(vec![one(model, &batches[0])?]);
                }
                std::thread::scope(|s| {
                    let workers: Vec<_> = devices
                        .iter()
                        .zip(batches)
                        .enumerate()
                        .map(|(d, (device, b))| {
                            let replica = if d == 0 { model.clone() } else { model.clone().fork(device) };
                            let main = &devices[0];
                            s.spawn(move || {
                                let mut g = one(&replica, b)?;
                                if d > 0 {
                                    g.grads = g.grads.to_device(main, &replica);
                                }
                                Ok(g)
                            })
                        })
                        .collect();
                    workers.into_iter().map(|w| w.join().expect("a training thread panicked")).collect()
                })
            }
            Spread::Cores(split, device) => {
                assert!(batches.len() <= split.parts(), "at most one batch a part");
                let replicas: Vec<Model> = (0..batches.len())
                    .map(|i| if i == 0 { model.clone() } else { model.clone().fork(device) })
                    .collect();
                split.run_first(batches.len(), |i| one(&replicas[i], &batches[i])).into_iter().collect()
            }
        }
    }
}

/// Forward, loss and backward of `model` on `b`: the label-smoothed (`epsilon`) loss summed
/// over the real target tokens, divided by the step's tokens — the one loss every path
/// optimises. `scale` is mixed precision's loss scale: the forward's products then take f16
/// operands and the loss is multiplied by it before the backward; `None` (f32) computes what the
/// toolkit always computed, to the bit. The dropout masks are drawn from `b.seed` (this thread's
/// stream). `read` reads the loss back before the backward (the step's first read-back).
fn batch_gradients(
    model: &Model,
    b: &Seeded<'_>,
    epsilon: f64,
    scale: Option<f64>,
    read: bool,
) -> Result<BatchGradients, StepError> {
    let start = Instant::now();
    s2s_kernels::ops::reseed(b.seed);
    let batch = b.batch;
    let precision = if scale.is_some() { Precision::Mixed } else { Precision::F32 };
    let out = precision.products(|| model.forward(&batch.src, batch.tgt_in.clone()));
    let sum = label_smoothed_loss(out.logits, batch.tgt_out.clone(), &batch.keep, epsilon).smoothed;
    let loss = sum.div(batch.step_tokens_on_device.clone());
    let loss_sum = match read {
        true => {
            let value = loss
                .clone()
                .try_into_scalar::<f32>()
                .map_err(|e| StepError::Device(root_cause(&e.to_string())))?;
            value as f64 * batch.step_tokens as f64
        }
        false => 0.0,
    };
    let forward = start.elapsed().as_secs_f64();
    let scaled = match scale {
        Some(scale) => loss.clone().mul_scalar(scale),
        None => loss.clone(),
    };
    let grads = GradientsParams::from_grads(scaled.backward(), model);
    Ok(BatchGradients {
        grads,
        loss: loss.inner(),
        loss_sum,
        seconds: [forward, start.elapsed().as_secs_f64() - forward],
    })
}

/// The innermost cause of a device's error report (cubecl's runs to a thousand lines of
/// skipped kernels before it, e.g. `can't allocate buffer of size: 408131584`), else its first
/// line.
fn root_cause(report: &str) -> String {
    let lines: Vec<&str> = report.lines().map(str::trim).collect();
    let cause = lines.iter().rposition(|l| *l == "Caused by:").and_then(|i| {
        lines[i + 1..].iter().find(|l| !l.is_empty() && !l.starts_with("No backtrace") && **l != "Asked at:")
    });
    cause.or(lines.first()).map(|l| l.to_string()).unwrap_or_default()
}

/// The step's summed gradients made ready for the update: unscaled by the loss scaler (when
/// there is one) and clipped to global norm `clip` (0: not clipped). `None` when the scaler
/// found a gradient that is not finite: the step is skipped, the scale halved. With them, the
/// global norm before clipping.
fn clipped(
    model: &Model,
    mut grads: GradientsParams,
    clip: f64,
    scaler: Option<&mut LossScaler>,
) -> Option<(GradientsParams, GradientNorm)> {
    use s2s_kernels::ops::{clip_global_norm, global_norm, scale_grads};
    let Some(scaler) = scaler else {
        let norm = clip_global_norm(model, &mut grads, clip);
        return Some((grads, norm));
    };
    // One norm of the scaled gradients tells overflow and the clip; one pass scales by both.
    let scaled_norm = global_norm(model, &grads);
    let scale = scaler.scale();
    if !scaler.update(scaled_norm.is_finite()) {
        return None;
    }
    let norm = scaled_norm / scale;
    let clip_factor = if clip > 0.0 && norm > clip { clip / norm } else { 1.0 };
    scale_grads(model, &mut grads, clip_factor / scale);
    Some((grads, GradientNorm::Known(norm)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{BatchShape, random_batch};

    const SHAPE: BatchShape =
        BatchShape { sentences: 3, src_len: 5, tgt_len: 4, src_vocab: 20, tgt_vocab: 24 };

    /// Every gradient's values, in the model's visiting order.
    fn values(model: &Model, grads: &GradientsParams) -> Vec<u32> {
        struct Values<'g>(&'g GradientsParams, Vec<u32>);
        impl burn::module::ModuleVisitor for Values<'_> {
            fn visit_float<const D: usize>(&mut self, p: &burn::module::Param<Tensor<D>>) {
                if let Some(g) = self.0.get::<D>(p.id) {
                    self.1.extend(g.into_data().try_to_vec::<f32>().unwrap().into_iter().map(f32::to_bits));
                }
            }
        }
        let mut v = Values(grads, Vec::new());
        burn::module::Module::visit(model, &mut v);
        v.1
    }

    /// A model of `spec` (no dropout: nothing random after the weights) and a batch.
    fn model_and_batch(spec: &s2s_models::ModelSpec) -> (Model, DeviceBatch) {
        let d = Device::flex().autodiff();
        let model = spec.init(SHAPE.src_vocab, SHAPE.tgt_vocab, &d).unwrap();
        (model, random_batch(SHAPE, 0..SHAPE.sentences, &d))
    }

    fn grads_of(
        (model, batch): &(Model, DeviceBatch),
        mixed: Option<f64>,
        clip: f64,
        scaler: Option<&mut LossScaler>,
    ) -> Option<Vec<u32>> {
        let g = batch_gradients(model, &Seeded { batch, seed: 0 }, 0.1, mixed, false).unwrap();
        clipped(model, g.grads, clip, scaler).map(|(g, _)| values(model, &g))
    }

    /// A loss scale that is a power of two leaves the gradients' bits alone once unscaled (on
    /// the CPU, whose products stay f32): scaling by 2ᵏ and back is exact, and so are the
    /// scaled norm and the clip's factor. Clipped or not.
    #[test]
    fn a_power_of_two_loss_scale_unscales_to_the_bits_of_f32() {
        for (name, spec) in s2s_models::testing::tiny_specs(0.0) {
            let m = model_and_batch(&spec);
            for clip in [1e-3, 0.0] {
                let f32 = grads_of(&m, None, clip, None).unwrap();
                let mut scaler = LossScaler::default();
                let mixed = grads_of(&m, Some(scaler.scale()), clip, Some(&mut scaler)).unwrap();
                assert_eq!(f32, mixed, "{name}, clip {clip}");
                assert_eq!((scaler.scale(), scaler.skipped), (LossScaler::INITIAL, 0));
            }
        }
    }

    /// Gradients that overflow (a loss scaled by infinity) skip the step and halve the scale.
    #[test]
    fn an_overflowed_step_is_skipped_and_halves_the_scale() {
        let (_, spec) = s2s_models::testing::tiny_specs(0.0).remove(0);
        let m = model_and_batch(&spec);
        let mut scaler = LossScaler::default();
        assert!(grads_of(&m, Some(f64::INFINITY), 1.0, Some(&mut scaler)).is_none());
        assert_eq!((scaler.scale(), scaler.skipped), (LossScaler::INITIAL / 2.0, 1));
        assert!(grads_of(&m, Some(scaler.scale()), 1.0, Some(&mut scaler)).is_some());
        assert_eq!(scaler.skipped, 1);
    }

    /// On wgpu (lavapipe where there is no GPU) mixed precision's products are f16: the loss
    /// moves off f32's, by about f16's rounding, not more.
    #[test]
    fn mixed_products_on_a_gpu_round_as_f16() {
        let Some(gpu) = s2s_kernels::testing::wgpu_f16_or_skip() else { return };
        let d = gpu.autodiff();
        let (_, spec) = s2s_models::testing::tiny_specs(0.0).pop().unwrap();
        let model = spec.init(SHAPE.src_vocab, SHAPE.tgt_vocab, &d).unwrap();
        let batch = random_batch(SHAPE, 0..SHAPE.sentences, &d);
        let loss = |mixed| {
            let g = batch_gradients(&model, &Seeded { batch: &batch, seed: 0 }, 0.1, mixed, false).unwrap();
            g.loss.into_scalar::<f32>()
        };
        let (f32, mixed) = (loss(None), loss(Some(128.0)));
        let gap = (f32 - mixed).abs() / f32.abs();
        assert!(gap > 0.0 && gap < 1e-2, "f32 {f32}, mixed {mixed}");
    }

    /// A device's report (the shape cubecl's takes on lavapipe) is reduced to its innermost
    /// cause; a report without causes to its first line.
    #[test]
    fn a_device_report_is_reduced_to_its_innermost_cause() {
        let report = "Execution(An error happened during execution\nCaused by:\n  skipped `KernelBinop`: \
                      it needed memory 6265, which carried the failure\nCaused by:\n  An IO error happened\n\
                      Caused by:\n  can't allocate buffer of size: 408131584\nNo backtrace available\n\
                      Asked at:\nNo backtrace available)";
        assert_eq!(root_cause(report), "can't allocate buffer of size: 408131584");
        assert_eq!(root_cause("out of memory\nsecond line"), "out of memory");
    }
}
