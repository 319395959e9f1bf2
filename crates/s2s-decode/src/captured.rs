//! Greedy and beam search with their decoding steps captured as graphs and replayed (GPU).
//!
//! A decoding step on a GPU is bound by the host's time per kernel launch, as a training step
//! is (`docs/decisions.md`, "Captured steps"). Here a batch is padded to a bucket shape —
//! rows and source length as the trainer buckets them ([`s2s_data::bucket`]), and at beam
//! `K` each sentence keeps `K` rows of its own — and each shape keeps a **chain** of graphs:
//! the encoder, then one graph a link, recorded the first time a batch of that shape gets
//! that far and replayed by every later one:
//! - greedy search: a link is [`GPU_CHUNK`](crate::greedy::GPU_CHUNK) steps, each fed the
//!   previous step's choice on the device, as [`greedy`](crate::greedy) runs them eagerly;
//! - beam search: a link is one step — reorder the rows (the host writes the indices), step,
//!   and each row's `2K` best tokens on the device (burn's top-k) — then the host does the
//!   search's bookkeeping ([`crate::beam`]) and writes the next link's indices and tokens.
//!
//! A link reads the state its predecessor wrote, so one graph a link serves a decoder state
//! that grows each step (the Transformer's key/value caches) as well as a fixed one. Rows
//! never leave a chain: a finished sentence's rows run on to the last link needed, and what
//! they produce is dropped. Each row's computation is its own, so the tokens equal those of
//! the eager search; the bits of the scores may differ where a kernel's reduction order
//! depends on the row count. [`Run::Eager`] runs the same padded search without graphs: what
//! a replay must equal to the bit.
//!
//! Not captured (they run eagerly): cross-attention kept for the output, traced beam search
//! (the studio), sampling, and the CPU, which launches no kernels.

use burn::tensor::{Device, Int, Tensor, TensorData};
use s2s_kernels::capture::{GraphError, Recorder, StepGraph, write_floats, write_ids};
use s2s_models::Source;

use crate::beam::{BeamConfig, BeamSteps, device_tops, split_tops};
use crate::greedy::{BOS, EOS, GPU_CHUNK, Hypothesis, absorb};
use crate::incremental::Incremental;
use crate::limits::MaxLength;

/// How a [`CapturedSearch`] runs its padded search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// Recorded once per shape and link, replayed after.
    Replay,
    /// The same padded search, each step launched eagerly (the reference replays are held to).
    Eager,
}

/// What the captured search did, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeCaptureStats {
    /// Graphs recorded (encoders and links).
    pub captures: usize,
    /// Graphs replayed.
    pub replays: usize,
    /// Chains dropped (least recently used) to stay within the limit.
    pub evictions: usize,
    /// Most chains alive at once.
    pub chains_alive: usize,
    /// Most graphs alive at once.
    pub graphs_alive: usize,
    /// Shapes whose recording or replay failed: each decodes eagerly from then on.
    pub refused: usize,
}

/// What a chain is for: the search and its shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    /// 0 for greedy search, else the beam size.
    beam: usize,
    /// Sentences (each has `beam.max(1)` rows after the encoder).
    sentences: usize,
    src_len: usize,
}

/// One link of a chain: the inputs the host writes before its replay, what it gives back, and
/// the state (and, in greedy search, the last choice) the next link reads.
struct Link<S> {
    graph: StepGraph,
    /// Beam search: the rows to keep and each row's last token `[rows]`.
    inputs: Option<(Tensor<1, Int>, Tensor<1, Int>)>,
    out: Tensor<2>,
    state: S,
    choice: Option<Tensor<1, Int>>,
}

/// The graphs of one shape.
struct Chain<S> {
    key: Key,
    /// The source's input buffers (`[sentences, src_len]`), written before each replay.
    src: Source,
    encoder: StepGraph,
    encoded: S,
    /// Greedy search: `<s>` for every row, the first link's input.
    bos: Tensor<1, Int>,
    links: Vec<Link<S>>,
    last_used: u64,
}

impl<S> Chain<S> {
    fn graphs(&self) -> usize {
        1 + self.links.len()
    }
}

