//! `x W` for a few rows at a time: decoder steps.
//!
//! Decoder steps multiply a `[batch, d_in]` state (64 rows in the benchmark, 320 in its beam
//! search) by a large weight: `[512, 2048]` per LSTM layer, `[1024, 512]` for Luong's `W_c`,
//! `[512, 8000]` for the output layer. burn's CPU backend hands such a product to `gemm` with
//! its own threading, which gains nothing below a few hundred rows (measured on the 2-core
//! AVX2 VM: `[64, 512] × [512, 2048]` at ~55 GFLOP/s with 1 thread or 2), and `gemm` re-packs
//! the whole weight on every call (16 % of greedy decoding time). Every product of a linear
//! layer comes here (`ops::linear`). [`matmul`] on flex:
//!
//! - **Decoding** (no autodiff): the weight is packed once for [`PackedB`] and kept in a small
//!   LRU cache (128 MiB, see [`packed`]) whose entries hold a handle on the weight's storage:
//!   a weight cannot be freed, reused or written in place while its entry lives, so a hit is
//!   always the same values. Its columns are cut into one range per thread. Any row count
//!   takes this path, so an encoder's input projection (`[batch·src, d]`, 1536 rows on the
//!   benchmark shape) is packed too; its row blocks of 256 keep a block of `A` in L2. Only
//!   weights may take it: a tensor made afresh at every call (the Transformer's side-by-side
//!   `[W_Q | W_K | W_V]`) goes through [`matmul`] with `reuse` off, never packed, or it would churn the
//!   cache. [`cpu_add_matmul`] adds a sum inside the product (`x W + b`, `x W_x + h W_h` and layer
//!   0's `xe + x W_feed` are one call): each thread adds the base to the columns it has just
//!   computed, so the result has the bits of the composed sum (tested) without a tensor or
//!   pass of its own.
//! - **Training** (autodiff), up to 256 rows: `W` packed for [`PackedB`] once a teacher-forced
//!   pass, by the first step's product, and read by every other step's product by it; `Wᵀ`
//!   likewise for the backward `∂x = ∂y Wᵀ` ([`shared`]); the columns cut over the threads as
//!   above. `∂W = xᵀ ∂y` goes through burn, whose threading suits its `d_in` rows — or, for a
//!   weight wrapped by [`crate::gemm::deferred_grad::defer_grad`], once for all steps. Weights
//!   change with every optimiser step, so the packs live only as long as the pass's backward
//!   steps (training never uses the decoding cache), and the sum is composed (`ops::add_matmul`).
//!
//! Larger products (while training, and for tensors computed afresh) go to
//! `gemm` with its own threads ([`matmul_2d`]: burn's product, without its output copy; see
//! [`crate::gemm::flex`]). On a cubecl device (without burn's fusion) the product is burn's, as
//! a node of its own while training, and [`gpu_add_bias`] is a node too, so that a deferred
//! weight's or bias's gradient waits for all steps ([`crate::gemm::deferred_grad`]); other backends
//! go to burn.
//!
//! # Shapes
//! - `x`: `[rows, d_in]`, `W`: `[d_in, d_out]` → `[rows, d_out]`

use burn::backend::TensorMetadata;
use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::flex::{FlexTensor, Layout};
use burn::backend::ops::FloatTensorOps;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::tensor::{Tensor, TensorData};
use rayon::prelude::*;

use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::cpu::flex_data::f32s;
use crate::gemm::deferred_grad::Part;
use crate::gemm::flex::{gemm_into, matmul_2d, strided};
use crate::gemm::int8::PackedI8;
use crate::gemm::packed::{PackedB, SendPtr, transpose};
use crate::own_backward::WithBackward;

/// While training, products with more rows than this go to [`matmul_2d`] (their weights are
/// not packed ahead, and `gemm`'s own threading pays off from a few hundred rows). Decoding
/// takes the packed weight at any row count: the encoders' input projections
/// (`[batch·src, d] × [d, 4·hidden]`) ran at ~160 GFLOP/s through burn there, against ~210
/// packed (Luong's encoder, 2 layers: 30.4 → 23.2 ms a batch).
const SPLIT_MAX_ROWS: usize = 256;

