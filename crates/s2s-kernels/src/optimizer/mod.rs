//! The optimiser: Adam in one pass over each parameter (`adam`), gradient clipping by the
//! global norm on a GPU (`clip`), the passes over all gradients that run in place on flex
//! (`in_place`), and their references (`reference`).

pub mod adam;
pub(crate) mod clip;
pub(crate) mod in_place;
pub(crate) mod reference;
