//! `s2s translate`: source sentences on stdin, translations on stdout, in input order.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use s2s_data::line::{LineRead, MAX_LINE_BYTES, read_line, skip_line};
use s2s_data::{BatchConfig, DataError, Example, Tokenizers, normalize};
use s2s_decode::{
    BeamConfig, CapturedSearch, DecodeCaptureStats, Ensemble, Hypothesis, Incremental, LengthPenalty,
    MaxLength, MemoryLimit, Names, RowState, Run, SampleConfig, SearchSize,
};
use s2s_models::Model;
use s2s_train::checkpoint::Checkpoints;
use s2s_train::config::Capture;
use s2s_train::device::{DeviceChoice, select};
use s2s_train::evaluate::{CAPTURED_CHAINS, Search, translate_prefixed};
use s2s_train::forced::{Forced, cross_layers, force};
use s2s_train::precision::Precision;
use s2s_train::run::{RunManifest, read_manifest};

use crate::args;
use crate::forced::{
    AlignMode, MAX_TARGET_TOKENS, NbestLine, alignment_field, parse_nbest, read_lines, too_few_lines,
    too_many_lines, word_of_tokens,
};

/// Translate stdin to stdout with a trained run: one line in, one line out, in order.
#[derive(Args, Debug)]
pub struct TranslateArgs {
    /// The run directory (`s2s train --run`): its tokenizer, config and best checkpoint. Given
    /// several times, the runs decode as an ensemble (their log-probabilities averaged at every
    /// step); they must share their tokenizers.
    #[arg(long = "model", value_name = "RUN_DIR", required = true)]
    runs: Vec<PathBuf>,
    /// Which checkpoint: best, last, or the name of one under RUN_DIR/checkpoints (e.g.
    /// average-last-5, written by `s2s average`).
    #[arg(long, default_value = "best")]
    checkpoint: String,
    /// Beam size (1: greedy search). The search's memory is estimated first, and a beam that
    /// would exceed the limit (half of this machine's memory; S2S_SEARCH_MEMORY sets another,
    /// e.g. 8G) is refused with the largest that fits.
    #[arg(long, default_value_t = 5, value_parser = args::at_least_one)]
    beam: usize,
    /// Length-penalty exponent α, 0 or more (0: raw log-probability).
    #[arg(long, default_value_t = 0.6, value_parser = args::non_negative, allow_negative_numbers = true)]
    alpha: f64,
    /// Length penalty: gnmt ((5+len)/6)^α or power len^α.
    #[arg(long, default_value = "gnmt", value_parser = parse_penalty)]
    penalty: LengthPenalty,
    /// Print the N best hypotheses per sentence as `i ||| hypothesis ||| score`.
    #[arg(long)]
    nbest: Option<usize>,
    /// Sentences per batch.
    #[arg(long, default_value_t = 64, value_parser = args::at_least_one)]
    batch_size: usize,
    /// Lines read (and flushed) per chunk.
    #[arg(long, default_value_t = 256, value_parser = args::at_least_one)]
    chunk: usize,
    /// Longest source in subword tokens; longer lines are truncated with a warning.
    #[arg(long, default_value_t = 250, value_parser = args::at_least_one)]
    max_src_tokens: usize,
    /// Replace lines that are not UTF-8, or longer than 1 MiB, by an empty line (with a warning)
    /// instead of stopping.
    #[arg(long)]
    skip_invalid: bool,
    /// Write an SVG attention heatmap per sentence into this directory (`<line>.svg`).
    #[arg(long)]
    attention: Option<PathBuf>,
    /// Device: auto, cpu or wgpu.
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
    /// GPU decoding steps captured as graphs per batch shape and replayed (greedy and beam
    /// search without --attention): auto (on a physical GPU), on, off.
    #[arg(long, default_value = "auto")]
    capture: Capture,
    /// Matrix-product precision: f32, or mixed (f16 products; a GPU only). Mixed decoding may
    /// pick another token where two are nearly tied.
    #[arg(long, default_value = "f32")]
    precision: Precision,
    /// Weights of the decoding products: none (f32), or int8 (each weight quantized once, one
    /// scale per output unit; inputs per row; int32 sums; the CPU only). Default: int8 for an
    /// int8 checkpoint (`s2s quantize`), else none.
    #[arg(long, value_name = "none|int8")]
    quantize: Option<s2s_kernels::quantize::Quantize>,
    /// Sample each next token instead of searching (--temperature, --top-k, --top-p, --seed);
    /// reproducible for a seed, whatever the batch size.
    #[arg(long, conflicts_with_all = ["nbest", "beam"])]
    sample: bool,
    /// Sampling temperature (1: the model's distribution).
    #[arg(long, default_value_t = 1.0, requires = "sample", value_parser = args::positive, allow_negative_numbers = true)]
    temperature: f64,
    /// Sample among the k most probable tokens only (0: all).
    #[arg(long, default_value_t = 0, requires = "sample")]
    top_k: usize,
    /// Sample among the fewest most probable tokens whose mass reaches p (1: all).
    #[arg(long, default_value_t = 1.0, requires = "sample", value_parser = args::mass, allow_negative_numbers = true)]
    top_p: f64,
    /// Seed of the sampling.
    #[arg(long, default_value_t = 1, requires = "sample")]
    seed: u64,
    /// Score the targets of FILE instead of translating (forced decoding; fairseq's
    /// --score-reference): line i of FILE is the target of stdin line i, and each output line is
    /// its log-probability under the model (the sum over its tokens and `</s>`, natural log),
    /// teacher-forced as training scores it.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["sample", "nbest", "prefix", "rescore"])]
    score_target: Option<PathBuf>,
    /// With --score-target: each token's log-probability after the sentence's (`score ||| lp₁ … lp_eos`).
    #[arg(long, requires = "score_target")]
    per_token: bool,
    /// Rescore the Moses n-best list of FILE (`id ||| hypothesis ||| features ||| score`, id the
    /// 0-based stdin line of its source): each line is written back with the model's
    /// log-probability of its hypothesis added to its features as `Score= x`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["sample", "nbest", "prefix", "alignment"])]
    rescore: Option<PathBuf>,
    /// Start each output with the words of line i of FILE (tokenised by the target tokenizer),
    /// however improbable, and search on from there (greedy and beam search).
    #[arg(long, value_name = "FILE", conflicts_with = "sample")]
    prefix: Option<PathBuf>,
    /// After each output, ` ||| ` and its word alignment from the cross-attention: hard (Pharaoh
    /// `i-j` pairs, source word i, target word j, 0-based) or soft (per target word, its
    /// attention over the source words, comma-separated).
    #[arg(long, value_name = "hard|soft")]
    alignment: Option<AlignMode>,
    /// The Transformer decoder layer (0-based) whose cross-attention, averaged over its heads,
    /// aligns; default the last.
    #[arg(long, value_name = "LAYER", requires = "alignment")]
    alignment_layer: Option<usize>,
}

