//! Matrix products, shared by every operation: ours for a few rows against weights packed
//! once (`packed`), the row-split products of training (`small`), `gemm`'s large products
//! (`flex`), and one product over all steps for a weight every step multiplies
//! (`deferred_grad`), a weight gradient on a GPU in blocks of rows (`split_rows`), and the
//! probe that times burn's product at a step's shapes (`probe`).
//!
//! A projection of a rank-3 input is one 2-D product, `[rows, d_in] × W` (`ops::matmul_rows`,
//! which every `Linear` goes through by `ops::linear`): burn would broadcast `W` into one
//! small product per sentence.

pub(crate) mod reference;

pub(crate) mod deferred_grad;
pub mod flex;
pub mod int8;
pub mod packed;
pub mod probe;
pub(crate) mod small;
pub mod split_rows;
pub mod table;