/// The column-split product as a burn backend extension (flex only).
#[backend_extension(Flex, Cube: cfg(not(feature = "gpu-tuned")), Autodiff)]
pub trait SmallMatmul: burn::backend::Backend {
    /// `x W` (`[rows, d_in] × [d_in, d_out]`). With `reuse`, `W` is a weight that comes back
    /// unchanged (decoding): it is packed once and kept (see [`packed`]).
    fn small_matmul(x: FloatTensor<Self>, w: FloatTensor<Self>, reuse: bool) -> FloatTensor<Self>;

    /// `base + x W` for decoding (`W` kept packed as with `reuse`), `base` `[rows, d_out]` or
    /// `[1, d_out]`: the addition happens inside the product ([`PackedB::matmul_par_add`]).
    fn add_small_matmul(
        base: FloatTensor<Self>,
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
    ) -> FloatTensor<Self>;
}

impl SmallMatmul for Flex {
    fn small_matmul(x: FlexTensor, w: FlexTensor, reuse: bool) -> FlexTensor {
        let [m, k] = x.layout().shape().dims::<2>();
        let [k2, n] = w.layout().shape().dims::<2>();
        assert_eq!(k, k2, "small_matmul: [m, k] × [k, n] shapes disagree");
        if !reuse && m > SPLIT_MAX_ROWS {
            return matmul_2d(&x, &w);
        }
        let x = f32s(&x);
        let out = if reuse && int8() {
            packed_i8(&w).product(&x, m, k, None)
        } else if reuse {
            packed(&w).product(&x, m, k, None)
        } else {
            let (w, rs, cs) = strided(&w);
            split_columns(&x, m, k, &w, n, rs, cs)
        };
        FlexTensor::from_data(TensorData::new(out, [m, n]))
    }

    fn add_small_matmul(base: FlexTensor, x: FlexTensor, w: FlexTensor) -> FlexTensor {
        let [m, k] = x.layout().shape().dims::<2>();
        let [k2, n] = w.layout().shape().dims::<2>();
        assert_eq!(k, k2, "add_small_matmul: [m, k] × [k, n] shapes disagree");
        let rows = base.layout().shape().dims::<2>()[0];
        assert!(
            base.layout().shape().dims::<2>()[1] == n && (rows == 1 || rows == m),
            "add_small_matmul: base shape"
        );
        let out = if int8() {
            packed_i8(&w).product(&f32s(&x), m, k, Some(&f32s(&base)))
        } else {
            packed(&w).product(&f32s(&x), m, k, Some(&f32s(&base)))
        };
        FlexTensor::from_data(TensorData::new(out, [m, n]))
    }
}

/// Whether this thread's decoding products take int8 weights ([`crate::mode::quantize`]).
fn int8() -> bool {
    crate::mode::quantize() == crate::mode::Quantize::Int8
}

/// `base + x W` composed from the backend's own product and a broadcast add: what the
/// backends without a fused one run (training never reaches it under autodiff:
/// `ops::add_matmul` composes there itself).
fn composed_add<B: SmallMatmul>(
    base: FloatTensor<B>,
    x: FloatTensor<B>,
    w: FloatTensor<B>,
) -> FloatTensor<B> {
    let y = B::small_matmul(x, w, false);
    let base = B::float_expand(base, y.shape());
    B::float_add(base, y)
}

impl<C: CheckpointStrategy> SmallMatmul for Autodiff<Flex, C> {
    fn add_small_matmul(
        base: FloatTensor<Self>,
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        composed_add::<Self>(base, x, w)
    }

