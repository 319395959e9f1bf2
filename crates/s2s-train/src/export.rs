//! A trained model for other tools: its weights as safetensors (every model kind), and a
//! Transformer as a CTranslate2 model directory (`model.bin` written here, in the layout
//! CTranslate2's `ModelSpec._serialize` writes).
//!
//! # Tensor names (safetensors)
//! One tensor per parameter, named by its path in the model (`docs/usage.md` lists them per
//! kind), in PyTorch's layouts: a linear layer's `weight` is `[out, in]` (burn keeps `[in,
//! out]`: transposed here), a layer norm's parameters are `weight` and `bias` (burn's `gamma`,
//! `beta`), an embedding is `[vocab, dim]`. A recurrent cell's own matrices are kept as the
//! cell multiplies them, `x · w_input` (`[in, gates·hidden]`). Absent parts (an embedding
//! shared with the target's, an output projection tied to it) have no tensor.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use s2s_data::Tokenizers;
use s2s_data::vocab::{BOS, EOS, UNK};
use s2s_models::{Model, ModelSpec, TransformerSpec};

use crate::error::TrainError;

/// One parameter in PyTorch's layout.
#[derive(Debug, Clone)]
pub struct Named {
    /// Its path, `.`-separated (`encoder.0.ffn.inner.weight`).
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its values, row-major.
    pub data: Vec<f32>,
}

/// Walks the model, keeping the path and the innermost module type.
struct Collect {
    path: Vec<String>,
    types: Vec<String>,
    out: Vec<Named>,
}

impl ModuleVisitor for Collect {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.types.push(container_type.to_string());
        // `Model`'s variant is not part of the names (one file holds one kind).
        if !container_type.starts_with("Enum:") {
            self.path.push(name.to_string());
        }
    }

    fn exit_module(&mut self, _name: &str, container_type: &str) {
        self.types.pop();
        if !container_type.starts_with("Enum:") {
            self.path.pop();
        }
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let module = self.types.iter().rev().find(|t| t.starts_with("Struct:")).map_or("", |s| s.as_str());
        let mut path = self.path.clone();
        let tensor = param.val();
        let mut shape = tensor.dims().to_vec();
        let mut data = tensor.into_data().convert::<f32>().try_to_vec::<f32>().unwrap_or_default();
        let last = path.last().map(String::as_str).unwrap_or("");
        if module == "Struct:Linear" && last == "weight" && shape.len() == 2 {
            let (rows, cols) = (shape[0], shape[1]);
            data = transpose(&data, rows, cols);
            shape = vec![cols, rows];
        }
        if module == "Struct:LayerNorm" {
            let renamed = match last {
                "gamma" => Some("weight"),
                "beta" => Some("bias"),
                _ => None,
            };
            if let (Some(r), Some(l)) = (renamed, path.last_mut()) {
                *l = r.to_string();
            }
        }
        self.out.push(Named { name: path.join("."), shape, data });
    }
}

fn transpose(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = data[r * cols + c];
        }
    }
    out
}

/// The model's parameters in PyTorch's layouts (module doc), in the model's order.
pub fn tensors(model: &Model) -> Vec<Named> {
    let mut c = Collect { path: Vec::new(), types: Vec::new(), out: Vec::new() };
    model.visit(&mut c);
    c.out
}

fn f32_bytes(data: &[f32]) -> Vec<u8> {
    data.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Writes the model's parameters as one safetensors file (f32, names as [`tensors`] gives
/// them), with `metadata` (safetensors' `__metadata__`; `format = pt` added, as PyTorch's
/// writers put it).
pub fn write_safetensors(model: &Model, path: &Path, metadata: &[(&str, String)]) -> Result<(), TrainError> {
    let named = tensors(model);
    let bytes: Vec<Vec<u8>> = named.iter().map(|t| f32_bytes(&t.data)).collect();
    let mut views = Vec::with_capacity(named.len());
    for (t, b) in named.iter().zip(&bytes) {
        let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, t.shape.clone(), b)
            .map_err(|e| TrainError::Config(format!("{}: tensor {}: {e}", path.display(), t.name)))?;
        views.push((t.name.clone(), view));
    }
    let mut info: HashMap<String, String> =
        metadata.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    info.insert("format".into(), "pt".into());
    let file = safetensors::tensor::serialize(views, Some(info))
        .map_err(|e| TrainError::Config(format!("{}: {e}", path.display())))?;
    s2s_data::write_atomic(path, &file)?;
    Ok(())
}

