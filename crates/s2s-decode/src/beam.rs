//! Beam search, batched over sentences and beams (Graves, 2012; Sutskever et al., 2014), with
//! fairseq's bookkeeping:
//!
//! - every live hypothesis of every unfinished sentence is one row of the decoder state; each
//!   step scores all rows at once, then each sentence keeps its best `beam` continuations
//!   ([`Incremental::select`] reorders the state rows to match);
//! - per sentence, the best `2·beam` candidates are ranked; a `</s>` among the first `beam`
//!   finishes that hypothesis (it is kept while the others continue), the rest refill the beam;
//! - a sentence stops, and its rows leave the batch, once it has `beam` finished hypotheses
//!   (or its hypotheses reach the length limit `a · src_len + b`, which finishes them as they
//!   are);
//! - finished hypotheses are ranked by `score / lp(len)` where `score` is the sum of token
//!   log-probabilities (`</s>` included) and `len` counts `</s>`: GNMT's
//!   `lp = ((5 + len) / 6)^α` (Wu et al., 2016, eq. 14) or plain `len^α` (fairseq's `--lenpen`).
//!   `α = 0` ranks by raw log-probability, and then beam size 1 is exactly greedy search.

use burn::tensor::{Int, Tensor, TensorData};
use s2s_models::Source;
use serde::{Deserialize, Serialize};

use crate::greedy::{BOS, EOS, Hypothesis};
use crate::incremental::Incremental;
use crate::limits::MaxLength;
use s2s_kernels::ops::top;

/// The length normalisation of finished hypotheses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LengthPenalty {
    /// `((5 + len) / 6)^α` (Wu et al., 2016).
    #[default]
    Gnmt,
    /// `len^α` (fairseq).
    Power,
}

impl LengthPenalty {
    /// The divisor for a hypothesis of `len` tokens.
    pub fn divisor(self, len: usize, alpha: f64) -> f64 {
        if alpha == 0.0 {
            return 1.0;
        }
        match self {
            LengthPenalty::Gnmt => ((5.0 + len as f64) / 6.0).powf(alpha),
            LengthPenalty::Power => (len.max(1) as f64).powf(alpha),
        }
    }
}

/// Beam search settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BeamConfig {
    /// Beam size `K` (≥ 1).
    pub beam: usize,
    /// Length-penalty exponent `α`.
    pub alpha: f64,
    /// Which length penalty.
    pub penalty: LengthPenalty,
    /// Hypotheses returned per sentence (≤ `beam`).
    pub nbest: usize,
    /// Output length limit.
    pub max_length: MaxLength,
    /// Keep each hypothesis's cross-attention.
    pub attention: bool,
}

impl Default for BeamConfig {
    fn default() -> Self {
        Self {
            beam: 5,
            alpha: 0.6,
            penalty: LengthPenalty::Gnmt,
            nbest: 1,
            max_length: MaxLength::default(),
            attention: false,
        }
    }
}

/// A hypothesis still being extended.
struct Live {
    tokens: Vec<u32>,
    score: f64,
    attention: Option<Vec<Vec<f32>>>,
    /// Its row in the current decoder state.
    row: usize,
}

/// One sentence's search.
struct Search {
    sentence: usize,
    limit: usize,
    live: Vec<Live>,
    finished: Vec<Hypothesis>,
}

/// What a beam search shows of each step, sentence by sentence: the studio's trace of a
/// search watches it this way, and `()` watches nothing.
pub trait BeamObserver {
    /// Whether the search should work out each candidate's [`Fate`] for [`step`](Self::step)
    /// (when false, `step` is not called).
    fn watching(&self) -> bool {
        true
    }

    /// Sentence `sentence`'s step: its beam (each live hypothesis's tokens, without `<s>`, and
    /// summed log-probability, in beam order) and the `2·beam` best continuations over the
    /// whole beam, best first, with what the search did with each.
    fn step(&mut self, sentence: usize, beam: &[(&[u32], f64)], candidates: &[Candidate]);

    /// Whether the search should stop now (its caller's deadline passed, its client left):
    /// asked before each decoding step. A stopped search returns the hypotheses finished so
    /// far, which its caller, having asked it to stop, discards.
    fn stopped(&self) -> bool {
        false
    }
}

impl BeamObserver for () {
    fn watching(&self) -> bool {
        false
    }

