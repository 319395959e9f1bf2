//! The CPU's dropout mask: element `e` of the mask drawn from a seed is a function of the seed
//! and `e` alone (SplitMix64's finaliser of `seed + e·φ`), so it can be drawn in parallel
//! chunks, recomputed inside a kernel, and drawn again on the host for the references.

use rayon::prelude::*;

/// Element `index` of the mask drawn from `seed` (what [`mask`] writes there): `scale`
/// (`1 / keep`) with probability `keep`, else 0. `threshold` is [`threshold`]`(keep)`.
#[inline]
pub(crate) fn element(seed: u64, index: usize, threshold: u32, scale: f32) -> f32 {
    let r = (splitmix64(seed.wrapping_add((index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))) >> 40) as u32; // 24 uniform bits
    if r < threshold { scale } else { 0.0 }
}

/// The 24-bit threshold below which an element is kept with probability `keep`.
pub(crate) fn threshold(keep: f32) -> u32 {
    (keep as f64 * (1u64 << 24) as f64) as u32
}

/// `n` values, each `1 / keep` with probability `keep` and 0 otherwise, from `seed`.
pub(crate) fn mask(seed: u64, n: usize, keep: f32) -> Vec<f32> {
    const CHUNK: usize = 1 << 14;
    let (scale, threshold) = (1.0 / keep, threshold(keep));
    let mut out = vec![0f32; n];
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, chunk)| {
        crate::cpu::fastmath::wide(
            #[inline(always)]
            || {
                for (i, v) in chunk.iter_mut().enumerate() {
                    *v = element(seed, c * CHUNK + i, threshold, scale);
                }
            },
        )
    });
    out
}

/// SplitMix64's output function (Steele, Lea & Flood, 2014).
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
