//! Dropout, as equations in plain burn tensor operations: what this folder's kernels compute,
//! and what runs under `--kernels reference` (see [`crate::reference`]).

use burn::nn::Dropout;
use burn::tensor::activation::relu;
use burn::tensor::{Tensor, TensorData};

/// Dropout (Srivastava et al., 2014): `x ⊙ m / (1 − p)`, `m ~ Bernoulli(1 − p)`, while
/// training; `x` otherwise. The mask is the kernels' (see the module doc).
pub fn dropout<const D: usize>(d: &Dropout, x: Tensor<D>) -> Tensor<D> {
    let device = x.device();
    if !crate::dropout::drops(d, &device) {
        return d.forward(x);
    }
    let keep = crate::dropout::keep(d);
    let seed = crate::device::draw_dropout_seed(&device);
    let shape = x.shape();
    let mask = crate::device::dropout_mask_on_host(&device, seed, shape.num_elements(), keep);
    x * Tensor::<D>::from_data(TensorData::new(mask, shape), &device)
}

/// `dropout(relu(x))`.
pub fn relu_dropout<const D: usize>(d: &Dropout, x: Tensor<D>) -> Tensor<D> {
    dropout(d, relu(x))
}

/// `x + dropout(y)` (a residual connection).
pub fn add_dropout<const D: usize>(d: &Dropout, x: Tensor<D>, y: Tensor<D>) -> Tensor<D> {
    x + dropout(d, y)
}