    fn step(&mut self, _: usize, _: &[(&[u32], f64)], _: &[Candidate]) {}
}

/// A continuation ranked at a step: hypothesis `parent` of the step's beam extended by
/// `token`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// Index into the step's beam.
    pub parent: usize,
    /// The token added.
    pub token: u32,
    /// Its log-probability given the parent.
    pub log_prob: f32,
    /// The parent's score plus `log_prob`.
    pub score: f64,
    /// `score / lp(len)`: the score a hypothesis finished here is ranked by.
    pub normalized: f64,
    /// What the search did with it.
    pub fate: Fate,
}

/// What beam search did with a [`Candidate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fate {
    /// It continues in the next step's beam.
    Kept,
    /// It ended (`</s>` among the first `beam`, or the length limit) and was set aside.
    Finished,
    /// The beam was full, or its `</s>` ranked below the first `beam`.
    Pruned,
}

/// Beam search for every row of `src`: per sentence, up to `nbest` hypotheses, best first, each
/// with its length-normalised score.
///
/// Each step the `2·beam` best tokens of every row are picked where the log-probabilities
/// are: on the CPU by the host, on a GPU by the device (burn's top-k kernel), so that only
/// `[rows, 2·beam]` values and ids come back instead of `[rows, vocab]` log-probabilities.
pub fn beam_search<M: Incremental>(model: &M, src: &Source, cfg: &BeamConfig) -> Vec<Vec<Hypothesis>> {
    let on_device = !s2s_kernels::ops::is_cpu(&src.ids.device());
    beam_search_with(model, src, cfg, on_device)
}

/// [`beam_search`] with each row's best tokens picked on the device (`top_on_device`) or by
/// the host after reading the whole row back. Both pick the same tokens (ties to the lower
/// id).
pub fn beam_search_with<M: Incremental>(
    model: &M,
    src: &Source,
    cfg: &BeamConfig,
    top_on_device: bool,
) -> Vec<Vec<Hypothesis>> {
    search(model, src, cfg, top_on_device, &[], &mut ())
}

/// [`beam_search`] whose hypotheses for row `r` start with `prefixes[r]` (CTranslate2's
/// `target_prefix`): while inside its prefix a sentence's only continuation is the prefix's
/// next token, however improbable, scored by its log-probability (the score of a hypothesis
/// counts its prefix); the beam opens after it. Rows without a prefix search as usual.
pub fn beam_search_prefixed<M: Incremental>(
    model: &M,
    src: &Source,
    cfg: &BeamConfig,
    prefixes: &[Vec<u32>],
) -> Vec<Vec<Hypothesis>> {
    let on_device = !s2s_kernels::ops::is_cpu(&src.ids.device());
    search(model, src, cfg, on_device, prefixes, &mut ())
}

/// [`beam_search`] that shows `observer` every step's beam and ranked candidates with their
/// fates (the same search: the hypotheses are [`beam_search`]'s).
pub fn beam_search_observed<M: Incremental>(
    model: &M,
    src: &Source,
    cfg: &BeamConfig,
    observer: &mut impl BeamObserver,
) -> Vec<Vec<Hypothesis>> {
    let on_device = !s2s_kernels::ops::is_cpu(&src.ids.device());
    search(model, src, cfg, on_device, &[], observer)
}

fn search<M: Incremental>(
    model: &M,
    src: &Source,
    cfg: &BeamConfig,
    top_on_device: bool,
    prefixes: &[Vec<u32>],
    observer: &mut impl BeamObserver,
) -> Vec<Vec<Hypothesis>> {
    let mut steps = Eager {
        model,
        state: Some(model.encode(src)),
        device: src.ids.device(),
        top_on_device,
        attention: cfg.attention,
        prefixes,
        taken: 0,
    };
    run(&mut steps, &src.lens, src.len(), cfg, observer)
}

/// What one step of a beam search runs, whichever way the steps are run: keep (and reorder)
/// the rows `select` of the decoder state (`None`: keep them as they are), feed each row its
/// last token, and give back each row's best `w` tokens, `(w, lp, ids)` as [`row_tops`] does,
/// with the rows' cross-attention `[rows, src_len]` when asked for. Row `r` of the step
/// extends a hypothesis of sentence `sentences[r]`; rows are grouped by sentence.
pub(crate) trait BeamSteps {
    fn step(
        &mut self,
        select: Option<Vec<i64>>,
        sentences: &[usize],
        last: Vec<i64>,
        w: usize,
    ) -> (usize, Vec<f32>, Vec<u32>, Option<Vec<f32>>);
}