fn parse_penalty(s: &str) -> Result<LengthPenalty, String> {
    match s {
        "gnmt" => Ok(LengthPenalty::Gnmt),
        "power" => Ok(LengthPenalty::Power),
        _ => Err(format!("unknown length penalty `{s}`: use gnmt or power")),
    }
}

/// Padded tokens (the longer side) of a batch of forced decoding at most, beside --batch-size.
const FORCED_BATCH_TOKENS: usize = 4096;

/// Loaded runs (one, or an ensemble), ready to translate.
struct Translator {
    models: Vec<Model>,
    tok: Tokenizers,
    search: Search,
    batch: BatchConfig,
    device: burn::tensor::Device,
    max_src: usize,
    /// Whether greedy and beam steps are replayed from captured graphs.
    capture: bool,
    /// The products' precision.
    precision: Precision,
    /// The output length limit of the (first) run.
    limit: MaxLength,
    /// `--score-target`'s lines, `--prefix`'s lines.
    targets: Option<Vec<String>>,
    prefixes: Option<Vec<String>>,
    /// `--rescore`'s lines, read before stdin.
    nbest: Option<Vec<String>>,
}

impl Translator {
    /// Loads the runs named by --model and sets up the search, batching and capture they decode with.
    fn load(a: &TranslateArgs) -> Result<Self> {
        let (device, name) = select(a.device);
        eprintln!("device: {name}");
        let LoadedRuns { models, tok, manifest, state } = load_runs(a, &device)?;
        let search = search_for(a, manifest.config.train.max_output)?;
        check_memory(a, &search, &tok, state, manifest.config.train.max_output)?;
        let batch =
            BatchConfig { max_tokens: usize::MAX / 4, max_sentences: a.batch_size, ..Default::default() };
        let capture = capture_for(a.capture, &device)?;
        a.precision.check_device(&device).map_err(|e| anyhow::anyhow!("--precision mixed: {e}"))?;
        let precision = a.precision;
        if a.alignment.is_some() {
            check_alignment(a, &models)?;
        }
        let targets = a.score_target.as_deref().map(|p| read_lines("--score-target", p)).transpose()?;
        let prefixes = a.prefix.as_deref().map(|p| read_lines("--prefix", p)).transpose()?;
        let nbest = a.rescore.as_deref().map(|p| read_lines("--rescore", p)).transpose()?;
        let limit = manifest.config.train.max_output;
        let int8_checkpoint = a.runs.iter().any(|r| {
            Checkpoints::new(r).named(&a.checkpoint).is_ok_and(|d| s2s_train::quantized::is_int8(&d))
        });
        let quantize = s2s_train::quantized::choose(a.quantize, int8_checkpoint, &device)?;
        if let Some(kernel) = quantize.kernel_name() {
            eprintln!("products: int8 ({kernel})");
        }
        s2s_kernels::quantize::set_quantize(quantize);
        Ok(Self {
            models,
            tok,
            search,
            batch,
            device,
            max_src: a.max_src_tokens,
            capture,
            precision,
            limit,
            targets,
            prefixes,
            nbest,
        })
    }

