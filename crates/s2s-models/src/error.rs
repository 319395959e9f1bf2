//! Why a model configuration cannot be built.

/// A model configuration that cannot be built (each message names the setting and the fix).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// A Luong score name that is none of the four.
    #[error("unknown Luong score `{0}`: use dot, general, concat or low-rank")]
    UnknownScore(String),
    /// The dot score between states of different sizes.
    #[error(
        "the dot score needs equal decoder and encoder sizes, got {query} and {key}: use general or low-rank"
    )]
    DotSizes {
        /// Decoder state size.
        query: usize,
        /// Encoder annotation size.
        key: usize,
    },
    /// A dropout probability outside `[0, 1)`.
    #[error("{name} must be in [0, 1), got {value}")]
    Probability {
        /// The setting.
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// A bidirectional encoder splits `hidden` in two halves.
    #[error("a bidirectional encoder needs an even hidden size, got {0}")]
    OddBidirectional(usize),
    /// Attention heads that do not divide the model width.
    #[error("heads ({heads}) must divide d_model ({d_model})")]
    Heads {
        /// Heads.
        heads: usize,
        /// Model width.
        d_model: usize,
    },
    /// A size or count that must be at least 1 is 0.
    #[error("{name} must be at least 1, got 0")]
    Zero {
        /// The setting.
        name: &'static str,
    },
    /// A Transformer without width or layers.
    #[error("d_model and the layer counts must be positive")]
    EmptyTransformer,
    /// Shared embeddings over two vocabularies.
    #[error("share_embeddings needs one joint vocabulary, but the sizes differ ({src} vs {tgt})")]
    SharedVocabulary {
        /// Source vocabulary size.
        src: usize,
        /// Target vocabulary size.
        tgt: usize,
    },
}

impl ModelError {
    /// The `[model]` key the error is about, when it is one key's (to point at its line).
    pub fn field(&self) -> Option<&'static str> {
        match self {
            ModelError::Zero { name } | ModelError::Probability { name, .. } => Some(name),
            ModelError::UnknownScore(_) | ModelError::DotSizes { .. } => Some("score"),
            ModelError::OddBidirectional(_) => Some("hidden"),
            ModelError::Heads { .. } => Some("heads"),
            ModelError::SharedVocabulary { .. } => Some("share_embeddings"),
            ModelError::EmptyTransformer => None,
        }
    }
}
