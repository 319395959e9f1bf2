//! Training hyperparameters (`[train]` in an experiment file, or `s2s train` flags).

use s2s_data::BatchConfig;
use s2s_decode::MaxLength;
use serde::{Deserialize, Serialize};

use crate::precision::Precision;
use crate::schedule::Schedule;

/// Which Adam.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Adam (Kingma & Ba, 2015), L2 weight decay added to the gradient.
    Adam,
    /// AdamW (Loshchilov & Hutter, 2019), decoupled weight decay.
    AdamW,
}

/// The metric early stopping and "best" checkpoints follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StopMetric {
    /// Greedy validation BLEU (higher is better).
    Bleu,
    /// Validation perplexity (lower is better).
    Ppl,
}

/// Whether GPU training steps are captured as graphs and replayed (`s2s_train::captured`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Capture {
    /// On where it pays: one physical GPU, one batch a step, Adam; off on the CPU and on
    /// software adapters (lavapipe executes the padding it adds on the CPU).
    #[default]
    Auto,
    /// On wherever it can run (one wgpu device, `accumulate = 1`, Adam); an error elsewhere.
    On,
    /// Every step eager.
    Off,
}

impl std::str::FromStr for Capture {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "on" => Ok(Self::On),
            "off" => Ok(Self::Off),
            _ => Err(format!("unknown capture mode `{s}`: use auto, on or off")),
        }
    }
}

/// How long to train: whichever limit is reached first (at least one must be set).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Optimizer steps.
    pub steps: Option<u64>,
    /// Whole passes over the training data: training stops at the end of the last one, each
    /// pass counted with its own batches (token-filled epochs differ by a few;
    /// docs/decisions.md, "Data").
    pub epochs: Option<u64>,
    /// Wall-clock minutes of training (validation included).
    pub minutes: Option<f64>,
}

/// Everything the training loop needs besides the model and the data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainSpec {
    /// Seed of initialisation, data order and dropout.
    pub seed: u64,
    /// Batching.
    pub batch: BatchConfig,
    /// Adam or AdamW.
    pub optimizer: OptimizerKind,
    /// Base (peak) learning rate.
    pub lr: f64,
    /// Adam β₁.
    pub beta1: f64,
    /// Adam β₂.
    pub beta2: f64,
    /// Adam ε.
    pub epsilon: f64,
    /// Weight decay (0: none).
    pub weight_decay: f64,
    /// Learning-rate schedule.
    pub schedule: Schedule,
    /// Label smoothing ε.
    pub label_smoothing: f64,
    /// Global gradient-norm bound (0: no clipping).
    pub clip_norm: f64,
    /// Batches whose gradients are summed per optimizer step (per device).
    pub accumulate: u32,
    /// Devices training in parallel, one batch each per micro-step (data parallelism): a step
    /// then reads `accumulate × devices` batches and equals `accumulate × devices` on one.
    pub devices: u32,
    /// Parts each batch is cut into by sentence on the CPU, computed at once on separate cores,
    /// their gradients summed ([`crate::core_split`]); 1 computes the batch whole with every core
    /// on each operation. The step is the same up to rounding, and depends on this number, not
    /// on the machine's cores (with fewer threads than parts they run one after another). GPUs
    /// take the batch whole.
    pub core_split: u32,
    /// Training budget.
    pub budget: Budget,
    /// Validate every this many optimizer steps (and at the end).
    pub valid_every: u64,
    /// Validation sentences decoded for BLEU (0: all).
    pub valid_bleu_sentences: usize,
    /// Output length limit for validation decoding.
    pub max_output: MaxLength,
    /// Early-stopping and best-checkpoint metric.
    pub stop_metric: StopMetric,
    /// Validations without improvement before stopping (0: never stop early).
    pub patience: u32,
    /// Skip (and count) batches whose loss is not finite instead of stopping with an error.
    pub skip_nonfinite: bool,
    /// Step checkpoints kept besides the best: the last N (at least 1), for `s2s average`.
    pub keep_last: u32,
    /// GPU steps captured as graphs and replayed ([`Capture`]).
    pub capture: Capture,
    /// Most captured graphs alive (one per batch shape; the least recently used is dropped
    /// past it). 0 pads batches as captured training does but runs every step eagerly.
    pub capture_graphs: usize,
    /// The matrix products' precision: `f32`, or `mixed` (f16 products, f32 weights, dynamic
    /// loss scaling; a GPU only: [`crate::precision`]).
    pub precision: Precision,
}

impl Default for TrainSpec {
    fn default() -> Self {
        Self {
            seed: 1,
            batch: BatchConfig::default(),
            optimizer: OptimizerKind::Adam,
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.98,
            epsilon: 1e-8,
            weight_decay: 0.0,
            schedule: Schedule::Constant,
            label_smoothing: 0.1,
            clip_norm: 1.0,
            accumulate: 1,
            devices: 1,
            core_split: 2,
            budget: Budget { steps: None, epochs: Some(10), minutes: None },
            valid_every: 500,
            valid_bleu_sentences: 0,
            max_output: MaxLength::default(),
            stop_metric: StopMetric::Bleu,
            patience: 5,
            skip_nonfinite: false,
            keep_last: 1,
            capture: Capture::Auto,
            capture_graphs: 16,
            precision: Precision::F32,
        }
    }
}

impl TrainSpec {
    /// Checks values a typo could make nonsensical.
    pub fn validate(&self) -> Result<(), SpecError> {
        let b = &self.budget;
        if b.steps.is_none() && b.epochs.is_none() && b.minutes.is_none() {
            return Err(SpecError::NoBudget);
        }
        if let Some(m) = b.minutes.filter(|m| !(*m > 0.0 && m.is_finite())) {
            return Err(SpecError::Minutes(m));
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(SpecError::LearningRate(self.lr));
        }
        if !(0.0..1.0).contains(&self.label_smoothing) {
            return Err(SpecError::LabelSmoothing(self.label_smoothing));
        }
        if self.accumulate == 0
            || self.devices == 0
            || self.core_split == 0
            || self.valid_every == 0
            || self.batch.max_tokens == 0
        {
            return Err(SpecError::Zero);
        }
        Ok(())
    }
}

/// A `[train]` value that cannot be right.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    /// No budget at all.
    #[error("the training budget needs steps, epochs or minutes")]
    NoBudget,
    /// `budget.minutes` not a positive number (NaN never ran out).
    #[error("budget minutes must be a positive number, got {0}")]
    Minutes(f64),
    /// `lr` not a positive number.
    #[error("lr must be positive, got {0}")]
    LearningRate(f64),
    /// `label_smoothing` outside `[0, 1)`.
    #[error("label_smoothing must be in [0, 1), got {0}")]
    LabelSmoothing(f64),
    /// A count that must be at least 1 is 0.
    #[error("accumulate, devices, core_split, valid_every and batch.max_tokens must be at least 1")]
    Zero,
}
