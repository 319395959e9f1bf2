//! What search needs from a model: encode once, step incrementally, reorder state rows.
//! [`Model`] implements it for every model kind; tests implement it with hand-built tables.

use burn::tensor::{Int, Tensor};
use s2s_models::{DecodeState, Model, Source, Step};

/// An incremental decoder.
pub trait Incremental {
    /// The per-row decoder state.
    type State;
    /// Encodes a source batch into one state row per sentence.
    fn encode(&self, src: &Source) -> Self::State;
    /// One step from the previous tokens `last` `[rows]`.
    fn step(&self, state: Self::State, last: Tensor<1, Int>) -> (Step, Self::State);
    /// Keeps rows `indices` in that order (repeats allowed); `picked` holds the same rows on
    /// the host ([`reorder`](crate::reorder)).
    fn select(&self, state: Self::State, indices: &Tensor<1, Int>, picked: &[usize]) -> Self::State;
}

impl Incremental for Model {
    type State = DecodeState;

    fn encode(&self, src: &Source) -> DecodeState {
        Model::encode(self, src)
    }

    fn step(&self, state: DecodeState, last: Tensor<1, Int>) -> (Step, DecodeState) {
        self.decode_step(state, last)
    }

    fn select(&self, state: DecodeState, indices: &Tensor<1, Int>, picked: &[usize]) -> DecodeState {
        crate::reorder::select(state, indices, picked)
    }
}