    /// Target ids of `text`, line `line` of `flag`'s `path` (normalised as sources are), refusing
    /// more than `max` tokens.
    fn encode_target(
        &self,
        flag: &str,
        path: &Path,
        line: usize,
        text: &str,
        max: usize,
    ) -> Result<Vec<u32>> {
        let ids = self.tok.tgt.encode(&normalize(text));
        if ids.len() > max {
            bail!(
                "{flag} {}:{line}: {} target tokens, more than {max}, the most {}",
                path.display(),
                ids.len(),
                if flag == "--prefix" {
                    "this source's output may have (the run's [train] max_output limit)"
                } else {
                    "scored (fairseq's --max-target-positions)"
                }
            );
        }
        Ok(ids)
    }

    /// Forced decoding of `(source, target)` pairs by every model, with the attention of
    /// --alignment-layer when `attention`.
    fn force(&self, pairs: &[Example], attention: bool, a: &TranslateArgs) -> Vec<Forced> {
        let models: Vec<&Model> = self.models.iter().collect();
        let layer = attention.then_some(a.alignment_layer);
        // The teacher-forced pass holds `[rows, length, vocab]` log-probabilities: a batch is
        // also bounded by its padded tokens, whatever the lengths.
        let batch = BatchConfig { max_tokens: FORCED_BATCH_TOKENS, ..self.batch };
        self.precision.products(|| force(&models, pairs, batch, &self.device, layer))
    }