    fn small_matmul(x: FloatTensor<Self>, w: FloatTensor<Self>, _reuse: bool) -> FloatTensor<Self> {
        Self::with_deferrable_backward(
            [x, w],
            // `∂W` waits when `W` is deferred ([`crate::gemm::deferred_grad`]).
            [false, true],
            |[x, w], keep| {
                let [m, k] = x.layout().shape().dims::<2>();
                if !keep || m > SPLIT_MAX_ROWS {
                    // Larger products take `gemm`'s threads (weights change with every
                    // optimiser step: never kept packed across steps while training).
                    let out = Flex::small_matmul(x.clone(), w.clone(), false);
                    return (out, keep.then_some((x, w, None)));
                }
                // `W` packed once for every step's product by it in this pass ([`shared`]).
                let packs = shared(&w);
                let out = packs.w.get_or_init(|| pack(&w)).product(&f32s(&x), m, k, None);
                let n = w.layout().shape().dims::<2>()[1];
                (FlexTensor::from_data(TensorData::new(out, [m, n])), Some((x, w, Some(packs))))
            },
            |(x, w, packs), dy, [x_needed, _]| {
                let dx = x_needed.then(|| {
                    let [m, n] = dy.layout().shape().dims::<2>();
                    let k = w.layout().shape().dims::<2>()[0];
                    let w_t = Flex::float_transpose(w);
                    match packs {
                        None => matmul_2d(&dy, &w_t),
                        // `Wᵀ` packed by the first step's backward to need it.
                        Some(p) => FlexTensor::from_data(TensorData::new(
                            p.w_t.get_or_init(|| pack(&w_t)).product(&f32s(&dy), m, n, None),
                            [m, k],
                        )),
                    }
                });
                [dx.map(Part::Whole), Some(Part::Product(x, dy))]
            },
        )
    }
}

/// `W` and `Wᵀ` packed for [`PackedB`], each made by the first product (forward) or backward
/// step (`∂x = ∂y Wᵀ`) to need it and read by every other step by the same `W` in the pass.
#[derive(Debug, Default)]
struct Packs {
    w: OnceLock<PackedB>,
    w_t: OnceLock<PackedB>,
}

/// The [`Packs`] of every weight whose products' backward steps are still to run, by its
/// storage's address and layout. An entry lives only as long as some backward step holds its
/// packs; such a step also holds `W`, so `W`'s storage can neither be freed (and its address
/// reused) nor written in place (burn writes in place only storage it holds alone) while the
/// entry lives: a live entry always describes the same values.
static SHARED: Mutex<Vec<(usize, Layout, Weak<Packs>)>> = Mutex::new(Vec::new());

/// The [`Packs`] shared by every product by `w` in one teacher-forced pass. A decoder
/// multiplies each step's state by the same weights (`[32, 512] × [512, 2048]` per LSTM layer
/// and core-split part); `gemm` re-packed all of `W` on every call, forward and backward, and
/// ran those products at 27–38 GFLOP/s on one core of the Zen 3 VM, against 79–86 for the same
/// products on a `W` packed ahead (39 % of Luong's training products' time went to them).
/// Packing once a pass keeps the cost of a `W` changed by every optimiser step to one packing
/// per pass, which the steps share.
fn shared(w: &FlexTensor) -> Arc<Packs> {
    let key = Arc::as_ptr(&w.data_arc()) as usize;
    let mut all = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = all.iter().find(|(k, l, _)| *k == key && l == w.layout()).and_then(|e| e.2.upgrade()) {
        return t;
    }
    all.retain(|e| e.2.strong_count() > 0);
    let t = Arc::new(Packs::default());
    all.push((key, w.layout().clone(), Arc::downgrade(&t)));
    t
}

/// A 2-D f32 flex tensor packed for [`PackedB`], read through its strides: rows copied whole
/// when contiguous, a transposed one (a weight's `Wᵀ`) through [`transpose`]'s tiles, else
/// gathered element by element.
fn pack(t: &FlexTensor) -> PackedB {
    let [k, n] = t.layout().shape().dims::<2>();
    let (data, rs, cs) = strided(t);
    PackedB::from_row_blocks(k, n, |rows, block| {
        if cs == 1 {
            for (i, r) in rows.enumerate() {
                block[i * n..(i + 1) * n].copy_from_slice(&data[r * rs..r * rs + n]);
            }
        } else if rs == 1 {
            transpose(&data, cs, rows.start, n, rows.len(), block, n);
        } else {
            for c in 0..n {
                for (i, r) in rows.clone().enumerate() {
                    block[i * n + c] = data[r * rs + c * cs];
                }
            }
        }
    })
}

