//! Products chosen per shape (`gemm::table`) on wgpu (lavapipe where there is no GPU): a
//! product the table sends to a cubek kernel equals burn's, forward and backward, in f32 and
//! through f16; a kernel that refuses a shape falls back to burn's. Its own test binary: the
//! table's variable, `S2S_GPU_PRODUCTS`, is read once a process.

use burn::tensor::{Device, Distribution, FloatDType, Tensor};
use s2s_kernels::bench::{Kernel, Operand, products};
use s2s_kernels::testing::{wgpu_f16_or_skip, wgpu_or_skip};
use s2s_kernels::{mode, ops};

/// The largest |a − b| over the largest |b|.
fn rel(a: Tensor<2>, b: Tensor<2>) -> f32 {
    let scale: f32 = b.clone().abs().max().into_scalar();
    let diff: f32 = (a - b).abs().max().into_scalar();
    diff / scale.max(f32::MIN_POSITIVE)
}

/// `x W` through `product` and its gradients `∂x`, `∂W` of `Σ (x W) ⊙ r`.
fn with_grads(
    d: &Device,
    x: &Tensor<2>,
    w: &Tensor<2>,
    r: &Tensor<2>,
    product: impl Fn(Tensor<2>, Tensor<2>) -> Tensor<2>,
) -> [Tensor<2>; 3] {
    let (x, w) = (x.clone().require_grad(), w.clone().require_grad());
    let y = product(x.clone(), w.clone());
    let g = (y.clone() * r.clone()).sum().backward();
    let grad = |t: &Tensor<2>| Tensor::<2>::from_data(t.grad(&g).expect("a gradient").into_data(), d);
    [Tensor::from_data(y.into_data(), d), grad(&x), grad(&w)]
}

#[test]
fn table_kernels_equal_burns_product_forward_and_backward() {
    // Forward `[7, 33] × [33, 20]` by double-unit, its `∂x` (`[7, 20] × [20, 33]`) by
    // simple-unit, `∂W` as before; `[5, 16] × [16, 24]` through f16 by double-unit (its `∂W`,
    // `[16, 5] × [5, 24]`, too); a vector-matrix kernel asked for a matrix falls back.
    // SAFETY: set before anything reads it, in this test binary's only test.
    unsafe {
        std::env::set_var(
            "S2S_GPU_PRODUCTS",
            "7x33x20:f32=double-unit,7x20x33:f32=simple-unit,5x16x24:f16=double-unit,16x5x24:f16=double-unit,\
             9x8x8:f32=simple-vecmat",
        )
    };
    assert_eq!(products::kernel(7, 33, 20, Operand::F32), Kernel::DoubleUnit);
    assert_eq!(products::kernel(7, 33, 20, Operand::F16), Kernel::Burn);
    let Some(gpu) = wgpu_or_skip() else { return };
    let ad = gpu.clone().autodiff();
    ad.seed(5);
    let rand = |s: [usize; 2]| Tensor::<2>::random(s, Distribution::Normal(0.0, 1.0), &ad);
    let counts = products::gpu::counts;
    for (m, k, n) in [(7, 33, 20), (9, 8, 8)] {
        let (x, w, r) = (rand([m, k]), rand([k, n]), rand([m, n]));
        let table = with_grads(&gpu, &x, &w, &r, |x, w| ops::matmul_rows(x, w));
        let burn = with_grads(&gpu, &x, &w, &r, |x, w| x.matmul(w));
        for (i, (a, b)) in table.into_iter().zip(burn).enumerate() {
            assert!(rel(a, b) < 1e-5, "{m}x{k}x{n}, output {i}");
        }
    }
    // The forward and `∂x` of the first shape ran by their kernels; the vector-matrix kernel
    // refused the second shape's forward and `∂x`.
    assert_eq!(counts(), (2, 2));
    // Through f16 (where the adapter has it: not wgpu's GL fallback): the product node with
    // its casts against burn's composed casts.
    if wgpu_f16_or_skip().is_none() {
        return;
    }
    let (x, w, r) = (rand([5, 16]), rand([16, 24]), rand([5, 24]));
    let half = |x: Tensor<2>, w: Tensor<2>| {
        x.cast(FloatDType::F16).matmul(w.cast(FloatDType::F16)).cast(FloatDType::F32)
    };
    let node = mode::with_half_products(true, || with_grads(&gpu, &x, &w, &r, |x, w| ops::matmul_rows(x, w)));
    let composed = with_grads(&gpu, &x, &w, &r, half);
    for (i, (a, b)) in node.into_iter().zip(composed).enumerate() {
        assert!(rel(a, b) < 2e-3, "f16, output {i}");
    }
    // The f16 forward and `∂W` by double-unit.
    assert_eq!(counts(), (4, 2));
    // Without autodiff (decoding) the same kernels run.
    let (x, w) = (Tensor::<2>::from_data(x.into_data(), &gpu), Tensor::<2>::from_data(w.into_data(), &gpu));
    let y = mode::with_half_products(true, || ops::matmul_rows(x.clone(), w.clone()));
    assert!(rel(y, half(x, w)) < 2e-3);
}
