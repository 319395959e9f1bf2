//! Throughput benchmark on the reference shapes of `experiments/bench/models.json` (a copy of
//! `../shared/bench/models.json`, same numbers), measured the way `torch_ref.py` measures:
//! random token batches of one fixed shape; training target tokens/s over full steps (forward,
//! label-smoothed loss, backward, global-norm clipping at 1.0, Adam) after 3 warm-up steps;
//! greedy and beam-5 decoding sentences/s (up to `tgt_len` tokens per sentence).
//!
//! The timed step is the trainer's, [`crate::step::take`], as the trainer calls it: the loss
//! read back after the forward, the trainer's dropout seeds, on the CPU the batch cut over the
//! cores as `core_split` cuts it, in mixed precision its loss scaler; only the batch is the
//! bench's own (one fixed batch on the device, where the trainer collates and uploads each).

use std::collections::BTreeMap;
use std::time::Instant;

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use s2s_decode::{BeamConfig, CapturedSearch, MaxLength, Run, beam_search, greedy};
use s2s_models::attention::LuongScore;
use s2s_models::{AttentionRnnSpec, LstmSpec, Model, ModelSpec, Source, TransformerSpec};
use serde::{Deserialize, Serialize};

use crate::captured::FixedBatchTrainer;
use crate::core_split::row_ranges;
use crate::precision::Precision;
use crate::step::{DeviceBatch, StepSettings};
use s2s_kernels::bench::Snapshot;
use s2s_kernels::ops::FusedAdam;
use s2s_kernels::ops::is_cpu;

/// The benchmark configuration shipped with the project.
pub const MODELS_JSON: &str = include_str!("../../../experiments/bench/models.json");

/// The fixed batch shape.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct BatchShape {
    /// Sentences per batch.
    pub sentences: usize,
    /// Source tokens per sentence.
    pub src_len: usize,
    /// Target tokens per sentence.
    pub tgt_len: usize,
    /// Source vocabulary.
    pub src_vocab: usize,
    /// Target vocabulary.
    pub tgt_vocab: usize,
}

/// One shape of `models.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Shape {
    family: String,
    attention: Option<String>,
    emb: Option<usize>,
    hidden: Option<usize>,
    layers: Option<usize>,
    bidirectional_encoder: Option<bool>,
    input_feeding: Option<bool>,
    dropout: f64,
    d_model: Option<usize>,
    heads: Option<usize>,
    ffn: Option<usize>,
    enc_layers: Option<usize>,
    dec_layers: Option<usize>,
}

/// The training step's settings: `torch_ref.py`'s (Adam at 1e-4, clipped at 1, label smoothing
/// 0.1) unless the file says otherwise.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BenchTrain {
    /// Learning rate.
    pub lr: f64,
    /// Global norm the gradients are clipped to.
    pub clip: f64,
    /// Label smoothing ε.
    pub label_smoothing: f64,
}

impl Default for BenchTrain {
    fn default() -> Self {
        Self { lr: 1e-4, clip: 1.0, label_smoothing: 0.1 }
    }
}

impl BenchTrain {
    /// As a training step's settings.
    pub fn settings(&self) -> StepSettings {
        StepSettings { lr: self.lr, clip: self.clip, label_smoothing: self.label_smoothing }
    }
}

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
pub struct BenchConfig {
    /// Batch shape.
    pub batch: BatchShape,
    /// The training step's settings (`"train"`; `torch_ref.py`'s when absent).
    #[serde(default)]
    pub train: BenchTrain,
    /// Model shapes by name.
    pub models: BTreeMap<String, Shape>,
}

impl BenchConfig {
    /// The shipped configuration.
    pub fn shipped() -> Self {
        serde_json::from_str(MODELS_JSON).expect("experiments/bench/models.json parses")
    }

