//! The rate of burn's matrix product at the shapes a training step multiplies, in f32 and in
//! f16: whether a device's products run near its peak, and what half-precision inputs would
//! buy (on a GPU, tensor cores take f16 and bf16; Vulkan has no tf32).
//!
//! Each shape is timed as `reps` products back to back after two untimed ones (the first runs
//! burn's autotune), with a device sync around the timed ones. The f16 product's output is
//! compared with the f32 one's (largest difference over the largest f32 magnitude), so a rate
//! that comes from computing something else shows. `scripts/product-probe.py` times PyTorch at
//! the same shapes and puts both side by side.
//!
//! On a cubecl device each shape is also timed by every kernel [`crate::gemm::table`] can
//! choose (`kernel` set, its output compared with burn's); [`table_entries`] keeps those that
//! beat burn's, the rows to write into the table.

use burn::tensor::{DType, Device, Distribution, Tensor};
use serde::Serialize;
use std::time::Instant;

use crate::gemm::split_rows::{blocks, transposed_product_in};

/// One product `[m, k] × [k, n]`, named after the layer it comes from.
#[derive(Debug, Clone, Serialize)]
pub struct ProductShape {
    /// The layer and pass, e.g. `output layer ∂W`.
    pub name: String,
    /// Rows of the left operand.
    pub m: usize,
    /// The summed dimension.
    pub k: usize,
    /// Columns of the right operand.
    pub n: usize,
}

impl ProductShape {
    /// A named shape.
    pub fn new(name: &str, m: usize, k: usize, n: usize) -> Self {
        Self { name: name.to_string(), m, k, n }
    }

    /// Floating-point operations of one product (a multiply and an add each).
    pub fn flop(&self) -> f64 {
        2.0 * (self.m * self.k * self.n) as f64
    }
}

/// A shape's measured rate in one element type.
#[derive(Debug, Clone, Serialize)]
pub struct ProductRate {
    /// The shape.
    #[serde(flatten)]
    pub shape: ProductShape,
    /// `f32` or `f16` (operands and output); for a weight gradient also `f32 aᵀb` (the
    /// product as training runs it, from the row-major `[rows, m]` operand) and `f32 aᵀb split`
    /// (the same in blocks of rows, [`crate::gemm::split_rows`]).
    pub dtype: &'static str,
    /// `f32 aᵀb split`: the blocks of rows.
    pub blocks: Option<usize>,
    /// Milliseconds a product.
    pub ms: f64,
    /// 10¹² floating-point operations a second.
    pub tflops: f64,
    /// f16 and split: largest |y − f32| over the largest |f32| of the output (the split
    /// against the whole `aᵀb`; a table kernel's against burn's product of its type).
    pub rel_err: Option<f64>,
    /// A table kernel's name ([`crate::gemm::table::Kernel::name`]); `None` for burn's product.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<&'static str>,
}

/// The products of a training step: the Transformer's projections, feed-forward and output
/// layer over `rows` positions (forward, `∂x` and `∂W`), and one recurrent step's gate product
/// (`batch` rows, `4·hidden` gates).
pub fn step_shapes(
    rows: usize,
    d: usize,
    ffn: usize,
    vocab: usize,
    batch: usize,
    hidden: usize,
) -> Vec<ProductShape> {
    vec![
        ProductShape::new("attention projection", rows, d, d),
        ProductShape::new("Q, K, V projection", rows, d, 3 * d),
        ProductShape::new("feed-forward up", rows, d, ffn),
        ProductShape::new("feed-forward down", rows, ffn, d),
        ProductShape::new("feed-forward up ∂W", d, rows, ffn),
        ProductShape::new("output layer", rows, d, vocab),
        ProductShape::new("output layer ∂x", rows, vocab, d),
        ProductShape::new("output layer ∂W", d, rows, vocab),
        ProductShape::new("LSTM gates, one step", batch, hidden, 4 * hidden),
    ]
}

