//! Global-norm gradient clipping (Pascanu et al., 2013): if `‖g‖₂ > max_norm` over *all*
//! parameters together, every gradient is scaled by `max_norm / ‖g‖₂`. (burn's
//! `GradientClippingConfig::Norm` clips each tensor on its own, which changes the direction.)

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

/// The global L2 norm of `grads` over `module`'s parameters.
pub fn global_norm<M: Module>(module: &M, grads: &GradientsParams) -> f64 {
    let mut v = SquaredNorm { grads, sum: None };
    module.visit(&mut v);
    v.sum.map(|s| (s.into_scalar::<f32>() as f64).sqrt()).unwrap_or(0.0)
}

/// Scales every gradient by `factor`.
pub fn scale_grads<M: Module>(module: &M, grads: &mut GradientsParams, factor: f64) {
    module.visit(&mut Scale { grads, factor });
}

/// Clips to `max_norm` (≤ 0: no clipping); returns the norm before clipping.
pub fn clip_global_norm<M: Module>(module: &M, grads: &mut GradientsParams, max_norm: f64) -> f64 {
    let norm = global_norm(module, grads);
    if max_norm > 0.0 && norm > max_norm {
        scale_grads(module, grads, max_norm / norm);
    }
    norm
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::{Device, Distribution};

    #[test]
    fn clips_the_global_norm_not_each_tensor() {
        let d = Device::flex().autodiff();
        d.seed(5);
        let lin: Linear = LinearConfig::new(4, 3).init(&d);
        let x: Tensor<2> = Tensor::random([8, 4], Distribution::Normal(0.0, 10.0), &d);
        let loss = lin.forward(x).square().sum();
        let mut grads = GradientsParams::from_grads(loss.backward(), &lin);
        let before = global_norm(&lin, &grads);
        assert!(before > 1.0);
        let w_before = grads.get::<2>(lin.weight.id).unwrap();
        let returned = clip_global_norm(&lin, &mut grads, 1.0);
        assert!((returned - before).abs() < 1e-3 * before);
        let after = global_norm(&lin, &grads);
        assert!((after - 1.0).abs() < 1e-4, "{after}");
        // Direction preserved: each tensor scaled by the same factor.
        let w_after = grads.get::<2>(lin.weight.id).unwrap();
        let ratio =
            (w_after / w_before.mul_scalar(1.0 / before)).sub_scalar(1.0).abs().max().into_scalar::<f32>();
        assert!(ratio < 1e-3, "{ratio}");
    }
}
