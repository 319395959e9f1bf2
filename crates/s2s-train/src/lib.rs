//! # s2s-train: the one training loop
//!
//! Used by every model kind through [`s2s_models::Model`]: [`loss`] (label-smoothed
//! cross-entropy without padding), [`schedule`] (constant,
//! Noam, plateau), [`checkpoint`] (atomic, exact resume), [`metrics`] (`metrics.csv`),
//! [`evaluate`] (perplexity and greedy BLEU) and [`trainer`] (the loop).

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
pub mod interrupt;
pub mod lock;
pub mod loss;
pub mod metrics;
pub mod pipeline;
pub mod precision;
pub mod run;
pub mod schedule;
pub mod step;
pub mod step_rate;
pub mod testset;
pub mod trainer;

pub use config::{Budget, OptimizerKind, StopMetric, TrainSpec};
pub use error::TrainError;
pub use trainer::{TrainData, TrainJob, TrainOutcome, build_model, load_model, train};