/// `A B` for row-major `A` (`[m, k]`) and `B` (`[k, n]`, element `(r, c)` at
/// `r·b_rs + c·b_cs`), the columns of `B` cut into one block per thread, each block one
/// single-threaded `gemm` call writing its columns of the row-major result.
fn split_columns(a: &[f32], m: usize, k: usize, b: &[f32], n: usize, b_rs: usize, b_cs: usize) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    if m == 0 || n == 0 || k == 0 {
        return out;
    }
    assert!(
        a.len() >= m * k && b.len() > (k - 1) * b_rs + (n - 1) * b_cs,
        "small_matmul: operands too short"
    );
    // Blocks of whole 16-column panels, at least 64 columns each.
    let blocks = rayon::current_num_threads().min(n.div_ceil(64)).max(1);
    let width = n.div_ceil(blocks).div_ceil(16) * 16;
    let starts: Vec<usize> = (0..n).step_by(width).collect();
    let out_ptr = SendPtr(out.as_mut_ptr());
    starts.par_iter().for_each(|&c0| {
        let cols = width.min(n - c0);
        let dst = &out_ptr;
        // SAFETY: blocks write disjoint column ranges `c0..c0 + cols` of the `[m, n]` output,
        // which outlives the parallel loop; `a` and `b` are read within `[m, k]` and
        // `[k, n]` at the strides given (bounds asserted below).
        unsafe {
            gemm_into(
                [m, cols, k],
                dst.0.add(c0),
                n,
                (a.as_ptr(), k, 1),
                (b.as_ptr().add(c0 * b_cs), b_rs, b_cs),
                gemm::Parallelism::None,
            )
        };
    });
    out
}

/// Weights kept packed for decoding, least recently used first, each with its size in bytes,
/// and the bytes they hold in all.
type Kept<P> = Mutex<(Vec<(FlexTensor, Arc<P>, usize)>, usize)>;

/// f32 packed weights ([`packed`]).
static PACKED: Kept<PackedB> = Mutex::new((Vec::new(), 0));

/// int8 weights (`--quantize int8`, [`packed_i8`]).
static PACKED_I8: Kept<PackedI8> = Mutex::new((Vec::new(), 0));

/// At most this many bytes of packed weights are kept in each cache (the largest, a
/// `[512, 8000]` output layer, takes 16 MiB in f32).
const PACKED_BYTES: usize = 128 << 20;

/// `w` made ready by `build` (the ready form and its bytes), from `cache` when the same tensor —
/// the same storage, read the same way — was before. An entry holds a handle on the weight's
/// storage, so the storage can neither be freed and reused for other data nor written in place
/// (burn copies storage it does not own alone) while the entry lives: a hit is always the same
/// values. The least recently used entries go past [`PACKED_BYTES`].
fn kept<P>(cache: &Kept<P>, w: &FlexTensor, build: impl FnOnce() -> (P, usize)) -> Arc<P> {
    let storage = w.data_arc();
    let same = |a: &FlexTensor| Arc::ptr_eq(&a.data_arc(), &storage) && a.layout() == w.layout();
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = cache.0.iter().position(|(t, _, _)| same(t)) {
        let entry = cache.0.remove(i);
        let p = entry.1.clone();
        cache.0.push(entry);
        return p;
    }
    let (p, bytes) = build();
    let p = Arc::new(p);
    cache.1 += bytes;
    cache.0.push((w.clone(), p.clone(), bytes));
    while cache.1 > PACKED_BYTES && cache.0.len() > 1 {
        let (_, _, old) = cache.0.remove(0);
        cache.1 -= old;
    }
    p
}