/// Greedy and beam search over padded, bucketed batches whose steps are replayed graphs
/// (see the [module docs](self)). It holds the model's chains: one per search and shape,
/// at most `max_chains`, the least recently used dropped first.
pub struct CapturedSearch<'m, M: Incremental> {
    model: &'m M,
    device: Device,
    run: Run,
    max_chains: usize,
    chains: Vec<Chain<M::State>>,
    /// Shapes that failed, with the first failure's words.
    refused: Vec<Key>,
    first_refusal: Option<String>,
    /// Tests: the link whose recording is refused.
    refuse_at: Option<usize>,
    uses: u64,
    stats: DecodeCaptureStats,
}

/// Records what `run` launches, after an eager warm-up that fills the memory pools (a
/// warm-up that grew them is repeated, as cubecl sizes a pool's pages by the largest
/// allocation so far; a recording that ran out of room is repeated after the pool of the
/// largest pages grows).
fn capture<T>(device: &Device, run: impl Fn() -> T) -> Result<(StepGraph, T), GraphError> {
    for tries in 0.. {
        let recorder = Recorder::prepare(device)?;
        drop(run());
        if recorder.warm_up_grew_pools() && tries < 3 {
            recorder.cancel();
            continue;
        }
        let recorded = recorder.record(&run);
        // A recording may need more room than its warm-up did (a beam link's `[rows, vocabulary]`
        // log-probabilities, seen on the H100 and on lavapipe): give the pool of the largest
        // pages more, and try again.
        if recorded.is_err() && tries < 4 {
            s2s_kernels::capture::grow_largest_pool(device);
            continue;
        }
        return recorded;
    }
    unreachable!("the loop returns")
}

/// `k` greedy steps from `last` `[rows]`, each fed the previous step's choice: the choices and
/// their log-probabilities `[rows, 2k]` (id, log p per step), the state after, the last choice.
fn greedy_chunk<M: Incremental>(
    model: &M,
    mut state: M::State,
    last: Tensor<1, Int>,
    k: usize,
) -> (Tensor<2>, M::State, Tensor<1, Int>) {
    let rows = last.dims()[0];
    let mut input = last;
    let mut pairs = Vec::with_capacity(k);
    for _ in 0..k {
        let (step, next) = model.step(state, input);
        state = next;
        let p = s2s_kernels::ops::best_log_prob_pairs(step.logits); // [rows, 2]
        input = p.clone().narrow(1, 0, 1).reshape([rows]).int();
        pairs.push(p);
    }
    (Tensor::cat(pairs, 1), state, input)
}

/// One beam step: keep rows `idx` (`picked` on the host), feed `last`, and each row's `w`
/// best log-probabilities and their ids `[rows, 2w]`.
fn beam_step<M: Incremental>(
    model: &M,
    state: M::State,
    idx: &Tensor<1, Int>,
    picked: &[usize],
    last: Tensor<1, Int>,
    w: usize,
) -> (Tensor<2>, M::State) {
    let state = model.select(state, idx, picked);
    let (step, next) = model.step(state, last);
    (device_tops(step.log_probs(), w), next)
}

/// Row-major `ids` `[rows, len]` of real lengths `lens` on `device`, as a captured step's
/// source: its buffers are rewritten in place before each replay ([`write_source`]), so
/// nothing the host knows of these rows' lengths may shape what is recorded — it claims no
/// dense prefix ([`Source::dense`] 0), and the recurrent encoders mask every position.
pub fn graph_source(ids: &[u32], lens: &[usize], len: usize, device: &Device) -> Source {
    Source { dense: 0, ..Source::new(ids, lens, len, device) }
}

/// Writes rows `ids` (row-major, `src`'s shape) of real lengths `lens` into the buffers of a
/// [`graph_source`] in place, with their masks, for the next replay. Nothing is launched.
pub fn write_source(src: &mut Source, ids: &[u32], lens: &[usize]) {
    let [rows, len] = src.ids.dims();
    assert_eq!((lens.len(), ids.len()), (rows, rows * len), "a source of another shape");
    let (keep, key_mask) = Source::masks(lens, len);
    write_ids(&src.ids, ids);
    write_floats(&src.keep, &keep);
    write_floats(&src.key_mask, &key_mask);
    src.lens = lens.to_vec();
}

fn read(t: &Tensor<2>) -> Vec<f32> {
    t.clone().into_data().convert::<f32>().try_to_vec::<f32>().unwrap_or_default()
}

fn ids_tensor(ids: &[i64], device: &Device) -> Tensor<1, Int> {
    Tensor::from_data(TensorData::new(ids.to_vec(), [ids.len()]), device)
}

