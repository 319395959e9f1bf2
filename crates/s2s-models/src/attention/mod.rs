//! Cross-attention for the recurrent decoders: score functions ([`bahdanau`], [`luong`]) and
//! the masked softmax that turns scores into weights and a context vector.
//!
//! `α = softmax(e)` over source positions with padded positions set to `−∞` first, so they
//! receive exactly zero weight; `c = Σᵢ αᵢ hᵢ` (Bahdanau et al., 2015, eqs. 5–6).
//!
//! [`attention_weights`] and [`context`] are those equations in plain tensor operations: they
//! run under `--kernels reference` and wherever no fast kernel applies (training on the CPU,
//! burn's fusion). Where one does — a decoding step on the CPU, a GPU — the kernels crate
//! computes the same (`s2s_kernels::ops::fast_attend`, which returns `None` elsewhere); the
//! tests below hold the two equal.

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

/// The attention weights (eq. 6), `α = softmax(e + mask)` over source positions: `key_mask`
/// is additive, 0 on real positions and `−∞` on padding ([`crate::Source::key_mask`]), so
/// padding gets exactly zero weight. The softmax is the kernels crate's (one pass a row on the
/// CPU; burn's under `--kernels reference`).
///
/// # Shapes
/// - `scores`, `key_mask` `[batch, src]` → weights `[batch, src]`
pub fn attention_weights(scores: Tensor<2>, key_mask: &Tensor<2>) -> Tensor<2> {
    ops::softmax(scores + key_mask.clone())
}

/// The context (eq. 5), `c = Σᵢ αᵢ hᵢ`.
///
/// # Shapes
/// - `weights` `[batch, src]`; `values` `[batch, src, d]`
/// - returns the context `[batch, d]`
pub fn context(weights: Tensor<2>, values: &Tensor<3>) -> Tensor<2> {
    // An element-wise product and a sum over positions, not `batch` [1, src] × [src, d]
    // products.
    (weights.unsqueeze_dim::<3>(2) * values.clone()).sum_dim(1).squeeze_dim::<2>(1) // [batch, d]
}

/// The masked softmax of `scores` and the context of `values`: (context `[batch, d]`, weights
/// `[batch, src]`), from the fast kernels where they apply, else [`attention_weights`] and
/// [`context`].
pub fn attend(scores: Tensor<2>, values: &Tensor<3>, key_mask: &Tensor<2>) -> (Tensor<2>, Tensor<2>) {
    ops::fast_attend(&scores, values, key_mask).unwrap_or_else(|| {
        let weights = attention_weights(scores, key_mask); // α: [batch, src]
        (context(weights.clone(), values), weights)
    })
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

    /// The plain equations, [`attention_weights`] and [`context`], give what the fast kernels
    /// give where they apply: a decoding step on the CPU (values), and on wgpu (values and the
    /// gradients of the scores and the values), with padding and `d` below and above `src`.
    #[test]
    fn the_plain_equations_equal_the_fast_kernels() {
        let plain = |e: Tensor<2>, v: &Tensor<3>, m: &Tensor<2>| {
            let w = attention_weights(e, m);
            (context(w.clone(), v), w)
        };
        let normal = Distribution::Normal(0.0, 1.0);
        let cpu = Device::flex();
        cpu.seed(8);
        for (b, s, d) in [(3, 7, 5), (2, 4, 19)] {
            let e: Tensor<2> = Tensor::random([b, s], Distribution::Normal(0.0, 2.0), &cpu);
            let v: Tensor<3> = Tensor::random([b, s, d], normal, &cpu);
            let lens: Vec<usize> = (0..b).map(|i| s - i).collect();
            let mask = crate::Source::new(&vec![0; b * s], &lens, s, &cpu).key_mask;
            let (c1, w1) = ops::fast_attend(&e, &v, &mask).expect("the step kernels run");
            let (c2, w2) = plain(e, &v, &mask);
            assert!(crate::test_support::max_diff(c1, c2) < 1e-5, "context, {b}x{s}x{d}");
            assert!(crate::test_support::max_diff(w1, w2) < 1e-6, "weights, {b}x{s}x{d}");
        }
        let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() else { return };
        let ad = gpu.autodiff();
        ad.seed(8);
        for (b, s, d) in [(3, 7, 5), (2, 4, 19)] {
            let e0: Tensor<2> = Tensor::random([b, s], Distribution::Normal(0.0, 2.0), &ad);
            let v0: Tensor<3> = Tensor::random([b, s, d], normal, &ad);
            let (rc, rw): (Tensor<2>, Tensor<2>) =
                (Tensor::random([b, d], normal, &ad), Tensor::random([b, s], normal, &ad));
            let lens: Vec<usize> = (0..b).map(|i| s - i).collect();
            let mask = crate::Source::new(&vec![0; b * s], &lens, s, &ad).key_mask;
            let run = |fast: bool| {
                let (e, v) = (e0.clone().require_grad(), v0.clone().require_grad());
                let (c, w) = if fast {
                    ops::fast_attend(&e, &v, &mask).expect("the GPU kernels run")
                } else {
                    plain(e.clone(), &v, &mask)
                };
                let g = ((c.clone() * rc.clone()).sum() + (w.clone() * rw.clone()).sum()).backward();
                (c.inner(), w.inner(), e.grad(&g).unwrap(), v.grad(&g).unwrap())
            };
            let ((c1, w1, de1, dv1), (c2, w2, de2, dv2)) = (run(true), run(false));
            let at = format!("wgpu, {b}x{s}x{d}");
            assert!(crate::test_support::max_diff(c1, c2) < 1e-5, "{at}: context");
            assert!(crate::test_support::max_diff(w1, w2) < 1e-6, "{at}: weights");
            assert!(crate::test_support::max_diff(de1, de2) < 1e-5, "{at}: ∂scores");
            assert!(crate::test_support::max_diff(dv1, dv2) < 1e-5, "{at}: ∂values");
        }
    }
}