    /// The ` ||| alignment` field of `src` → `tgt` given its forced decoding, or nothing.
    fn alignment(&self, a: &TranslateArgs, src: &[u32], tgt: &[u32], f: &Forced) -> String {
        match (a.alignment, &f.attention) {
            (Some(mode), Some(att)) => format!(
                " ||| {}",
                alignment_field(
                    mode,
                    att,
                    &word_of_tokens(&self.tok.src, src),
                    &word_of_tokens(&self.tok.tgt, tgt)
                )
            ),
            (Some(_), None) => " ||| ".into(),
            _ => String::new(),
        }
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

    /// Translates a chunk whose first line has the 0-based index `first` in the input (empty
    /// sources give no hypotheses).
    fn run<'t>(
        &'t self,
        sources: &[Vec<u32>],
        prefixes: &[Vec<u32>],
        first: usize,
        kept: &mut Kept<'t>,
    ) -> Vec<Vec<Hypothesis>> {
        let mut out = vec![Vec::new(); sources.len()];
        // Sampling draws sentence i's tokens from stream i: each line translated on its own
        // index, so empty lines skipped here do not shift the others.
        let todo: Vec<usize> = (0..sources.len()).filter(|&i| !sources[i].is_empty()).collect();
        let groups: Vec<Vec<usize>> = match self.search {
            Search::Sample(_) => consecutive_runs(&todo),
            _ => vec![todo],
        };
        for group in groups {
            let picked: Vec<Vec<u32>> = group.iter().map(|&i| sources[i].clone()).collect();
            let picked_prefixes: Vec<Vec<u32>> =
                group.iter().map(|&i| prefixes.get(i).cloned().unwrap_or_default()).collect();
            let search = match self.search {
                Search::Sample(c) => {
                    Search::Sample(SampleConfig { first_index: (first + group[0]) as u64, ..c })
                }
                s => s,
            };
            let hyps = self.precision.products(|| match kept {
                Kept::Single(captured) => translate_prefixed(
                    &self.models[0],
                    &picked,
                    &picked_prefixes,
                    self.batch,
                    &search,
                    &self.device,
                    captured,
                ),
                Kept::Ensemble(ensemble, captured) => translate_prefixed(
                    *ensemble,
                    &picked,
                    &picked_prefixes,
                    self.batch,
                    &search,
                    &self.device,
                    captured,
                ),
            });
            for (h, &i) in hyps.into_iter().zip(&group) {
                out[i] = h;
            }
        }
        out
    }
}

/// The models of the runs, with the first run's tokenizers and manifest.
struct LoadedRuns {
    models: Vec<Model>,
    tok: Tokenizers,
    manifest: RunManifest,
    /// A decoding row of every model together.
    state: RowState,
}

/// Loads each run's manifest, tokenizers and checkpoint in order, checking that the runs share vocabularies.
fn load_runs(a: &TranslateArgs, device: &burn::tensor::Device) -> Result<LoadedRuns> {
    let mut models = Vec::with_capacity(a.runs.len());
    let mut state = RowState::default();
    let mut first: Option<(PathBuf, Tokenizers, RunManifest)> = None;
    for run in &a.runs {
        let manifest = read_manifest(run)
            .with_context(|| format!("{} is not a run directory (no readable run.json)", run.display()))?;
        let tok = Tokenizers::load(&run.join("tokenizer"))
            .with_context(|| format!("loading {}", run.join("tokenizer").display()))?;
        if let Some((first_run, first_tok, _)) = &first {
            check_shared_vocabularies(first_run, first_tok, run, &tok)?;
        }
        let dir = Checkpoints::new(run).named(&a.checkpoint)?;
        eprintln!("checkpoint: {}", dir.display());
        let model = s2s_train::load_model(&manifest.config.model, &tok, &dir, &device.clone().autodiff())?;
        models.push(burn::module::Module::valid(&model));
        state = state + RowState::of(&manifest.config.model);
        if first.is_none() {
            first = Some((run.clone(), tok, manifest));
        }
    }
    let (_, tok, manifest) = first.context("give at least one --model RUN_DIR")?;
    Ok(LoadedRuns { models, tok, manifest, state })
}

/// Errors unless `run`'s source and target vocabularies are those of `first_run`.
fn check_shared_vocabularies(
    first_run: &Path,
    first_tok: &Tokenizers,
    run: &Path,
    tok: &Tokenizers,
) -> Result<()> {
    for (side, x, y) in [("source", &tok.src, &first_tok.src), ("target", &tok.tgt, &first_tok.tgt)] {
        if !x.same_as(y)? {
            bail!(
                "{} and {} have different {side} vocabularies: an ensemble's models must share \
                 their tokenizers (train them on the same corpus with the same [tokenizer] settings, \
                 as the models of one experiment are)",
                first_run.display(),
                run.display()
            );
        }
    }
    Ok(())
}

