//! Checkpoint averaging (fairseq's `average_checkpoints.py`, Marian's `--average`): the
//! element-wise mean of every parameter over the last N checkpoints of a run, `θ̄ = (1/N) Σₖ θₖ`,
//! written as a new checkpoint `checkpoints/average-last-N/` beside them; the originals are left
//! as they are. Training keeps the last N checkpoints when `[train] keep_last = N`.
//!
//! The mean is summed in f64 in a fixed order (newest first), so the same checkpoints always
//! give the same bytes.

use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{Device, Tensor, TensorData};
use s2s_data::Tokenizers;
use s2s_models::{Model, ModelSpec};
use serde::{Deserialize, Serialize};

use crate::checkpoint::Checkpoints;
use crate::error::TrainError;
use crate::trainer::load_model;

/// `averaged.json` in an averaged checkpoint: what it was made from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Averaged {
    /// The checkpoint directories averaged (names under `checkpoints/`), newest first.
    pub from: Vec<String>,
    /// Their steps, in the same order.
    pub steps: Vec<u64>,
}

/// The name of the checkpoint averaging the last `n`.
pub fn name(n: usize) -> String {
    format!("average-last-{n}")
}

/// Averages the `n` most recent checkpoints of `run_dir` into `checkpoints/average-last-N/`
/// (replacing an earlier average of that name) and returns its directory. Refuses when the run
/// has fewer than `n` checkpoints, naming `keep_last`.
pub fn average_last(
    run_dir: &Path,
    spec: &ModelSpec,
    tok: &Tokenizers,
    n: usize,
) -> Result<(PathBuf, Averaged), TrainError> {
    let dirs = recent_checkpoints(run_dir, n)?;
    let Summed { sum, first, steps } = sum_checkpoints(spec, tok, &dirs)?;
    let averaged = mean_model(first, sum, n);
    let names: Vec<String> = dirs
        .iter()
        .map(|d| d.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default())
        .collect();
    let record = Averaged { from: names, steps };
    let out = write_average(run_dir, n, averaged, &record)?;
    Ok((out, record))
}

/// Returns the `n` most recent checkpoint directories of `run_dir`, newest first; an error when
/// `n` is 0 or the run has fewer.
fn recent_checkpoints(run_dir: &Path, n: usize) -> Result<Vec<PathBuf>, TrainError> {
    if n == 0 {
        return Err(TrainError::Config("average over at least 1 checkpoint".into()));
    }
    let ckpts = Checkpoints::new(run_dir);
    let dirs = ckpts.recent(n)?;
    if dirs.len() < n {
        return Err(TrainError::Config(format!(
            "{} has {} step checkpoint(s), not the {n} to average: train with `keep_last = {n}` in [train] \
             (checkpoints are written at every validation)",
            run_dir.display(),
            dirs.len()
        )));
    }
    Ok(dirs)
}

/// The checkpoints' parameters summed, with what else the average needs of them.
struct Summed {
    /// Every float parameter's values summed in f64, and its shape, in module order.
    sum: Vec<(Vec<f64>, Vec<usize>)>,
    /// The first (newest) checkpoint's model, whose parameters the mean replaces.
    first: Model,
    /// The checkpoints' steps, in order.
    steps: Vec<u64>,
}

/// Loads the checkpoints `dirs` (at least one) in order on the CPU and sums their parameters.
fn sum_checkpoints(spec: &ModelSpec, tok: &Tokenizers, dirs: &[PathBuf]) -> Result<Summed, TrainError> {
    let device = Device::flex();
    let mut sum: Option<Vec<(Vec<f64>, Vec<usize>)>> = None;
    let mut first: Option<Model> = None;
    let mut steps = Vec::with_capacity(dirs.len());
    for dir in dirs {
        steps.push(Checkpoints::read_state(dir)?.step);
        let model = load_model(spec, tok, dir, &device)?;
        let mut collect = Collect { out: Vec::new() };
        let model = model.map(&mut collect);
        match &mut sum {
            None => {
                sum = Some(
                    collect
                        .out
                        .into_iter()
                        .map(|(v, s)| (v.iter().map(|&x| x as f64).collect(), s))
                        .collect(),
                )
            }
            Some(acc) => {
                for ((a, _), (v, _)) in acc.iter_mut().zip(collect.out) {
                    for (x, y) in a.iter_mut().zip(v) {
                        *x += y as f64;
                    }
                }
            }
        }
        if first.is_none() {
            first = Some(model);
        }
    }
    Ok(Summed {
        sum: sum.expect("at least one checkpoint"),
        first: first.expect("at least one checkpoint"),
        steps,
    })
}

/// Returns `first` with every float parameter replaced by its mean over the `n` checkpoints
/// (`sum / n`, as f32).
fn mean_model(first: Model, sum: Vec<(Vec<f64>, Vec<usize>)>, n: usize) -> Model {
    let mean: Vec<(Vec<f32>, Vec<usize>)> =
        sum.into_iter().map(|(v, s)| (v.into_iter().map(|x| (x / n as f64) as f32).collect(), s)).collect();
    first.map(&mut Replace { values: mean.into_iter() })
}

