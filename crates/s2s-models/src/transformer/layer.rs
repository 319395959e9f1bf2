//! Encoder and decoder layers (Vaswani et al., 2017, §3.1, §3.3): sublayers wrapped in a
//! residual connection and layer normalisation, either post-norm as in the paper,
//! `LayerNorm(x + Dropout(Sublayer(x)))`, or pre-norm, `x + Dropout(Sublayer(LayerNorm(x)))`
//! (Wang et al., 2019; the default: it trains without a long warm-up).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Initializer, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Device, Int, Tensor};

use super::mha::{KeySource, KeyValue, MultiHeadAttention, MultiHeadAttentionConfig};
use ops::{StepCache, layer_norm};
use s2s_kernels::ops;

/// Configuration shared by [`EncoderLayer`] and [`DecoderLayer`].
#[derive(Config, Debug)]
pub struct LayerConfig {
    /// Model width.
    pub d_model: usize,
    /// Attention heads.
    pub heads: usize,
    /// Inner width of the feed-forward network.
    pub ffn: usize,
    /// Dropout on residual branches and inside the feed-forward network.
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Dropout on attention weights.
    #[config(default = 0.1)]
    pub attention_dropout: f64,
    /// Pre-norm (true) or post-norm (false).
    #[config(default = true)]
    pub pre_norm: bool,
    /// Attention scores divided by √d_k ([`MultiHeadAttentionConfig::scaled`]).
    #[config(default = true)]
    pub scaled: bool,
}

/// Position-wise feed-forward network, `FFN(x) = max(0, xW₁ + b₁)W₂ + b₂` (eq. 2).
///
/// # Shapes
/// - `[batch, t, d_model]` → `[batch, t, d_model]`
#[derive(Module, Debug)]
pub struct FeedForward {
    /// `W₁`, `b₁`.
    pub inner: Linear,
    /// `W₂`, `b₂`.
    pub outer: Linear,
    /// Dropout after the ReLU.
    pub dropout: Dropout,
}

impl FeedForward {
    /// Applies the network.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let hidden = ops::relu_dropout(&self.dropout, ops::linear(&self.inner, x));
        ops::linear(&self.outer, hidden)
    }
}

/// One residual sublayer's normalisation and dropout.
#[derive(Module, Debug)]
pub struct Residual {
    /// Its layer norm.
    pub norm: LayerNorm,
    /// Dropout on the sublayer output.
    pub dropout: Dropout,
    /// Pre-norm placement.
    #[module(skip)]
    pub pre_norm: bool,
}

impl Residual {
    fn init(c: &LayerConfig, device: &Device) -> Self {
        Residual {
            norm: LayerNormConfig::new(c.d_model).init(device),
            dropout: DropoutConfig::new(c.dropout).init(),
            pre_norm: c.pre_norm,
        }
    }

    /// The sublayer's input: `LayerNorm(x)` for pre-norm, `x` for post-norm.
    pub fn input(&self, x: &Tensor<3>) -> Tensor<3> {
        if self.pre_norm { layer_norm(&self.norm, x.clone()) } else { x.clone() }
    }

    /// Adds the sublayer's output `y` to `x`.
    pub fn output(&self, x: Tensor<3>, y: Tensor<3>) -> Tensor<3> {
        let sum = ops::add_dropout(&self.dropout, x, y);
        if self.pre_norm { sum } else { layer_norm(&self.norm, sum) }
    }
}

impl LayerConfig {
    fn ffn(&self, device: &Device) -> FeedForward {
        let lin = |i, o| LinearConfig::new(i, o).with_initializer(Initializer::XavierUniform { gain: 1.0 });
        FeedForward {
            inner: lin(self.d_model, self.ffn).init(device),
            outer: lin(self.ffn, self.d_model).init(device),
            dropout: DropoutConfig::new(self.dropout).init(),
        }
    }

    fn attention(&self, device: &Device) -> Result<MultiHeadAttention, crate::ModelError> {
        MultiHeadAttentionConfig::new(self.d_model, self.heads)
            .with_dropout(self.attention_dropout)
            .with_scaled(self.scaled)
            .init(device)
    }

    /// An encoder layer.
    pub fn init_encoder(&self, device: &Device) -> Result<EncoderLayer, crate::ModelError> {
        Ok(EncoderLayer {
            self_attention: self.attention(device)?,
            ffn: self.ffn(device),
            attention_residual: Residual::init(self, device),
            ffn_residual: Residual::init(self, device),
        })
    }