/// Refuses --alignment for a model without attention and an --alignment-layer a model lacks.
fn check_alignment(a: &TranslateArgs, models: &[Model]) -> Result<()> {
    for (run, m) in a.runs.iter().zip(models) {
        let layers = cross_layers(m);
        if layers == 0 {
            bail!(
                "--alignment: {} is an LSTM encoder-decoder without attention, which aligns nothing \
                 (align with an attention or Transformer model)",
                run.display()
            );
        }
        if let Some(l) = a.alignment_layer.filter(|&l| l >= layers) {
            bail!(
                "--alignment-layer {l}: {} has {layers} decoder layer{} with cross-attention (give 0 to {})",
                run.display(),
                if layers == 1 { "" } else { "s" },
                layers - 1
            );
        }
    }
    Ok(())
}

/// Returns the search the flags ask for (sampling, greedy or beam), after checking --beam and --nbest.
fn search_for(a: &TranslateArgs, limit: MaxLength) -> Result<Search> {
    let nbest = a.nbest.unwrap_or(1);
    if nbest == 0 || nbest > a.beam {
        bail!("--nbest must be between 1 and --beam ({})", a.beam);
    }
    let keep_attention = a.attention.is_some();
    let search = if a.sample {
        let cfg = SampleConfig {
            temperature: a.temperature,
            top_k: a.top_k,
            top_p: a.top_p,
            seed: a.seed,
            first_index: 0,
            max_length: limit,
        };
        cfg.check().map_err(|e| anyhow::anyhow!("--sample: {e}"))?;
        Search::Sample(cfg)
    } else if a.beam == 1 {
        Search::Greedy { limit, attention: keep_attention }
    } else {
        Search::Beam(BeamConfig {
            beam: a.beam,
            alpha: a.alpha,
            penalty: a.penalty,
            nbest,
            max_length: limit,
            attention: keep_attention,
        })
    };
    Ok(search)
}

/// Refuses a search whose memory estimate at the largest batch the flags allow (--batch-size
/// sentences, or --chunk when fewer, of --max-src-tokens each) exceeds this machine's limit.
fn check_memory(
    a: &TranslateArgs,
    search: &Search,
    tok: &Tokenizers,
    state: RowState,
    limit: MaxLength,
) -> Result<()> {
    let beam = match search {
        Search::Beam(c) => c.beam,
        Search::Greedy { .. } | Search::Sample(_) => 1,
    };
    let size = SearchSize {
        beam,
        sentences: a.batch_size.min(a.chunk),
        vocab: tok.tgt.vocab_size(),
        src_len: a.max_src_tokens.saturating_add(1),
        max_length: limit,
        attention: a.attention.is_some(),
        observed: false,
        state,
    };
    let memory = MemoryLimit::from_env()?;
    size.check(memory).map_err(|e| {
        anyhow::anyhow!(e.message(&Names {
            beam: "--beam",
            sentences: "--batch-size",
            source: "--max-src-tokens"
        }))
    })?;
    Ok(())
}

/// Whether decoding steps are replayed from captured graphs: --capture resolved against the device.
fn capture_for(capture: Capture, device: &burn::tensor::Device) -> Result<bool> {
    let gpu = !s2s_kernels::ops::is_cpu(device);
    Ok(match capture {
        Capture::On if !gpu => {
            bail!("--capture on needs a GPU device (--device wgpu): the CPU launches no kernels")
        }
        Capture::On => true,
        Capture::Auto => gpu && !burn::tensor::Device::enumerate_physical().is_empty(),
        Capture::Off => false,
    })
}

/// What lives across chunks: the ensemble, and the captured decoding graphs (recorded by the
/// first chunk of each batch shape, replayed by the next).
enum Kept<'t> {
    Single(Option<CapturedSearch<'t, Model>>),
    Ensemble(&'t Ensemble<'t, Model>, Option<CapturedSearch<'t, Ensemble<'t, Model>>>),
}

