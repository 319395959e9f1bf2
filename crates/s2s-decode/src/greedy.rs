//! Greedy decoding, batched: every row takes its most probable next token until it emits
//! `</s>` or reaches its length limit; finished rows leave the batch (their state rows are
//! dropped with [`reorder::select`](crate::reorder::select)) so they stop costing compute.

use burn::tensor::{Bool, Int, Tensor, TensorData};
use s2s_models::Source;

use crate::incremental::Incremental;

use crate::limits::MaxLength;

/// `<s>` and `</s>` ids (the data crate's convention).
pub const BOS: u32 = 2;
/// End of sentence.
pub const EOS: u32 = 3;

/// A decoded sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct Hypothesis {
    /// Output ids without `<s>` and `</s>`.
    pub tokens: Vec<u32>,
    /// Sum of the chosen tokens' log-probabilities (`</s>` included when emitted).
    pub score: f64,
    /// Per output token (and `</s>`), the cross-attention over the source, when asked for and
    /// the model attends: `attention[t][i]`.
    pub attention: Option<Vec<Vec<f32>>>,
}

/// Greedy search for every row of `src`.
///
/// On the CPU every step's choices come back to the host at once, and finished rows leave
/// the batch after each step. On a GPU a read-back waits for the whole queue, so the search
/// runs [`GPU_CHUNK`] steps at a time on the device, each step fed the previous step's choice
/// there, and reads the chunk's choices back once: rows that finish inside a chunk run on to
/// its end and what they produce after `</s>` or their limit is dropped, so the result is the
/// same (each row's computation is independent of the others').
pub fn greedy<M: Incremental>(
    model: &M,
    src: &Source,
    limit: MaxLength,
    capture_attention: bool,
) -> Vec<Hypothesis> {
    let chunk = if s2s_kernels::ops::is_cpu(&src.ids.device()) { 1 } else { GPU_CHUNK };
    greedy_chunked(model, src, limit, capture_attention, chunk)
}

/// Keeps the state rows `keep` (ascending indices into `rows`) of a search whose state row `r`
/// is sentence `rows[r]`: the finished rows leave the batch and stop costing compute; nothing
/// is selected when every row stays.
pub(crate) fn keep_rows<M: Incremental>(
    model: &M,
    state: M::State,
    rows: &mut Vec<usize>,
    keep: &[usize],
    device: &burn::tensor::Device,
) -> M::State {
    if keep.len() == rows.len() {
        return state;
    }
    let idx: Vec<i64> = keep.iter().map(|&r| r as i64).collect();
    *rows = keep.iter().map(|&r| rows[r]).collect();
    model.select(state, &Tensor::<1, Int>::from_data(TensorData::new(idx, [keep.len()]), device), keep)
}

/// Steps between read-backs on a GPU (see [`greedy`]).
pub const GPU_CHUNK: usize = 8;

/// [`greedy`] with `chunk` steps on the device between read-backs (1: read back every step).
pub fn greedy_chunked<M: Incremental>(
    model: &M,
    src: &Source,
    limit: MaxLength,
    capture_attention: bool,
    chunk: usize,
) -> Vec<Hypothesis> {
    greedy_chunked_prefixed(model, src, limit, capture_attention, chunk, &[])
}

/// [`greedy`] whose output for row `r` starts with `prefixes[r]` (CTranslate2's
/// `target_prefix`): while a row is inside its prefix, its next token is the prefix's, however
/// improbable, scored by its log-probability, and the search goes on greedily after it. A row
/// without a prefix (`prefixes` shorter than the batch, or an empty one) is plain greedy search.
/// A prefix token must not be `</s>` (the caller encodes words).
pub fn greedy_prefixed<M: Incremental>(
    model: &M,
    src: &Source,
    limit: MaxLength,
    capture_attention: bool,
    prefixes: &[Vec<u32>],
) -> Vec<Hypothesis> {
    let chunk = if s2s_kernels::ops::is_cpu(&src.ids.device()) { 1 } else { GPU_CHUNK };
    greedy_chunked_prefixed(model, src, limit, capture_attention, chunk, prefixes)
}

/// The step's `(id, log p)` pairs `[n, 2]` with the rows that have a `forced` token taking it
/// (and its log-probability) instead of their best.
fn force_rows(logits: Tensor<2>, forced: &[Option<u32>], device: &burn::tensor::Device) -> Tensor<2> {
    let n = forced.len();
    let best = s2s_kernels::ops::best_log_prob_pairs(logits.clone());
    let ids: Vec<i64> = forced.iter().map(|f| f.unwrap_or(0) as i64).collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [n, 1]), device);
    let lp = s2s_kernels::ops::log_softmax(logits).gather(1, ids.clone());
    let pairs = Tensor::cat(vec![ids.float(), lp], 1);
    let mask: Vec<bool> = forced.iter().flat_map(|f| [f.is_some(); 2]).collect();
    best.mask_where(Tensor::<2, Bool>::from_data(TensorData::new(mask, [n, 2]), device), pairs)
}

