//! Additive attention (Bahdanau, Cho & Bengio, 2015, eq. 6 and appendix A.1.2):
//! `eᵢ = vᵀ tanh(W₁ hᵢ + W₂ s)`, with `hᵢ` the encoder annotations and `s` the decoder state
//! (in RNNsearch, the state *before* the current step).
//!
//! [`additive_scores`] is the equation in plain tensor operations: it runs under `--kernels
//! reference` and wherever no fast kernel applies (training on the CPU, burn's fusion). Where
//! one does — a decoding step on the CPU, a GPU — the kernels crate computes the same
//! (`s2s_kernels::ops::fast_additive_scores`, which returns `None` elsewhere); the tests below
//! hold the two equal.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use s2s_kernels::ops;

/// The additive score (eq. 6) of every source position, `eᵢ = vᵀ tanh(W₁hᵢ + W₂s)`, from the
/// projected annotations `W₁hᵢ` (`keys`, once per sentence) and the projected state `W₂s + b`
/// (`q`, at every step). The `tanh` is the kernels crate's (vectorised on the CPU; burn's
/// under `--kernels reference`).
///
/// # Shapes
/// - `q` `[batch, d_attention]`; `keys` `[batch, src, d_attention]`; `v` `[d_attention, 1]`
/// - returns the scores `[batch, src]`
pub fn additive_scores(q: Tensor<2>, keys: &Tensor<3>, v: Tensor<2>) -> Tensor<2> {
    let [batch, src, d_attention] = keys.dims();
    // tanh(W₁hᵢ + W₂s): [batch, src, d_attention]
    let hidden = ops::tanh(keys.clone() + q.unsqueeze_dim::<3>(1));
    // vᵀ(·) as one [batch·src, d_attention] × [d_attention, 1] product (`Linear` on a 3-d input
    // would run `batch` tiny products).
    hidden.reshape([batch * src, d_attention]).matmul(v).reshape([batch, src]) // [batch, src]
}

/// Configuration of [`AdditiveAttention`].
#[derive(Config, Debug)]
pub struct AdditiveAttentionConfig {
    /// Encoder annotation size (`2·hidden` for a bidirectional encoder).
    pub d_key: usize,
    /// Decoder state size.
    pub d_query: usize,
    /// Size of the hidden layer of the score network.
    pub d_attention: usize,
}

/// The additive score network.
///
/// # Shapes
/// - keys (projected): `[batch, src, d_attention]`
/// - query: `[batch, d_query]` → scores `[batch, src]`
#[derive(Module, Debug)]
pub struct AdditiveAttention {
    /// `W₁`, applied once per sentence to the annotations.
    pub key_proj: Linear,
    /// `W₂` (with the score network's bias), applied to the decoder state at every step.
    pub query_proj: Linear,
    /// `v`.
    pub v: Linear,
}

impl AdditiveAttentionConfig {
    /// Initialises the score network.
    pub fn init(&self, device: &Device) -> AdditiveAttention {
        AdditiveAttention {
            key_proj: LinearConfig::new(self.d_key, self.d_attention).with_bias(false).init(device),
            query_proj: LinearConfig::new(self.d_query, self.d_attention).init(device),
            v: LinearConfig::new(self.d_attention, 1).with_bias(false).init(device),
        }
    }
}

impl AdditiveAttention {
    /// `W₁ hᵢ` for every position: `[batch, src, d_key]` → `[batch, src, d_attention]`.
    pub fn keys(&self, memory: Tensor<3>) -> Tensor<3> {
        ops::linear(&self.key_proj, memory)
    }

    /// `eᵢ = vᵀ tanh(W₁hᵢ + W₂s)`: `[batch, d_query]` → `[batch, src]`, from a fast kernel
    /// where one applies, else [`additive_scores`].
    pub fn scores(&self, query: Tensor<2>, keys: &Tensor<3>) -> Tensor<2> {
        let q = ops::linear(&self.query_proj, query); // W₂s + b: [batch, d_attention]
        let v = self.v.weight.val(); // [d_attention, 1]
        ops::fast_additive_scores(&q, keys, &v).unwrap_or_else(|| additive_scores(q, keys, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::gradcheck;
    use burn::tensor::Distribution;

    /// The plain equation, [`additive_scores`], gives what the fast kernel gives where it
    /// applies: a decoding step on the CPU (values), and on wgpu (values and the gradients of
    /// the query, the keys and `v`), with a width that leaves a partial lane block.
    #[test]
    fn the_plain_equation_equals_the_fast_kernels() {
        let d = Device::flex();
        d.seed(3);
        let normal = Distribution::Normal(0.0, 1.0);
        for (b, s, a) in [(5, 7, 37), (2, 3, 16)] {
            let q: Tensor<2> = Tensor::random([b, a], normal, &d);
            let keys: Tensor<3> = Tensor::random([b, s, a], normal, &d);
            let v: Tensor<2> = Tensor::random([a, 1], normal, &d);
            let fast = ops::fast_additive_scores(&q, &keys, &v).expect("the step kernel runs");
            let plain = additive_scores(q, &keys, v);
            assert!(crate::test_support::max_diff(fast, plain) < 1e-5, "{b}x{s}x{a}");
        }
        let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() else { return };
        let ad = gpu.autodiff();
        ad.seed(9);
        let (b, s, a) = (3, 7, 11);
        let q0: Tensor<2> = Tensor::random([b, a], normal, &ad);
        let k0: Tensor<3> = Tensor::random([b, s, a], normal, &ad);
        let v0: Tensor<2> = Tensor::random([a, 1], normal, &ad);
        let r: Tensor<2> = Tensor::random([b, s], normal, &ad);
        let run = |fast: bool| {
            let (q, k, v) = (q0.clone().require_grad(), k0.clone().require_grad(), v0.clone().require_grad());
            let e = if fast {
                ops::fast_additive_scores(&q, &k, &v).expect("the GPU kernel runs")
            } else {
                additive_scores(q.clone(), &k, v.clone())
            };
            let g = (e.clone() * r.clone()).sum().backward();
            (e.inner(), q.grad(&g).unwrap(), k.grad(&g).unwrap(), v.grad(&g).unwrap())
        };
        let ((e1, q1, k1, v1), (e2, q2, k2, v2)) = (run(true), run(false));
        let close = |x: Tensor<2>, y: Tensor<2>, tol: f32| crate::test_support::max_diff(x, y) < tol;
        assert!(close(e1, e2, 1e-5), "wgpu: scores");
        assert!(close(q1, q2, 1e-5), "wgpu: ∂q");
        assert!(crate::test_support::max_diff(k1, k2) < 1e-5, "wgpu: ∂keys");
        assert!(close(v1, v2, 1e-4), "wgpu: ∂v");
    }

    #[test]
    fn gradient_matches_central_differences() {
        let d = Device::flex().autodiff();
        d.seed(11);
        let att = AdditiveAttentionConfig::new(3, 2, 4).init(&d);
        let mem: Tensor<3> = Tensor::random([2, 3, 3], Distribution::Normal(0.0, 1.0), &d);
        let q: Tensor<2> = Tensor::random([2, 2], Distribution::Normal(0.0, 1.0), &d);
        let weights: Tensor<2> = Tensor::random([2, 3], Distribution::Normal(0.0, 1.0), &d);
        gradcheck::check(att, |a: &AdditiveAttention| {
            let s = a.scores(q.clone(), &a.keys(mem.clone()));
            (burn::tensor::activation::softmax(s, 1) * weights.clone()).sum()
        });
    }
}