/// `w` packed for [`PackedB`], kept ([`kept`]). Decoding multiplies the same few weights at
/// every step; the `gemm` crate re-packs the whole weight on every call, which took 16 % of
/// greedy decoding time.
fn packed(w: &FlexTensor) -> Arc<PackedB> {
    kept(&PACKED, w, || {
        let [k, n] = w.layout().shape().dims::<2>();
        (pack(w), 4 * k * n)
    })
}

/// `w` quantized to int8 per column and packed ([`PackedI8`]), kept ([`kept`]): each weight
/// quantized and packed once.
fn packed_i8(w: &FlexTensor) -> Arc<PackedI8> {
    kept(&PACKED_I8, w, || {
        let [k, n] = w.layout().shape().dims::<2>();
        let (data, rs, cs) = strided(w);
        let p = PackedI8::new(k, n, |r, c| data[r * rs + c * cs]);
        let bytes = p.bytes();
        (p, bytes)
    })
}

/// `x W` as a node of this module's extension: on flex the kernels above (`reuse`: `W` is a
/// weight, which comes back unchanged and is kept packed while decoding ([`packed`]), not a
/// tensor computed afresh each call); on a cubecl device burn's product, as a node of its own
/// while training so that a deferred weight's gradient waits for all steps. Which device takes
/// it is [`crate::ops`]'s choice.
pub fn matmul(x: Tensor<2>, w: Tensor<2>, reuse: bool) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as SmallMatmul>::small_matmul(
        x.into_dispatch(),
        w.into_dispatch(),
        reuse,
    ))
}

/// `x W` with f16 operands, the result back in f32 (mixed precision on a GPU: the device
/// accumulates f16 products in f32). burn's casts are differentiable, so the backward's
/// products take f16 operands too and the weight's gradient arrives in f32.
pub fn half_product(x: Tensor<2>, w: Tensor<2>) -> Tensor<2> {
    use burn::tensor::FloatDType;
    x.cast(FloatDType::F16).matmul(w.cast(FloatDType::F16)).cast(FloatDType::F32)
}

/// `x W` with f16 operands on a cubecl device, the result back in f32: [`half_product`] as one
/// node whose products, forward and backward, take the kernel [`crate::gemm::table`] chooses
/// for their shape.
#[cfg(not(feature = "gpu-tuned"))]
pub fn gpu_half_matmul(x: Tensor<2>, w: Tensor<2>) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as gpu::GpuHalfProduct>::half_matmul(
        x.into_dispatch(),
        w.into_dispatch(),
    ))
}

/// `y + b` for every row of `y` (`[rows, d]`, `b` `[d]`) on a GPU while training: a node whose
/// bias gradient waits for all steps when `b` is deferred ([`crate::gemm::deferred_grad`]).
#[cfg(not(feature = "gpu-tuned"))]
pub fn gpu_add_bias(y: Tensor<2>, b: Tensor<1>) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as gpu::GpuBias>::gpu_add_bias(y.into_dispatch(), b.into_dispatch()))
}

/// `base + x W`, `base` `[rows, d_out]` or `[1, d_out]` (a bias for every row), while decoding
/// on flex: the addition happens inside the product (no pass or tensor of its own), the same
/// result to the bit as the two composed.
pub fn cpu_add_matmul(base: Tensor<2>, x: Tensor<2>, w: Tensor<2>) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as SmallMatmul>::add_small_matmul(
        base.into_dispatch(),
        x.into_dispatch(),
        w.into_dispatch(),
    ))
}

/// On a GPU: the product by the kernel [`crate::gemm::table`] chooses for its shape (burn's
/// outside the table), as a node of its own while training so that a deferred weight's
/// gradient waits for all steps ([`crate::gemm::deferred_grad`]); with f16 operands, a node
/// that casts around its products.
#[cfg(not(feature = "gpu-tuned"))]
mod gpu {