/// Times every shape in f32 and, where `device` supports it, f16; a weight gradient's shape
/// (named `… ∂W`) also as training multiplies it, whole and in blocks of rows.
pub fn product_probe(device: &Device, shapes: &[ProductShape], reps: usize) -> Vec<ProductRate> {
    let half = device.supports_dtype(DType::F16);
    let mut out = Vec::new();
    for s in shapes {
        let a = Tensor::<2>::random([s.m, s.k], Distribution::Uniform(-1.0, 1.0), device);
        let b = Tensor::<2>::random([s.k, s.n], Distribution::Uniform(-1.0, 1.0), device);
        let (ms, full) = time(|| a.clone().matmul(b.clone()), reps, device);
        out.push(rate(s, "f32", ms, None, None));
        out.extend(kernels(s, "f32", &a, &b, &full, reps, device));
        if half {
            let (a, b) = (a.clone().cast(DType::F16), b.clone().cast(DType::F16));
            let (ms, y) = time(|| a.clone().matmul(b.clone()), reps, device);
            out.push(rate(s, "f16", ms, Some(rel_err(y.clone().cast(DType::F32), full.clone())), None));
            out.extend(kernels(s, "f16", &a, &b, &y.cast(DType::F32), reps, device));
        }
        if s.name.ends_with("∂W") {
            // The left operand as the backward pass holds it: `x` `[rows, m]`, row-major.
            let x = Tensor::<2>::random([s.k, s.m], Distribution::Uniform(-1.0, 1.0), device);
            let (ms, whole) = time(|| transposed_product_in(x.clone(), b.clone(), 1), reps, device);
            out.push(rate(s, "f32 aᵀb", ms, None, Some(1)));
            let n = blocks(s.k, s.m, s.n);
            let (ms, y) = time(|| transposed_product_in(x.clone(), b.clone(), n), reps, device);
            out.push(rate(s, "f32 aᵀb split", ms, Some(rel_err(y, whole)), Some(n)));
        }
    }
    out
}

/// On a cubecl device, `a b` timed by each table kernel but burn's (those that refuse the shape
/// left out), each output compared with burn's (`want`, in f32); nothing elsewhere.
#[cfg(not(feature = "gpu-tuned"))]
fn kernels(
    s: &ProductShape,
    dtype: &'static str,
    a: &Tensor<2>,
    b: &Tensor<2>,
    want: &Tensor<2>,
    reps: usize,
    device: &Device,
) -> Vec<ProductRate> {
    use crate::gemm::table::{Kernel, gpu::product_by};
    use crate::gpu::launch::{cube_of, dispatch_of};
    let cube = |t: &Tensor<2>| cube_of(t.clone().into_dispatch()).ok();
    let (Some(ca), Some(cb)) = (cube(a), cube(b)) else { return Vec::new() };
    let mut out = Vec::new();
    for k in Kernel::ALL.into_iter().filter(|&k| k != Kernel::Burn) {
        // A kernel that refuses the shape, or panics setting itself up, is left out: the probe
        // of every other kernel and shape still answers.
        let tried =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| product_by(ca.clone(), cb.clone(), k)));
        if !matches!(tried, Ok(Ok(_))) {
            continue;
        }
        let run = || {
            Tensor::<2>::from_dispatch(dispatch_of(product_by(ca.clone(), cb.clone(), k).expect("ran once")))
        };
        let (ms, y) = time(run, reps, device);
        let mut r = rate(s, dtype, ms, Some(rel_err(y.cast(DType::F32), want.clone())), None);
        r.kernel = Some(k.name());
        out.push(r);
    }
    out
}

#[cfg(feature = "gpu-tuned")]
fn kernels(
    _: &ProductShape,
    _: &'static str,
    _: &Tensor<2>,
    _: &Tensor<2>,
    _: &Tensor<2>,
    _: usize,
    _: &Device,
) -> Vec<ProductRate> {
    Vec::new()
}

/// The table rows the probe's `rates` support: for each shape and type, the fastest table
/// kernel where it beats burn's product by more than `margin` (1.1: 10 %) and computes the same
/// product (its error under 1 % of the output's scale), as `MxKxN:TYPE=KERNEL` (the form of
/// `S2S_GPU_PRODUCTS`, and of [`crate::gemm::table::TABLE`]'s rows).
pub fn table_entries(rates: &[ProductRate], margin: f64) -> Vec<String> {
    let mut out = Vec::new();
    for burn in rates.iter().filter(|r| r.kernel.is_none() && (r.dtype == "f32" || r.dtype == "f16")) {
        let same = |r: &&ProductRate| {
            r.kernel.is_some()
                && r.dtype == burn.dtype
                && (r.shape.m, r.shape.k, r.shape.n) == (burn.shape.m, burn.shape.k, burn.shape.n)
        };
        let best = rates
            .iter()
            .filter(same)
            .filter(|r| r.rel_err.is_some_and(|e| e < 1e-2))
            .min_by(|a, b| a.ms.total_cmp(&b.ms));
        if let Some(best) = best.filter(|b| b.ms * margin < burn.ms) {
            let entry = format!(
                "{}x{}x{}:{}={}",
                burn.shape.m,
                burn.shape.k,
                burn.shape.n,
                burn.dtype,
                best.kernel.unwrap_or("burn")
            );
            if !out.contains(&entry) {
                out.push(entry);
            }
        }
    }
    out
}

