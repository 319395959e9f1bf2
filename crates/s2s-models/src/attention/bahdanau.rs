//! Additive attention (Bahdanau, Cho & Bengio, 2015, eq. 6 and appendix A.1.2):
//! `eᵢ = vᵀ tanh(W₁ hᵢ + W₂ s)`, with `hᵢ` the encoder annotations and `s` the decoder state
//! (in RNNsearch, the state *before* the current step).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use s2s_kernels::ops;

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

    /// `eᵢ = vᵀ tanh(W₁hᵢ + W₂s)`: `[batch, d_query]` → `[batch, src]`.
    pub fn scores(&self, query: Tensor<2>, keys: &Tensor<3>) -> Tensor<2> {
        let q = ops::linear(&self.query_proj, query); // [B, A]
        ops::additive_scores(q, keys, self.v.weight.val()) // [B, S]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::gradcheck;
    use burn::tensor::Distribution;

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