    /// A configuration in the same format from `path` (e.g.
    /// `experiments/bench/launch-bound.json`); errors name the file and what is wrong.
    pub fn from_file(path: &std::path::Path) -> Result<Self, BenchError> {
        let file = path.to_path_buf();
        let text =
            std::fs::read_to_string(path).map_err(|source| BenchError::Io { file: file.clone(), source })?;
        let cfg: Self =
            serde_json::from_str(&text).map_err(|source| BenchError::Parse { file: file.clone(), source })?;
        if cfg.models.is_empty() {
            return Err(BenchError::NoShapes { file });
        }
        for (name, shape) in &cfg.models {
            shape.spec().map_err(|e| BenchError::InFile {
                file: file.clone(),
                shape: name.clone(),
                error: Box::new(e),
            })?;
        }
        Ok(cfg)
    }
}

/// What can go wrong reading bench shapes or running one.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The shapes file cannot be read.
    #[error("{}: {source}", file.display())]
    Io {
        /// The file.
        file: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The shapes file is not the expected JSON.
    #[error("{}: {source} (expected the format of experiments/bench/models.json)", file.display())]
    Parse {
        /// The file.
        file: std::path::PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// The shapes file lists no shape.
    #[error("{}: no shapes under \"models\"", file.display())]
    NoShapes {
        /// The file.
        file: std::path::PathBuf,
    },
    /// One shape of a file is wrong.
    #[error("{}: shape `{shape}`: {error}", file.display())]
    InFile {
        /// The file.
        file: std::path::PathBuf,
        /// The shape's name.
        shape: String,
        /// What is wrong with it.
        error: Box<BenchError>,
    },
    /// A shape lacks a field its family needs.
    #[error("shape lacks `{0}`")]
    Missing(&'static str),
    /// An attention or family name the bench does not know.
    #[error("unknown {0} `{1}`")]
    Unknown(&'static str, String),
    /// A training step failed: a device, or a captured step that could not be recorded or
    /// replayed.
    #[error(transparent)]
    Step(#[from] crate::step::StepError),
    /// The model cannot be built.
    #[error(transparent)]
    Model(#[from] s2s_models::ModelError),
    /// A precision the device or the step mode cannot run.
    #[error("{0}")]
    Precision(String),
}

impl Shape {
    /// Hidden units of a recurrent shape.
    pub fn hidden(&self) -> Option<usize> {
        self.hidden
    }

    /// Model width and feed-forward width of a Transformer shape.
    pub fn transformer_widths(&self) -> Option<(usize, usize)> {
        self.d_model.zip(self.ffn)
    }

    /// The toolkit's model with this shape (as close to `torch_ref.py`'s as the kinds allow:
    /// the Transformer gets separate embeddings and an untied output, like PyTorch's).
    pub fn spec(&self) -> Result<ModelSpec, BenchError> {
        let need = |v: Option<usize>, what: &'static str| v.ok_or(BenchError::Missing(what));
        Ok(match (self.family.as_str(), self.attention.as_deref()) {
            ("lstm", _) => ModelSpec::Lstm(LstmSpec {
                emb: need(self.emb, "emb")?,
                hidden: need(self.hidden, "hidden")?,
                layers: need(self.layers, "layers")?,
                bidirectional: self.bidirectional_encoder.unwrap_or(false),
                dropout: self.dropout,
                ..Default::default()
            }),
            ("rnn-attention", Some(att)) => {
                let s = AttentionRnnSpec {
                    emb: need(self.emb, "emb")?,
                    hidden: need(self.hidden, "hidden")?,
                    layers: need(self.layers, "layers")?,
                    bidirectional: self.bidirectional_encoder.unwrap_or(false),
                    input_feeding: self.input_feeding.unwrap_or(true),
                    dropout: self.dropout,
                    ..Default::default()
                };
                match att {
                    "bahdanau" => ModelSpec::Bahdanau(s),
                    "luong-general" => ModelSpec::Luong(AttentionRnnSpec { score: LuongScore::General, ..s }),
                    "luong-dot" => ModelSpec::Luong(AttentionRnnSpec { score: LuongScore::Dot, ..s }),
                    other => return Err(BenchError::Unknown("attention", other.to_string())),
                }
            }
            ("transformer", _) => ModelSpec::Transformer(TransformerSpec {
                d_model: need(self.d_model, "d_model")?,
                heads: need(self.heads, "heads")?,
                ffn: need(self.ffn, "ffn")?,
                enc_layers: need(self.enc_layers, "enc_layers")?,
                dec_layers: need(self.dec_layers, "dec_layers")?,
                dropout: self.dropout,
                attention_dropout: self.dropout,
                pre_norm: true,
                tie_output: false,
                share_embeddings: false,
                positions: true,
                causal: true,
                scaled: true,
            }),
            (f, _) => return Err(BenchError::Unknown("family", f.to_string())),
        })
    }
}

/// One model's figures (field names as in `torch_ref.py`'s JSON lines, plus ours).
#[derive(Debug, Clone, Default, Serialize)]
pub struct BenchResult {
    /// Shape name.
    pub model: String,
    /// Device description.
    pub device: String,
    /// Parameters.
    pub params: usize,
    /// Training target tokens per second.
    pub train_tokens_per_s: f64,
    /// The last timed training step's loss (same seed and batch on every backend, so two
    /// builds or devices that compute the same step agree to rounding); `None` without training.
    #[serde(default)]
    pub train_loss: Option<f32>,
    /// The products' precision, `f32` or `mixed`.
    pub precision: String,
    /// Mixed precision: the loss scale after the timed steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
    /// The decoding products' weights, `none` (f32) or `int8` (`--quantize`).
    #[serde(default)]
    pub quantize: String,
    /// Greedy decoding sentences per second.
    pub decode_sentences_per_s: f64,
    /// Beam-5 decoding sentences per second.
    pub beam5_sentences_per_s: f64,
    /// Peak resident memory of the process so far, MiB (CPU; 0 where unknown).
    pub peak_rss_mib: f64,
    /// Mean milliseconds per timed training step in each phase: `forward` (model, loss, and
    /// reading the loss back), `backward`, `clip` (global norm), `adam`. Exact on the CPU; on a
    /// GPU work queued in one phase may finish in the next.
    pub train_phase_ms: BTreeMap<String, f64>,
    /// Host CPU milliseconds per timed training step spent launching it: the calling thread
    /// plus cubecl's device-service threads ([`s2s_kernels::bench::Snapshot`]). On a GPU a
    /// launch-bound step costs this much whatever the GPU does; on lavapipe it excludes the
    /// driver's execution of the dispatches. `None` on the CPU backend, which launches nothing.
    pub train_host_ms: Option<f64>,
    /// [`train_host_ms`](Self::train_host_ms) split: the calling thread's share (building the
    /// step, or writing its values and replaying it) and the device-service threads' (encoding
    /// and submitting; on lavapipe also the driver's execution of the dispatches, which runs on
    /// the submitting thread).
    pub train_host_split_ms: Option<BTreeMap<String, f64>>,
    /// Host CPU milliseconds per greedy pass over the batch (as
    /// [`train_host_ms`](Self::train_host_ms)); with `capture`, the pass replays its steps.
    #[serde(default)]
    pub decode_host_ms: Option<f64>,
    /// With `capture`: why a search's graphs failed, so that it decoded eagerly (its figures
    /// are then the eager search's); `None` when they replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_eager_because: Option<String>,
}

/// Rows `rows` of the benchmark's batch of shape `b` on `device`: random token ids, full rows
/// (no padding), the same ids whichever rows are asked for.
pub fn random_batch(b: BatchShape, rows: std::ops::Range<usize>, device: &Device) -> DeviceBatch {
    let (n, s, t) = (rows.len(), b.src_len, b.tgt_len);
    let src_ids: Vec<u32> = random_ids(b.sentences * s, b.src_vocab, 1)[rows.start * s..rows.end * s]
        .iter()
        .map(|&i| i as u32)
        .collect();
    let y = random_ids(b.sentences * (t + 1), b.tgt_vocab, 2);
    let tgt_in: Vec<i64> = rows.clone().flat_map(|r| y[r * (t + 1)..r * (t + 1) + t].to_vec()).collect();
    let tgt_out: Vec<i64> = rows.flat_map(|r| y[r * (t + 1) + 1..(r + 1) * (t + 1)].to_vec()).collect();
    DeviceBatch::from_tensors(
        Source::new(&src_ids, &vec![s; n], s, device),
        Tensor::from_data(TensorData::new(tgt_in, [n, t]), device),
        Tensor::from_data(TensorData::new(tgt_out, [n, t]), device),
        Tensor::ones([n, t], device),
        n * t,
    )
}

/// `n` token ids in `4..vocab` (past the special tokens), reproducible from `seed`.
fn random_ids(n: usize, vocab: usize, seed: u64) -> Vec<i64> {
    let mut rng = s2s_data::rng::SplitMix64::new(seed);
    (0..n).map(|_| 4 + (rng.next_u64() % (vocab as u64 - 4)) as i64).collect()
}

/// Peak resident set size (VmHWM) in MiB, from `/proc/self/status`.
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// What [`bench`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jobs {
    /// Training, then greedy and beam-5 decoding.
    Both,
    /// Training only.
    Train,
    /// Decoding only, with the initialised model.
    Decode,
}

/// How [`bench`]'s training steps run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepMode {
    /// Rate, clip and label smoothing ([`BenchConfig::train`]).
    pub settings: StepSettings,
    /// Replayed from one captured graph after the warm-up, and decoding steps likewise (GPU).
    pub capture: bool,
    /// The products' precision (mixed: eager GPU steps, dynamic loss scaling).
    pub precision: Precision,
    /// Parts a CPU step is cut into over the cores, as the trainer's `core_split`
    /// ([`crate::core_split`]; 1: the step whole, every core on each operation).
    pub core_split: usize,
}

/// Benchmarks one shape: `steps` timed training steps (after 3 warm-up steps; with `capture`,
/// replayed from a graph captured after them, [`crate::captured`]), then `max(1, steps / 4)`
/// greedy and beam-5 passes over the batch (each after one untimed pass; with `capture`,
/// replayed from graphs the untimed pass recorded). `jobs` leaves out training or decoding
/// (their figures 0): decoding alone decodes with the freshly initialised model, to profile it.
pub fn bench(
    name: &str,
    spec: &ModelSpec,
    b: BatchShape,
    steps: usize,
    device: &Device,
    device_name: &str,
    mode: StepMode,
    jobs: Jobs,
) -> Result<BenchResult, BenchError> {
    mode.precision.check_device(device).map_err(|e| BenchError::Precision(e.to_string()))?;
    if mode.precision == Precision::Mixed && mode.capture {
        return Err(BenchError::Precision(
            "--precision mixed runs eager steps: captured steps are f32 only; leave out --capture".into(),
        ));
    }
    let ad = device.clone().autodiff();
    ad.seed(0);
    let model = spec.init(b.src_vocab, b.tgt_vocab, &ad)?;
    let mut result = BenchResult {
        model: name.to_string(),
        device: device_name.to_string(),
        params: model.num_params(),
        precision: mode.precision.to_string(),
        ..Default::default()
    };
    let (warm_up, train_steps) = if jobs == Jobs::Decode { (0, 0) } else { (3, steps) };
    let model = time_training(&mut result, model, b, (warm_up, train_steps), (device, &ad), mode)?;
    if jobs != Jobs::Train {
        let valid = model.valid();
        mode.precision
            .products(|| time_decoding(&mut result, &valid, b, (steps / 4).max(1), device, mode.capture));
    }
    result.peak_rss_mib = peak_rss_mib();
    Ok(result)
}

/// [`bench`]'s training on `device` (through its autodiff twin `ad`): `warm_up` untimed
/// steps, then `steps` timed ones (replayed from a graph captured after the warm-up with
/// `capture`) on one random batch of shape `b`; fills the training figures of `result` and
/// returns the trained model.
fn time_training(
    result: &mut BenchResult,
    model: Model,
    b: BatchShape,
    (warm_up, steps): (usize, usize),
    (device, ad): (&Device, &Device),
    mode: StepMode,
) -> Result<Model, BenchError> {
    let capture = mode.capture;
    let batch = random_batch(b, 0..b.sentences, ad);
    let parts =
        row_ranges(b.sentences, mode.core_split).into_iter().map(|r| random_batch(b, r, ad)).collect();
    // burn's `AdamConfig` defaults, through the trainer's Adam.
    let adam = FusedAdam::new(0.9, 0.999, 1e-5, 0.0);
    let mut trainer = FixedBatchTrainer::new(model, ad, batch, adam, mode.settings, 0).with_core_split(parts);
    if mode.precision == Precision::Mixed {
        trainer = trainer.mixed();
    }
    let phases = ["forward", "backward", "clip", "adam"];
    let mut phase_s = [0f64; 4];
    // Eager steps read the loss at every step, as the trainer's logging does; replayed ones
    // only at the end.
    for _ in 0..warm_up {
        trainer.step(true, None)?;
    }
    if capture && steps > 0 {
        trainer.capture()?;
    }
    let (host0, t0) = (Snapshot::now(), Instant::now());
    for _ in 0..steps {
        trainer.step(!capture, Some(&mut phase_s))?;
    }
    trainer.sync();
    result.train_loss = (steps > 0).then(|| trainer.loss());
    result.loss_scale = trainer.scaler().map(|s| s.scale());
    if steps > 0 {
        result.train_tokens_per_s = (steps * b.sentences * b.tgt_len) as f64 / t0.elapsed().as_secs_f64();
    }
    let host = Snapshot::now().since(&host0);
    let gpu_host = host.measured && !is_cpu(device);
    let per_step = |s: f64| 1e3 * s / steps.max(1) as f64;
    result.train_host_ms = gpu_host.then(|| per_step(host.launch_s()));
    result.train_host_split_ms = gpu_host.then(|| {
        BTreeMap::from([
            ("caller".to_string(), per_step(host.caller_s)),
            ("device_service".to_string(), per_step(host.device_service_s)),
        ])
    });
    result.train_phase_ms = phases.iter().zip(phase_s).map(|(p, s)| (p.to_string(), per_step(s))).collect();
    Ok(trainer.into_model())
}

/// [`bench`]'s decoding: `passes` greedy and then `passes` beam-5 passes over one random
/// source batch of shape `b`, each after one untimed pass (which, with `capture`, records
/// the graphs the timed passes replay: `s2s_decode::captured`); fills the decoding figures
/// of `result`.
fn time_decoding(
    result: &mut BenchResult,
    model: &Model,
    b: BatchShape,
    passes: usize,
    device: &Device,
    capture: bool,
) {
    let (n, s) = (b.sentences, b.src_len);
    let src_ids: Vec<u32> = random_ids(n * s, b.src_vocab, 1).into_iter().map(|i| i as u32).collect();
    let lens = vec![s; n];
    let limit = MaxLength { a: 0.0, b: b.tgt_len };
    // Eager passes on the CPU decode the batch's parts side by side, as `translate` does
    // (`crate::evaluate::decode_split`).
    let split = crate::evaluate::decode_split();
    let parts: Vec<Source> = row_ranges(n, if is_cpu(device) { split.parts() } else { 1 })
        .into_iter()
        .map(|r| Source::new(&src_ids[r.start * s..r.end * s], &lens[r.clone()], s, device))
        .collect();
    let side_by_side = |f: &(dyn Fn(&Source) + Sync)| drop(split.run_first(parts.len(), |i| f(&parts[i])));
    let mut captured = capture.then(|| CapturedSearch::new(model, device, Run::Replay, 4));
    let greedy_pass = |c: &mut Option<CapturedSearch<'_, _>>| match c {
        Some(c) => drop(c.greedy(&src_ids, &lens, s, limit)),
        None => side_by_side(&|src| drop(greedy(model, src, limit, false))),
    };
    greedy_pass(&mut captured);
    let (host0, t0) = (Snapshot::now(), Instant::now());
    for _ in 0..passes {
        greedy_pass(&mut captured);
    }
    result.decode_sentences_per_s = (passes * n) as f64 / t0.elapsed().as_secs_f64();
    let host = Snapshot::now().since(&host0);
    result.decode_host_ms = (host.measured && !is_cpu(device)).then(|| 1e3 * host.launch_s() / passes as f64);
    let cfg = BeamConfig { beam: 5, max_length: limit, ..Default::default() };
    let beam_pass = |c: &mut Option<CapturedSearch<'_, _>>| match c {
        Some(c) => drop(c.beam(&src_ids, &lens, s, &cfg)),
        None => side_by_side(&|src| drop(beam_search(model, src, &cfg))),
    };
    // Warmed up like greedy: the first pass compiles the search's kernels on a GPU (and
    // records its graphs).
    beam_pass(&mut captured);
    let t0 = Instant::now();
    for _ in 0..passes {
        beam_pass(&mut captured);
    }
    result.beam5_sentences_per_s = (passes * n) as f64 / t0.elapsed().as_secs_f64();
    result.decode_eager_because = captured.as_ref().and_then(|c| c.first_refusal()).map(str::to_string);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_shapes_build_with_the_reference_parameter_counts() {
        let cfg = BenchConfig::shipped();
        assert_eq!(cfg.models.len(), 4);
        let d = Device::flex();
        // PyTorch's counts (torch_ref.py) minus what the kinds differ in: PyTorch LSTMs carry two
        // bias vectors per layer and direction (4H each), ours one; PyTorch's Transformer has
        // the same 11,682,624 parameters as ours.
        for (name, torch, extra_bias) in [
            ("lstm", 15_556_416usize, 4 * 2048),
            ("bahdanau", 18_547_520, 2 * 1024 + 2048),
            ("luong", 17_391_936, 4 * 2048),
            ("transformer", 11_682_624, 0),
        ] {
            let spec = cfg.models[name].spec().unwrap();
            let b = cfg.batch;
            let p = spec.init(b.src_vocab, b.tgt_vocab, &d).unwrap().num_params();
            assert_eq!(p + extra_bias, torch, "{name}");
        }
    }

    /// The launch-bound file has the reference shapes' models, layer for layer, and their
    /// batch shape, only narrower: the same operations a step, so its step time counts them.
    #[test]
    fn launch_bound_shapes_mirror_the_reference_layers() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/bench");
        let tiny = BenchConfig::from_file(&dir.join("launch-bound.json")).unwrap();
        let full = BenchConfig::shipped();
        assert_eq!(tiny.models.keys().collect::<Vec<_>>(), full.models.keys().collect::<Vec<_>>());
        for (name, t) in &tiny.models {
            let f = &full.models[name];
            let layers = |s: &Shape| {
                (s.family.clone(), s.attention.clone(), s.layers, s.bidirectional_encoder, s.input_feeding)
            };
            assert_eq!(layers(t), layers(f), "{name}");
            assert_eq!(
                (t.enc_layers, t.dec_layers, t.dropout),
                (f.enc_layers, f.dec_layers, f.dropout),
                "{name}"
            );
        }
        // The same batch shape: some code paths choose by rows (mha's one-product projections).
        let shape = |b: &BatchShape| (b.sentences, b.src_len, b.tgt_len);
        assert_eq!(shape(&tiny.batch), shape(&full.batch));
        let bad = std::env::temp_dir().join(format!("s2s-bench-bad-{}.json", std::process::id()));
        std::fs::write(&bad, "{\"batch\": {}}").unwrap();
        let e = BenchConfig::from_file(&bad).unwrap_err().to_string();
        let _ = std::fs::remove_file(&bad);
        assert!(e.contains("s2s-bench-bad") && e.contains("models.json"), "{e}");
    }
}
