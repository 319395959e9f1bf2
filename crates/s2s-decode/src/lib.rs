//! # s2s-decode: search over the seq2seq interface
//!
//! Decoding only ever calls [`Model::encode`](s2s_models::Model::encode) and
//! [`Model::decode_step`](s2s_models::Model::decode_step) (through [`Incremental`]), so it
//! serves every model kind and [`Ensemble`]s of them: greedy search, beam search and
//! [`sample`]-ing.

pub mod beam;
pub mod captured;
pub mod ensemble;
pub mod greedy;
pub mod incremental;
pub mod limits;
pub mod reorder;
pub mod sample;

pub use beam::{
    BeamConfig, BeamObserver, Candidate, Fate, LengthPenalty, beam_search, beam_search_observed,
    beam_search_prefixed, beam_search_with,
};
pub use captured::{CapturedSearch, DecodeCaptureStats, Run};
pub use ensemble::Ensemble;
pub use greedy::{Hypothesis, greedy, greedy_chunked, greedy_chunked_prefixed, greedy_prefixed};
pub use incremental::Incremental;
pub use limits::{MaxLength, MemoryLimit, Names, RowState, SearchMemoryError, SearchSize};
pub use sample::{SampleConfig, SampleError, sample};
