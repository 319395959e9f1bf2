//! The LSTM: the cell's gate math and the whole layer, on the CPU (`cpu`, with its threads in
//! lockstep, `lockstep`) and on a GPU (`gpu`). How the CPU layer's rate is measured against
//! the machine's best product rate (`s2s bench --lstm-step`): `s2s_train::step_rate`.

pub(crate) mod reference;

pub mod cpu;
#[cfg(not(feature = "gpu-tuned"))]
pub(crate) mod gpu;
pub(crate) mod lockstep;
