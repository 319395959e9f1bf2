//! Global attention scores of Luong, Pham & Manning (2015, eq. 8), computed on the *current*
//! decoder state `s` against encoder states `hᵢ`, plus the low-rank bilinear variant:
//!
//! - `dot`: `eᵢ = sᵀ hᵢ` (needs `d_query = d_key`)
//! - `general`: `eᵢ = sᵀ W hᵢ`
//! - `concat`: `eᵢ = vᵀ tanh(W [s; hᵢ])` — the additive network of
//!   [`super::bahdanau`], which it reuses (`W [s; h] = W_s s + W_h h`)
//! - `low-rank`: `eᵢ = (U s)ᵀ (V hᵢ)`, a rank-`r` factorisation of `general`'s `W = Uᵀ V`
//!
//! `dot`, `general` and `low-rank` are one product, [`dot_scores`], of a query and keys
//! projected beforehand (`W hᵢ` once per sentence; `U s` at every step): the equation in plain
//! tensor operations, which runs under `--kernels reference` and wherever no fast kernel
//! applies. Where one does — a decoding step on the CPU, a GPU — the kernels crate computes
//! the same (`s2s_kernels::ops::fast_dot_scores`, which returns `None` elsewhere); the tests
//! below hold the two equal.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::bahdanau::{AdditiveAttention, AdditiveAttentionConfig};
use s2s_kernels::ops;

/// The dot score (eq. 8) of every source position, `eᵢ = sᵀ hᵢ`: `general`'s `sᵀ (W hᵢ)` and
/// `low-rank`'s `(U s)ᵀ (V hᵢ)` with their projections already applied.
///
/// # Shapes
/// - `q` `[batch, k]`; `keys` `[batch, src, k]`
/// - returns the scores `[batch, src]`
pub fn dot_scores(q: Tensor<2>, keys: &Tensor<3>) -> Tensor<2> {
    // Σₖ hᵢₖ sₖ as one element-wise product and a sum, not `batch` tiny [src, k] × [k, 1]
    // products.
    (keys.clone() * q.unsqueeze_dim::<3>(1)).sum_dim(2).squeeze_dim::<2>(2) // [batch, src, k] → [batch, src]
}

/// Which Luong score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LuongScore {
    /// `sᵀ h`.
    Dot,
    /// `sᵀ W h`.
    #[default]
    General,
    /// `vᵀ tanh(W [s; h])`.
    Concat,
    /// `(U s)ᵀ (V h)`.
    LowRank,
}

impl std::str::FromStr for LuongScore {
    type Err = crate::ModelError;
    fn from_str(s: &str) -> Result<Self, crate::ModelError> {
        match s {
            "dot" => Ok(Self::Dot),
            "general" => Ok(Self::General),
            "concat" => Ok(Self::Concat),
            "low-rank" => Ok(Self::LowRank),
            _ => Err(crate::ModelError::UnknownScore(s.to_string())),
        }
    }
}

/// Configuration of [`LuongAttention`].
#[derive(Config, Debug)]
pub struct LuongAttentionConfig {
    /// The score function.
    pub score: LuongScore,
    /// Encoder state size.
    pub d_key: usize,
    /// Decoder state size.
    pub d_query: usize,
    /// Hidden size of `concat`'s network.
    #[config(default = 256)]
    pub d_attention: usize,
    /// Rank `r` of `low-rank`.
    #[config(default = 64)]
    pub rank: usize,
}

/// A Luong score function.
///
/// # Shapes
/// - keys (projected): `[batch, src, k]` (`k` = `d_key` for dot, `d_query` for general,
///   `d_attention` for concat, `rank` for low-rank)
/// - query `[batch, d_query]` → scores `[batch, src]`
#[derive(Module, Debug)]
pub struct LuongAttention {
    /// `general`: `W` (`d_key → d_query`); `low-rank`: `V` (`d_key → r`).
    pub key_proj: Option<Linear>,
    /// `low-rank`: `U` (`d_query → r`).
    pub query_proj: Option<Linear>,
    /// `concat`: the additive network.
    pub concat: Option<AdditiveAttention>,
    /// Which score: what [`keys`](Self::keys) and [`scores`](Self::scores) compute (the
    /// projections above are the ones it needs).
    #[module(skip)]
    pub score: LuongScore,
}

impl LuongAttentionConfig {
    /// Initialises the score. `dot` with `d_query ≠ d_key` is refused.
    pub fn init(&self, device: &Device) -> Result<LuongAttention, crate::ModelError> {
        let lin = |i, o| Some(LinearConfig::new(i, o).with_bias(false).init(device));
        let (key_proj, query_proj, concat) = match self.score {
            LuongScore::Dot if self.d_query != self.d_key => {
                return Err(crate::ModelError::DotSizes { query: self.d_query, key: self.d_key });
            }
            LuongScore::Dot => (None, None, None),
            LuongScore::General => (lin(self.d_key, self.d_query), None, None),
            LuongScore::LowRank => (lin(self.d_key, self.rank), lin(self.d_query, self.rank), None),
            LuongScore::Concat => (
                None,
                None,
                Some(AdditiveAttentionConfig::new(self.d_key, self.d_query, self.d_attention).init(device)),
            ),
        };
        Ok(LuongAttention { key_proj, query_proj, concat, score: self.score })
    }
}

impl LuongAttention {
    /// Projects encoder states once per sentence (`W h`, `V h`, `W_h h`; `h` itself for dot).
    pub fn keys(&self, memory: Tensor<3>) -> Tensor<3> {
        match self.score {
            LuongScore::Concat => self.network().keys(memory),
            LuongScore::General | LuongScore::LowRank => {
                ops::linear(self.key_proj.as_ref().expect("general and low-rank project the keys"), memory)
            }
            LuongScore::Dot => memory,
        }
    }