/// A CTranslate2 weights type (`--quantization`): what `ct2-*-converter --quantization`
/// accepts, applied as its Python converter applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantization {
    /// No conversion.
    Float32,
    /// Linear and embedding weights to int8 (a scale a row), the rest f32.
    Int8,
    /// The same as int8 (CTranslate2 tells them apart at load time only).
    Int8Float32,
    /// int8 weights, the rest f16.
    Int8Float16,
    /// int8 weights, the rest bf16.
    Int8Bfloat16,
    /// Linear and embedding weights to int16 (one scale a matrix), the rest f32.
    Int16,
    /// Everything f16.
    Float16,
    /// Everything bf16.
    Bfloat16,
}

impl Quantization {
    /// Every accepted name, in CTranslate2's order.
    pub const NAMES: [&'static str; 8] =
        ["int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32"];

    /// The type named `s` (CTranslate2's names).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "int8" => Self::Int8,
            "int8_float32" => Self::Int8Float32,
            "int8_float16" => Self::Int8Float16,
            "int8_bfloat16" => Self::Int8Bfloat16,
            "int16" => Self::Int16,
            "float16" => Self::Float16,
            "bfloat16" => Self::Bfloat16,
            "float32" => Self::Float32,
            _ => return None,
        })
    }

    /// What the floats that are not quantized weights become.
    fn others(self) -> Dtype {
        match self {
            Self::Float16 | Self::Int8Float16 => Dtype::F16,
            Self::Bfloat16 | Self::Int8Bfloat16 => Dtype::Bf16,
            _ => Dtype::F32,
        }
    }
}

/// CTranslate2's variable types (`include/ctranslate2/types.h`'s order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dtype {
    F32 = 0,
    I8 = 1,
    I16 = 2,
    F16 = 4,
    Bf16 = 5,
}

/// One variable of `model.bin`.
#[derive(Debug, Clone)]
struct Var {
    shape: Vec<usize>,
    dtype: Dtype,
    bytes: Vec<u8>,
}

impl Var {
    fn floats(shape: Vec<usize>, data: &[f32]) -> Self {
        Var { shape, dtype: Dtype::F32, bytes: f32_bytes(data) }
    }

    fn int8(v: i8) -> Self {
        Var { shape: vec![], dtype: Dtype::I8, bytes: vec![v as u8] }
    }

    fn int16(v: i16) -> Self {
        Var { shape: vec![], dtype: Dtype::I16, bytes: v.to_le_bytes().to_vec() }
    }

    fn values(&self) -> Vec<f32> {
        self.bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect()
    }

    /// The float `self` as `to` (f16/bf16 rounded to nearest, as numpy's `astype` does).
    fn cast(&self, to: Dtype) -> Self {
        let v = self.values();
        let bytes = match to {
            Dtype::F16 => v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
            Dtype::Bf16 => v.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect(),
            _ => return self.clone(),
        };
        Var { shape: self.shape.clone(), dtype: to, bytes }
    }
}

/// Positions given to CTranslate2 as a table (ours interleave sine and cosine, its built-in
/// ones do not): sources and outputs up to this many tokens.
pub const CT2_POSITIONS: usize = 1024;

