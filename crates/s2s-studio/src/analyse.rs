//! What one request asks of one model, computed without HTTP: the translation by beam search
//! (beam 1 is greedy search) with its recorded steps, each output token's probability, every
//! attention map of the output and of the reference (teacher-forced through
//! [`Model::inspect`](s2s_models::Model::inspect)), the reference's forced-decoding score
//! beside the output's, and — where a gold word alignment is known — the alignment error
//! rate of the model's attention.

use std::time::Instant;

use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};
use s2s_data::{Batch, Example, normalize};
use s2s_decode::{BeamConfig, BeamObserver, Fate, Hypothesis, LengthPenalty, beam_search_observed};
use s2s_eval::alignment::AlignCounts;
use s2s_models::{AttentionKind, Source};
use serde::Serialize;

use crate::load::{Loaded, Studio, word_level};

/// Limits on one request.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest text, in characters.
    pub max_chars: usize,
    /// Longest source, and longest reference, in the model's tokens (`</s>` not counted).
    pub max_src_tokens: usize,
    /// Largest beam.
    pub max_beam: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_chars: 1000, max_src_tokens: 100, max_beam: 16 }
    }
}

impl Limits {
    /// Refuses limits under which a request's traced beam search — one sentence of up to
    /// `max_src_tokens`, at beam `max_beam` — could hold more than its share of `memory`, with
    /// `workers` requests decoding at once: each request is bounded by these limits, so every
    /// request the studio accepts then fits ([`s2s_decode::SearchSize`]).
    pub fn check_memory(
        &self,
        studio: &Studio,
        workers: usize,
        memory: s2s_decode::MemoryLimit,
    ) -> Result<(), crate::StudioError> {
        let workers = workers.max(1);
        let share =
            if workers == 1 { memory } else { s2s_decode::MemoryLimit::bytes(memory.bytes / workers as u64) };
        let shared = if workers == 1 {
            String::new()
        } else {
            format!(" (1/{workers} of {memory}, as --workers {workers} decode at once)")
        };
        for m in &studio.models {
            let spec = s2s_train::run::read_manifest(&m.run)?.config.model;
            let size = s2s_decode::SearchSize {
                beam: self.max_beam,
                sentences: 1,
                vocab: m.tok.tgt.vocab_size(),
                src_len: self.max_src_tokens.saturating_add(1),
                max_length: m.limit,
                attention: false,
                observed: true,
                state: s2s_decode::RowState::of(&spec),
            };
            size.check(share).map_err(|e| {
                let names = s2s_decode::Names {
                    beam: "--max-beam",
                    sentences: "--workers",
                    source: "--max-src-tokens",
                };
                crate::StudioError::Serve(format!(
                    "--max-beam {}: model `{}`: {}{shared}",
                    self.max_beam,
                    m.name,
                    e.message(&names)
                ))
            })?;
        }
        Ok(())
    }
}

/// A bad request, with its HTTP status and a message for the page.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    /// 400, 404, 413 …
    pub status: u16,
    /// What is wrong and what to do.
    pub message: String,
}

impl RequestError {
    /// A 400.
    pub fn bad(message: impl Into<String>) -> Self {
        Self { status: 400, message: message.into() }
    }
}

/// What to translate and how.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Source text.
    pub text: String,
    /// A reference translation: scored by forced decoding beside the output.
    #[serde(default)]
    pub reference: Option<String>,
    /// Models to run (all when absent).
    #[serde(default)]
    pub models: Option<Vec<String>>,
    /// Beam size (1: greedy search).
    #[serde(default = "default_beam")]
    pub beam: usize,
    /// Length-penalty exponent α of GNMT's `((5 + len) / 6)^α`.
    #[serde(default = "default_alpha")]
    pub alpha: f64,
}

fn default_beam() -> usize {
    5
}
fn default_alpha() -> f64 {
    0.6
}