    use burn::backend::TensorMetadata;
    use burn::backend::autodiff::Autodiff;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::ops::FloatTensorOps;
    use burn::backend::tensor::FloatTensor;
    use burn_cubecl::CubeBackend;
    use burn_cubecl::tensor::CubeTensor;

    use burn::backend::backend_extension;
    use burn::tensor::Shape;

    use super::SmallMatmul;
    use crate::gemm::deferred_grad::Part;
    use crate::gemm::table::gpu::product;
    use crate::own_backward::WithBackward;

    type Mm = CubeBackend;

    /// `x W` with f16 operands, the output in f32, as a burn backend extension (cubecl runtimes
    /// without fusion).
    #[backend_extension(Cube, Autodiff)]
    pub trait GpuHalfProduct: burn::backend::Backend {
        /// `x W` (`[rows, d_in] × [d_in, d_out]`, f32), its products in f16.
        fn half_matmul(x: FloatTensor<Self>, w: FloatTensor<Self>) -> FloatTensor<Self>;
    }

    /// `a b` of f32 tensors through f16: both cast, multiplied (the device accumulates in f32),
    /// the product cast back.
    fn half(a: CubeTensor, b: CubeTensor) -> CubeTensor {
        use burn::tensor::FloatDType;
        let f16 = |t| Mm::float_cast(t, FloatDType::F16);
        Mm::float_cast(product(f16(a), f16(b)), FloatDType::F32)
    }

    impl GpuHalfProduct for CubeBackend {
        fn half_matmul(x: CubeTensor, w: CubeTensor) -> CubeTensor {
            half(x, w)
        }
    }

    impl<C: CheckpointStrategy> GpuHalfProduct for Autodiff<CubeBackend, C> {
        fn half_matmul(x: FloatTensor<Self>, w: FloatTensor<Self>) -> FloatTensor<Self> {
            Self::with_backward(
                [x, w],
                |[x, w], keep| {
                    let y = half(x.clone(), w.clone());
                    (y, keep.then_some((x, w)))
                },
                // `∂x = ∂y Wᵀ`, `∂W = xᵀ ∂y`, each through f16 as burn's casts would take them.
                |(x, w), dy, [x_needed, w_needed]| {
                    [
                        x_needed.then(|| half(dy.clone(), Mm::float_transpose(w))),
                        w_needed.then(|| half(Mm::float_transpose(x), dy)),
                    ]
                },
            )
        }
    }

    /// The bias addition as a burn backend extension (cubecl runtimes without fusion).
    #[backend_extension(Cube, Autodiff)]
    pub trait GpuBias: burn::backend::Backend {
        /// `y + b` for every row of `y` (`[rows, d]`, `b` `[d]`).
        fn gpu_add_bias(y: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self>;
    }

    /// `y + b` broadcast over the rows.
    fn add_rows(y: CubeTensor, b: CubeTensor) -> CubeTensor {
        let d = b.shape()[0];
        Mm::float_add(y, Mm::float_reshape(b, Shape::from([1, d])))
    }

    impl GpuBias for CubeBackend {
        fn gpu_add_bias(y: CubeTensor, b: CubeTensor) -> CubeTensor {
            add_rows(y, b)
        }
    }

    impl<C: CheckpointStrategy> GpuBias for Autodiff<CubeBackend, C> {
        fn gpu_add_bias(y: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self> {
            Self::with_deferrable_backward(
                [y, b],
                // `∂b` waits when `b` is deferred.
                [false, true],
                |[y, b], _| (add_rows(y, b), Some(())),
                |(), dy, [y_needed, _]| [y_needed.then(|| Part::Whole(dy.clone())), Some(Part::RowSums(dy))],
            )
        }
    }

    impl SmallMatmul for CubeBackend {
        fn small_matmul(x: CubeTensor, w: CubeTensor, _reuse: bool) -> CubeTensor {
            product(x, w)
        }

        fn add_small_matmul(base: CubeTensor, x: CubeTensor, w: CubeTensor) -> CubeTensor {
            super::composed_add::<Self>(base, x, w)
        }
    }