/// The reasons a model cannot become a CTranslate2 model; `None` when it can.
pub fn ctranslate2_refusal(spec: &ModelSpec) -> Option<String> {
    match spec {
        ModelSpec::Transformer(_) => None,
        other => Some(format!(
            "CTranslate2 holds Transformers only (its recurrent specifications are not those of our `{}` \
             models); export this run with --format safetensors instead",
            kind_name(other)
        )),
    }
}

/// The kind's name in configurations.
pub fn kind_name(spec: &ModelSpec) -> &'static str {
    match spec {
        ModelSpec::Lstm(_) => "lstm",
        ModelSpec::Bahdanau(_) => "bahdanau",
        ModelSpec::Luong(_) => "luong",
        ModelSpec::Transformer(_) => "transformer",
    }
}

/// Our sinusoids (`s2s_models::transformer::position`), rows `0..n`, or zeros when the model
/// adds none.
fn position_table(n: usize, d: usize, positions: bool) -> Vec<f32> {
    let mut t = Vec::with_capacity(n * d);
    for pos in 0..n {
        for j in 0..d {
            let i2 = (j - j % 2) as f64;
            let angle = pos as f64 / 10000f64.powf(i2 / d as f64);
            let v = if j % 2 == 0 { angle.sin() } else { angle.cos() } as f32;
            t.push(if positions { v } else { 0.0 });
        }
    }
    t
}

/// Writes `out` (an existing, empty directory) as a CTranslate2 model directory of the
/// Transformer `model`: `model.bin`, `config.json`, and `shared_vocabulary.json` (one
/// vocabulary) or `source_vocabulary.json` and `target_vocabulary.json`.
pub fn write_ctranslate2(
    model: &Model,
    spec: &ModelSpec,
    tok: &Tokenizers,
    out: &Path,
    quantization: Quantization,
) -> Result<(), TrainError> {
    if let Some(why) = ctranslate2_refusal(spec) {
        return Err(TrainError::Config(why));
    }
    let ModelSpec::Transformer(t) = spec else { unreachable!("refused above") };
    let named: BTreeMap<String, Named> = tensors(model).into_iter().map(|n| (n.name.clone(), n)).collect();
    let (vars, aliases) = ct2_variables(&named, t)?;
    let vars = quantize(vars, quantization);
    std::fs::write(out.join("model.bin"), serialize(&vars, &aliases))
        .map_err(|e| TrainError::io(&out.join("model.bin"), e))?;
    let token = |id: u32| tok.tgt.token(id);
    let config = serde_json::json!({
        "add_source_bos": false,
        "add_source_eos": true,
        "bos_token": token(BOS),
        "decoder_start_token": token(BOS),
        "eos_token": token(EOS),
        "layer_norm_epsilon": 1e-5,
        "multi_query_attention": false,
        "unk_token": token(UNK),
    });
    let write_json = |name: &str, v: &serde_json::Value| -> Result<(), TrainError> {
        let path = out.join(name);
        let text = serde_json::to_string_pretty(v).expect("JSON values serialize") + "\n";
        std::fs::write(&path, text).map_err(|e| TrainError::io(&path, e))
    };
    write_json("config.json", &config)?;
    let vocab =
        |t: &s2s_data::Tokenizer| -> Vec<String> { (0..t.vocab_size() as u32).map(|i| t.token(i)).collect() };
    let (src, tgt) = (vocab(&tok.src), vocab(&tok.tgt));
    if src == tgt {
        write_json("shared_vocabulary.json", &serde_json::json!(src))?;
    } else {
        write_json("source_vocabulary.json", &serde_json::json!(src))?;
        write_json("target_vocabulary.json", &serde_json::json!(tgt))?;
    }
    Ok(())
}