/// A batch padded to its bucket: `sentences` rows (the extra ones `</s>` alone) of
/// `src_len` positions.
struct Padded {
    ids: Vec<u32>,
    lens: Vec<usize>,
    src_len: usize,
}

fn pad(ids: &[u32], lens: &[usize], len: usize) -> Padded {
    let (sentences, src_len, _) = s2s_data::bucket(lens.len(), len, 1);
    let mut out = vec![0u32; sentences * src_len];
    for (r, row) in ids.chunks(len.max(1)).take(lens.len()).enumerate() {
        out[r * src_len..r * src_len + len].copy_from_slice(row);
    }
    for r in lens.len()..sentences {
        out[r * src_len] = EOS;
    }
    let mut plens = lens.to_vec();
    plens.resize(sentences, 1);
    Padded { ids: out, lens: plens, src_len }
}

impl<'m, M: Incremental> CapturedSearch<'m, M>
where
    M::State: Clone,
{
    /// A search over `model` on `device`, keeping at most `max_chains` chains (≥ 1).
    pub fn new(model: &'m M, device: &Device, run: Run, max_chains: usize) -> Self {
        Self {
            model,
            device: device.clone(),
            run,
            max_chains: max_chains.max(1),
            chains: Vec::new(),
            refused: Vec::new(),
            first_refusal: None,
            refuse_at: None,
            uses: 0,
            stats: DecodeCaptureStats::default(),
        }
    }

    /// What it did so far.
    pub fn stats(&self) -> DecodeCaptureStats {
        self.stats
    }

    /// Why the first shape that decodes eagerly failed to record or replay, if one did.
    pub fn first_refusal(&self) -> Option<&str> {
        self.first_refusal.as_deref()
    }

    /// Tests: refuse to record link `link` of every chain, as a device out of room would.
    #[doc(hidden)]
    pub fn refuse_recording_at(&mut self, link: usize) {
        self.refuse_at = Some(link);
    }

    /// The refusal the test hook asks for at `link`.
    fn refused_by_test(&self, link: usize) -> Result<(), GraphError> {
        match self.refuse_at == Some(link) {
            true => Err(GraphError::Refused { what: "record", reason: "refused by the test hook".into() }),
            false => Ok(()),
        }
    }

    /// Runs `search` for a batch of shape `key` as this search runs — eagerly once the shape
    /// failed — and, should its graphs fail, refuses the shape and runs it again eagerly.
    fn or_eager<T>(&mut self, key: Key, search: impl Fn(&mut Self, Run) -> Result<T, GraphError>) -> T {
        let run = if self.refused.contains(&key) { Run::Eager } else { self.run };
        search(self, run).unwrap_or_else(|e| {
            self.refuse(key, e);
            search(self, Run::Eager).expect("an eager search launches no graph")
        })
    }

    /// Drops `key`'s chain and decodes that shape eagerly from now on. A failed recording
    /// leaves the buffers it would have written unusable, and only those: the state of the
    /// links before it and the model's parameters, which it read, are intact.
    fn refuse(&mut self, key: Key, error: GraphError) {
        self.chains.retain(|c| c.key != key);
        self.refused.push(key);
        self.stats.refused += 1;
        self.first_refusal.get_or_insert_with(|| error.to_string());
    }

    /// The source buffers of `p`, marked as a graph's input.
    fn source(&self, p: &Padded) -> Source {
        graph_source(&p.ids, &p.lens, p.src_len, &self.device)
    }

    /// The chain for `key`, its source written with `p` and its encoder replayed (recorded
    /// first if new). Returns its index.
    fn chain(&mut self, key: Key, p: &Padded) -> Result<usize, GraphError> {
        self.uses += 1;
        if let Some(i) = self.chains.iter().position(|c| c.key == key) {
            let c = &mut self.chains[i];
            c.last_used = self.uses;
            write_source(&mut c.src, &p.ids, &p.lens);
            // SAFETY: the encoder reads the chain's source buffers and the model's parameters,
            // both alive and unmoved; its output is the state the chain holds.
            unsafe { c.encoder.replay() }?;
            self.stats.replays += 1;
            return Ok(i);
        }
        if self.chains.len() >= self.max_chains {
            let lru = (0..self.chains.len()).min_by_key(|&i| self.chains[i].last_used).expect("a chain");
            self.chains.swap_remove(lru);
            self.stats.evictions += 1;
        }
        let src = self.source(p);
        let model = self.model;
        let (graph, encoded) = capture(&self.device, || model.encode(&src))?;
        // SAFETY: as above; the source was written when its buffers were made.
        unsafe { graph.replay() }?;
        self.stats.captures += 1;
        self.stats.replays += 1;
        let rows = p.lens.len() * key.beam.max(1);
        let bos = ids_tensor(&vec![BOS as i64; rows], &self.device);
        self.chains.push(Chain {
            key,
            src,
            encoder: graph,
            encoded,
            bos,
            links: Vec::new(),
            last_used: self.uses,
        });
        self.stats.chains_alive = self.stats.chains_alive.max(self.chains.len());
        Ok(self.chains.len() - 1)
    }

    fn count_graphs(&mut self) {
        let alive = self.chains.iter().map(Chain::graphs).sum();
        self.stats.graphs_alive = self.stats.graphs_alive.max(alive);
    }

    /// Greedy search over rows `ids` (`[lens.len(), len]`, row-major) of real lengths `lens`:
    /// the hypotheses of [`greedy`](crate::greedy::greedy) (cross-attention is not kept).
    /// A shape whose graphs fail is searched again eagerly, and eagerly from then on.
    pub fn greedy(&mut self, ids: &[u32], lens: &[usize], len: usize, limit: MaxLength) -> Vec<Hypothesis> {
        let p = pad(ids, lens, len);
        let key = Key { beam: 0, sentences: p.lens.len(), src_len: p.src_len };
        self.or_eager(key, |s, run| s.greedy_padded(&p, lens, limit, run, key))
    }

    fn greedy_padded(
        &mut self,
        p: &Padded,
        lens: &[usize],
        limit: MaxLength,
        run: Run,
        key: Key,
    ) -> Result<Vec<Hypothesis>, GraphError> {
        let n = lens.len();
        let limits: Vec<usize> = lens.iter().map(|&l| limit.for_source(l)).collect();
        let mut out: Vec<Hypothesis> =
            (0..n).map(|_| Hypothesis { tokens: Vec::new(), score: 0.0, attention: None }).collect();
        // Sentences still searching, each with its row (its index: rows never move).
        let live: Vec<(usize, usize)> = (0..n).map(|s| (s, s)).collect();
        match run {
            Run::Eager => self.greedy_eager(p, lens, &limits, &mut out, live),
            Run::Replay => self.greedy_replay(p, lens, &limits, &mut out, live, key)?,
        }
        Ok(out)
    }

    /// Greedy search over `p` launched eagerly, [`GPU_CHUNK`] steps at a time, into `out` until
    /// no sentence of `live` (sentence, row) searches; `limits` are their length limits.
    fn greedy_eager(
        &self,
        p: &Padded,
        lens: &[usize],
        limits: &[usize],
        out: &mut [Hypothesis],
        mut live: Vec<(usize, usize)>,
    ) {
        let k = GPU_CHUNK;
        let model = self.model;
        let src = self.source(p);
        let mut state = model.encode(&src);
        let mut last = ids_tensor(&vec![BOS as i64; p.lens.len()], &self.device);
        while !live.is_empty() {
            let (pairs, next, choice) = greedy_chunk(model, state, last, k);
            (state, last) = (next, choice);
            let (keep, _) = absorb(out, &live, limits, &read(&pairs), None, k, lens, p.src_len);
            live = keep.into_iter().map(|i| live[i]).collect();
        }
    }

    /// Greedy search over `p` replaying the chain for `key`, each link recorded the first time
    /// a batch of that shape gets that far, into `out` until no sentence of `live` searches.
    fn greedy_replay(
        &mut self,
        p: &Padded,
        lens: &[usize],
        limits: &[usize],
        out: &mut [Hypothesis],
        mut live: Vec<(usize, usize)>,
        key: Key,
    ) -> Result<(), GraphError> {
        let k = GPU_CHUNK;
        let c = self.chain(key, p)?;
        let mut link = 0;
        while !live.is_empty() {
            if link == self.chains[c].links.len() {
                self.record_greedy_link(c, link)?;
            }
            let l = &self.chains[c].links[link];
            // SAFETY: the link reads its predecessor's state and choice (held by the
            // chain) and the model's parameters; its intermediates are pinned by the graph.
            unsafe { l.graph.replay() }?;
            self.stats.replays += 1;
            let (keep, _) = absorb(out, &live, limits, &read(&l.out), None, k, lens, p.src_len);
            live = keep.into_iter().map(|i| live[i]).collect();
            link += 1;
        }
        Ok(())
    }

    /// Records link `link` of greedy chain `c`: [`GPU_CHUNK`] steps from the state and choice
    /// of the link before (the encoder's state and `<s>` for the first).
    fn record_greedy_link(&mut self, c: usize, link: usize) -> Result<(), GraphError> {
        let k = GPU_CHUNK;
        let model = self.model;
        self.refused_by_test(link)?;
        let chain = &self.chains[c];
        let (state, last) = match chain.links.last() {
            None => (chain.encoded.clone(), chain.bos.clone()),
            Some(l) => (l.state.clone(), l.choice.clone().expect("a greedy link's choice")),
        };
        let (graph, (out, state, choice)) =
            capture(&self.device, || greedy_chunk(model, state.clone(), last.clone(), k))?;
        self.stats.captures += 1;
        self.chains[c].links.push(Link { graph, inputs: None, out, state, choice: Some(choice) });
        self.count_graphs();
        Ok(())
    }

    /// Beam search over rows `ids` (`[lens.len(), len]`, row-major) of real lengths `lens`:
    /// the hypotheses of [`beam_search`](crate::beam::beam_search) (cross-attention is not
    /// kept, `cfg.attention` is ignored). A shape whose graphs fail is searched again
    /// eagerly, and eagerly from then on.
    pub fn beam(
        &mut self,
        ids: &[u32],
        lens: &[usize],
        len: usize,
        cfg: &BeamConfig,
    ) -> Vec<Vec<Hypothesis>> {
        let p = pad(ids, lens, len);
        let key = Key { beam: cfg.beam.max(1), sentences: p.lens.len(), src_len: p.src_len };
        self.or_eager(key, |s, run| s.beam_padded(&p, lens, cfg, run, key))
    }

    fn beam_padded(
        &mut self,
        p: &Padded,
        lens: &[usize],
        cfg: &BeamConfig,
        run: Run,
        key: Key,
    ) -> Result<Vec<Vec<Hypothesis>>, GraphError> {
        let mut steps =
            Fixed { search: self, key, chain: None, state: None, prev: Vec::new(), link: 0, error: None };
        match run {
            Run::Eager => {
                let src = steps.search.source(p);
                steps.state = Some(steps.search.model.encode(&src));
            }
            Run::Replay => steps.chain = Some(steps.search.chain(key, p)?),
        }
        let cfg = BeamConfig { attention: false, ..*cfg };
        let hyps = crate::beam::run(&mut steps, lens, p.src_len, &cfg, &mut ());
        match steps.error {
            Some(e) => Err(e),
            None => Ok(hyps),
        }
    }
}