impl Request {
    /// Checks the request against `limits` and the loaded models; returns the indices of the
    /// models to run.
    pub fn check(&self, studio: &Studio, limits: &Limits) -> Result<Vec<usize>, RequestError> {
        let chars = self.text.chars().count();
        if self.text.trim().is_empty() {
            return Err(RequestError::bad("the text is empty: type a sentence or pick one"));
        }
        if chars > limits.max_chars {
            return Err(RequestError {
                status: 413,
                message: format!(
                    "the text has {chars} characters; the limit is {} (--max-chars)",
                    limits.max_chars
                ),
            });
        }
        if let Some(r) = &self.reference
            && r.chars().count() > limits.max_chars
        {
            return Err(RequestError {
                status: 413,
                message: format!(
                    "the reference is longer than {} characters (--max-chars)",
                    limits.max_chars
                ),
            });
        }
        if self.beam == 0 || self.beam > limits.max_beam {
            return Err(RequestError::bad(format!(
                "beam {} is out of range: use 1 (greedy) to {}",
                self.beam, limits.max_beam
            )));
        }
        if !(self.alpha.is_finite() && (0.0..=5.0).contains(&self.alpha)) {
            return Err(RequestError::bad(format!("alpha {} is out of range: use 0 to 5", self.alpha)));
        }
        let Some(names) = &self.models else { return Ok((0..studio.models.len()).collect()) };
        if names.is_empty() {
            return Err(RequestError::bad("no model asked for"));
        }
        // Each model runs once per request: a list longer than the studio's, or naming a model
        // twice, would only repeat the same work.
        if names.len() > studio.models.len() {
            return Err(RequestError::bad(format!(
                "{} models asked for; the studio has {}: name each model at most once, or leave \
                 `models` out for all of them",
                names.len(),
                studio.models.len()
            )));
        }
        let mut which: Vec<usize> = Vec::with_capacity(names.len());
        for n in names {
            let i = studio.models.iter().position(|m| &m.name == n).ok_or_else(|| RequestError {
                status: 404,
                message: format!(
                    "no model named `{n}`: the studio has {}",
                    studio.models.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            })?;
            if which.contains(&i) {
                return Err(RequestError::bad(format!(
                    "model `{n}` is asked for twice: name each model at most once"
                )));
            }
            which.push(i);
        }
        Ok(which)
    }

    /// Checks the request ([`Request::check`]) and encodes its text and reference in the tokens
    /// of every model asked for, so that every limit — the token limits included — is checked
    /// before any decoding starts.
    pub fn prepare(&self, studio: &Studio, limits: &Limits) -> Result<Vec<Encoded>, RequestError> {
        self.check(studio, limits)?
            .into_iter()
            .map(|i| {
                let m = &studio.models[i];
                Ok(Encoded {
                    model: i,
                    src: encode_source(m, &self.text, limits)?,
                    reference: encode_reference(m, self, limits)?,
                })
            })
            .collect()
    }
}

/// A request's text and reference in one model's tokens, within the limits
/// ([`Request::prepare`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// Index of the model in [`Studio::models`].
    pub model: usize,
    /// The source, `</s>` not included.
    pub src: Vec<u32>,
    /// The reference, when one was given.
    pub reference: Option<Vec<u32>>,
}

/// Why a request's work stopped before its last model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Its client left (closed the connection) before the answer.
    Gone,
    /// It ran past its deadline (`--request-timeout`).
    Deadline,
}

/// Runs `req` on every model of `encoded`, in order. `stop` is asked before each model, before
/// each step of a model's beam search and between the search and its teacher-forced passes;
/// the first `Some` ends the work there. `done` hears each model finished.
pub fn run_request(
    studio: &Studio,
    encoded: &[Encoded],
    req: &Request,
    stop: impl Fn() -> Option<Stopped>,
    mut done: impl FnMut(&ModelResult),
) -> Result<Vec<ModelResult>, Stopped> {
    let mut results = Vec::with_capacity(encoded.len());
    for e in encoded {
        if let Some(why) = stop() {
            return Err(why);
        }
        let r = run_model(studio, e, req, &stop)?;
        done(&r);
        results.push(r);
    }
    Ok(results)
}

/// One attention layer of a teacher-forced pass, for the page.
#[derive(Debug, Clone, Serialize)]
pub struct Map {
    /// `cross`, `decoder-self` or `encoder-self`.
    pub kind: &'static str,
    /// Layer, bottom first.
    pub layer: usize,
    /// `[head][query][key]`, trimmed to real positions.
    pub heads: Vec<Vec<Vec<f32>>>,
}