/// CTranslate2's `TransformerSpec` variables of our Transformer, and its aliases (a variable
/// that is another: shared embeddings, a tied projection, the one position table).
fn ct2_variables(
    named: &BTreeMap<String, Named>,
    t: &TransformerSpec,
) -> Result<(BTreeMap<String, Var>, BTreeMap<String, String>), TrainError> {
    let get = |name: &str| -> Result<&Named, TrainError> {
        named.get(name).ok_or_else(|| TrainError::Config(format!("the model has no parameter `{name}`")))
    };
    let mut vars = BTreeMap::new();
    let mut aliases = BTreeMap::new();
    let copy = |vars: &mut BTreeMap<String, Var>, to: String, from: &str| -> Result<(), TrainError> {
        let n = get(from)?;
        vars.insert(to, Var::floats(n.shape.clone(), &n.data));
        Ok(())
    };
    // Rows of several linear layers stacked into one (CTranslate2 fuses Q, K, V).
    let stack = |vars: &mut BTreeMap<String, Var>, to: &str, from: &[String]| -> Result<(), TrainError> {
        let (mut w, mut b, mut rows, mut cols) = (Vec::new(), Vec::new(), 0, 0);
        for f in from {
            let wn = get(&format!("{f}.weight"))?;
            w.extend_from_slice(&wn.data);
            rows += wn.shape[0];
            cols = wn.shape[1];
            b.extend_from_slice(&get(&format!("{f}.bias"))?.data);
        }
        vars.insert(format!("{to}/weight"), Var::floats(vec![rows, cols], &w));
        vars.insert(format!("{to}/bias"), Var::floats(vec![b.len()], &b));
        Ok(())
    };
    let linear =
        |vars: &mut BTreeMap<String, Var>, to: &str, from: &str| stack(vars, to, &[from.to_string()]);
    let norm = |vars: &mut BTreeMap<String, Var>, to: &str, from: &str| -> Result<(), TrainError> {
        copy(vars, format!("{to}/gamma"), &format!("{from}.weight"))?;
        copy(vars, format!("{to}/beta"), &format!("{from}.bias"))
    };
    let heads =
        i16::try_from(t.heads).map_err(|_| TrainError::Config("too many heads for CTranslate2".into()))?;
    let d = t.d_model;
    let qkv = |p: &str| ["query", "key", "value"].map(|x| format!("{p}.{x}"));
    for side in ["encoder", "decoder"] {
        vars.insert(format!("{side}/activation"), Var::int8(0)); // ReLU
        vars.insert(format!("{side}/num_heads"), Var::int16(heads));
        vars.insert(format!("{side}/pre_norm"), Var::int8(t.pre_norm as i8));
        vars.insert(format!("{side}/scale_embeddings"), Var::int8(1));
        if t.pre_norm {
            norm(&mut vars, &format!("{side}/layer_norm"), &format!("{side}_norm"))?;
        }
    }
    for (k, v) in [
        ("alibi", 0),
        ("alibi_use_positive_positions", 0),
        ("scale_alibi", 0),
        ("start_from_zero_embedding", 0),
    ] {
        vars.insert(format!("decoder/{k}"), Var::int8(v));
    }
    vars.insert("decoder/alignment_heads".into(), Var::int16(1));
    vars.insert("decoder/alignment_layer".into(), Var::int16(-1));
    vars.insert("encoder/embeddings_merge".into(), Var::int8(0));
    vars.insert("encoder/multi_query_attention".into(), Var::int8(0));
    let pe = position_table(CT2_POSITIONS, d, t.positions);
    vars.insert("decoder/position_encodings/encodings".into(), Var::floats(vec![CT2_POSITIONS, d], &pe));
    aliases
        .insert("encoder/position_encodings/encodings".into(), "decoder/position_encodings/encodings".into());
    copy(&mut vars, "decoder/embeddings/weight".into(), "tgt_embed.weight")?;
    if named.contains_key("src_embed.weight") {
        copy(&mut vars, "encoder/embeddings_0/weight".into(), "src_embed.weight")?;
    } else {
        aliases.insert("encoder/embeddings_0/weight".into(), "decoder/embeddings/weight".into());
    }
    if named.contains_key("output.weight") {
        linear(&mut vars, "decoder/projection", "output")?;
    } else {
        aliases.insert("decoder/projection/weight".into(), "decoder/embeddings/weight".into());
    }
    let unscaled = |vars: &mut BTreeMap<String, Var>, at: &str| {
        if !t.scaled {
            vars.insert(format!("{at}/queries_scale"), Var::floats(vec![], &[1.0]));
        }
    };
    // A layer's self-attention (Q, K, V fused; its norm is `{from}.{residual}.norm`), and its
    // feed-forward block: the same in the encoder and the decoder.
    let self_attention =
        |vars: &mut BTreeMap<String, Var>, to: &str, from: &str, residual: &str| -> Result<(), TrainError> {
            stack(vars, &format!("{to}/self_attention/linear_0"), &qkv(&format!("{from}.self_attention")))?;
            linear(vars, &format!("{to}/self_attention/linear_1"), &format!("{from}.self_attention.output"))?;
            norm(vars, &format!("{to}/self_attention/layer_norm"), &format!("{from}.{residual}.norm"))?;
            unscaled(vars, &format!("{to}/self_attention"));
            Ok(())
        };
    let ffn = |vars: &mut BTreeMap<String, Var>, to: &str, from: &str| -> Result<(), TrainError> {
        linear(vars, &format!("{to}/ffn/linear_0"), &format!("{from}.ffn.inner"))?;
        linear(vars, &format!("{to}/ffn/linear_1"), &format!("{from}.ffn.outer"))?;
        norm(vars, &format!("{to}/ffn/layer_norm"), &format!("{from}.ffn_residual.norm"))
    };
    for i in 0..t.enc_layers {
        let (to, from) = (format!("encoder/layer_{i}"), format!("encoder.{i}"));
        self_attention(&mut vars, &to, &from, "attention_residual")?;
        ffn(&mut vars, &to, &from)?;
    }
    for i in 0..t.dec_layers {
        let (to, from) = (format!("decoder/layer_{i}"), format!("decoder.{i}"));
        self_attention(&mut vars, &to, &from, "self_residual")?;
        let cross = format!("{from}.cross_attention");
        linear(&mut vars, &format!("{to}/attention/linear_0"), &format!("{cross}.query"))?;
        stack(
            &mut vars,
            &format!("{to}/attention/linear_1"),
            &[format!("{cross}.key"), format!("{cross}.value")],
        )?;
        linear(&mut vars, &format!("{to}/attention/linear_2"), &format!("{cross}.output"))?;
        norm(&mut vars, &format!("{to}/attention/layer_norm"), &format!("{from}.cross_residual.norm"))?;
        unscaled(&mut vars, &format!("{to}/attention"));
        ffn(&mut vars, &to, &from)?;
    }
    Ok((vars, aliases))
}