    /// A decoder layer.
    pub fn init_decoder(&self, device: &Device) -> Result<DecoderLayer, crate::ModelError> {
        Ok(DecoderLayer {
            self_attention: self.attention(device)?,
            cross_attention: self.attention(device)?,
            ffn: self.ffn(device),
            self_residual: Residual::init(self, device),
            cross_residual: Residual::init(self, device),
            ffn_residual: Residual::init(self, device),
        })
    }
}

/// Self-attention and feed-forward, each residual.
///
/// # Shapes
/// - `x` `[batch, src, d_model]`, key mask `[batch, 1, 1, src]` → `[batch, src, d_model]`,
///   self-attention weights `[batch, heads, src, src]`
#[derive(Module, Debug)]
pub struct EncoderLayer {
    /// Self-attention.
    pub self_attention: MultiHeadAttention,
    /// Feed-forward network.
    pub ffn: FeedForward,
    /// Around self-attention.
    pub attention_residual: Residual,
    /// Around the feed-forward network.
    pub ffn_residual: Residual,
}

impl EncoderLayer {
    /// Applies the layer: the output and the self-attention weights (for showing).
    pub fn forward(&self, x: Tensor<3>, mask: &Tensor<4>) -> (Tensor<3>, Tensor<4>) {
        let h = self.attention_residual.input(&x);
        let a = self.self_attention.forward(h, KeySource::Input, Some(mask));
        let x = self.attention_residual.output(x, a.output);
        let h = self.ffn_residual.input(&x);
        (self.ffn_residual.output(x, self.ffn.forward(h)), a.weights)
    }
}

/// Masked self-attention, cross-attention to the encoder memory, feed-forward.
///
/// # Shapes
/// - `x` `[batch, t, d_model]` (t new positions), cache `[batch, heads, t_prev, d_k]`,
///   memory keys/values `[batch, heads, src, d_k]` → `[batch, t, d_model]`, the grown cache,
///   self-attention weights `[batch, heads, t, t_prev + t]`, cross-attention weights
///   `[batch, heads, t, src]`
#[derive(Module, Debug)]
pub struct DecoderLayer {
    /// Masked self-attention.
    pub self_attention: MultiHeadAttention,
    /// Attention to the encoder memory.
    pub cross_attention: MultiHeadAttention,
    /// Feed-forward network.
    pub ffn: FeedForward,
    /// Around self-attention.
    pub self_residual: Residual,
    /// Around cross-attention.
    pub cross_residual: Residual,
    /// Around the feed-forward network.
    pub ffn_residual: Residual,
}

impl DecoderLayer {
    /// Applies the layer to new positions `x`; `cache` holds the keys and values of the
    /// positions before them (none in a teacher-forced pass). `self_mask` is the causal mask
    /// over the new positions (none for a single step, which may see its whole prefix). Row `r`
    /// attends to row `memory_rows[r]` of the memory and its mask (`None`: row `r`). Returns
    /// the output, the grown cache, and the self- and cross-attention weights.
    pub fn forward(
        &self,
        x: Tensor<3>,
        cache: Option<StepCache>,
        self_mask: Option<&Tensor<4>>,
        memory: &KeyValue,
        memory_mask: &Tensor<4>,
        memory_rows: Option<&Tensor<1, Int>>,
    ) -> DecoderOutput {
        let h = self.self_residual.input(&x);
        let source = cache.map_or(KeySource::Input, KeySource::Cached);
        let a = self.self_attention.forward(h, source, self_mask);
        let cache = a.keys.into_cache().expect("self-attention keeps its keys and values");
        let x = self.self_residual.output(x, a.output);
        let h = self.cross_residual.input(&x);
        let source = KeySource::Memory(memory, memory_rows);
        let c = self.cross_attention.forward(h, source, Some(memory_mask));
        let x = self.cross_residual.output(x, c.output);
        let h = self.ffn_residual.input(&x);
        DecoderOutput {
            output: self.ffn_residual.output(x, self.ffn.forward(h)),
            cache,
            self_weights: a.weights,
            cross_weights: c.weights,
        }
    }
}

/// What [`DecoderLayer::forward`] gives.
#[derive(Debug, Clone)]
pub struct DecoderOutput {
    /// `[batch, t, d_model]`.
    pub output: Tensor<3>,
    /// The self-attention cache with the new positions.
    pub cache: StepCache,
    /// Self-attention weights `[batch, heads, t, t_prev + t]` (for showing).
    pub self_weights: Tensor<4>,
    /// Cross-attention weights `[batch, heads, t, src]`.
    pub cross_weights: Tensor<4>,
}
