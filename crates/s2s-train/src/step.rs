//! One training step, as every path takes it — the trainer (eager, data parallel, or cut over
//! the cores), captured steps and the bench:
//!
//! 1. [`DeviceBatch`]: a batch on the device;
//! 2. [`gradients`]: forward, the label-smoothed loss over the real target tokens divided by
//!    the step's [`Norm`] (times the loss scale under mixed precision), backward — for one
//!    batch, or one part of one;
//! 3. [`clipped`]: the summed gradients unscaled (mixed precision: `None` when one is not
//!    finite, and the step is skipped) and clipped to their global norm;
//! 4. [`apply`]: the optimizer's update at the step's rate.
//!
//! The loss a step optimises is the mean over the step's target tokens: each batch's
//! label-smoothed sum divided by its token count times the batches a step sums (`accumulate
//! × devices`), so the summed gradient of N batches is the mean of their per-token means —
//! fairseq's per-token normalisation. A captured step divides by the count the device sums
//! from the target mask ([`Norm::Device`]): a host number would be frozen in the graph.

use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Int, Tensor, TensorData};
use s2s_data::Batch;
use s2s_models::{Model, Source};

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
}

impl DeviceBatch {
    /// Moves a collated batch to `device`.
    pub fn new(b: &Batch, device: &Device) -> Self {
        let ids = |v: &[u32]| -> Vec<i64> { v.iter().map(|&i| i as i64).collect() };
        let n = b.size();
        let keep: Vec<f32> = b.tgt_mask().into_iter().map(|k| if k { 1.0 } else { 0.0 }).collect();
        Self {
            src: Source::new(&b.src, &b.src_lens, b.src_len, device),
            tgt_in: Tensor::from_data(TensorData::new(ids(&b.tgt_in), [n, b.tgt_len]), device),
            tgt_out: Tensor::from_data(TensorData::new(ids(&b.tgt_out), [n, b.tgt_len]), device),
            keep: Tensor::from_data(TensorData::new(keep, [n, b.tgt_len]), device),
            tokens: b.tgt_tokens(),
        }
    }

    /// `b` on `device`, as a captured step's inputs (its source claims no dense prefix:
    /// [`s2s_decode::captured::graph_source`]).
    pub fn graph_input(b: &Batch, device: &Device) -> Self {
        let src = s2s_decode::captured::graph_source(&b.src, &b.src_lens, b.src_len, device);
        Self { src, ..Self::new(b, device) }
    }

    /// Writes `b` (of this shape) into these buffers, for the next replay.
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

/// What a batch's label-smoothed loss sum is divided by: the step's target tokens times the
/// batches a step sums.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Norm {
    /// Known on the host (eager steps).
    Host(f64),
    /// The batch's own token count, summed on the device from `keep` (captured steps: one
    /// batch a step).
    Device,
}

/// One batch's (or part's) [`gradients`].
pub struct BatchGradients {
    /// Gradients of the loss (divided by the [`Norm`], times the loss scale).
    pub grads: GradientsParams,
    /// The per-token loss as optimised (divided by the norm, not scaled), on the device.
    pub loss: Tensor<1>,
    /// With [`Norm::Device`], the token count it divided by (on the device).
    pub device_tokens: Option<Tensor<1>>,
}

/// Forward, loss and backward of `model` (on an autodiff device) on `batch`: the label-smoothed
/// (`epsilon`) loss summed over the real target tokens, divided by `norm` — the one loss every
/// training path optimises. `mixed` carries the loss scale of mixed precision: the forward's
/// products then take f16 operands and the loss is multiplied by the scale before the
/// backward; `None` (f32) computes what the toolkit always computed, to the bit. `check` runs
/// between the forward and the backward on the loss (the first read-back of a step, where a
/// failing device says so; timing).
pub fn gradients<E>(
    model: &Model,
    batch: &DeviceBatch,
    epsilon: f64,
    norm: Norm,
    mixed: Option<f64>,
    check: impl FnOnce(&Tensor<1>) -> Result<(), E>,
) -> Result<BatchGradients, E> {
    let precision = if mixed.is_some() { Precision::Mixed } else { Precision::F32 };
    let out = precision.products(|| model.forward(&batch.src, batch.tgt_in.clone()));
    let sum = label_smoothed_loss(out.logits, batch.tgt_out.clone(), &batch.keep, epsilon).smoothed;
    let (loss, device_tokens) = match norm {
        Norm::Host(n) => (sum.div_scalar(n), None),
        Norm::Device => {
            let tokens = batch.keep.clone().sum();
            (sum.div(tokens.clone()), Some(tokens.inner()))
        }
    };
    check(&loss)?;
    let scaled = match mixed {
        Some(scale) => loss.clone().mul_scalar(scale),
        None => loss.clone(),
    };
    let grads = GradientsParams::from_grads(scaled.backward(), model);
    Ok(BatchGradients { grads, loss: loss.inner(), device_tokens })
}

/// The step's summed gradients made ready for the update: unscaled by the loss scaler (when
/// there is one) and clipped to global norm `clip` (0: not clipped). `None` when the scaler
/// found a gradient that is not finite: the step is skipped, the scale halved.
pub fn clipped(
    model: &Model,
    mut grads: GradientsParams,
    clip: f64,
    scaler: Option<&mut LossScaler>,
) -> Option<GradientsParams> {
    use s2s_kernels::ops::{clip_global_norm, global_norm, scale_grads};
    let Some(scaler) = scaler else {
        let _ = clip_global_norm(model, &mut grads, clip);
        return Some(grads);
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
    Some(grads)
}

/// The optimizer's update of `model` with `grads` at rate `lr` (Adam updates in place: the
/// caller hands over its only handle).
pub fn apply(optim: &mut ModuleOptimizer, lr: f64, model: Model, grads: GradientsParams) -> Model {
    s2s_kernels::ops::adam_step(optim, lr, model, grads)
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
        let Ok(g) = gradients(model, batch, 0.1, Norm::Host(batch.tokens as f64), mixed, |_| {
            Ok::<(), std::convert::Infallible>(())
        });
        clipped(model, g.grads, clip, scaler).map(|g| values(model, &g))
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
            let Ok(g) = gradients(&model, &batch, 0.1, Norm::Host(batch.tokens as f64), mixed, |_| {
                Ok::<(), std::convert::Infallible>(())
            });
            g.loss.into_scalar::<f32>()
        };
        let (f32, mixed) = (loss(None), loss(Some(128.0)));
        let gap = (f32 - mixed).abs() / f32.abs();
        assert!(gap > 0.0 && gap < 1e-2, "f32 {f32}, mixed {mixed}");
    }
}
