//! `s2s translate`: source sentences on stdin, translations on stdout, in input order.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use s2s_data::{BatchConfig, Tokenizers, normalize};
use s2s_decode::{BeamConfig, Hypothesis, LengthPenalty};
use s2s_models::Model;
use s2s_train::checkpoint::Checkpoints;
use s2s_train::device::{DeviceChoice, select};
use s2s_train::evaluate::{Search, translate};
use s2s_train::run::read_manifest;

/// Translate stdin to stdout with a trained run: one line in, one line out, in order.
#[derive(Args, Debug)]
pub struct TranslateArgs {
    /// The run directory (`s2s train --run`): its tokenizer, config and best checkpoint.
    #[arg(long = "model", value_name = "RUN_DIR")]
    run: PathBuf,
    /// Which checkpoint: best or last.
    #[arg(long, default_value = "best")]
    checkpoint: String,
    /// Beam size (1: greedy search).
    #[arg(long, default_value_t = 5)]
    beam: usize,
    /// Length-penalty exponent α (0: raw log-probability).
    #[arg(long, default_value_t = 0.6)]
    alpha: f64,
    /// Length penalty: gnmt ((5+len)/6)^α or power len^α.
    #[arg(long, default_value = "gnmt", value_parser = parse_penalty)]
    penalty: LengthPenalty,
    /// Print the N best hypotheses per sentence as `i ||| hypothesis ||| score`.
    #[arg(long)]
    nbest: Option<usize>,
    /// Sentences per batch.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Lines read (and flushed) per chunk.
    #[arg(long, default_value_t = 256)]
    chunk: usize,
    /// Longest source in subword tokens; longer lines are truncated with a warning.
    #[arg(long, default_value_t = 250)]
    max_src_tokens: usize,
    /// Replace lines that are not UTF-8 by an empty line (with a warning) instead of stopping.
    #[arg(long)]
    skip_invalid: bool,
    /// Write an SVG attention heatmap per sentence into this directory (`<line>.svg`).
    #[arg(long)]
    attention: Option<PathBuf>,
    /// Device: auto, cpu or wgpu.
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
}

fn parse_penalty(s: &str) -> Result<LengthPenalty, String> {
    match s {
        "gnmt" => Ok(LengthPenalty::Gnmt),
        "power" => Ok(LengthPenalty::Power),
        _ => Err(format!("unknown length penalty `{s}`: use gnmt or power")),
    }
}

/// A loaded run, ready to translate.
struct Translator {
    model: Model,
    tok: Tokenizers,
    search: Search,
    batch: BatchConfig,
    device: burn::tensor::Device,
    max_src: usize,
}

impl Translator {
    fn load(a: &TranslateArgs) -> Result<Self> {
        let manifest = read_manifest(&a.run)
            .with_context(|| format!("{} is not a run directory (no readable run.json)", a.run.display()))?;
        let tok = Tokenizers::load(&a.run.join("tokenizer"))
            .with_context(|| format!("loading {}", a.run.join("tokenizer").display()))?;
        let which = a.checkpoint.as_str();
        if which != "best" && which != "last" {
            bail!("--checkpoint must be best or last, not `{which}`");
        }
        let dir = Checkpoints::new(&a.run).pointed(which)?.with_context(|| {
            format!("{} has no {which} checkpoint yet: train it first (s2s train --run ...)", a.run.display())
        })?;
        let (device, name) = select(a.device);
        eprintln!("device: {name}; checkpoint: {}", dir.display());
        let model = s2s_train::load_model(&manifest.config.model, &tok, &dir, &device.clone().autodiff())?;
        let model = burn::module::Module::valid(&model);
        if a.beam == 0 {
            bail!("--beam must be at least 1");
        }
        let nbest = a.nbest.unwrap_or(1);
        if nbest == 0 || nbest > a.beam {
            bail!("--nbest must be between 1 and --beam ({})", a.beam);
        }
        let limit = manifest.config.train.max_output;
        let capture = a.attention.is_some();
        let search = if a.beam == 1 {
            Search::Greedy { limit, attention: capture }
        } else {
            Search::Beam(BeamConfig {
                beam: a.beam,
                alpha: a.alpha,
                penalty: a.penalty,
                nbest,
                max_length: limit,
                attention: capture,
            })
        };
        let batch = BatchConfig {
            max_tokens: usize::MAX / 4,
            max_sentences: a.batch_size.max(1),
            ..Default::default()
        };
        Ok(Self { model, tok, search, batch, device, max_src: a.max_src_tokens.max(1) })
    }

