//! Reordering a decoder state's rows: beam search's hypotheses follow the rows they extend,
//! and finished sentences leave. The models define the state ([`DecodeState`]); search decides
//! which rows live on, so the reordering lives here.
//!
//! The caller holds the kept rows on the host (`picked`) as well as on the device (`indices`,
//! the same rows): search chose them there, and a captured step reads nothing back.

use burn::tensor::{Int, Tensor};
use s2s_models::cell::CellState;
use s2s_models::transformer::TransformerState;
use s2s_models::{DecodeState, RnnState};

/// Keeps rows `indices` (equal to `picked`, in that order; repeats allowed) of every tensor
/// of `state`.
pub fn select(state: DecodeState, indices: &Tensor<1, Int>, picked: &[usize]) -> DecodeState {
    match state {
        DecodeState::Rnn(s) => DecodeState::Rnn(rnn(s, indices)),
        DecodeState::Transformer(s) => DecodeState::Transformer(transformer(s, indices, picked)),
    }
}

/// A recurrent decoder's layers, its memory and keys, mask and input feeding.
fn rnn(s: RnnState, indices: &Tensor<1, Int>) -> RnnState {
    let rows2 = |t: Tensor<2>| t.select(0, indices.clone());
    let rows3 = |t: Tensor<3>| t.select(0, indices.clone());
    RnnState {
        layers: s.layers.into_iter().map(|l| CellState { h: rows2(l.h), c: l.c.map(rows2) }).collect(),
        memory: s.memory.map(rows3),
        keys: s.keys.map(rows3),
        key_mask: rows2(s.key_mask),
        feed: s.feed.map(rows2),
    }
}

/// The Transformer's caches. The memory and its mask are not copied when they are kept by
/// sentence, nor when the rows' sentences do not change (a beam-search step reordering
/// hypotheses within each sentence): copying `[rows, src, 2·d_model]` per layer cost ~47 MB a
/// step on the bench shape at beam 5.
fn transformer(s: TransformerState, indices: &Tensor<1, Int>, picked: &[usize]) -> TransformerState {
    let (rows, copy) = s.rows.select(picked);
    let (memory, memory_mask) = if copy {
        (
            s.memory.into_iter().map(|kv| kv.select(indices)).collect(),
            s.memory_mask.select(0, indices.clone()),
        )
    } else {
        (s.memory, s.memory_mask)
    };
    TransformerState {
        memory,
        cache: s.cache.into_iter().map(|c| c.map(|kv| kv.select(indices, picked))).collect(),
        memory_mask,
        position: s.position,
        rows,
    }
}
