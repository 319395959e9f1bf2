//! Greedy decoding, batched: every row takes its most probable next token until it emits
//! `</s>` or reaches its length limit; finished rows leave the batch (their state rows are
//! dropped with [`DecodeState::select`]) so they stop costing compute.

use burn::tensor::{Int, Tensor, TensorData};
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
pub fn greedy<M: Incremental>(
    model: &M,
    src: &Source,
    limit: MaxLength,
    capture_attention: bool,
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
    while !rows.is_empty() {
        let input = Tensor::<1, Int>::from_data(TensorData::new(last.clone(), [rows.len()]), &device);
        let (step, next) = model.step(state, input);
        state = next;
        let (ids, best) = s2s_models::fused_softmax::best_log_probs(step.logits);
        let att: Option<Vec<f32>> = if capture_attention {
            step.attention.and_then(|a| a.into_data().convert::<f32>().try_to_vec::<f32>().ok())
        } else {
            None
        };
        let mut keep = Vec::with_capacity(rows.len());
        for (r, &sent) in rows.iter().enumerate() {
            let h = &mut out[sent];
            h.score += best[r] as f64;
            if let (Some(a), Some(store)) = (&att, h.attention.as_mut()) {
                store.push(a[r * src_len..r * src_len + src.lens[sent]].to_vec());
            }
            let id = ids[r] as u32;
            let finished = id == EOS || {
                h.tokens.push(id);
                h.tokens.len() >= limits[sent]
            };
            if !finished {
                keep.push(r);
            }
        }
        if keep.len() < rows.len() {
            if keep.is_empty() {
                break;
            }
            let idx: Vec<i64> = keep.iter().map(|&r| r as i64).collect();
            state = model
                .select(state, &Tensor::<1, Int>::from_data(TensorData::new(idx, [keep.len()]), &device));
            rows = keep.iter().map(|&r| rows[r]).collect();
            last = keep.iter().map(|&r| ids[r]).collect();
        } else {
            last = ids;
        }
    }
    out
}
