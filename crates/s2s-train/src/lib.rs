//! # s2s-train: the one training loop
//!
//! Used by every model kind through [`s2s_models::Model`]. Its modules:
//!
//! - the step and the loop: [`step`] (one training step, as every path takes it: forward,
//!   loss, backward, clip, the optimizer), [`trainer`] (the loop: resume, steps, validation,
//!   checkpoints), [`core_split`] (a CPU step cut over the cores), [`captured`] (GPU steps
//!   recorded once per batch shape and replayed), [`precision`] (mixed precision and the loss
//!   scaler), [`loss`] (label-smoothed cross-entropy without padding), [`schedule`] (constant,
//!   Noam, plateau), [`interrupt`] (graceful stops, fault injection for the crash tests);
//! - a run's files: [`config`] (`[train]`), [`run`] (a run's whole configuration and its
//!   preparation), [`checkpoint`] (atomic, exact resume), [`average`] (checkpoint averaging),
//!   [`metrics`] (`metrics.csv`), [`export`] (safetensors and CTranslate2),
//!   [`tensorboard`] (the same scalars as TensorBoard event
//!   files), [`error`] (training errors);
//! - around the loop: [`pipeline`] (one run from configuration to test scores, what `s2s train`
//!   and each model of `s2s experiment` do), [`experiment`] (experiment files: models, grids,
//!   seeds), [`evaluate`] (perplexity and greedy BLEU), [`testset`] (the test split's decoding
//!   and scores), [`device`] (`cpu`, `wgpu`, `auto`);
//! - measuring: [`bench`] (`s2s bench`: training and decoding throughput on the reference
//!   shapes, timing the trainer's step), [`step_rate`] (the LSTM step beside the machine's best
//!   product rate).

pub mod average;
pub mod bench;
pub mod captured;
pub mod checkpoint;
pub mod config;
pub mod core_split;
pub mod device;
pub mod error;
pub mod evaluate;
pub mod experiment;
pub mod export;
pub mod forced;
pub mod interrupt;
pub mod lock;
pub mod loss;
pub mod metrics;
pub mod pipeline;
pub mod precision;
pub mod quantized;
pub mod run;
pub mod schedule;
pub mod step;
pub mod step_rate;
pub mod tensorboard;
pub mod testset;
pub mod trainer;

pub use config::{Budget, OptimizerKind, StopMetric, TrainSpec};
pub use error::TrainError;
pub use trainer::{TrainData, TrainJob, TrainOutcome, build_model, load_model, train};
