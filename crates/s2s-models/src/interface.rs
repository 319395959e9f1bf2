//! The one seq2seq interface every model implements, and the values that cross it.
//!
//! - [`Model::forward`](crate::Model::forward): teacher-forced logits `[batch, tgt, vocab]`
//!   (and cross-attention weights when the model has them);
//! - [`Model::encode`](crate::Model::encode): the source → a [`DecodeState`];
//! - [`Model::decode_step`](crate::Model::decode_step): one incremental step → logits
//!   `[rows, vocab]` and the next state, whose rows search reorders (beam search) or drops
//!   (finished sentences): `s2s_decode::reorder`.

use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::cell::CellState;
use s2s_kernels::ops;

/// A padded source batch on a device.
///
/// # Shapes
/// - `ids`, `keep`, `key_mask`: `[batch, src]`; `keep` 1 on real tokens and 0 on padding,
///   `key_mask` the additive attention mask (0 on real tokens, `−∞` on padding)
#[derive(Debug, Clone)]
pub struct Source {
    /// Token ids.
    pub ids: Tensor<2, Int>,
    /// 1.0 on real positions, 0.0 on padding.
    pub keep: Tensor<2>,
    /// 0.0 on real positions, `−∞` on padding: added to attention scores, built here once a
    /// batch (on the host: no launch on a GPU).
    pub key_mask: Tensor<2>,
    /// Real length of each row.
    pub lens: Vec<usize>,
    /// Leading positions real in every row (the shortest length), which the recurrent
    /// encoders run without the padding mix. 0 claims none: a source whose buffers are
    /// rewritten after a computation was recorded on them (`s2s_decode::captured::graph_source`)
    /// must not let this batch's lengths shape it.
    pub dense: usize,
}

impl Source {
    /// Builds from row-major ids `[batch, len]` and per-row real lengths.
    pub fn new(ids: &[u32], lens: &[usize], len: usize, device: &Device) -> Self {
        let batch = lens.len();
        let ids: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
        let (keep, key_mask) = Self::masks(lens, len);
        Self {
            ids: Tensor::from_data(TensorData::new(ids, [batch, len]), device),
            keep: Tensor::from_data(TensorData::new(keep, [batch, len]), device),
            key_mask: Tensor::from_data(TensorData::new(key_mask, [batch, len]), device),
            lens: lens.to_vec(),
            dense: lens.iter().copied().min().unwrap_or(0).min(len),
        }
    }

    /// `keep` and `key_mask` (row-major `[batch, len]`) of rows of real lengths `lens`.
    pub fn masks(lens: &[usize], len: usize) -> (Vec<f32>, Vec<f32>) {
        let keep: Vec<f32> =
            lens.iter().flat_map(|&l| (0..len).map(move |j| if j < l { 1.0 } else { 0.0 })).collect();
        let key_mask = keep.iter().map(|&k| if k == 0.0 { f32::NEG_INFINITY } else { 0.0 }).collect();
        (keep, key_mask)
    }

    /// Rows in the batch.
    pub fn batch(&self) -> usize {
        self.lens.len()
    }

    /// Padded length.
    pub fn len(&self) -> usize {
        self.ids.dims()[1]
    }

    /// True for a batch without positions.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each row's real tokens reversed in place (padding stays at the end), as in
    /// Sutskever et al. (2014): `a b c </s> <pad>` → `</s> c b a <pad>`. The index comes
    /// from `keep` on the device, so it holds for whatever rows the buffers hold.
    pub fn reversed(&self) -> Self {
        let (batch, len) = (self.batch(), self.len());
        let device = self.ids.device();
        // Position j of a row of length l reads l − 1 − j where j < l, else j.
        let j: Tensor<2> = ops::constant("positions", &[1, len], &device, || {
            Tensor::<1, Int>::arange(0..len as i64, &device).float().reshape([1, len])
        })
        .expand([batch, len]);
        let l = self.keep.clone().sum_dim(1).expand([batch, len]);
        let back = l.clone().sub_scalar(1.0) - j.clone();
        let idx = j.clone().mask_where(j.lower(l), back).int();
        Self { ids: self.ids.clone().gather(1, idx), ..self.clone() }
    }
}

/// Teacher-forced output.
#[derive(Debug, Clone)]
pub struct Forward {
    /// Unnormalised scores, `[batch, tgt, vocab]`.
    pub logits: Tensor<3>,
    /// Cross-attention weights `[batch, tgt, src]` (averaged over heads), when the model
    /// attends and they were asked for.
    pub attention: Option<Tensor<3>>,
}

/// One incremental decoding step's output.
///
/// The scores come unnormalised: beam search normalises them ([`Step::log_probs`]); greedy
/// search needs only each row's best token and its log-probability
/// ([`ops::best_log_probs`]), one pass over the row instead of a full
/// `log_softmax` and an argmax over its result (~0.5 ms of a ~9 ms Luong step on the
/// benchmark shape).
#[derive(Debug, Clone)]
pub struct Step {
    /// Unnormalised scores of the next token, `[rows, vocab]`.
    pub logits: Tensor<2>,
    /// Cross-attention over the source for this step, `[rows, src]`.
    pub attention: Option<Tensor<2>>,
}

impl Step {
    /// Log-probabilities of the next token, `[rows, vocab]`.
    pub fn log_probs(&self) -> Tensor<2> {
        ops::log_softmax(self.logits.clone())
    }
}

/// A recurrent decoder's state.
#[derive(Debug, Clone)]
pub struct RnnState {
    /// Per decoder layer.
    pub layers: Vec<CellState>,
    /// Encoder outputs `[rows, src, d]` (attention models).
    pub memory: Option<Tensor<3>>,
    /// The attention's projected keys `[rows, src, k]` (computed once in `encode`).
    pub keys: Option<Tensor<3>>,
    /// The source's additive key mask `[rows, src]` ([`Source::key_mask`]).
    pub key_mask: Tensor<2>,
    /// Luong input feeding: the previous attentional vector `[rows, hidden]`.
    pub feed: Option<Tensor<2>>,
}

/// Embeds ids and zeroes padding rows (burn's `Embedding` has no padding index): the `<pad>`
/// vector is never used and never trained.
pub fn embed_masked(embedding: &burn::nn::Embedding, ids: Tensor<2, Int>, keep: &Tensor<2>) -> Tensor<3> {
    embedding.forward(ids) * keep.clone().unsqueeze_dim::<3>(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row's real tokens reversed, padding left in place; the dense prefix is the
    /// shortest row.
    #[test]
    fn reverses_each_rows_real_tokens() {
        let d = Device::flex();
        let ids: Vec<u32> = (1..=15).collect();
        let src = Source::new(&ids, &[5, 2, 0], 5, &d);
        let reversed = src.reversed().ids.into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
        assert_eq!(reversed, [5, 4, 3, 2, 1, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15]);
        assert_eq!((src.dense, Source::new(&ids, &[5, 5, 4], 5, &d).dense), (0, 4));
    }
}
