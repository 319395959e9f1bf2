//! The output length limit `a · source_len + b` (fairseq's `--max-len-a/--max-len-b`).

use serde::{Deserialize, Serialize};

/// Maximum output tokens (without `</s>`) as a linear function of the source length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaxLength {
    /// Slope `a`.
    pub a: f64,
    /// Intercept `b`.
    pub b: usize,
}

impl Default for MaxLength {
    fn default() -> Self {
        Self { a: 1.5, b: 10 }
    }
}

impl MaxLength {
    /// The limit for a source of `src_len` tokens.
    pub fn for_source(&self, src_len: usize) -> usize {
        (self.a * src_len as f64).floor() as usize + self.b
    }
}