    /// Encodes one line (empty stays empty), truncating with a warning.
    fn encode(&self, line_no: usize, text: &str) -> Vec<u32> {
        let mut ids = self.tok.src.encode(&normalize(text));
        if ids.len() > self.max_src {
            eprintln!(
                "warning: line {line_no}: {} source tokens, truncated to {} (--max-src-tokens)",
                ids.len(),
                self.max_src
            );
            ids.truncate(self.max_src);
        }
        ids
    }

    /// Translates a chunk (empty sources give no hypotheses).
    fn run(&self, sources: &[Vec<u32>]) -> Vec<Vec<Hypothesis>> {
        let todo: Vec<usize> = (0..sources.len()).filter(|&i| !sources[i].is_empty()).collect();
        let picked: Vec<Vec<u32>> = todo.iter().map(|&i| sources[i].clone()).collect();
        let mut out = vec![Vec::new(); sources.len()];
        for (h, i) in
            translate(&self.model, &picked, self.batch, &self.search, &self.device).into_iter().zip(todo)
        {
            out[i] = h;
        }
        out
    }
}

/// Runs `s2s translate`.
pub fn run(a: TranslateArgs) -> Result<()> {
    let t = Translator::load(&a)?;
    if let Some(dir) = &a.attention {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    let chunk = if interactive { 1 } else { a.chunk.max(1) };
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut line_no = 0usize;
    let mut pending: Vec<Vec<u32>> = Vec::new();
    let mut failure: Option<anyhow::Error> = None;
    loop {
        if interactive {
            eprint!("> ");
            std::io::stderr().flush().ok();
        }
        let mut buf = Vec::new();
        let n = input.read_until(b'\n', &mut buf).context("reading stdin")?;
        if n > 0 {
            line_no += 1;
            while buf.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
                buf.pop();
            }
            match String::from_utf8(buf) {
                Ok(text) => pending.push(t.encode(line_no, &text)),
                Err(_) if a.skip_invalid => {
                    eprintln!("warning: line {line_no} is not valid UTF-8: output left empty");
                    pending.push(Vec::new());
                }
                Err(_) => {
                    failure = Some(anyhow::anyhow!(
                        "stdin line {line_no} is not valid UTF-8: convert the input (e.g. iconv -t UTF-8), \
                         or pass --skip-invalid to leave its output line empty"
                    ));
                }
            }
        }
        if pending.len() >= chunk
            || (n == 0 && !pending.is_empty())
            || (failure.is_some() && !pending.is_empty())
        {
            let first = line_no - pending.len() - usize::from(failure.is_some()) + 1;
            write_chunk(&t, &a, &pending, first, &mut out)?;
            pending.clear();
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if n == 0 {
            return Ok(());
        }
    }
}

/// Translates and writes a chunk whose first line is `first` (1-based), then flushes.
fn write_chunk(
    t: &Translator,
    a: &TranslateArgs,
    sources: &[Vec<u32>],
    first: usize,
    out: &mut impl Write,
) -> Result<()> {
    let hyps = t.run(sources);
    for (k, (src, h)) in sources.iter().zip(&hyps).enumerate() {
        let line = first + k;
        if let Some(n) = a.nbest {
            if h.is_empty() {
                writeln!(out, "{} ||| ||| 0", line - 1)?;
            }
            for hyp in h.iter().take(n) {
                writeln!(out, "{} ||| {} ||| {:.4}", line - 1, t.tok.tgt.decode(&hyp.tokens), hyp.score)?;
            }
        } else {
            let text = h.first().map(|hyp| t.tok.tgt.decode(&hyp.tokens)).unwrap_or_default();
            writeln!(out, "{text}")?;
        }
        if let (Some(dir), Some(best)) = (&a.attention, h.first()) {
            if let Some(w) = &best.attention {
                let src_toks: Vec<String> =
                    src.iter().map(|&i| t.tok.src.token(i)).chain(std::iter::once("</s>".into())).collect();
                let out_toks: Vec<String> = best
                    .tokens
                    .iter()
                    .map(|&i| t.tok.tgt.token(i))
                    .chain(std::iter::once("</s>".into()))
                    .collect();
                let path = dir.join(format!("{line}.svg"));
                s2s_data::write_atomic(&path, s2s_report::heatmap::svg(&src_toks, &out_toks, w).as_bytes())
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    out.flush()?;
    Ok(())
}
