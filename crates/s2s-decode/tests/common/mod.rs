//! What the search tests share.

use burn::tensor::Device;
use s2s_decode::MaxLength;
use s2s_models::Source;

/// A padded source batch of `rows` (ids, each row ending in `</s>`).
pub fn source(rows: &[Vec<u32>], d: &Device) -> Source {
    let len = rows.iter().map(Vec::len).max().unwrap();
    let ids: Vec<u32> =
        rows.iter().flat_map(|r| r.iter().copied().chain(std::iter::repeat(0)).take(len)).collect();
    let lens: Vec<usize> = rows.iter().map(Vec::len).collect();
    Source::new(&ids, &lens, len, d)
}

/// A short output limit, so every search ends quickly.
pub const LIMIT: MaxLength = MaxLength { a: 1.0, b: 4 };