/// Beam steps over a fixed row layout: sentence `s` owns rows `s·K .. s·K + K`; its `j`-th
/// live hypothesis is at row `s·K + j`, and rows it does not use keep themselves.
struct Fixed<'a, 'm, M: Incremental> {
    search: &'a mut CapturedSearch<'m, M>,
    key: Key,
    /// The chain replayed ([`Run::Replay`]).
    chain: Option<usize>,
    /// The state ([`Run::Eager`]).
    state: Option<M::State>,
    /// The fixed row of each row of the previous step.
    prev: Vec<usize>,
    /// The next link.
    link: usize,
    /// The first error of a replay (the search then runs on with empty read-backs).
    error: Option<GraphError>,
}

impl<M: Incremental> BeamSteps for Fixed<'_, '_, M>
where
    M::State: Clone,
{
    fn step(
        &mut self,
        select: Option<Vec<i64>>,
        sentences: &[usize],
        last: Vec<i64>,
        w: usize,
    ) -> (usize, Vec<f32>, Vec<u32>, Option<Vec<f32>>) {
        let k = self.key.beam;
        let rows = self.key.sentences * k;
        let fixed = fixed_rows(sentences, k);
        let picked = self.picked(select, &fixed, rows);
        let mut tokens = vec![EOS as i64; rows];
        for (r, &f) in fixed.iter().enumerate() {
            tokens[f] = last[r];
        }
        self.prev = fixed.clone();
        let idx: Vec<i64> = picked.iter().map(|&i| i as i64).collect();
        let all = self.tops(&idx, &picked, &tokens, w, rows);
        self.link += 1;
        // Back to the live rows: row r's best at r·w + j (w clamped to the vocabulary).
        let w = all.len() / (2 * rows);
        let (lp, ids) = split_tops(fixed.iter().map(|&f| &all[f * 2 * w..(f + 1) * 2 * w]), w);
        (w, lp, ids, None)
    }
}