/// Steps run as they come: the state holds the live rows only.
struct Eager<'m, M: Incremental> {
    model: &'m M,
    state: Option<M::State>,
    device: burn::tensor::Device,
    top_on_device: bool,
    attention: bool,
    /// Per sentence, the tokens its hypotheses must start with (empty: none).
    prefixes: &'m [Vec<u32>],
    /// Steps taken: every live hypothesis has this many tokens.
    taken: usize,
}

impl<M: Incremental> BeamSteps for Eager<'_, M> {
    fn step(
        &mut self,
        select: Option<Vec<i64>>,
        sentences: &[usize],
        last: Vec<i64>,
        w: usize,
    ) -> (usize, Vec<f32>, Vec<u32>, Option<Vec<f32>>) {
        let mut state = self.state.take().expect("a state between steps");
        if let Some(idx) = select {
            let picked: Vec<usize> = idx.iter().map(|&i| i as usize).collect();
            let indices = Tensor::from_data(TensorData::new(idx, [picked.len()]), &self.device);
            state = self.model.select(state, &indices, &picked);
        }
        let rows = last.len();
        let (step, next) =
            self.model.step(state, Tensor::<1, Int>::from_data(TensorData::new(last, [rows]), &self.device));
        self.state = Some(next);
        let forced: Vec<Option<u32>> = sentences
            .iter()
            .map(|&s| self.prefixes.get(s).and_then(|p| p.get(self.taken)).copied())
            .collect();
        self.taken += 1;
        let (w, lp, ids) = if forced.iter().any(Option::is_some) {
            // Inside a prefix, every other token is −∞: the prefix's is the one finite candidate.
            let [rows, vocab] = step.logits.dims();
            let mut mask = vec![0f32; rows * vocab];
            for (r, f) in forced.iter().enumerate() {
                if let Some(t) = f {
                    let row = &mut mask[r * vocab..(r + 1) * vocab];
                    row.fill(f32::NEG_INFINITY);
                    row[*t as usize] = 0.0;
                }
            }
            let mask = Tensor::<2>::from_data(TensorData::new(mask, [rows, vocab]), &self.device);
            log_prob_tops(step.log_probs() + mask, w, self.top_on_device)
        } else {
            row_tops(&step, w, self.top_on_device)
        };
        let att = if self.attention {
            step.attention.and_then(|a| a.into_data().convert::<f32>().try_to_vec::<f32>().ok())
        } else {
            None
        };
        (w, lp, ids, att)
    }
}

/// The search over sentences of real lengths `lens` (padded to `src_len`), its steps run by
/// `steps`, each sentence's steps shown to `observer`.
pub(crate) fn run(
    steps: &mut impl BeamSteps,
    lens: &[usize],
    src_len: usize,
    cfg: &BeamConfig,
    observer: &mut impl BeamObserver,
) -> Vec<Vec<Hypothesis>> {
    let k = cfg.beam.max(1);
    let mut done: Vec<Vec<Hypothesis>> = vec![Vec::new(); lens.len()];
    let (mut active, mut select) = start_all(lens, cfg, &mut done);
    while !active.is_empty() && !observer.stopped() {
        let last: Vec<i64> = active
            .iter()
            .flat_map(|s| s.live.iter().map(|h| *h.tokens.last().unwrap_or(&BOS) as i64))
            .collect();
        let sentences: Vec<usize> = active.iter().flat_map(|s| s.live.iter().map(|_| s.sentence)).collect();
        // Row r's best tokens: ids[r·w + j] with log-probability lp[r·w + j], best first.
        let (w, lp, ids, att) = steps.step(select.take(), &sentences, last, 2 * k);
        let tops = Tops { w, lp: &lp, ids: &ids, att: att.as_deref(), src_len };
        let (still, origin) = advance(active, &tops, lens, cfg, observer, &mut done);
        active = still;
        select = Some(origin);
    }
    done
}

/// One step's output for every row of the step: its `w` best continuations (`ids`, with
/// log-probabilities `lp`, best first) and, when asked for, its attention over the source.
///
/// # Shapes
/// - `lp`, `ids`: `[rows, w]`; `att`: `[rows, src_len]`
struct Tops<'a> {
    w: usize,
    lp: &'a [f32],
    ids: &'a [u32],
    att: Option<&'a [f32]>,
    src_len: usize,
}

