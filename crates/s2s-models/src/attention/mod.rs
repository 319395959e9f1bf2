//! Cross-attention for the recurrent decoders: score functions ([`bahdanau`], [`luong`]) and
//! the masked softmax that turns scores into weights and a context vector.
//!
//! `α = softmax(e)` over source positions with padded positions set to `−∞` first, so they
//! receive exactly zero weight; `c = Σᵢ αᵢ hᵢ` (Bahdanau et al., 2015, eqs. 5–6).

pub mod bahdanau;
pub mod luong;

use burn::module::Module;
use burn::tensor::Tensor;
use s2s_kernels::ops;

pub use bahdanau::{AdditiveAttention, AdditiveAttentionConfig};
pub use luong::{LuongAttention, LuongAttentionConfig, LuongScore};

/// Either family of score functions, behind one call pattern: keys are projected once per
/// sentence ([`Attention::keys`]), then scored against a query at every step.
#[derive(Module, Debug)]
pub enum Attention {
    /// Additive (Bahdanau) scores.
    Bahdanau(AdditiveAttention),
    /// Multiplicative / concat (Luong) scores.
    Luong(LuongAttention),
}

impl Attention {
    /// Projects the encoder memory `[batch, src, d_key]` into the score's key space, once.
    pub fn keys(&self, memory: Tensor<3>) -> Tensor<3> {
        match self {
            Attention::Bahdanau(a) => a.keys(memory),
            Attention::Luong(a) => a.keys(memory),
        }
    }

    /// Scores `e` `[batch, src]` of `query` `[batch, d_query]` against projected `keys`.
    pub fn scores(&self, query: Tensor<2>, keys: &Tensor<3>) -> Tensor<2> {
        match self {
            Attention::Bahdanau(a) => a.scores(query, keys),
            Attention::Luong(a) => a.scores(query, keys),
        }
    }

    /// Scores, masked softmax and context in one call.
    pub fn attend(
        &self,
        query: Tensor<2>,
        keys: &Tensor<3>,
        values: &Tensor<3>,
        key_mask: &Tensor<2>,
    ) -> (Tensor<2>, Tensor<2>) {
        attend(self.scores(query, keys), values, key_mask)
    }
}

/// Masked softmax of `scores` `[batch, src]` (`key_mask` additive: 0 on real positions, `−∞`
/// on padding, [`crate::Source::key_mask`]) and the weighted sum of `values`
/// `[batch, src, d]`: `α = softmax(e + mask)`, `c = Σᵢ αᵢ hᵢ`. Returns (context `[batch, d]`,
/// weights `[batch, src]`).
pub fn attend(scores: Tensor<2>, values: &Tensor<3>, key_mask: &Tensor<2>) -> (Tensor<2>, Tensor<2>) {
    ops::attend(scores, values, key_mask)
}

#[cfg(test)]
pub(crate) mod gradcheck {
    //! Numerical gradient checks shared by the score tests.
    use burn::module::{Module, ModuleMapper, Param};
    use burn::tensor::Tensor;

    /// Central differences of `f` w.r.t. every parameter entry of `module` (built on an
    /// autodiff flex device; f32, so a tolerance suited to it), compared with autodiff's
    /// gradient.
    pub fn check<M: Module + Clone>(module: M, f: impl Fn(&M) -> Tensor<1>) {
        let grads = f(&module).backward();
        let mut collect = Collect { grads: &grads, out: Vec::new() };
        let _ = module.clone().map(&mut collect);
        let analytic = collect.out;
        let mut index = 0;
        for (p, g) in analytic.iter().enumerate() {
            for i in 0..g.len() {
                let eps = 1e-2f32;
                let plus = f(&module.clone().map(&mut Nudge { target: p, index: i, by: eps, seen: 0 }))
                    .into_scalar::<f32>();
                let minus = f(&module.clone().map(&mut Nudge { target: p, index: i, by: -eps, seen: 0 }))
                    .into_scalar::<f32>();
                let numeric = (plus - minus) / (2.0 * eps);
                let tol = 2e-3 + 2e-2 * numeric.abs().max(g[i].abs());
                assert!(
                    (numeric - g[i]).abs() < tol,
                    "param {p} entry {i}: numeric {numeric} vs autodiff {}",
                    g[i]
                );
                index += 1;
            }
        }
        assert!(index > 0, "no parameters were checked");
    }

    struct Collect<'a> {
        grads: &'a burn::tensor::Gradients,
        out: Vec<Vec<f32>>,
    }
    impl ModuleMapper for Collect<'_> {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let g = param.val().grad(self.grads).expect("every parameter has a gradient");
            self.out.push(g.into_data().try_to_vec::<f32>().unwrap());
            param
        }
    }

    struct Nudge {
        target: usize,
        index: usize,
        by: f32,
        seen: usize,
    }
    impl ModuleMapper for Nudge {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let p = self.seen;
            self.seen += 1;
            if p != self.target {
                return param;
            }
            let (index, by) = (self.index, self.by);
            param.map(|t| {
                let shape = t.shape();
                let mut v: Vec<f32> = t.to_data().try_to_vec::<f32>().unwrap();
                v[index] += by;
                Tensor::from_data(burn::tensor::TensorData::new(v, shape), &t.device())
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, Distribution};

    #[test]
    fn weights_sum_to_one_and_padding_gets_zero() {
        let d = Device::flex();
        let scores: Tensor<2> = Tensor::random([2, 4], Distribution::Normal(0.0, 3.0), &d);
        let src = crate::Source::new(&[0; 8], &[4, 2], 4, &d);
        let values: Tensor<3> = Tensor::random([2, 4, 3], Distribution::Normal(0.0, 1.0), &d);
        let (ctx, w) = attend(scores, &values, &src.key_mask);
        let w: Vec<f32> = w.into_data().try_to_vec::<f32>().unwrap();
        assert!((w[..4].iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((w[4..].iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert_eq!(&w[6..], &[0.0, 0.0]);
        assert_eq!(ctx.dims(), [2, 3]);
    }
}