impl Kept<'_> {
    /// Says on stderr what the captured search did, when it ran.
    fn report(&self) {
        fn what<'a, M: Incremental>(
            c: &'a Option<CapturedSearch<'_, M>>,
        ) -> (Option<DecodeCaptureStats>, Option<&'a str>)
        where
            M::State: Clone,
        {
            (c.as_ref().map(CapturedSearch::stats), c.as_ref().and_then(|c| c.first_refusal()))
        }
        let (stats, refusal) = match self {
            Kept::Single(c) => what(c),
            Kept::Ensemble(_, c) => what(c),
        };
        if let Some(s) = stats {
            eprintln!(
                "captured decoding: {} graphs recorded, {} replayed ({} batch shapes)",
                s.captures, s.replays, s.chains_alive
            );
        }
        if let (Some(s), Some(why)) = (stats, refusal) {
            eprintln!(
                "captured decoding: {} batch shapes decoded eagerly instead; the first because {why}",
                s.refused
            );
        }
    }
}

/// Runs `s2s translate`.
pub fn run(a: TranslateArgs) -> Result<()> {
    let t = Translator::load(&a)?;
    let ensemble = Ensemble::new(t.models.iter().collect());
    let mut kept = keep(&t, &ensemble);
    if let Some(dir) = &a.attention {
        s2s_data::create_dir_all(dir)?;
    }
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    // An n-best list names its sources by line: it is rescored once stdin is read.
    let chunk = if a.rescore.is_some() {
        usize::MAX
    } else if interactive {
        1
    } else {
        a.chunk
    };
    let mut input = stdin.lock();
    let mut out = crate::out::Stdout::lock();
    let mut line_no = 0usize;
    let mut pending: Vec<Vec<u32>> = Vec::new();
    let mut failure: Option<anyhow::Error> = None;
    loop {
        if interactive {
            eprint!("> ");
            std::io::stderr().flush().ok();
        }
        let mut buf = Vec::new();
        let read = read_line(&mut input, &mut buf, MAX_LINE_BYTES).context("reading stdin")?;
        let n = usize::from(read != LineRead::End);
        if read == LineRead::TooLong {
            line_no += 1;
            skip_line(&mut input).context("reading stdin")?;
            if let Err(e) = push_too_long(&a, line_no, &mut pending) {
                failure = Some(e);
            }
        } else if read == LineRead::Line {
            line_no += 1;
            if let Err(e) = push_line(&t, &a, line_no, buf, &mut pending) {
                failure = Some(e);
            }
        }
        if a.rescore.is_none()
            && (pending.len() >= chunk
                || (n == 0 && !pending.is_empty())
                || (failure.is_some() && !pending.is_empty()))
        {
            let first = line_no - pending.len() - usize::from(failure.is_some()) + 1;
            write_chunk(&t, &a, &pending, first, &mut kept, &mut out)?;
            pending.clear();
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if n == 0 {
            if let (Some(path), Some(lines)) = (&a.rescore, &t.nbest) {
                write_rescored(&t, &a, path, lines, &pending, &mut out)?;
            }
            for (flag, path, lines) in
                [("--score-target", &a.score_target, &t.targets), ("--prefix", &a.prefix, &t.prefixes)]
            {
                if let (Some(path), Some(lines)) = (path, lines) {
                    if lines.len() > line_no {
                        return Err(too_many_lines(flag, path, lines.len(), line_no));
                    }
                }
            }
            kept.report();
            return Ok(());
        }
    }
}

/// Returns what lives across chunks: the single model or the ensemble, each with its captured search
/// when capture is on.
fn keep<'t>(t: &'t Translator, ensemble: &'t Ensemble<'t, Model>) -> Kept<'t> {
    if t.models.len() == 1 {
        Kept::Single(
            t.capture.then(|| CapturedSearch::new(&t.models[0], &t.device, Run::Replay, CAPTURED_CHAINS)),
        )
    } else {
        Kept::Ensemble(
            ensemble,
            t.capture.then(|| CapturedSearch::new(ensemble, &t.device, Run::Replay, CAPTURED_CHAINS)),
        )
    }
}

