//! The optimiser: Adam in one pass over each parameter (`adam`) and gradient clipping by the
//! global norm (`clip`).

pub mod adam;
pub(crate) mod clip;
