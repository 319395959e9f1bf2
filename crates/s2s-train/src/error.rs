//! Training errors.

use std::path::{Path, PathBuf};

/// What can stop training.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// File-system trouble, with the path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A checkpoint that cannot be used.
    #[error("checkpoint {path}: {message}")]
    Checkpoint {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Bad configuration.
    #[error("{0}")]
    Config(String),
    /// A model configuration that cannot be built.
    #[error(transparent)]
    Model(#[from] s2s_models::ModelError),
    /// The loss stopped being a number.
    #[error(
        "the training loss became {value} at step {step}; the last good checkpoint is kept — lower lr or clip_norm and resume"
    )]
    NonFinite {
        /// Step.
        step: u64,
        /// The loss.
        value: f64,
    },
    /// Mixed precision's loss scale fell below its floor: the gradients overflow at any scale.
    #[error(
        "the gradients overflowed at every loss scale down to {scale} (step {step}): the loss is exploding, not the scale too high; the last good checkpoint is kept — lower lr or clip_norm, or train with precision = \"f32\", and resume"
    )]
    LossScale {
        /// Step.
        step: u64,
        /// The scale reached.
        scale: f64,
    },
    /// The device failed while computing a step (a GPU out of memory, or over a software
    /// Vulkan device's limits): nothing of the step was applied.
    #[error(
        "the device failed while computing step {step} ({message}); the last checkpoint is kept — a batch may exceed the device's memory or limits (lavapipe's among them): lower max_tokens (--max-tokens) and resume"
    )]
    Device {
        /// Step.
        step: u64,
        /// What the device said.
        message: String,
    },
    /// Data-layer failure.
    #[error(transparent)]
    Data(#[from] s2s_data::DataError),
    /// Scoring failure.
    #[error(transparent)]
    Eval(#[from] s2s_eval::EvalError),
    /// The directory is being written by another process, or cannot be locked.
    #[error(transparent)]
    Lock(#[from] crate::lock::LockError),
}

impl TrainError {
    /// Wraps an I/O error with its path.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        TrainError::Io { path: path.to_path_buf(), source }
    }
}