/// Strips line `line_no`'s ending and queues its source ids on `pending` (empty, with a warning, for
/// invalid UTF-8 under --skip-invalid); an error for invalid UTF-8 otherwise.
fn push_line(
    t: &Translator,
    a: &TranslateArgs,
    line_no: usize,
    mut buf: Vec<u8>,
    pending: &mut Vec<Vec<u32>>,
) -> Result<()> {
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
            return Err(anyhow::anyhow!(
                "stdin line {line_no} is not valid UTF-8: convert the input (e.g. iconv -t UTF-8), \
                 or pass --skip-invalid to leave its output line empty"
            ));
        }
    }
    Ok(())
}

/// Queues an empty output for line `line_no`, longer than [`MAX_LINE_BYTES`], with a warning under
/// --skip-invalid; an error naming the line otherwise.
fn push_too_long(a: &TranslateArgs, line_no: usize, pending: &mut Vec<Vec<u32>>) -> Result<()> {
    if a.skip_invalid {
        eprintln!("warning: line {line_no} is longer than {MAX_LINE_BYTES} bytes: output left empty");
        pending.push(Vec::new());
        return Ok(());
    }
    let e = DataError::LineTooLong { path: "stdin".into(), line: line_no, limit: MAX_LINE_BYTES };
    Err(anyhow::anyhow!("{e}; or pass --skip-invalid to leave its output line empty"))
}

/// `indices` (ascending) cut into runs of consecutive values.
fn consecutive_runs(indices: &[usize]) -> Vec<Vec<usize>> {
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for &i in indices {
        match runs.last_mut() {
            Some(run) if run.last() == Some(&(i - 1)) => run.push(i),
            _ => runs.push(vec![i]),
        }
    }
    runs
}