/// A teacher-forced pass over one target sentence.
#[derive(Debug, Clone, Serialize)]
pub struct Forced {
    /// Target tokens, `</s>` last.
    pub tokens: Vec<String>,
    /// Each token's probability given the source and the tokens before it.
    pub probs: Vec<f32>,
    /// Summed log-probability.
    pub score: f64,
    /// `score / lp(len)` with the request's α: what beam search ranks by.
    pub normalized: f64,
    /// Every attention map.
    pub maps: Vec<Map>,
}

/// The gold alignment of a sentence and how the model's attention matches it.
#[derive(Debug, Clone, Serialize)]
pub struct Alignment {
    /// Gold links `[target word, source word]`.
    pub gold: Vec<[usize; 2]>,
    /// Alignment error rate of the model's attention while forced to decode the reference
    /// (a recurrent model's attention; the Transformer's last cross-attention layer, its
    /// heads averaged).
    pub aer: f64,
    /// The same, per cross-attention layer and head (the Transformer).
    pub heads: Vec<HeadAer>,
}

/// AER of one head.
#[derive(Debug, Clone, Serialize)]
pub struct HeadAer {
    /// Layer.
    pub layer: usize,
    /// Head.
    pub head: usize,
    /// Its AER.
    pub aer: f64,
}

/// A step of the beam search, tokens spelled out.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// The beam extended at this step.
    pub live: Vec<Live>,
    /// The best continuations, best first.
    pub candidates: Vec<Candidate>,
}

/// A hypothesis of a [`Step`]'s beam.
#[derive(Debug, Clone, Serialize)]
pub struct Live {
    /// Its tokens.
    pub tokens: Vec<String>,
    /// Summed log-probability.
    pub score: f64,
}

/// A ranked continuation.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// Index into the step's `live`.
    pub parent: usize,
    /// The token.
    pub token: String,
    /// Its log-probability.
    pub log_prob: f32,
    /// Parent's score plus `log_prob`.
    pub score: f64,
    /// Length-normalised score.
    pub normalized: f64,
    /// `kept`, `finished` or `pruned`.
    pub fate: Fate,
}

/// The beam search's steps as the page shows them, tokens spelled out (the one sentence
/// searched).
struct Trace<'p> {
    piece: &'p dyn Fn(u32) -> String,
    steps: Vec<Step>,
    /// The request's stop check, asked before each step of the search.
    stop: &'p dyn Fn() -> Option<Stopped>,
    /// Why the search stopped, once the check said so (it is not asked again).
    stopped: std::cell::Cell<Option<Stopped>>,
}

impl BeamObserver for Trace<'_> {
    fn stopped(&self) -> bool {
        if self.stopped.get().is_none() {
            self.stopped.set((self.stop)());
        }
        self.stopped.get().is_some()
    }

    fn step(&mut self, _: usize, beam: &[(&[u32], f64)], candidates: &[s2s_decode::Candidate]) {
        let piece = self.piece;
        self.steps.push(Step {
            live: beam
                .iter()
                .map(|(tokens, score)| Live {
                    tokens: tokens.iter().map(|&t| piece(t)).collect(),
                    score: *score,
                })
                .collect(),
            candidates: candidates
                .iter()
                .map(|c| Candidate {
                    parent: c.parent,
                    token: piece(c.token),
                    log_prob: c.log_prob,
                    score: c.score,
                    normalized: c.normalized,
                    fate: c.fate,
                })
                .collect(),
        });
    }
}

/// A finished hypothesis.
#[derive(Debug, Clone, Serialize)]
pub struct Finished {
    /// The detokenised text.
    pub text: String,
    /// Length-normalised score.
    pub normalized: f64,
}