/// Writes `averaged` and its `averaged.json` into `checkpoints/average-last-N/` through a
/// temporary directory renamed into place (replacing an earlier one), and returns that directory.
fn write_average(
    run_dir: &Path,
    n: usize,
    averaged: Model,
    record: &Averaged,
) -> Result<PathBuf, TrainError> {
    let root = run_dir.join("checkpoints");
    let out = root.join(name(n));
    let tmp = root.join(format!(".{}.tmp", name(n)));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    let mpath = tmp.join("model.bpk");
    averaged
        .save_file(&mpath)
        .map_err(|e| TrainError::Checkpoint { path: mpath.clone(), message: e.to_string() })?;
    let json = serde_json::to_vec_pretty(record).expect("averaged.json serialises");
    std::fs::write(tmp.join("averaged.json"), json).map_err(|e| TrainError::io(&tmp, e))?;
    Checkpoints::write_checks(&tmp)?;
    if out.exists() {
        std::fs::remove_dir_all(&out).map_err(|e| TrainError::io(&out, e))?;
    }
    std::fs::rename(&tmp, &out).map_err(|e| TrainError::io(&out, e))?;
    Ok(out)
}

/// Collects every float parameter's values and shape, in module order.
struct Collect {
    out: Vec<(Vec<f32>, Vec<usize>)>,
}

impl ModuleMapper for Collect {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let t = param.val();
        let shape = t.dims().to_vec();
        let v = t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap_or_default();
        self.out.push((v, shape));
        param
    }
}

/// Replaces every float parameter, in module order, by the next values.
struct Replace<I: Iterator<Item = (Vec<f32>, Vec<usize>)>> {
    values: I,
}

impl<I: Iterator<Item = (Vec<f32>, Vec<usize>)>> ModuleMapper for Replace<I> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (v, shape) = self.values.next().expect("the same parameters in every checkpoint");
        param.map(|t| {
            assert_eq!(t.dims().to_vec(), shape, "the same parameter shapes in every checkpoint");
            Tensor::from_data(TensorData::new(v, shape), &t.device())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::TrainerState;
    use crate::config::TrainSpec;
    use s2s_data::{Pair, TokenizerConfig};
    use s2s_models::LstmSpec;

    fn params(m: Model) -> Vec<Vec<f32>> {
        let mut c = Collect { out: Vec::new() };
        let _ = m.map(&mut c);
        c.out.into_iter().map(|(v, _)| v).collect()
    }

    #[test]
    fn the_average_is_the_mean_of_the_last_checkpoints_and_leaves_them_alone() {
        let run = std::env::temp_dir().join(format!("s2s-average-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&run);
        let pairs = vec![Pair { src: "a b c".into(), tgt: "x y".into() }];
        let cfg = TokenizerConfig { level: s2s_data::Level::Word, ..Default::default() };
        let tok = Tokenizers::train(&cfg, &pairs).unwrap();
        let spec =
            ModelSpec::Lstm(LstmSpec { emb: 4, hidden: 4, layers: 1, dropout: 0.0, ..Default::default() });
        let d = Device::flex();
        let ckpts = Checkpoints::new(&run).keeping(3);
        let state =
            |step| TrainerState { step, ..TrainerState::start(TrainSpec::default().schedule.start()) };
        // Four checkpoints of different weights; the last three are kept and averaged.
        let mut saved = Vec::new();
        for step in 1..=4u64 {
            let m = crate::trainer::build_model(&spec, &tok, step, &d).unwrap();
            saved.push(params(m.clone()));
            ckpts
                .save(&state(step), false, |dir| {
                    m.save_file(dir.join("model.bpk")).map_err(|e| TrainError::Checkpoint {
                        path: dir.to_path_buf(),
                        message: e.to_string(),
                    })
                })
                .unwrap();
        }
        let bytes = std::fs::read(ckpts.recent(1).unwrap()[0].join("model.bpk")).unwrap();
        let err = average_last(&run, &spec, &tok, 4).unwrap_err().to_string();
        assert!(err.contains("keep_last = 4"), "the first was pruned: {err}");
        let (dir, record) = average_last(&run, &spec, &tok, 3).unwrap();
        assert_eq!(record.steps, vec![4, 3, 2]);
        let avg = params(load_model(&spec, &tok, &dir, &d).unwrap());
        for (p, got) in avg.iter().enumerate() {
            for (i, g) in got.iter().enumerate() {
                let want = (saved[1][p][i] + saved[2][p][i] + saved[3][p][i]) / 3.0;
                assert!((g - want).abs() < 1e-6, "param {p}[{i}]: {g} vs {want}");
            }
        }
        assert_eq!(std::fs::read(ckpts.recent(1).unwrap()[0].join("model.bpk")).unwrap(), bytes);
        let _ = std::fs::remove_dir_all(&run);
    }
}