/// Translates and writes a chunk whose first line is `first` (1-based), then flushes.
fn write_chunk<'t>(
    t: &'t Translator,
    a: &TranslateArgs,
    sources: &[Vec<u32>],
    first: usize,
    kept: &mut Kept<'t>,
    out: &mut impl Write,
) -> Result<()> {
    if let (Some(path), Some(targets)) = (&a.score_target, &t.targets) {
        return write_scores(t, a, path, targets, sources, first, out);
    }
    let prefixes = match (&a.prefix, &t.prefixes) {
        (Some(path), Some(lines)) => encode_prefixes(t, path, lines, sources, first)?,
        _ => Vec::new(),
    };
    let hyps = t.run(sources, &prefixes, first - 1, kept);
    let shown = a.nbest.unwrap_or(1);
    // The attention of each hypothesis written, teacher-forced (`s2s_train::forced`).
    let mut aligned = std::collections::HashMap::new();
    if a.alignment.is_some() {
        let mut pairs = Vec::new();
        let mut which = Vec::new();
        for (k, h) in hyps.iter().enumerate() {
            for (r, hyp) in h.iter().take(shown).enumerate() {
                pairs.push(Example { src: sources[k].clone(), tgt: hyp.tokens.clone() });
                which.push((k, r));
            }
        }
        aligned = which.into_iter().zip(t.force(&pairs, true, a)).collect();
    }
    let align = |k: usize, r: usize, tokens: &[u32]| match aligned.get(&(k, r)) {
        Some(f) => t.alignment(a, &sources[k], tokens, f),
        None if a.alignment.is_some() => " ||| ".to_string(),
        None => String::new(),
    };
    for (k, (src, h)) in sources.iter().zip(&hyps).enumerate() {
        let line = first + k;
        if let Some(n) = a.nbest {
            if h.is_empty() {
                writeln!(out, "{} ||| ||| 0{}", line - 1, align(k, 0, &[]))?;
            }
            for (r, hyp) in h.iter().take(n).enumerate() {
                let text = t.tok.tgt.decode(&hyp.tokens);
                writeln!(out, "{} ||| {text} ||| {:.4}{}", line - 1, hyp.score, align(k, r, &hyp.tokens))?;
            }
        } else {
            let tokens = h.first().map(|hyp| hyp.tokens.as_slice()).unwrap_or_default();
            let text = h.first().map(|hyp| t.tok.tgt.decode(&hyp.tokens)).unwrap_or_default();
            writeln!(out, "{text}{}", align(k, 0, tokens))?;
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

/// The prefixes of the chunk of `sources` whose first line is `first` (1-based), from
/// `--prefix`'s `lines`: each line's target ids, checked against its source's length limit
/// (empty for an empty source, which is not translated).
fn encode_prefixes(
    t: &Translator,
    path: &Path,
    lines: &[String],
    sources: &[Vec<u32>],
    first: usize,
) -> Result<Vec<Vec<u32>>> {
    let mut out = Vec::with_capacity(sources.len());
    for (k, src) in sources.iter().enumerate() {
        let line = first + k;
        let text = lines.get(line - 1).ok_or_else(|| too_few_lines("--prefix", path, lines.len(), line))?;
        let max = t.limit.for_source(src.len() + 1);
        let ids = t.encode_target("--prefix", path, line, text, max)?;
        out.push(if src.is_empty() { Vec::new() } else { ids });
    }
    Ok(out)
}

/// Writes the forced-decoding score of each of `targets`' lines given its source (the chunk
/// of `sources` whose first line is `first`, 1-based): `score`, then with --per-token
/// ` ||| ` and each token's log-probability, then with --alignment the alignment. An empty
/// source (an empty or skipped stdin line) gives an empty line, as it does when translating.
fn write_scores(
    t: &Translator,
    a: &TranslateArgs,
    path: &Path,
    targets: &[String],
    sources: &[Vec<u32>],
    first: usize,
    out: &mut impl Write,
) -> Result<()> {
    let mut pairs = Vec::new();
    let mut which = Vec::new();
    for (k, src) in sources.iter().enumerate() {
        let line = first + k;
        let text = targets
            .get(line - 1)
            .ok_or_else(|| too_few_lines("--score-target", path, targets.len(), line))?;
        let tgt = t.encode_target("--score-target", path, line, text, MAX_TARGET_TOKENS)?;
        if !src.is_empty() {
            pairs.push(Example { src: src.clone(), tgt });
            which.push(k);
        }
    }
    let forced = t.force(&pairs, a.alignment.is_some(), a);
    let mut lines = vec![String::new(); sources.len()];
    for ((k, f), pair) in which.into_iter().zip(&forced).zip(&pairs) {
        let mut line = format!("{:.4}", f.score());
        if a.per_token {
            let each: Vec<String> = f.log_probs.iter().map(|l| format!("{l:.4}")).collect();
            line.push_str(&format!(" ||| {}", each.join(" ")));
        }
        line.push_str(&t.alignment(a, &pair.src, &pair.tgt, f));
        lines[k] = line;
    }
    for line in lines {
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(())
}

/// Rescores the n-best list `lines` of `path` (`--rescore`) whose ids name lines of `sources` (all of
/// stdin): each line written back with the model's log-probability of its hypothesis added to
/// its features.
fn write_rescored(
    t: &Translator,
    a: &TranslateArgs,
    path: &Path,
    lines: &[String],
    sources: &[Vec<u32>],
    out: &mut impl Write,
) -> Result<()> {
    let nbest: Vec<NbestLine> = parse_nbest(path, lines, sources.len())?;
    let pairs = nbest
        .iter()
        .enumerate()
        .map(|(k, l)| {
            let tgt = t.encode_target("--rescore", path, k + 1, &l.hypothesis, MAX_TARGET_TOKENS)?;
            Ok(Example { src: sources[l.id].clone(), tgt })
        })
        .collect::<Result<Vec<_>>>()?;
    for (l, f) in nbest.iter().zip(t.force(&pairs, false, a)) {
        writeln!(out, "{}", l.with_feature(f.score()))?;
    }
    out.flush()?;
    Ok(())
}
