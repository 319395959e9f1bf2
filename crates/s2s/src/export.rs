//! `s2s export`: a run's checkpoint as safetensors (any model kind) or as a CTranslate2 model
//! directory (the Transformer).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use s2s_data::Tokenizers;
use s2s_train::checkpoint::Checkpoints;
use s2s_train::device::{DeviceChoice, select};
use s2s_train::export::{self, Quantization};
use s2s_train::run::read_manifest;

use crate::out::outln;

/// Export a run's checkpoint for other tools: `safetensors` (every model kind; tensor names
/// in docs/usage.md) or `ctranslate2` (a Transformer as a CTranslate2 model directory).
/// DIR must be new or empty; the run's tokenizer files are copied into DIR/tokenizer/.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The run directory.
    #[arg(value_name = "RUN_DIR")]
    run: PathBuf,
    /// What to write.
    #[arg(long, value_enum)]
    format: Format,
    /// The directory to write into (created; refused when it holds anything).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Which checkpoint: best, last, or the name of one under RUN_DIR/checkpoints (as for
    /// `s2s translate`).
    #[arg(long, default_value = "best")]
    checkpoint: String,
    /// With --format ctranslate2: the weights' type, as CTranslate2's converters take it
    /// (int8, int8_float32, int8_float16, int8_bfloat16, int16, float16, bfloat16, float32).
    #[arg(long, value_parser = parse_quantization)]
    quantization: Option<Quantization>,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// `model.safetensors` (f32, PyTorch layouts) and `config.json` (the model's hyperparameters).
    Safetensors,
    /// CTranslate2's `model.bin`, `config.json` and vocabularies.
    Ctranslate2,
}

fn parse_quantization(s: &str) -> Result<Quantization, String> {
    Quantization::parse(s)
        .ok_or_else(|| format!("unknown type `{s}`: use one of {}", Quantization::NAMES.join(", ")))
}

/// Runs `s2s export`.
pub fn run(a: ExportArgs) -> Result<()> {
    let manifest = read_manifest(&a.run)
        .with_context(|| format!("{} is not a run directory (no readable run.json)", a.run.display()))?;
    let spec = &manifest.config.model;
    if a.format == Format::Ctranslate2
        && let Some(why) = export::ctranslate2_refusal(spec)
    {
        bail!("--format ctranslate2: {}: {why}", a.run.display());
    }
    if a.format == Format::Safetensors && a.quantization.is_some() {
        bail!("--quantization is CTranslate2's (with --format ctranslate2); safetensors are written in f32");
    }
    check_empty(&a.out)?;
    let tok_dir = a.run.join("tokenizer");
    let tok = Tokenizers::load(&tok_dir).with_context(|| format!("loading {}", tok_dir.display()))?;
    let dir = Checkpoints::new(&a.run).named(&a.checkpoint)?;
    eprintln!("checkpoint: {}", dir.display());
    let (device, _) = select(DeviceChoice::Cpu);
    let model = s2s_train::load_model(spec, &tok, &dir, &device.autodiff())?;
    let model = burn::module::Module::valid(&model);
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    match a.format {
        Format::Safetensors => {
            let config = serde_json::json!({
                "kind": export::kind_name(spec),
                "model": spec,
                "src_vocab": tok.src.vocab_size(),
                "tgt_vocab": tok.tgt.vocab_size(),
                "joint_vocabulary": tok.joint,
                "checkpoint": dir.file_name().map(|n| n.to_string_lossy().into_owned()),
            });
            let text = serde_json::to_string_pretty(&config)? + "\n";
            let meta =
                [("s2s_kind", export::kind_name(spec).to_string()), ("s2s_config", config.to_string())];
            export::write_safetensors(&model, &a.out.join("model.safetensors"), &meta)?;
            let path = a.out.join("config.json");
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        Format::Ctranslate2 => {
            let q = a.quantization.unwrap_or(Quantization::Float32);
            export::write_ctranslate2(&model, spec, &tok, &a.out, q)?;
        }
    }
    copy_dir(&tok_dir, &a.out.join("tokenizer"))?;
    outln!("{}", a.out.display())?;
    Ok(())
}

/// Refuses an `--out` that exists and holds anything (nothing already there is overwritten).
fn check_empty(out: &Path) -> Result<()> {
    match std::fs::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!("--out {}: the directory is not empty; give a new or empty one", out.display());
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory || out.is_file() => {
            bail!("--out {}: a file, not a directory; give a new or empty directory", out.display())
        }
        Err(e) => Err(e).with_context(|| format!("--out {}", out.display())),
    }
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let p = e?.path();
        if p.is_file() {
            let dest = to.join(p.file_name().expect("a file has a name"));
            std::fs::copy(&p, &dest)
                .with_context(|| format!("copying {} to {}", p.display(), dest.display()))?;
        }
    }
    Ok(())
}