/// `vars` converted as CTranslate2's `LayerSpec._quantize` converts them: weights that have a
/// `weight_scale` beside them in its specification (linear layers' and embeddings') quantized,
/// the other floats cast; scalars kept.
fn quantize(vars: BTreeMap<String, Var>, q: Quantization) -> BTreeMap<String, Var> {
    let mut out = BTreeMap::new();
    for (name, v) in vars {
        if v.shape.is_empty() || v.dtype != Dtype::F32 {
            out.insert(name, v);
            continue;
        }
        let quantizable = name.ends_with("/weight")
            && (name.contains("/linear_") || name.contains("/embeddings") || name.contains("/projection"));
        if !quantizable {
            out.insert(name, v.cast(q.others()));
            continue;
        }
        let values = v.values();
        match q {
            Quantization::Int8
            | Quantization::Int8Float32
            | Quantization::Int8Float16
            | Quantization::Int8Bfloat16 => {
                let cols = v.shape[1..].iter().product::<usize>().max(1);
                let mut scales = Vec::with_capacity(v.shape[0]);
                let mut bytes = Vec::with_capacity(values.len());
                for row in values.chunks(cols) {
                    let mut amax = row.iter().fold(0f32, |m, x| m.max(x.abs()));
                    if amax == 0.0 {
                        amax = 127.0;
                    }
                    let amax = amax.max(127.0 / f32::MAX);
                    let scale = 127.0 / amax;
                    scales.push(scale);
                    bytes.extend(row.iter().map(|&x| (x * scale).round_ties_even() as i8 as u8));
                }
                out.insert(name.clone(), Var { shape: v.shape.clone(), dtype: Dtype::I8, bytes });
                out.insert(format!("{name}_scale"), Var::floats(vec![scales.len()], &scales));
            }
            Quantization::Int16 => {
                let amax = values.iter().fold(0f32, |m, x| m.max(x.abs()));
                let scale = 1024.0 / amax;
                let bytes = values
                    .iter()
                    .flat_map(|&x| {
                        ((x * scale).round_ties_even().clamp(i16::MIN as f32, i16::MAX as f32) as i16)
                            .to_le_bytes()
                    })
                    .collect();
                out.insert(name.clone(), Var { shape: v.shape.clone(), dtype: Dtype::I16, bytes });
                out.insert(format!("{name}_scale"), Var::floats(vec![], &[scale]));
            }
            Quantization::Float16 => {
                out.insert(name, v.cast(Dtype::F16));
            }
            Quantization::Bfloat16 => {
                out.insert(name, v.cast(Dtype::Bf16));
            }
            Quantization::Float32 => {
                out.insert(name, v);
            }
        }
    }
    out
}