    /// The scores of `query` against the projected keys: from a fast kernel where one applies,
    /// else [`dot_scores`] (`concat`: the additive network's).
    pub fn scores(&self, query: Tensor<2>, keys: &Tensor<3>) -> Tensor<2> {
        let q = match self.score {
            LuongScore::Concat => return self.network().scores(query, keys),
            // U s: [B, r]
            LuongScore::LowRank => {
                self.query_proj.as_ref().expect("low-rank projects the query").forward(query)
            }
            // s: [B, d]
            LuongScore::Dot | LuongScore::General => query,
        };
        ops::fast_dot_scores(&q, keys).unwrap_or_else(|| dot_scores(q, keys)) // [B, S]
    }

    /// `concat`'s additive network.
    fn network(&self) -> &AdditiveAttention {
        self.concat.as_ref().expect("concat has its additive network")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::gradcheck;
    use burn::tensor::{Distribution, TensorData};

    #[test]
    fn dot_and_general_by_hand() {
        let d = Device::flex();
        let mem = Tensor::<3>::from_data(TensorData::new(vec![1f32, 0., 0., 1., 1., 1.], [1, 3, 2]), &d);
        let q = Tensor::<2>::from_data(TensorData::new(vec![2f32, 3.], [1, 2]), &d);
        let dot = LuongAttentionConfig::new(LuongScore::Dot, 2, 2).init(&d).unwrap();
        let s: Vec<f32> =
            dot.scores(q.clone(), &dot.keys(mem.clone())).into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(s, vec![2.0, 3.0, 5.0]);
        // general with W = identity equals dot.
        let mut general = LuongAttentionConfig::new(LuongScore::General, 2, 2).init(&d).unwrap();
        let mut w = general.key_proj.take().unwrap();
        w.weight = burn::module::Param::from_tensor(Tensor::from_data(
            TensorData::new(vec![1f32, 0., 0., 1.], [2, 2]),
            &d,
        ));
        general.key_proj = Some(w);
        let s: Vec<f32> = general.scores(q, &general.keys(mem)).into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(s, vec![2.0, 3.0, 5.0]);
    }

    /// The plain equation, [`dot_scores`], gives what the fast kernel gives where it applies:
    /// a decoding step on the CPU (values), and on wgpu (values and the gradients of the query
    /// and the keys), with widths below and above a lane block.
    #[test]
    fn the_plain_equation_equals_the_fast_kernels() {
        let d = Device::flex();
        d.seed(4);
        let normal = Distribution::Normal(0.0, 1.0);
        for (b, s, k) in [(5, 7, 37), (2, 3, 2)] {
            let q: Tensor<2> = Tensor::random([b, k], normal, &d);
            let keys: Tensor<3> = Tensor::random([b, s, k], normal, &d);
            let fast = ops::fast_dot_scores(&q, &keys).expect("the step kernel runs");
            assert!(crate::test_support::max_diff(fast, dot_scores(q, &keys)) < 1e-5, "{b}x{s}x{k}");
        }
        let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() else { return };
        let ad = gpu.autodiff();
        ad.seed(4);
        for (b, s, k) in [(3, 7, 2), (2, 5, 19)] {
            let q0: Tensor<2> = Tensor::random([b, k], normal, &ad);
            let k0: Tensor<3> = Tensor::random([b, s, k], normal, &ad);
            let r: Tensor<2> = Tensor::random([b, s], normal, &ad);
            let run = |fast: bool| {
                let (q, keys) = (q0.clone().require_grad(), k0.clone().require_grad());
                let e = if fast {
                    ops::fast_dot_scores(&q, &keys).expect("the GPU kernel runs")
                } else {
                    dot_scores(q.clone(), &keys)
                };
                let g = (e.clone() * r.clone()).sum().backward();
                (e.inner(), q.grad(&g).unwrap(), keys.grad(&g).unwrap())
            };
            let ((e1, q1, k1), (e2, q2, k2)) = (run(true), run(false));
            let at = format!("wgpu, {b}x{s}x{k}");
            assert!(crate::test_support::max_diff(e1, e2) < 1e-5, "{at}: scores");
            assert!(crate::test_support::max_diff(q1, q2) < 1e-5, "{at}: ∂q");
            assert!(crate::test_support::max_diff(k1, k2) < 1e-5, "{at}: ∂keys");
        }
    }

    #[test]
    fn dot_refuses_mismatched_sizes() {
        assert!(LuongAttentionConfig::new(LuongScore::Dot, 4, 2).init(&Device::flex()).is_err());
    }

    #[test]
    fn gradients_match_central_differences() {
        let d = Device::flex().autodiff();
        d.seed(12);
        for score in [LuongScore::General, LuongScore::Concat, LuongScore::LowRank] {
            let att =
                LuongAttentionConfig::new(score, 3, 2).with_d_attention(4).with_rank(2).init(&d).unwrap();
            let mem: Tensor<3> = Tensor::random([2, 3, 3], Distribution::Normal(0.0, 1.0), &d);
            let q: Tensor<2> = Tensor::random([2, 2], Distribution::Normal(0.0, 1.0), &d);
            let weights: Tensor<2> = Tensor::random([2, 3], Distribution::Normal(0.0, 1.0), &d);
            gradcheck::check(att, |a: &LuongAttention| {
                let s = a.scores(q.clone(), &a.keys(mem.clone()));
                (burn::tensor::activation::softmax(s, 1) * weights.clone()).sum()
            });
        }
    }
}
