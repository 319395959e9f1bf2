//! `aᵀ b` over many rows as a sum of products over blocks of rows: a weight's gradient
//! `∂W = xᵀ ∂y` on a GPU.
//!
//! A weight gradient sums over every position of the batch (`rows` = 4,096 at the bench's
//! Multi30k shape) into a small output (`d_in × d_out`, 256 × 1,024 for the feed-forward layer).
//! burn's product tiles the output, so such a product runs in a few dozen workgroups, each
//! walking all the rows alone: on an H100 through Vulkan 0.3–0.5 TFLOP/s in f32 where the same
//! product with a 2-million-element output reaches ~11 (`s2s bench --product-probe`,
//! docs/benchmarks.md). Split into `S` blocks of rows, it is one batched product
//! `[S, d_in, rows/S] × [S, rows/S, d_out]` with `S` times the workgroups, and a sum over
//! the blocks: the split-k of GEMM libraries, written with burn's operations.
//!
//! `S` makes the batched output about [`TARGET_OUTPUTS`] elements, with blocks of at least
//! [`MIN_BLOCK_ROWS`] rows, and divides `rows` (no padding copy); where no such `S` above 1
//! exists the product is burn's. The sum runs in another order than one product's, so results
//! agree to rounding, not to the bit.
//!
//! Training splits only with `S2S_GPU_SPLIT_ROWS=1` ([`enabled`]) until a GPU has measured it:
//! the product probe times each weight gradient both ways and `scripts/gpu-session.sh run split`
//! trains with and without it, so one lease decides the default.

use burn::tensor::Tensor;
use std::sync::OnceLock;

/// Whether training's weight gradients are split: `S2S_GPU_SPLIT_ROWS=1`, read once.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("S2S_GPU_SPLIT_ROWS").is_ok_and(|v| v == "1"))
}

/// Output elements (blocks × `d_in × d_out`) a split aims for.
pub const TARGET_OUTPUTS: usize = 1 << 22;

/// Fewest rows a block gets.
pub const MIN_BLOCK_ROWS: usize = 128;

/// Most blocks a product is split into.
const MAX_BLOCKS: usize = 32;

/// How many blocks `rows` is split into for an `m × n` output: 1 for no split.
pub fn blocks(rows: usize, m: usize, n: usize) -> usize {
    let want = (TARGET_OUTPUTS / (m * n).max(1)).min(MAX_BLOCKS).min(rows / MIN_BLOCK_ROWS);
    (2..=want).rev().find(|s| rows % s == 0).unwrap_or(1)
}

/// `aᵀ b` for `a` `[rows, m]` and `b` `[rows, n]`: `[m, n]`, in [`blocks`] blocks of rows
/// when [`enabled`], else burn's product.
pub fn transposed_product(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    let [rows, m] = a.dims();
    let n = b.dims()[1];
    let s = if enabled() { blocks(rows, m, n) } else { 1 };
    transposed_product_in(a, b, s)
}

/// [`transposed_product`] in `s` blocks (`s` divides `rows`; 1 is burn's product).
pub fn transposed_product_in(a: Tensor<2>, b: Tensor<2>, s: usize) -> Tensor<2> {
    let [rows, m] = a.dims();
    let n = b.dims()[1];
    assert_eq!(rows % s, 0, "transposed_product_in: {s} blocks do not divide {rows} rows");
    if s == 1 {
        return a.transpose().matmul(b);
    }
    let a = a.reshape([s, rows / s, m]).swap_dims(1, 2); // [S, m, rows/S]
    let b = b.reshape([s, rows / s, n]); // [S, rows/S, n]
    a.matmul(b).sum_dim(0).reshape([m, n])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::{Device, Distribution};

    #[test]
    fn blocks_divide_the_rows_and_keep_blocks_long() {
        assert_eq!(blocks(4096, 256, 1024), 16);
        assert_eq!(blocks(4096, 256, 8000), 2);
        assert_eq!(blocks(4096, 512, 2048), 4);
        assert_eq!(blocks(4000, 256, 256), 25);
        assert_eq!(blocks(127 * 3, 16, 16), 1, "blocks under MIN_BLOCK_ROWS");
        assert_eq!(blocks(4099, 16, 16), 1, "a prime number of rows");
        assert_eq!(blocks(1 << 20, 4096, 4096), 1, "a large output");
    }

    fn check(d: Device) {
        let a = Tensor::<2>::random([384, 7], Distribution::Normal(0.0, 1.0), &d);
        let b = Tensor::<2>::random([384, 5], Distribution::Normal(0.0, 1.0), &d);
        let want = a.clone().transpose().matmul(b.clone());
        for s in [2, 3, 4, 6, 12] {
            assert!(
                max_diff(transposed_product_in(a.clone(), b.clone(), s), want.clone()) < 1e-4,
                "{s} blocks"
            );
        }
        // A strided `a` (a transposed tensor) splits the same.
        let at = Tensor::<2>::random([7, 384], Distribution::Normal(0.0, 1.0), &d);
        let want = at.clone().matmul(b.clone());
        assert!(max_diff(transposed_product_in(at.transpose(), b, 3), want) < 1e-4, "strided");
    }

    #[test]
    fn blocks_sum_to_the_product() {
        check(Device::default());
    }

    #[test]
    fn blocks_sum_to_the_product_on_wgpu() {
        let Some(d) = crate::testing::wgpu_or_skip() else { return };
        check(d);
    }
}