/// One model's answer.
#[derive(Debug, Clone, Serialize)]
pub struct ModelResult {
    /// The model's name.
    pub model: String,
    /// Its kind.
    pub kind: &'static str,
    /// Source tokens, `</s>` last.
    pub source_tokens: Vec<String>,
    /// The translation, detokenised.
    pub output: String,
    /// True when the search stopped the translation at the length limit (no `</s>`).
    pub cut: bool,
    /// The translation teacher-forced: tokens, probabilities, scores, attention maps.
    pub translation: Forced,
    /// The reference teacher-forced, when one was given.
    pub reference: Option<Forced>,
    /// `correct`, `search error` (the model scores the reference higher than what the search
    /// found) or `model error` (the model scores its own output higher), when a reference was
    /// given.
    pub verdict: Option<&'static str>,
    /// Gold alignment and AER, when the reference has one (built-in pair, word-level tokens,
    /// a model with attention).
    pub alignment: Option<Alignment>,
    /// The beam search's steps.
    pub steps: Vec<Step>,
    /// Every finished hypothesis, best first.
    pub finished: Vec<Finished>,
    /// Wall time of this model's part, milliseconds.
    pub ms: f64,
}

/// Runs `req` on the model of `e` (its text and reference in that model's tokens); `stop` is
/// asked before each step of the beam search and between the search and the teacher-forced
/// passes.
pub fn run_model(
    studio: &Studio,
    e: &Encoded,
    req: &Request,
    stop: impl Fn() -> Option<Stopped>,
) -> Result<ModelResult, Stopped> {
    let started = Instant::now();
    let m = &studio.models[e.model];
    let device = &studio.device;
    let src = &e.src;
    let Searched { hyps, best, cut, steps, stopped } = traced_search(m, req, src, device, &stop);
    if let Some(why) = stopped.or_else(&stop) {
        return Err(why);
    }
    let translation = forced(m, src, &best, !cut, req.alpha, device);
    let reference_ids = &e.reference;
    let reference = reference_ids.as_ref().map(|ids| forced(m, src, ids, true, req.alpha, device));
    let verdict = reference_ids
        .as_ref()
        .zip(reference.as_ref())
        .map(|(ids, r)| verdict_of(ids, &best, r, &translation));
    let alignment = match (&reference, &req.reference) {
        (Some(r), Some(text)) => {
            gold_alignment(studio, m, &req.text, text).and_then(|g| score_alignment(r, &g))
        }
        _ => None,
    };
    let finished =
        hyps.iter().map(|h| Finished { text: m.tok.tgt.decode(&h.tokens), normalized: h.score }).collect();
    let mut source_tokens: Vec<String> = src.iter().map(|&t| m.tok.src.token(t)).collect();
    source_tokens.push("</s>".into());
    Ok(ModelResult {
        model: m.name.clone(),
        kind: m.kind,
        source_tokens,
        output: m.tok.tgt.decode(&best),
        cut,
        translation,
        reference,
        verdict,
        alignment,
        steps,
        finished,
        ms: started.elapsed().as_secs_f64() * 1e3,
    })
}

/// Returns `text` in `m`'s source tokens: a 400 when none is known, a 413 past the token limit.
fn encode_source(m: &Loaded, text: &str, limits: &Limits) -> Result<Vec<u32>, RequestError> {
    let src = m.tok.src.encode(&normalize(text));
    if src.is_empty() {
        return Err(RequestError::bad(format!("{}: the text has no token this model knows", m.name)));
    }
    if src.len() > limits.max_src_tokens {
        return Err(RequestError {
            status: 413,
            message: format!(
                "{}: the text is {} tokens long; the limit is {} (--max-src-tokens)",
                m.name,
                src.len(),
                limits.max_src_tokens
            ),
        });
    }
    Ok(src)
}

/// What the beam search found for the one sentence.
struct Searched {
    /// Every finished hypothesis, best first.
    hyps: Vec<Hypothesis>,
    /// The best hypothesis's tokens (empty when there is none).
    best: Vec<u32>,
    /// Whether the best hypothesis reached the length limit (and so has no `</s>`).
    cut: bool,
    /// The search's recorded steps.
    steps: Vec<Step>,
    /// Why the search stopped before its end, if the request's check said so.
    stopped: Option<Stopped>,
}