/// Milliseconds a product over `reps` timed ones, and the last output.
fn time(product: impl Fn() -> Tensor<2>, reps: usize, device: &Device) -> (f64, Tensor<2>) {
    let _ = product();
    let mut y = product();
    let _ = device.sync();
    let t = Instant::now();
    for _ in 0..reps.max(1) {
        y = product();
    }
    let _ = device.sync();
    (1e3 * t.elapsed().as_secs_f64() / reps.max(1) as f64, y)
}

fn rate(
    s: &ProductShape,
    dtype: &'static str,
    ms: f64,
    rel_err: Option<f64>,
    blocks: Option<usize>,
) -> ProductRate {
    ProductRate { shape: s.clone(), dtype, blocks, ms, tflops: s.flop() / (ms * 1e9), rel_err, kernel: None }
}

/// Largest |y − want| over the largest |want|.
fn rel_err(y: Tensor<2>, want: Tensor<2>) -> f64 {
    let diff: f32 = (y - want.clone()).abs().max().into_scalar();
    let scale: f32 = want.abs().max().into_scalar();
    f64::from(diff) / f64::from(scale.max(f32::MIN_POSITIVE))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the CPU every shape comes back in f32 with a positive rate and no error figure, and
    /// each weight gradient also whole and split, the split equal to the whole.
    #[test]
    fn probe_times_every_shape() {
        let device = Device::default();
        let shapes = step_shapes(8, 4, 16, 12, 2, 3);
        let rates = product_probe(&device, &shapes, 2);
        let f32s: Vec<_> = rates.iter().filter(|r| r.dtype == "f32" && r.kernel.is_none()).collect();
        assert_eq!(f32s.len(), shapes.len());
        assert!(f32s.iter().all(|r| r.ms > 0.0 && r.tflops > 0.0 && r.rel_err.is_none()));
        assert_eq!(shapes[7].flop(), 2.0 * (4 * 8 * 12) as f64);
        // Each weight gradient also whole and split, the split equal to the whole.
        let splits: Vec<_> = rates.iter().filter(|r| r.dtype == "f32 aᵀb split").collect();
        assert_eq!(splits.len(), shapes.iter().filter(|s| s.name.ends_with("∂W")).count());
        assert!(splits.iter().all(|r| r.rel_err.is_some_and(|e| e < 1e-5)));
    }

    /// A table row only where a kernel beats burn's by the margin and computes the same
    /// product; the fastest such kernel.
    #[test]
    fn table_entries_keep_kernels_that_beat_burn() {
        let s = ProductShape::new("x", 64, 512, 2048);
        let r = |dtype, ms, kernel, err| ProductRate { kernel, ..rate(&s, dtype, ms, err, None) };
        let rates = [
            r("f32", 2.0, None, None),
            r("f32", 1.9, Some("simple-unit"), Some(0.0)),
            r("f16", 1.0, None, Some(1e-3)),
            r("f16", 0.5, Some("double-unit"), Some(1e-3)),
            r("f16", 0.4, Some("simple-cyclic-cmma"), Some(0.5)),
            r("f16", 0.6, Some("double-cyclic-cmma"), Some(1e-3)),
        ];
        assert_eq!(table_entries(&rates, 1.1), ["64x512x2048:f16=double-unit"]);
        assert_eq!(crate::gemm::table::parse(&table_entries(&rates, 1.1)[0]).unwrap()[0].m, 64);
    }

    /// The f16 comparison measures what it says: a perturbed output shows its error.
    #[test]
    fn rel_err_measures_the_difference() {
        let device = Device::default();
        let want = Tensor::<2>::from_floats([[1.0, -4.0], [2.0, 0.5]], &device);
        let y = Tensor::<2>::from_floats([[1.0, -4.0], [2.2, 0.5]], &device);
        assert!((rel_err(y, want.clone()) - 0.05).abs() < 1e-6);
        assert_eq!(rel_err(want.clone(), want), 0.0);
    }
}