/// Each live row's fixed row: the j-th row of sentence s is s·K + j (`sentences`: each live
/// row's sentence, a sentence's rows together).
fn fixed_rows(sentences: &[usize], k: usize) -> Vec<usize> {
    let mut fixed = Vec::with_capacity(sentences.len());
    for (r, &s) in sentences.iter().enumerate() {
        let j = if r > 0 && sentences[r - 1] == s { fixed[r - 1] - s * k + 1 } else { 0 };
        fixed.push(s * k + j);
    }
    fixed
}

impl<M: Incremental> Fixed<'_, '_, M>
where
    M::State: Clone,
{
    /// The row each of the `rows` fixed rows keeps: on the first link its sentence's encoded
    /// row, after it the previous step's fixed row of the parent `select` names for each live
    /// row in `fixed` (rows nobody uses keep themselves).
    fn picked(&self, select: Option<Vec<i64>>, fixed: &[usize], rows: usize) -> Vec<usize> {
        let k = self.key.beam;
        let first = self.link == 0;
        // The rows to keep: the first link spreads each encoded sentence over its K rows.
        let mut picked: Vec<usize> =
            if first { (0..rows).map(|f| f / k).collect() } else { (0..rows).collect() };
        if !first {
            let parents = select.expect("after the first step, rows are selected");
            for (r, &f) in fixed.iter().enumerate() {
                picked[f] = self.prev[parents[r] as usize];
            }
        }
        picked
    }

    /// One step of all `rows` rows — keep rows `idx` (`picked` on the host), feed `tokens` —
    /// and each row's `w` best log-probabilities and ids, read back (`[rows, 2w]`): replayed
    /// from the chain, else eager; zeros once a recording or replay failed.
    fn tops(&mut self, idx: &[i64], picked: &[usize], tokens: &[i64], w: usize, rows: usize) -> Vec<f32> {
        let device = self.search.device.clone();
        let model = self.search.model;
        match self.chain {
            // After a failed recording or replay the chain lacks that link: the search runs
            // out on empty read-backs, and `beam` runs it again eagerly.
            Some(_) if self.error.is_some() => vec![0.0; rows * 2 * w],
            Some(c) => match self.replay(c, idx, picked, tokens, w) {
                Ok(v) => v,
                Err(e) => {
                    self.error.get_or_insert(e);
                    vec![0.0; rows * 2 * w]
                }
            },
            _ => {
                let state = self.state.take().expect("a state between steps");
                let (out, next) = beam_step(
                    model,
                    state,
                    &ids_tensor(idx, &device),
                    picked,
                    ids_tensor(tokens, &device),
                    w,
                );
                self.state = Some(next);
                read(&out)
            }
        }
    }

    /// Writes the link's inputs, replays it (recording it first if new) and reads it back.
    fn replay(
        &mut self,
        c: usize,
        idx: &[i64],
        picked: &[usize],
        tokens: &[i64],
        w: usize,
    ) -> Result<Vec<f32>, GraphError> {
        let search = &mut *self.search;
        let model = search.model;
        if self.link == search.chains[c].links.len() {
            search.refused_by_test(self.link)?;
            let chain = &search.chains[c];
            let state = chain.links.last().map_or_else(|| chain.encoded.clone(), |l| l.state.clone());
            let (ix, last) = (ids_tensor(idx, &search.device), ids_tensor(tokens, &search.device));
            let (graph, (out, state)) =
                capture(&search.device, || beam_step(model, state.clone(), &ix, picked, last.clone(), w))?;
            search.stats.captures += 1;
            search.chains[c].links.push(Link { graph, inputs: Some((ix, last)), out, state, choice: None });
            search.count_graphs();
        } else {
            let (ix, last) = search.chains[c].links[self.link].inputs.as_ref().expect("a beam link's inputs");
            write_ids(ix, &idx.iter().map(|&i| i as u32).collect::<Vec<_>>());
            write_ids(last, &tokens.iter().map(|&i| i as u32).collect::<Vec<_>>());
        }
        let l = &search.chains[c].links[self.link];
        // SAFETY: the link reads its inputs and its predecessor's state (held by the chain)
        // and the model's parameters; its intermediates are pinned by the graph.
        unsafe { l.graph.replay() }?;
        search.stats.replays += 1;
        Ok(read(&l.out))
    }
}
