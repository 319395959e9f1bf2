//! int8 checkpoints (`s2s quantize RUN --to int8`): a checkpoint's weights quantized to int8,
//! written as `checkpoints/int8/model.q8` beside a record of where they came from
//! (`quantized.json`) and the lengths and CRC-32s every checkpoint has (`files.json`).
//!
//! Every matrix parameter is stored as int8 with one f32 scale per output unit — a column of
//! a product's `W` (`[d_in, d_out]`), a row of an embedding (`[vocab, d]`: a token, which is
//! also an output unit where the output layer is the embedding transposed) — the scheme the
//! int8 products use (`s2s_kernels::gemm::int8`), so that quantizing the loaded weights again
//! at decoding gives back the same integers. Vectors (biases, layer norms) stay f32. Loading
//! dequantises (`q · s`) into the f32 model, so every command that loads a checkpoint loads
//! this one ([`crate::load_model`]); `--quantize int8` then multiplies by the int8 values.
//!
//! # Format (`model.q8`, little-endian)
//! `S2SQ8` and format version 1 (8 bytes), the parameter count (u32), then per parameter in
//! module order: its kind (u8: 0 f32, 1 int8 per column, 2 int8 per row), rank (u8), dims
//! (u64 each), then for f32 its values, for int8 its scales (f32, one per column or row) and
//! its values (i8, row-major).

use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{Device, Tensor, TensorData};
use s2s_data::Tokenizers;
use s2s_kernels::quantize::{Quantize, dequantize_matrix, quantize_matrix};
use s2s_models::{Model, ModelSpec};
use serde::{Deserialize, Serialize};

use crate::checkpoint::Checkpoints;
use crate::error::TrainError;
use crate::trainer::load_model;

/// The file an int8 checkpoint keeps its model in.
pub const FILE: &str = "model.q8";
/// The checkpoint name `s2s quantize --to int8` writes.
pub const NAME: &str = "int8";
const MAGIC: &[u8; 8] = b"S2SQ8\0\0\x01";

/// `quantized.json` in an int8 checkpoint: what it was made from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quantized {
    /// The checkpoint quantized (its directory name under `checkpoints/`).
    pub from: String,
    /// Its step.
    pub step: u64,
    /// The bytes of its `model.bpk` and of the int8 `model.q8`.
    pub f32_bytes: u64,
    pub int8_bytes: u64,
}

