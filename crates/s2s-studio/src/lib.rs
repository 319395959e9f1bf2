//! # s2s-studio: compare trained models live, in a local web page
//!
//! `s2s studio PATH…` loads every trained model of an experiment (or of run directories) once
//! ([`load`]), and serves one page and a JSON API on the loopback address ([`server`]): type or
//! pick a sentence and see every model's translation with each token's probability, every
//! attention map (recurrent attention; every Transformer layer and head, cross and self), the
//! beam search step by step, the reference's forced-decoding score beside the output's (a
//! search error told from a model error), and on the built-in language pair the gold word
//! alignment and each model's alignment error rate ([`analyse`]).

pub mod analyse;
pub mod load;
pub mod server;

use std::path::PathBuf;

use burn::tensor::Device;

pub use analyse::{Encoded, Limits, ModelResult, Request, RequestError, Stopped, run_request};
pub use load::{Loaded, Studio};
pub use server::{Options, Stats, bind, router, serve, serve_on};

/// Test sentences with a gold alignment scored at start-up for each model's AER, at most
/// (spread over all lengths).
pub const AER_SENTENCES: usize = 200;

/// What can stop the studio from starting.
#[derive(Debug, thiserror::Error)]
pub enum StudioError {
    /// File-system trouble, with the path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Nothing to load, with what to do.
    #[error("{0}")]
    NoRuns(String),
    /// A run that cannot be loaded.
    #[error("{0}")]
    Run(String),
    /// From loading a run's files.
    #[error(transparent)]
    Train(#[from] s2s_train::TrainError),
    /// The server could not start or stopped with an error.
    #[error("{0}")]
    Serve(String),
}

/// Loads the models under `paths` (their `checkpoint`: best, last, or a name under
/// `checkpoints/`) onto `device`, the first model's test sentences and gold alignments, and
/// each model's AER over [`AER_SENTENCES`] of them. `progress` hears what is loaded.
pub fn open(
    paths: &[PathBuf],
    checkpoint: &str,
    device: Device,
    device_name: String,
    mut progress: impl FnMut(&str),
) -> Result<Studio, StudioError> {
    let runs = load::find_runs(paths)?;
    let mut models = Vec::with_capacity(runs.len());
    for (name, dir) in &runs {
        let m = load::load_run(name, dir, checkpoint, &device)?;
        progress(&format!("loaded {name} ({}, {} parameters) from {}", m.kind, m.params, dir.display()));
        if !s2s_train::experiment::finished(dir) {
            progress(&format!(
                "note: {name} has not finished training: the page shows its {checkpoint} checkpoint so far"
            ));
        }
        models.push(m);
    }
    // Without its test split (a corpus moved since training) the page still translates typed
    // sentences: say so and go on.
    let (examples, gold) = load::test_sentences(&runs[0].1).unwrap_or_else(|e| {
        progress(&format!("warning: no test sentences to pick from: {e}"));
        Default::default()
    });
    let mut studio = Studio { models: Vec::new(), examples, gold, device, device_name };
    for mut m in models {
        if let Some((aer, sentences)) = analyse::corpus_aer(&studio, &m, AER_SENTENCES) {
            m.aer = Some(aer);
            progress(&format!(
                "{}: AER {:.1} % on the gold alignments of {sentences} test sentences",
                m.name,
                100.0 * aer
            ));
        }
        studio.models.push(m);
    }
    Ok(studio)
}