    impl<C: CheckpointStrategy> SmallMatmul for Autodiff<CubeBackend, C> {
        fn add_small_matmul(
            base: FloatTensor<Self>,
            x: FloatTensor<Self>,
            w: FloatTensor<Self>,
        ) -> FloatTensor<Self> {
            super::composed_add::<Self>(base, x, w)
        }

        fn small_matmul(x: FloatTensor<Self>, w: FloatTensor<Self>, _reuse: bool) -> FloatTensor<Self> {
            Self::with_deferrable_backward(
                [x, w],
                // `∂W` waits when `W` is deferred.
                [false, true],
                |[x, w], keep| {
                    if !keep {
                        return (product(x, w), None);
                    }
                    (product(x.clone(), w.clone()), Some((x, w)))
                },
                |(x, w), dy, [x_needed, _]| {
                    let dx = x_needed.then(|| Part::Whole(product(dy.clone(), Mm::float_transpose(w))));
                    [dx, Some(Part::Product(x, dy))]
                },
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::{Device, Distribution};

    /// Equals burn's product forward and backward (`∂x`, `∂W` of a random linear function of
    /// the output), with column counts that leave a partial last block, with row counts for
    /// every path (split by column, `gemm` on one thread, `gemm` threaded), and without
    /// autodiff (a weight, and a tensor computed afresh).
    #[test]
    fn equals_burns_matmul_forward_and_backward() {
        let ad = Device::flex().autodiff();
        ad.seed(3);
        for (m, k, n) in
            [(1, 5, 3), (7, 33, 200), (64, 40, 130), (300, 8, 20), (1100, 9, 33), (1100, 200, 40)]
        {
            let x = Tensor::<2>::random([m, k], Distribution::Normal(0.0, 1.0), &ad);
            // A transposed weight (as tied embeddings are) is read in place through its strides.
            let w = if n % 2 == 0 {
                Tensor::<2>::random([n, k], Distribution::Normal(0.0, 1.0), &ad).transpose()
            } else {
                Tensor::<2>::random([k, n], Distribution::Normal(0.0, 1.0), &ad)
            };
            let r = Tensor::<2>::random([m, n], Distribution::Normal(0.0, 1.0), &ad);
            let run = |fast: bool| {
                let (x, w) = (x.clone().require_grad(), w.clone().require_grad());
                let y = if fast { matmul(x.clone(), w.clone(), true) } else { x.clone().matmul(w.clone()) };
                let grads = (y.clone() * r.clone()).sum().backward();
                (y.inner(), x.grad(&grads).expect("∂x"), w.grad(&grads).expect("∂W"))
            };
            let (y1, dx1, dw1) = run(true);
            let (y2, dx2, dw2) = run(false);
            assert!(max_diff(y1, y2) < 1e-4, "{m}x{k}x{n}: y");
            assert!(max_diff(dx1, dx2) < 1e-4, "{m}x{k}x{n}: ∂x");
            assert!(max_diff(dw1, dw2) < 1e-4, "{m}x{k}x{n}: ∂W");
            let (x, w) = (x.inner(), w.inner());
            assert!(max_diff(matmul(x.clone(), w.clone(), true), x.clone().matmul(w.clone())) < 1e-4);
            assert!(max_diff(matmul(x.clone(), w.clone(), false), x.matmul(w)) < 1e-4);
        }
    }

    /// Steps that multiply by one weight share its packed `W` and `Wᵀ` ([`shared`]), and
    /// nothing else does: two products by `W`, one by `Wᵀ` and one by the lower half of `W`'s
    /// rows, views of the same storage read other ways, give burn's product and `∂x` each; so
    /// does a second pass after `W`'s storage was written in place (flex writes in place
    /// storage held alone), which must not read the first pass's packs.
    #[test]
    fn steps_share_their_packed_weight_and_never_a_stale_one() {
        let ad = Device::flex().autodiff();
        ad.seed(5);
        let (m, k) = (16, 48);
        let mut w = Tensor::<2>::random([k, k], Distribution::Normal(0.0, 1.0), &ad).inner();
        for pass in 0..3 {
            let xs: Vec<_> = [k, k, k, k / 2]
                .iter()
                .map(|&cols| Tensor::<2>::random([m, cols], Distribution::Normal(0.0, 1.0), &ad))
                .collect();
            let run = |fast: bool| {
                let w = Tensor::from_inner(w.clone()).require_grad();
                let xs: Vec<_> = xs.iter().map(|x| x.clone().require_grad()).collect();
                let mul = |x: Tensor<2>, w: Tensor<2>| if fast { matmul(x, w, true) } else { x.matmul(w) };
                let ys = [
                    mul(xs[0].clone(), w.clone()),
                    mul(xs[1].clone(), w.clone()) * 2.0,
                    mul(xs[2].clone(), w.clone().transpose()).sin(),
                    mul(xs[3].clone(), w.clone().narrow(0, k / 2, k / 2)).cos(),
                ];
                let grads = ys.iter().cloned().reduce(|a, b| a + b).expect("products").sum().backward();
                let dxs = xs.iter().map(|x| x.grad(&grads).expect("∂x"));
                ys.iter().map(|y| y.clone().inner()).zip(dxs).collect::<Vec<_>>()
            };
            for (i, ((y, dx), (y_burn, dx_burn))) in run(true).into_iter().zip(run(false)).enumerate() {
                assert!(max_diff(y, y_burn) < 1e-4, "pass {pass}, product {i}: y");
                assert!(max_diff(dx, dx_burn) < 1e-4, "pass {pass}, product {i}: ∂x");
            }
            w = w.mul_scalar(-0.5).add_scalar(0.25);
        }
    }

    /// `cpu_add_matmul` while decoding equals burn's product plus the base, bias-shaped or full, to
    /// the bit.
    #[test]
    fn add_matmul_equals_the_composed_sum() {
        let d = Device::flex();
        d.seed(5);
        // Not [24, 70]: the reuse test counts the cache's entries of that shape.
        let (m, k, n) = (9, 23, 71);
        let x = Tensor::<2>::random([m, k], Distribution::Normal(0.0, 1.0), &d);
        let w = Tensor::<2>::random([k, n], Distribution::Normal(0.0, 1.0), &d);
        for rows in [1, m] {
            let base = Tensor::<2>::random([rows, n], Distribution::Normal(0.0, 1.0), &d);
            let fused = cpu_add_matmul(base.clone(), x.clone(), w.clone()).into_data();
            let composed = (base + matmul(x.clone(), w.clone(), true)).into_data();
            assert_eq!(fused, composed, "base rows {rows}");
        }
    }

    /// Without autodiff the weight is packed once and reused: repeated products, and products
    /// with two views of one storage (rows `0..k` and `k..2k`), equal burn's every time.
    #[test]
    fn packed_weights_are_reused_and_never_confused() {
        let d = Device::flex();
        d.seed(4);
        let (m, k, n) = (9, 24, 70);
        let w = Tensor::<2>::random([2 * k, n], Distribution::Normal(0.0, 1.0), &d);
        let (top, bottom) = (w.clone().narrow(0, 0, k), w.clone().narrow(0, k, k));
        for step in 0..3 {
            let x = Tensor::<2>::random([m, k], Distribution::Normal(0.0, 1.0), &d);
            for part in [&top, &bottom] {
                let fast = matmul(x.clone(), part.clone(), true);
                assert!(max_diff(fast, x.clone().matmul(part.clone())) < 1e-4, "step {step}");
            }
        }
        let cache = PACKED.lock().unwrap_or_else(|e| e.into_inner());
        let ours = cache.0.iter().filter(|(t, _, _)| t.layout().shape().dims::<2>() == [k, n]);
        assert_eq!(ours.count(), 2, "one packed entry per view, none per step");
    }
}