/// Quantizes the checkpoint `from` (best, last, or a name under `checkpoints/`) of `run_dir`
/// into `checkpoints/int8/` (replacing an earlier one) and returns that directory.
pub fn quantize_checkpoint(
    run_dir: &Path,
    spec: &ModelSpec,
    tok: &Tokenizers,
    from: &str,
) -> Result<(PathBuf, Quantized), TrainError> {
    let ckpts = Checkpoints::new(run_dir);
    let src = ckpts.named(from)?;
    if src.join(FILE).is_file() {
        return Err(TrainError::Config(format!(
            "{} is already an int8 checkpoint: quantize an f32 one (best, last, step-…)",
            src.display()
        )));
    }
    let step = Checkpoints::read_state(&src).map(|s| s.step).unwrap_or(0);
    let model = load_model(spec, tok, &src, &Device::flex())?;
    let mut w = Writer { out: Vec::new(), count: 0, path: Vec::new() };
    w.out.extend_from_slice(MAGIC);
    w.out.extend_from_slice(&0u32.to_le_bytes());
    let _ = model.map(&mut w);
    let count = w.count;
    w.out[8..12].copy_from_slice(&count.to_le_bytes());

    let root = run_dir.join("checkpoints");
    let out = root.join(NAME);
    let tmp = root.join(format!(".{NAME}.tmp"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    std::fs::write(tmp.join(FILE), &w.out).map_err(|e| TrainError::io(&tmp.join(FILE), e))?;
    let f32_bytes = std::fs::metadata(src.join("model.bpk")).map(|m| m.len()).unwrap_or(0);
    let name = src.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let record = Quantized { from: name, step, f32_bytes, int8_bytes: w.out.len() as u64 };
    let json = serde_json::to_vec_pretty(&record).expect("quantized.json serialises");
    std::fs::write(tmp.join("quantized.json"), json).map_err(|e| TrainError::io(&tmp, e))?;
    Checkpoints::write_checks(&tmp)?;
    for entry in std::fs::read_dir(&tmp).map_err(|e| TrainError::io(&tmp, e))? {
        let path = entry.map_err(|e| TrainError::io(&tmp, e))?.path();
        std::fs::File::open(&path).and_then(|f| f.sync_all()).map_err(|e| TrainError::io(&path, e))?;
    }
    if out.exists() {
        std::fs::remove_dir_all(&out).map_err(|e| TrainError::io(&out, e))?;
    }
    std::fs::rename(&tmp, &out).map_err(|e| TrainError::io(&out, e))?;
    Ok((out, record))
}

/// The decoding products' precision for a command: `asked` (`--quantize`), else int8 for an
/// int8 checkpoint and none for an f32 one. int8 products run on the CPU only: asked for on a
/// GPU it is an error; an int8 checkpoint decoded on a GPU runs its dequantised weights in f32.
pub fn choose(
    asked: Option<Quantize>,
    int8_checkpoint: bool,
    device: &Device,
) -> Result<Quantize, TrainError> {
    let cpu = s2s_kernels::ops::is_cpu(device);
    match asked {
        Some(Quantize::Int8) if !cpu => Err(TrainError::Config(
            "--quantize int8 runs on the CPU only: add --device cpu (or leave --quantize out)".into(),
        )),
        Some(q) => Ok(q),
        None if int8_checkpoint && cpu => Ok(Quantize::Int8),
        None => Ok(Quantize::None),
    }
}

/// Whether the checkpoint directory `dir` is an int8 one.
pub fn is_int8(dir: &Path) -> bool {
    dir.join(FILE).is_file()
}

/// Whether an embedding's table is being visited (its rows are its output units).
fn in_embedding(path: &[String]) -> bool {
    path.last().is_some_and(|c| c == "Struct:Embedding")
}

/// Writes every float parameter, in module order.
struct Writer {
    out: Vec<u8>,
    count: u32,
    /// The container types entered.
    path: Vec<String>,
}

impl ModuleMapper for Writer {
    fn enter_module(&mut self, _name: &str, container_type: &str) {
        self.path.push(container_type.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let t = param.val();
        let dims = t.dims();
        let v = t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap_or_default();
        let kind: u8 = match D {
            2 if in_embedding(&self.path) => 2,
            2 => 1,
            _ => 0,
        };
        self.out.push(kind);
        self.out.push(D as u8);
        for d in dims {
            self.out.extend_from_slice(&(d as u64).to_le_bytes());
        }
        match kind {
            0 => v.iter().for_each(|x| self.out.extend_from_slice(&x.to_le_bytes())),
            _ => {
                let (q, scales) = quantize_matrix(&v, dims[0], dims[1], kind == 1);
                scales.iter().for_each(|s| self.out.extend_from_slice(&s.to_le_bytes()));
                self.out.extend(q.iter().map(|&x| x as u8));
            }
        }
        self.count += 1;
        param
    }
}

/// Reads `model.q8` of the checkpoint `dir` into `model` (built for the run's configuration),
/// its integrity checked first ([`Checkpoints::verify`]).
pub fn load_into(model: Model, dir: &Path, device: &Device) -> Result<Model, TrainError> {
    Checkpoints::verify(dir, FILE)?;
    let path = dir.join(FILE);
    let bytes = std::fs::read(&path).map_err(|e| TrainError::io(&path, e))?;
    let damaged = |what: &str| TrainError::Checkpoint {
        path: path.clone(),
        message: format!(
            "not a readable int8 checkpoint ({what}): damaged or not written by s2s quantize; {}",
            Checkpoints::remedy_for_damage(dir)
        ),
    };
    if bytes.len() < 12 || &bytes[..8] != MAGIC {
        return Err(damaged("no S2SQ8 header of version 1"));
    }
    let count = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
    let mut r = Reader { bytes: &bytes, at: 12 };
    let mut params = Vec::with_capacity(count);
    for _ in 0..count {
        params.push(r.param().ok_or_else(|| damaged("cut short"))?);
    }
    if r.at != bytes.len() {
        return Err(damaged("bytes after the last parameter"));
    }
    let mut fill = Fill { params: params.into_iter(), device: device.clone(), error: None, index: 0 };
    let model = model.map(&mut fill);
    if fill.error.is_none() && fill.params.next().is_some() {
        fill.error = Some("more parameters than the model has".into());
    }
    match fill.error {
        Some(m) => Err(TrainError::Checkpoint {
            path,
            message: format!(
                "written for another model configuration ({m}): load it with the configuration it was quantized from (the run's run.json)"
            ),
        }),
        None => Ok(model),
    }
}

/// The cursor over `model.q8`'s bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    /// One parameter: its dims and f32 values (dequantised).
    fn param(&mut self) -> Option<(Vec<usize>, Vec<f32>)> {
        let kind = self.take(1)?[0];
        let rank = self.take(1)?[0] as usize;
        let mut dims = Vec::with_capacity(rank);
        for _ in 0..rank {
            dims.push(usize::try_from(u64::from_le_bytes(self.take(8)?.try_into().ok()?)).ok()?);
        }
        let len = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
        let f32s =
            |b: &[u8]| b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4"))).collect();
        let values = match (kind, rank) {
            (0, _) => f32s(self.take(len.checked_mul(4)?)?),
            (1 | 2, 2) => {
                let groups = if kind == 1 { dims[1] } else { dims[0] };
                let scales: Vec<f32> = f32s(self.take(groups.checked_mul(4)?)?);
                let q: Vec<i8> = self.take(len)?.iter().map(|&b| b as i8).collect();
                let mut v = vec![0f32; len];
                dequantize_matrix(&q, &scales, dims[0], dims[1], kind == 1, &mut v);
                v
            }
            _ => return None,
        };
        Some((dims, values))
    }
}

/// Replaces every float parameter, in module order, by the next one read.
struct Fill<I: Iterator<Item = (Vec<usize>, Vec<f32>)>> {
    params: I,
    device: Device,
    /// The first mismatch met (the rest are left as they were).
    error: Option<String>,
    index: usize,
}

impl<I: Iterator<Item = (Vec<usize>, Vec<f32>)>> ModuleMapper for Fill<I> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        self.index += 1;
        if self.error.is_some() {
            return param;
        }
        let shape = param.lazy_shape().dims::<D>().to_vec();
        match self.params.next() {
            Some((dims, values)) if dims == shape => {
                let id = param.id;
                Param::initialized(id, Tensor::from_data(TensorData::new(values, dims), &self.device))
            }
            Some((dims, _)) => {
                self.error =
                    Some(format!("parameter {} is {dims:?} where the model has {shape:?}", self.index));
                param
            }
            None => {
                self.error = Some(format!("{} parameters where the model has more", self.index - 1));
                param
            }
        }
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
        struct C(Vec<Vec<f32>>);
        impl ModuleMapper for C {
            fn map_float<const D: usize>(&mut self, p: Param<Tensor<D>>) -> Param<Tensor<D>> {
                self.0.push(p.val().into_data().try_to_vec::<f32>().unwrap());
                p
            }
        }
        let mut c = C(Vec::new());
        let _ = m.map(&mut c);
        c.0
    }

    /// The int8 checkpoint loads back to within one quantization step of every weight
    /// (vectors exactly), is under 30 % of the f32 bytes on a model whose matrices dominate,
    /// and a flipped byte or a cut file is refused as damaged.
    #[test]
    fn an_int8_checkpoint_loads_close_and_refuses_damage() {
        let run = std::env::temp_dir().join(format!("s2s-quantized-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&run);
        let words: Vec<String> = (0..200).map(|i| format!("w{i}")).collect();
        let pairs = vec![Pair { src: words.join(" "), tgt: words.join(" ") }];
        let cfg = TokenizerConfig { level: s2s_data::Level::Word, ..Default::default() };
        let tok = Tokenizers::train(&cfg, &pairs).unwrap();
        let spec =
            ModelSpec::Lstm(LstmSpec { emb: 32, hidden: 64, layers: 1, dropout: 0.0, ..Default::default() });
        let d = Device::flex();
        let ckpts = Checkpoints::new(&run);
        let m = crate::trainer::build_model(&spec, &tok, 1, &d).unwrap();
        let state = TrainerState { step: 7, ..TrainerState::start(TrainSpec::default().schedule.start()) };
        ckpts
            .save(&state, true, |dir| {
                m.clone()
                    .save_file(dir.join("model.bpk"))
                    .map_err(|e| TrainError::Checkpoint { path: dir.to_path_buf(), message: e.to_string() })
            })
            .unwrap();
        let (dir, record) = quantize_checkpoint(&run, &spec, &tok, "best").unwrap();
        assert_eq!(record.step, 7);
        assert!(
            record.int8_bytes * 10 <= record.f32_bytes * 3,
            "{} int8 bytes against {} f32",
            record.int8_bytes,
            record.f32_bytes
        );
        assert_eq!(ckpts.named("int8").unwrap(), dir);
        let back = params(load_model(&spec, &tok, &dir, &d).unwrap());
        for (p, (a, b)) in params(m).iter().zip(&back).enumerate() {
            let max = a.iter().fold(0f32, |m, x| m.max(x.abs()));
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= max / 127.0 * 0.5 + 1e-6, "param {p}: {x} vs {y}");
            }
        }
        let file = dir.join(FILE);
        let good = std::fs::read(&file).unwrap();
        let mut bad = good.clone();
        bad[good.len() / 2] ^= 0x40;
        std::fs::write(&file, &bad).unwrap();
        let err = load_model(&spec, &tok, &dir, &d).unwrap_err().to_string();
        assert!(err.contains("damaged"), "{err}");
        std::fs::write(&file, &good[..good.len() - 10]).unwrap();
        let err = load_model(&spec, &tok, &dir, &d).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        let _ = std::fs::remove_dir_all(&run);
    }
}