/// [`greedy_prefixed`] with `chunk` steps on the device between read-backs, as
/// [`greedy_chunked`].
pub fn greedy_chunked_prefixed<M: Incremental>(
    model: &M,
    src: &Source,
    limit: MaxLength,
    capture_attention: bool,
    chunk: usize,
    prefixes: &[Vec<u32>],
) -> Vec<Hypothesis> {
    let device = src.ids.device();
    let batch = src.batch();
    let limits: Vec<usize> = src.lens.iter().map(|&l| limit.for_source(l)).collect();
    let mut out: Vec<Hypothesis> = (0..batch)
        .map(|_| Hypothesis { tokens: Vec::new(), score: 0.0, attention: capture_attention.then(Vec::new) })
        .collect();
    let mut state = model.encode(src);
    let mut rows: Vec<usize> = (0..batch).collect(); // state row r ↔ sentence rows[r]
    let mut last: Vec<i64> = vec![BOS as i64; batch];
    let src_len = src.len();
    // Steps taken so far: every unfinished row has that many tokens.
    let mut steps = 0usize;
    while !rows.is_empty() {
        let n = rows.len();
        // No more steps than the longest remaining row needs.
        let need = rows.iter().map(|&s| limits[s].saturating_sub(out[s].tokens.len())).max().unwrap_or(0);
        let k = chunk.clamp(1, need.max(1));
        let mut input = Some(Tensor::<1, Int>::from_data(TensorData::new(last.clone(), [n]), &device));
        let mut pairs = Vec::with_capacity(k);
        let mut atts = Vec::with_capacity(k);
        for j in 0..k {
            let (step, next) = model.step(state, input.take().expect("each step is fed"));
            state = next;
            let forced: Vec<Option<u32>> =
                rows.iter().map(|&s| prefixes.get(s).and_then(|p| p.get(steps + j)).copied()).collect();
            let p = if forced.iter().any(Option::is_some) {
                force_rows(step.logits, &forced, &device)
            } else {
                s2s_kernels::ops::best_log_prob_pairs(step.logits) // [n, 2]
            };
            if j + 1 < k {
                // The next step's input is this step's choice, on the device.
                input = Some(p.clone().narrow(1, 0, 1).reshape([n]).int());
            }
            pairs.push(p);
            if capture_attention {
                atts.push(step.attention);
            }
        }
        // One read-back for the chunk: row r, step j at [r·2k + 2j] (id) and [.. + 1] (log p).
        let v: Vec<f32> =
            Tensor::cat(pairs, 1).into_data().convert::<f32>().try_to_vec::<f32>().unwrap_or_default();
        // The chunk's attention in one read too: row r, step j at [(r·k + j)·src_len ..].
        let att: Option<Vec<f32>> = atts
            .into_iter()
            .collect::<Option<Vec<Tensor<2>>>>()
            .filter(|a| !a.is_empty())
            .and_then(|a| Tensor::cat(a, 1).into_data().convert::<f32>().try_to_vec::<f32>().ok());
        steps += k;
        let live: Vec<(usize, usize)> = rows.iter().copied().enumerate().collect();
        let (keep, next_last) =
            absorb(&mut out, &live, &limits, &v, att.as_deref(), k, src.lens.as_slice(), src_len);
        if keep.is_empty() {
            break;
        }
        state = keep_rows(model, state, &mut rows, &keep, &device);
        last = next_last;
    }
    out
}

/// Takes a chunk of `k` steps' choices into the hypotheses `out`. `live` pairs each unfinished
/// sentence with its row of the chunk's read-back `v` (row `r`, step `j`: id at `r·2k + 2j`,
/// log-probability after it) and of its attention `att` (at `(r·k + j)·src_len`). Returns the
/// positions in `live` of the sentences still unfinished and their last tokens.
pub(crate) fn absorb(
    out: &mut [Hypothesis],
    live: &[(usize, usize)],
    limits: &[usize],
    v: &[f32],
    att: Option<&[f32]>,
    k: usize,
    lens: &[usize],
    src_len: usize,
) -> (Vec<usize>, Vec<i64>) {
    let mut keep = Vec::with_capacity(live.len());
    let mut next_last = Vec::with_capacity(live.len());
    for (i, &(r, sent)) in live.iter().enumerate() {
        let h = &mut out[sent];
        let mut finished = false;
        for j in 0..k {
            let (id, best) = (v[r * 2 * k + 2 * j] as u32, v[r * 2 * k + 2 * j + 1]);
            h.score += best as f64;
            if let (Some(a), Some(store)) = (att, h.attention.as_mut()) {
                let at = (r * k + j) * src_len;
                store.push(a[at..at + lens[sent]].to_vec());
            }
            finished = id == EOS || {
                h.tokens.push(id);
                h.tokens.len() >= limits[sent]
            };
            if finished {
                break;
            }
        }
        if !finished {
            keep.push(i);
            next_last.push(*h.tokens.last().expect("an unfinished row has a token") as i64);
        }
    }
    (keep, next_last)
}
