//! Products by a weight over the last dimension, and a module used at every decoder step, as
//! equations in plain burn tensor operations: what this folder's kernels compute, and what runs
//! under `--kernels reference` (see [`crate::reference`]).

use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::Tensor;

/// `f` on `x` seen as `[rows, d_in]` (every leading dimension one row), its `[rows, d_out]`
/// result given `x`'s leading dimensions back.
pub fn as_rows<const D: usize>(
    x: Tensor<D>,
    d_out: usize,
    f: impl FnOnce(Tensor<2>) -> Tensor<2>,
) -> Tensor<D> {
    let mut dims = x.dims();
    let d_in = dims[D - 1];
    let rows = dims[..D - 1].iter().product::<usize>();
    dims[D - 1] = d_out;
    f(x.reshape([rows, d_in])).reshape(dims)
}

/// `x W` over the last dimension.
pub fn matmul_rows<const D: usize>(x: Tensor<D>, w: Tensor<2>) -> Tensor<D> {
    as_rows(x, w.dims()[1], |x| x.matmul(w))
}

/// `x W + b` over the last dimension.
pub fn affine_rows<const D: usize>(x: Tensor<D>, w: Tensor<2>, b: Tensor<1>) -> Tensor<D> {
    as_rows(x, w.dims()[1], |x| x.matmul(w) + b.unsqueeze::<2>())
}

/// A `Linear` layer: `x W + b`.
pub fn linear<const D: usize>(layer: &Linear, x: Tensor<D>) -> Tensor<D> {
    match &layer.bias {
        Some(b) => affine_rows(x, layer.weight.val(), b.val()),
        None => matmul_rows(x, layer.weight.val()),
    }
}

/// `base + x W` (`base` `[rows, d_out]` or `[1, d_out]`).
pub fn add_matmul(base: Tensor<2>, x: Tensor<2>, w: Tensor<2>) -> Tensor<2> {
    base + x.matmul(w)
}

/// A module used at every step of a decoder loop, as it is (the kernels defer its weight
/// gradients; autodiff sums them step by step here).
pub fn for_steps<M: Module>(module: &M) -> M {
    module.clone()
}
