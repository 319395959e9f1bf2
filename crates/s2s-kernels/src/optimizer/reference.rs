//! The optimiser's passes as equations in plain burn tensor operations: what this folder's
//! kernels compute, and what runs under `--kernels reference` (see [`crate::reference`]).
//! Adam's reference is burn's own `Adam` ([`crate::optimizer::adam`] computes it operation by
//! operation, to the bit).

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

struct SquaredNorm<'a> {
    grads: &'a GradientsParams,
    sum: Option<Tensor<1>>,
}

impl ModuleVisitor for SquaredNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            let s = g.square().sum();
            self.sum = Some(match self.sum.take() {
                Some(acc) => acc + s,
                None => s,
            });
        }
    }
}

/// `‖g‖₂ = √(Σ g²)` over all of `module`'s gradients together (0 without any).
pub fn global_norm<M: Module>(module: &M, grads: &GradientsParams) -> f64 {
    let mut v = SquaredNorm { grads, sum: None };
    module.visit(&mut v);
    v.sum.map(|s| (s.into_scalar::<f32>() as f64).sqrt()).unwrap_or(0.0)
}

struct Scale<'a> {
    grads: &'a mut GradientsParams,
    factor: f64,
}

impl ModuleVisitor for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.remove::<D>(param.id) {
            self.grads.register(param.id, g.mul_scalar(self.factor));
        }
    }
}

/// Every gradient times `factor`.
pub fn scale_grads<M: Module>(module: &M, grads: &mut GradientsParams, factor: f64) {
    module.visit(&mut Scale { grads, factor });
}