/// Beam-searches `src` with the request's beam and α, recording every step.
fn traced_search(
    m: &Loaded,
    req: &Request,
    src: &[u32],
    device: &Device,
    stop: &dyn Fn() -> Option<Stopped>,
) -> Searched {
    let cfg = BeamConfig {
        beam: req.beam,
        alpha: req.alpha,
        penalty: LengthPenalty::Gnmt,
        nbest: req.beam,
        max_length: m.limit,
        attention: false,
    };
    let batch = Batch::collate(&[Example { src: src.to_vec(), tgt: Vec::new() }], &[0]);
    let source = Source::new(&batch.src, &batch.src_lens, batch.src_len, device);
    let piece = |t: u32| m.tok.tgt.token(t);
    let mut trace = Trace { piece: &piece, steps: Vec::new(), stop, stopped: std::cell::Cell::new(None) };
    let hyps = beam_search_observed(&m.model, &source, &cfg, &mut trace);
    let (steps, stopped) = (trace.steps, trace.stopped.get());
    let hyps = hyps.into_iter().next().unwrap_or_default();
    let best = hyps.first().map(|h| h.tokens.clone()).unwrap_or_default();
    // A hypothesis that reached the length limit ended without `</s>`, and its score has no
    // `</s>` term: teacher-force it the same way.
    let cut = best.len() >= m.limit.for_source(batch.src_lens[0]);
    Searched { hyps, best, cut, steps, stopped }
}

/// Returns the request's reference in `m`'s target tokens, when given: a 413 past the token limit.
fn encode_reference(m: &Loaded, req: &Request, limits: &Limits) -> Result<Option<Vec<u32>>, RequestError> {
    let reference_ids = req.reference.as_ref().map(|r| m.tok.tgt.encode(&normalize(r)));
    if let Some(ids) = reference_ids.as_ref().filter(|ids| ids.len() > limits.max_src_tokens) {
        return Err(RequestError {
            status: 413,
            message: format!(
                "{}: the reference is {} tokens long; the limit is {} (--max-src-tokens)",
                m.name,
                ids.len(),
                limits.max_src_tokens
            ),
        });
    }
    Ok(reference_ids)
}

/// Returns `correct` when the search found the reference `ids`, else `search error` when the
/// model scores the reference higher than the output and `model error` when it does not.
fn verdict_of(ids: &[u32], best: &[u32], reference: &Forced, translation: &Forced) -> &'static str {
    if ids == best {
        "correct"
    } else if reference.normalized > translation.normalized {
        "search error"
    } else {
        "model error"
    }
}

/// Teacher-forces `tgt` from `src`: each token's probability and every attention map,
/// trimmed to the sentence. With `ends`, the sentence's `</s>` is scored too; without it (a
/// hypothesis the search cut at the length limit) it is left out, as the search scored it.
pub fn forced(m: &Loaded, src: &[u32], tgt: &[u32], ends: bool, alpha: f64, device: &Device) -> Forced {
    let batch = Batch::collate(&[Example { src: src.to_vec(), tgt: tgt.to_vec() }], &[0]);
    let source = Source::new(&batch.src, &batch.src_lens, batch.src_len, device);
    let t = batch.tgt_len;
    let tgt_in: Vec<i64> = batch.tgt_in.iter().map(|&i| i as i64).collect();
    let tgt_in = Tensor::<2, Int>::from_data(TensorData::new(tgt_in, [1, t]), device);
    let (logits, maps) = m.model.inspect(&source, tgt_in);
    let vocab = logits.dims()[2];
    let lp = floats(log_softmax(logits, 2));
    // Target positions shown and scored: the tokens, and `</s>` when the sentence ends.
    let n = if ends { t } else { t - 1 };
    let log_probs: Vec<f64> = (0..n).map(|j| lp[j * vocab + batch.tgt_out[j] as usize] as f64).collect();
    let score: f64 = log_probs.iter().sum();
    let mut tokens: Vec<String> = tgt.iter().map(|&i| m.tok.tgt.token(i)).collect();
    if ends {
        tokens.push("</s>".into());
    }
    let (s, inputs) = (batch.src_len, n);
    let maps = maps
        .into_iter()
        .map(|map| {
            let [_, heads, q, k] = map.weights.dims();
            let w = floats(map.weights);
            let (rows, cols) = match map.kind {
                AttentionKind::Cross => (inputs, s),
                AttentionKind::DecoderSelf => (inputs, inputs),
                AttentionKind::EncoderSelf => (s, s),
            };
            let heads = (0..heads)
                .map(|h| {
                    (0..rows.min(q))
                        .map(|i| w[(h * q + i) * k..(h * q + i) * k + cols.min(k)].to_vec())
                        .collect()
                })
                .collect();
            let kind = match map.kind {
                AttentionKind::Cross => "cross",
                AttentionKind::DecoderSelf => "decoder-self",
                AttentionKind::EncoderSelf => "encoder-self",
            };
            Map { kind, layer: map.layer, heads }
        })
        .collect();
    Forced {
        tokens,
        probs: log_probs.iter().map(|&l| l.exp() as f32).collect(),
        score,
        normalized: score / LengthPenalty::Gnmt.divisor(n, alpha),
        maps,
    }
}

fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap_or_default()
}

/// The gold alignment of `source` → `reference` when the studio knows it (the built-in
/// pair's generator made this exact pair) and the model's tokens are words.
pub fn gold_alignment(studio: &Studio, m: &Loaded, source: &str, reference: &str) -> Option<Vec<[usize; 2]>> {
    let (tgt, alignment) = studio.gold.get(normalize(source).trim())?;
    if tgt.trim() != normalize(reference).trim() || !word_level(&m.tok) {
        return None;
    }
    Some(alignment.iter().enumerate().map(|(j, &i)| [j, i]).collect())
}

/// The map AER is measured on: a recurrent model's cross-attention, or the mean over heads
/// of the Transformer's last cross-attention layer.
pub fn alignment_map(f: &Forced) -> Option<Vec<Vec<f32>>> {
    let last = f.maps.iter().filter(|m| m.kind == "cross").max_by_key(|m| m.layer)?;
    let h = last.heads.len() as f32;
    let rows = last.heads.first()?.len();
    Some(
        (0..rows)
            .map(|i| {
                let cols = last.heads[0][i].len();
                (0..cols).map(|j| last.heads.iter().map(|head| head[i][j]).sum::<f32>() / h).collect()
            })
            .collect(),
    )
}

/// Scores the reference's forced attention against `gold` (`None` when the model has no
/// attention).
fn score_alignment(r: &Forced, gold: &[[usize; 2]]) -> Option<Alignment> {
    let map = alignment_map(r)?;
    let heads = r
        .maps
        .iter()
        .filter(|m| m.kind == "cross" && m.heads.len() > 1)
        .flat_map(|m| {
            m.heads.iter().enumerate().map(move |(h, w)| HeadAer {
                layer: m.layer,
                head: h,
                aer: AlignCounts::of(w, gold).aer(),
            })
        })
        .collect();
    Some(Alignment { gold: gold.to_vec(), aer: AlignCounts::of(&map, gold).aer(), heads })
}

/// AER of a model's attention over `limit` examples spread evenly over all lengths (the
/// examples are sorted by length), teacher-forcing their references; `None` for a model
/// without attention, tokens that are not words, or a corpus without gold alignments. Returns
/// the AER and the number of sentences scored.
pub fn corpus_aer(studio: &Studio, m: &Loaded, limit: usize) -> Option<(f64, usize)> {
    if studio.gold.is_empty() || m.kind == "lstm" || !word_level(&m.tok) {
        return None;
    }
    let mut total = AlignCounts::default();
    let mut seen = 0;
    let step = studio.examples.len().div_ceil(limit.max(1)).max(1);
    for e in studio.examples.iter().step_by(step) {
        let Some(gold) = gold_alignment(studio, m, &e.source, &e.reference) else { continue };
        let src = m.tok.src.encode(&normalize(&e.source));
        let tgt = m.tok.tgt.encode(&normalize(&e.reference));
        let f = forced(m, &src, &tgt, true, 0.0, &studio.device);
        total.add(AlignCounts::of(&alignment_map(&f)?, &gold));
        seen += 1;
    }
    (seen > 0).then(|| (total.aer(), seen))
}