/// Every sentence's search started. Sentences whose limit is 0 finish empty at once (into
/// `done`); returns the others and, when some finished, the encoded rows the first step keeps.
fn start_all(
    lens: &[usize],
    cfg: &BeamConfig,
    done: &mut [Vec<Hypothesis>],
) -> (Vec<Search>, Option<Vec<i64>>) {
    let batch = lens.len();
    let (zero, mut active): (Vec<Search>, Vec<Search>) =
        (0..batch).map(|s| Search::start(s, lens[s], cfg)).partition(|s| s.limit == 0);
    for mut s in zero {
        s.finished.push(Hypothesis {
            tokens: Vec::new(),
            score: 0.0,
            attention: cfg.attention.then(Vec::new),
        });
        finish(s, cfg, done);
    }
    let mut select = None;
    if active.len() < batch && !active.is_empty() {
        select = Some(active.iter().map(|s| s.sentence as i64).collect());
        for (r, s) in active.iter_mut().enumerate() {
            s.live[0].row = r;
        }
    }
    (active, select)
}

/// One step's continuations applied to every active sentence (each shown to `observer`):
/// the finished go into `done`; returns the sentences still searching and, for each of their
/// live hypotheses in order, the row it continues (what the next step keeps).
fn advance(
    active: Vec<Search>,
    tops: &Tops,
    lens: &[usize],
    cfg: &BeamConfig,
    observer: &mut impl BeamObserver,
    done: &mut [Vec<Hypothesis>],
) -> (Vec<Search>, Vec<i64>) {
    let (k, watching) = (cfg.beam.max(1), observer.watching());
    let mut still = Vec::with_capacity(active.len());
    let mut origin: Vec<i64> = Vec::new();
    for mut s in active {
        let ranked = s.ranked(tops.lp, tops.ids, tops.w, k);
        let len = lens[s.sentence];
        let row_attention = |row: usize| tops.att.map(|a| &a[row * tops.src_len..row * tops.src_len + len]);
        let (live, fates) = s.extend(&ranked, row_attention, cfg, watching);
        if watching {
            s.show(observer, &ranked, &fates, cfg);
        }
        s.live = live;
        if s.finished.len() >= k || s.live.is_empty() {
            finish(s, cfg, done);
        } else {
            for h in s.live.iter_mut() {
                origin.push(h.row as i64);
                h.row = origin.len() - 1;
            }
            still.push(s);
        }
    }
    (still, origin)
}

/// A finished sentence's best `nbest` hypotheses (at most `beam`), best first, into `done`.
fn finish(s: Search, cfg: &BeamConfig, done: &mut [Vec<Hypothesis>]) {
    let mut f = s.finished;
    f.sort_by(|a, b| b.score.total_cmp(&a.score));
    f.truncate(cfg.nbest.clamp(1, cfg.beam.max(1)));
    done[s.sentence] = f;
}

/// A continuation of one sentence's beam: (score, live index, token, log-probability).
type Ranked = (f64, usize, u32, f32);

impl Search {
    /// Sentence `sentence` (of `len` source tokens) before its first step: one empty
    /// hypothesis on the encoder's row `sentence`.
    fn start(sentence: usize, len: usize, cfg: &BeamConfig) -> Self {
        let root =
            Live { tokens: Vec::new(), score: 0.0, attention: cfg.attention.then(Vec::new), row: sentence };
        Search { sentence, limit: cfg.max_length.for_source(len), live: vec![root], finished: Vec::new() }
    }

    /// The `2K` best continuations over this sentence's live hypotheses, best first (ties to
    /// the earlier hypothesis, then the lower token), from each row's best `w` tokens `ids`
    /// with log-probabilities `lp` (`[rows, w]`).
    fn ranked(&self, lp: &[f32], ids: &[u32], w: usize, k: usize) -> Vec<Ranked> {
        // Every parent's `w` best, not `2k`: where the vocabulary is smaller than `2k`, a row
        // has only `w` (`crate::limits` counts `k · w` of these).
        let mut cands: Vec<Ranked> = Vec::with_capacity(self.live.len() * w);
        for (i, h) in self.live.iter().enumerate() {
            let at = h.row * w..(h.row + 1) * w;
            cands.extend(lp[at.clone()].iter().zip(&ids[at]).map(|(&l, &t)| (h.score + l as f64, i, t, l)));
        }
        cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        cands.truncate(2 * k);
        cands
    }