/// `model.bin`: CTranslate2's binary version 6, `TransformerSpec` revision 7, the variables in
/// name order, then the aliases.
fn serialize(vars: &BTreeMap<String, Var>, aliases: &BTreeMap<String, String>) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend(((s.len() + 1) as u16).to_le_bytes());
        out.extend(s.as_bytes());
        out.push(0);
    }
    let mut out = Vec::new();
    out.extend(6u32.to_le_bytes());
    string(&mut out, "TransformerSpec");
    out.extend(7u32.to_le_bytes());
    out.extend((vars.len() as u32).to_le_bytes());
    for (name, v) in vars {
        string(&mut out, name);
        out.push(v.shape.len() as u8);
        for &d in &v.shape {
            out.extend((d as u32).to_le_bytes());
        }
        out.push(v.dtype as u8);
        out.extend((v.bytes.len() as u32).to_le_bytes());
        out.extend(&v.bytes);
    }
    out.extend((aliases.len() as u32).to_le_bytes());
    for (alias, target) in aliases {
        string(&mut out, alias);
        string(&mut out, target);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// int8 rows as CTranslate2's converter quantizes them (numpy: `rint(w · 127/amax)`, a zero
    /// row scaled by 1), and the binary layout's header.
    #[test]
    fn int8_rows_and_the_header() {
        let mut vars = BTreeMap::new();
        vars.insert(
            "decoder/projection/weight".to_string(),
            Var::floats(vec![2, 3], &[0.5, -1.0, 0.25, 0.0, 0.0, 0.0]),
        );
        vars.insert("decoder/projection/bias".to_string(), Var::floats(vec![2], &[0.5, 1.0]));
        let q = quantize(vars, Quantization::Int8Float16);
        let w = &q["decoder/projection/weight"];
        assert_eq!(w.bytes.iter().map(|&b| b as i8).collect::<Vec<_>>(), [64, -127, 32, 0, 0, 0]);
        assert_eq!(q["decoder/projection/weight_scale"].values(), [127.0, 1.0]);
        assert_eq!(q["decoder/projection/bias"].dtype, Dtype::F16);
        let bin = serialize(&q, &BTreeMap::new());
        assert_eq!(&bin[..4], &6u32.to_le_bytes());
        assert_eq!(&bin[4..6], &16u16.to_le_bytes());
        assert_eq!(&bin[6..22], b"TransformerSpec\0");
    }
}
