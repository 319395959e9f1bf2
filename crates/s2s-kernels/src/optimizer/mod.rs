//! The optimiser: Adam in one pass over each parameter (`adam`) and gradient clipping by the
//! global norm (`clip`), and the passes over all gradients that run in place on flex (`in_place`).

pub mod adam;
pub(crate) mod clip;
pub(crate) mod in_place;