    /// The next beam: the `ranked` continuations, best first, until `K` are live. A `</s>`
    /// among the first `K` finishes its hypothesis (scored `score / lp(len)`), and so does one
    /// that reaches the length limit; `row_attention(row)` is the step's cross-attention of a
    /// row. Returns the beam and, when `watching`, each candidate's fate.
    fn extend<'a>(
        &mut self,
        ranked: &[Ranked],
        row_attention: impl Fn(usize) -> Option<&'a [f32]>,
        cfg: &BeamConfig,
        watching: bool,
    ) -> (Vec<Live>, Vec<Fate>) {
        let k = cfg.beam.max(1);
        let mut fates = vec![Fate::Pruned; if watching { ranked.len() } else { 0 }];
        let mut live = Vec::with_capacity(k);
        for (rank, &(score, i, t, _)) in ranked.iter().enumerate() {
            if live.len() == k {
                break;
            }
            if score == f64::NEG_INFINITY {
                continue; // a token ruled out (inside a forced prefix)
            }
            let parent = &self.live[i];
            let mut attention = parent.attention.clone();
            if let (Some(a), Some(store)) = (row_attention(parent.row), attention.as_mut()) {
                store.push(a.to_vec());
            }
            let fate = if t == EOS {
                if rank >= k {
                    continue;
                }
                let norm = score / cfg.penalty.divisor(parent.tokens.len() + 1, cfg.alpha);
                self.finished.push(Hypothesis { tokens: parent.tokens.clone(), score: norm, attention });
                Fate::Finished
            } else {
                let mut tokens = parent.tokens.clone();
                tokens.push(t);
                if tokens.len() >= self.limit {
                    let norm = score / cfg.penalty.divisor(tokens.len(), cfg.alpha);
                    self.finished.push(Hypothesis { tokens, score: norm, attention });
                    Fate::Finished
                } else {
                    live.push(Live { tokens, score, attention, row: parent.row });
                    Fate::Kept
                }
            };
            if let Some(f) = fates.get_mut(rank) {
                *f = fate;
            }
        }
        (live, fates)
    }

    /// Shows `observer` this step: the beam before it and the ranked candidates with their fates.
    fn show(&self, observer: &mut impl BeamObserver, ranked: &[Ranked], fates: &[Fate], cfg: &BeamConfig) {
        let beam: Vec<(&[u32], f64)> = self.live.iter().map(|h| (h.tokens.as_slice(), h.score)).collect();
        let candidates: Vec<Candidate> = ranked
            .iter()
            .zip(fates)
            .map(|(&(score, i, token, log_prob), &fate)| Candidate {
                parent: i,
                token,
                log_prob,
                score,
                normalized: score / cfg.penalty.divisor(self.live[i].tokens.len() + 1, cfg.alpha),
                fate,
            })
            .collect();
        observer.step(self.sentence, &beam, &candidates);
    }
}

/// Each row's `min(n, vocab)` best log-probabilities and their ids (as floats, exact below
/// 2²⁴) by burn's top-k on the device, `[rows, 2w]`: one read-back for both.
pub(crate) fn device_tops(log_probs: Tensor<2>, n: usize) -> Tensor<2> {
    let w = n.min(log_probs.dims()[1]);
    let (values, indices) = log_probs.topk_with_indices(w, 1);
    Tensor::cat(vec![values, indices.float()], 1)
}

/// [`device_tops`] rows read back (each `w` log-probabilities, then their `w` ids), as
/// `(lp, ids)` with row `r`'s `j`-th best at `r·w + j`.
pub(crate) fn split_tops<'a>(rows: impl Iterator<Item = &'a [f32]>, w: usize) -> (Vec<f32>, Vec<u32>) {
    let (mut lp, mut ids) = (Vec::new(), Vec::new());
    for row in rows {
        lp.extend_from_slice(&row[..w]);
        ids.extend(row[w..2 * w].iter().map(|&t| t as u32));
    }
    (lp, ids)
}

/// The `n` best entries of each row of the step's log-probabilities `[rows, vocab]`, best
/// first: `(w, lp, ids)` with `w = min(n, vocab)` and row `r`'s `j`-th best at `r·w + j`.
///
/// On the device: burn's `topk_with_indices` (cubecl's top-k reduction keeps ties in index
/// order, like [`top`]), and the values and ids come back in one read, the ids as floats
/// (exact below 2²⁴). On the CPU: one kernel from the logits
/// ([`s2s_kernels::ops::top_log_probs`]). Otherwise the whole tensor comes back and [`top`]
/// picks on the host.
fn row_tops(step: &s2s_models::Step, n: usize, on_device: bool) -> (usize, Vec<f32>, Vec<u32>) {
    let w = n.min(step.logits.dims()[1]);
    if !on_device {
        // On the CPU, one pass per row from the logits: no `[rows, vocab]` log-probabilities
        // written and read back (`ops::top_log_probs`).
        if let Some((lp, ids)) = s2s_kernels::ops::top_log_probs(step.logits.clone(), n) {
            return (w, lp, ids);
        }
    }
    log_prob_tops(step.log_probs(), n, on_device)
}

/// [`row_tops`] from log-probabilities `[rows, vocab]`: on the device, or on the host.
fn log_prob_tops(log_probs: Tensor<2>, n: usize, on_device: bool) -> (usize, Vec<f32>, Vec<u32>) {
    let [rows, vocab] = log_probs.dims();
    let w = n.min(vocab);
    let read = |t: Tensor<2>| t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap_or_default();
    if on_device {
        let both = read(device_tops(log_probs, w));
        let (lp, ids) = split_tops(both.chunks(2 * w), w);
        (w, lp, ids)
    } else {
        let all = read(log_probs);
        let (mut lp, mut ids) = (Vec::with_capacity(rows * w), Vec::with_capacity(rows * w));
        for row in all.chunks(vocab.max(1)) {
            for t in top(row, w) {
                lp.push(row[t]);
                ids.push(t as u32);
            }
        }
        (w, lp, ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;
    use s2s_models::Step;

    /// A Markov chain over 7 tokens: the next token's probabilities depend on the last token
    /// only. From `<s>`: `a` 0.6, `b` 0.4; after `a`: `</s>` 0.4, `a`/`c` 0.3; after `b`:
    /// `</s>` 0.9. Greedy takes `a </s>` (0.6 · 0.4 = 0.24); the better `b </s>` (0.36) needs
    /// a beam of 2.
    struct Chain(Tensor<2>);

    const A: usize = 4;
    const B: usize = 5;
    const C: usize = 6;

    impl Chain {
        fn new(d: &Device) -> Self {
            let mut p = vec![1e-6f32; 7 * 7];
            let mut set = |from: usize, to: usize, v: f32| p[from * 7 + to] = v;
            set(BOS as usize, A, 0.6);
            set(BOS as usize, B, 0.4);
            set(A, EOS as usize, 0.4);
            set(A, A, 0.3);
            set(A, C, 0.3);
            set(B, EOS as usize, 0.9);
            set(B, C, 0.1);
            set(C, EOS as usize, 1.0);
            let lp: Vec<f32> = p.iter().map(|x| x.ln()).collect();
            Chain(Tensor::from_data(TensorData::new(lp, [7, 7]), d))
        }
    }

    impl Incremental for Chain {
        type State = Tensor<1, Int>;
        fn encode(&self, src: &Source) -> Self::State {
            Tensor::zeros([src.batch()], &src.ids.device())
        }
        fn step(&self, _: Self::State, last: Tensor<1, Int>) -> (Step, Self::State) {
            (Step { logits: self.0.clone().select(0, last.clone()), attention: None }, last)
        }
        fn select(&self, state: Self::State, indices: &Tensor<1, Int>, _: &[usize]) -> Self::State {
            state.select(0, indices.clone())
        }
    }

    fn src(d: &Device) -> Source {
        Source::new(&[4, 3], &[2], 2, d)
    }

    #[test]
    fn beam_two_finds_what_greedy_misses() {
        let d = Device::flex();
        let chain = Chain::new(&d);
        let g = crate::greedy(&chain, &src(&d), MaxLength::default(), false);
        assert_eq!(g[0].tokens, vec![A as u32]);
        assert!((g[0].score - 0.24f64.ln()).abs() < 1e-5);
        let cfg = BeamConfig { beam: 2, alpha: 0.0, nbest: 2, ..Default::default() };
        let b = beam_search(&chain, &src(&d), &cfg);
        assert_eq!(b[0][0].tokens, vec![B as u32]);
        assert!((b[0][0].score - 0.36f64.ln()).abs() < 1e-5);
        assert_eq!(b[0][1].tokens, vec![A as u32], "the runner-up is kept in the n-best list");
    }

    /// Each step a sentence's search shows, as [`BeamObserver::step`] gets it.
    #[derive(Debug, Default)]
    struct Recorded(Vec<(usize, Vec<(Vec<u32>, f64)>, Vec<Candidate>)>);

    impl BeamObserver for Recorded {
        fn step(&mut self, sentence: usize, beam: &[(&[u32], f64)], candidates: &[Candidate]) {
            self.0.push((
                sentence,
                beam.iter().map(|(t, s)| (t.to_vec(), *s)).collect(),
                candidates.to_vec(),
            ));
        }
    }

    /// What the observer sees of the chain's beam of 2: step 1 keeps `a` and `b` and prunes
    /// the rest; step 2 finishes `b </s>` (0.36) and `a </s>` (0.24), keeps `a a` and `a c`
    /// (0.18 each), and the search stops with two finished hypotheses, the same as the
    /// unobserved search's.
    #[test]
    fn the_observer_sees_each_step_and_fate() {
        let d = Device::flex();
        let chain = Chain::new(&d);
        let cfg = BeamConfig { beam: 2, alpha: 0.0, nbest: 2, ..Default::default() };
        let mut seen = Recorded::default();
        let hyps = beam_search_observed(&chain, &src(&d), &cfg, &mut seen);
        assert_eq!(hyps, beam_search(&chain, &src(&d), &cfg));
        let t = &seen.0;
        assert_eq!(t.len(), 2);
        assert!(t.iter().all(|(sentence, _, _)| *sentence == 0));
        assert_eq!(t[0].1, vec![(vec![], 0.0)]);
        let fates = |c: &[Candidate]| c.iter().map(|c| c.fate).collect::<Vec<_>>();
        assert_eq!(fates(&t[0].2), [Fate::Kept, Fate::Kept, Fate::Pruned, Fate::Pruned]);
        assert_eq!(t[0].2[0].token, A as u32);
        assert!((t[0].2[1].log_prob as f64 - 0.4f64.ln()).abs() < 1e-5);
        assert_eq!(t[1].1.iter().map(|h| h.0.clone()).collect::<Vec<_>>(), [vec![A as u32], vec![B as u32]]);
        assert_eq!(fates(&t[1].2), [Fate::Finished, Fate::Finished, Fate::Kept, Fate::Kept]);
        let first = &t[1].2[0];
        assert_eq!((first.parent, first.token), (1, EOS));
        assert!((first.score - 0.36f64.ln()).abs() < 1e-5 && first.normalized == first.score);
        // With a length penalty, `normalized` is the score over lp(len) of the extended hypothesis.
        let lp = BeamConfig { alpha: 1.0, ..cfg };
        let mut seen = Recorded::default();
        beam_search_observed(&chain, &src(&d), &lp, &mut seen);
        let c = &seen.0[1].2[0];
        assert!((c.normalized - c.score / LengthPenalty::Gnmt.divisor(2, 1.0)).abs() < 1e-12);
    }

    #[test]
    fn length_limit_finishes_hypotheses_as_they_are() {
        let d = Device::flex();
        let chain = Chain::new(&d);
        let cfg = BeamConfig {
            beam: 3,
            alpha: 0.0,
            max_length: MaxLength { a: 0.0, b: 1 },
            nbest: 3,
            ..Default::default()
        };
        let b = beam_search(&chain, &src(&d), &cfg);
        assert!(b[0].iter().all(|h| h.tokens.len() <= 1), "{:?}", b[0]);
        let zero = BeamConfig { max_length: MaxLength { a: 0.0, b: 0 }, ..cfg };
        assert_eq!(beam_search(&chain, &src(&d), &zero)[0][0].tokens, Vec::<u32>::new());
    }

    #[test]
    fn penalties() {
        assert_eq!(LengthPenalty::Gnmt.divisor(1, 1.0), 1.0);
        assert!((LengthPenalty::Gnmt.divisor(7, 0.5) - 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(LengthPenalty::Power.divisor(4, 0.5), 2.0);
        assert_eq!(LengthPenalty::Power.divisor(4, 0.0), 1.0);
    }
}
