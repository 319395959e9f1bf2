//! Two or three matrices side by side, `[A | B | C]` along the last axis, as one cubecl kernel
//! each way (wgpu): what the Transformer's fused projection does to `W^Q`, `W^K`, `W^V` and
//! their biases at every call (the Transformer's multi-head attention).
//!
//! burn's `cat` writes each part with its own slice-assign, and its backward hands each part
//! a strided view of the gradient, which the clip and Adam then copy to make contiguous: per
//! attention ~12 launches for weights and biases, each ~28 µs of host time through wgpu on
//! an H100. Here forward is one launch (a thread an output element) and backward one launch
//! writing each part's gradient contiguous. Not with burn's fusion (`gpu-tuned`). The
//! checkpoint format does not change; only the concatenation at each call is cheaper. A wgpu
//! test compares the fused self-attention's output and all six projection gradients with
//! flex's.
//!
//! The RNN attention steps' concatenations go through it too (`ops::cat_columns`), and so
//! does Bahdanau's readout `[sₜ; cₜ; E y_{t−1}]`, joined once: the step returns `sₜ` and `cₜ`,
//! and forward stacks each and joins them with the whole embedding tensor in one launch
//! (`ops::cat_features`, the rows of `[batch, time, dᵢ]` parts). Joining the bidirectional
//! encoder's halves the same way counted +2 launches (its halves are strided views of the
//! layer's output buffer, which a reshape copies), so that stays burn's `cat`.
//!
//! # Shapes
//! - `a` `[rows, da]`, `b` `[rows, db]`, `c` `[rows, dc]` (optional) → `[rows, da + db + dc]`

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::{Dispatch, backend_extension, tensor::FloatTensor};
use burn::tensor::{DType, Tensor};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::cube;
use cubecl::prelude::*;

use crate::gpu::launch::{empty, launch_dims};

/// The concatenation as a burn backend extension (cubecl runtimes without fusion).
#[backend_extension(Cube, Autodiff)]
pub trait GpuCat: burn::backend::Backend {
    /// `[a | b]` along the last axis of 2-D tensors with the same rows.
    fn gpu_cat2(a: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `[a | b | c]` along the last axis of 2-D tensors with the same rows.
    fn gpu_cat3(a: FloatTensor<Self>, b: FloatTensor<Self>, c: FloatTensor<Self>) -> FloatTensor<Self>;
}

/// One thread per output element `(row, j)`: from `a` for `j < da`, `b` for `j < da + db`,
/// else `c` (read only with `has_c`).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn cat_forward(
    a: &[f32],
    b: &[f32],
    c: &[f32],
    out: &mut [f32],
    da: u32,
    db: u32,
    dc: u32,
    #[comptime] has_c: bool,
) {
    let n = ABSOLUTE_POS;
    let (da, db, dc) = (da as usize, db as usize, dc as usize);
    let width = da + db + dc;
    if n < out.len() {
        let (row, j) = (n / width, n % width);
        let mut v = 0.0f32;
        if j < da {
            v = a[row * da + j];
        } else if j < da + db {
            v = b[row * db + j - da];
        } else if has_c {
            v = c[row * dc + j - da - db];
        }
        out[n] = v;
    }
}

/// One thread per gradient element `(row, j)`: into `∂a`, `∂b` or `∂c` (written only with
/// `has_c`), each contiguous.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn cat_backward(
    grad: &[f32],
    d_a: &mut [f32],
    d_b: &mut [f32],
    d_c: &mut [f32],
    da: u32,
    db: u32,
    dc: u32,
    #[comptime] has_c: bool,
) {
    let n = ABSOLUTE_POS;
    let (da, db, dc) = (da as usize, db as usize, dc as usize);
    let width = da + db + dc;
    if n < grad.len() {
        let (row, j) = (n / width, n % width);
        if j < da {
            d_a[row * da + j] = grad[n];
        } else if j < da + db {
            d_b[row * db + j - da] = grad[n];
        } else if has_c {
            d_c[row * dc + j - da - db] = grad[n];
        }
    }
}

/// `(rows, [da, db, dc])`, checked (`dc` 0 without `c`).
fn dims(a: &CubeTensor, b: &CubeTensor, c: Option<&CubeTensor>) -> (usize, [usize; 3]) {
    let shape = |t: &CubeTensor| {
        let s = t.meta.shape();
        assert!(s.num_dims() == 2 && t.dtype == DType::F32, "cat_columns: the parts are not f32 matrices");
        [s[0], s[1]]
    };
    let ([ra, da], [rb, db]) = (shape(a), shape(b));
    let [rc, dc] = c.map_or([ra, 0], shape);
    assert!(ra == rb && ra == rc, "cat_columns: the parts' rows differ ({ra}, {rb}, {rc})");
    (ra, [da, db, dc])
}

fn forward(a: CubeTensor, b: CubeTensor, c: Option<CubeTensor>) -> CubeTensor {
    let (rows, [da, db, dc]) = dims(&a, &b, c.as_ref());
    let (a, b) = (into_contiguous(a), into_contiguous(b));
    let has_c = c.is_some();
    // Without `c` the kernel reads none; `a` fills its binding.
    let c = c.map_or_else(|| a.clone(), into_contiguous);
    let out = empty(&a, [rows, da + db + dc]);
    let (count, dim) = launch_dims(&a, rows * (da + db + dc));
    cat_forward::launch(
        &a.client.clone(),
        count,
        dim,
        a.into_buffer_arg(),
        b.into_buffer_arg(),
        c.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        da as u32,
        db as u32,
        dc as u32,
        has_c,
    );
    out
}

/// The parts' gradients, each contiguous (`∂c` only with `dc > 0`).
fn backward(
    grad: CubeTensor,
    rows: usize,
    [da, db, dc]: [usize; 3],
) -> (CubeTensor, CubeTensor, Option<CubeTensor>) {
    let grad = into_contiguous(grad);
    let (d_a, d_b) = (empty(&grad, [rows, da]), empty(&grad, [rows, db]));
    let d_c = (dc > 0).then(|| empty(&grad, [rows, dc]));
    let (count, dim) = launch_dims(&grad, rows * (da + db + dc));
    cat_backward::launch(
        &grad.client.clone(),
        count,
        dim,
        grad.clone().into_buffer_arg(),
        d_a.clone().into_buffer_arg(),
        d_b.clone().into_buffer_arg(),
        d_c.clone().unwrap_or_else(|| d_a.clone()).into_buffer_arg(),
        da as u32,
        db as u32,
        dc as u32,
        d_c.is_some(),
    );
    (d_a, d_b, d_c)
}

impl GpuCat for CubeBackend {
    fn gpu_cat2(a: CubeTensor, b: CubeTensor) -> CubeTensor {
        forward(a, b, None)
    }

    fn gpu_cat3(a: CubeTensor, b: CubeTensor, c: CubeTensor) -> CubeTensor {
        forward(a, b, Some(c))
    }
}

/// The concatenation of `N` (2 or 3) parts as one autodiff node.
fn cat_node<C: CheckpointStrategy, const N: usize>(
    parts: [FloatTensor<Autodiff<CubeBackend, C>>; N],
) -> FloatTensor<Autodiff<CubeBackend, C>> {
    #[derive(Debug)]
    struct CatBackward<const N: usize>;

    impl<const N: usize> Backward<CubeBackend, N> for CatBackward<N> {
        /// The rows and the parts' widths.
        type State = (usize, [usize; 3]);

        fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
            let grad = grads.consume::<CubeBackend>(&ops.node);
            let (rows, widths) = ops.state;
            let (d_a, d_b, d_c) = backward(grad, rows, widths);
            for (node, g) in ops.parents.into_iter().zip([Some(d_a), Some(d_b), d_c]) {
                if let (Some(node), Some(g)) = (node, g) {
                    grads.register::<CubeBackend>(node.id, g);
                }
            }
        }
    }

    let (tensors, nodes): (Vec<CubeTensor>, Vec<_>) = parts.into_iter().map(|p| p.into_parts()).unzip();
    let nodes: [_; N] = nodes.try_into().unwrap_or_else(|_| unreachable!("N parts"));
    let mut t = tensors.into_iter();
    let (a, b, c) = (t.next().expect("a"), t.next().expect("b"), t.next());
    let (rows, widths) = dims(&a, &b, c.as_ref());
    match CatBackward::<N>.prepare::<C>(nodes).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish((rows, widths), forward(a, b, c)),
        OpsKind::UnTracked(prep) => prep.finish(forward(a, b, c)),
    }
}

impl<C: CheckpointStrategy> GpuCat for Autodiff<CubeBackend, C> {
    fn gpu_cat2(a: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self> {
        cat_node::<C, 2>([a, b])
    }

    fn gpu_cat3(a: FloatTensor<Self>, b: FloatTensor<Self>, c: FloatTensor<Self>) -> FloatTensor<Self> {
        cat_node::<C, 3>([a, b, c])
    }
}

/// `[parts₀ | parts₁ | parts₂]` along the last axis of 2-D tensors with the same rows, two
/// or three parts, on a cubecl device (not flex; not with `gpu-tuned`).
pub fn cat_columns(parts: Vec<Tensor<2>>) -> Tensor<2> {
    assert!(matches!(parts.len(), 2 | 3), "cat_columns takes two or three parts");
    let mut parts = parts.into_iter().map(Tensor::into_dispatch);
    let (a, b) = (parts.next().expect("two parts"), parts.next().expect("two parts"));
    Tensor::from_dispatch(match parts.next() {
        Some(c) => <Dispatch as GpuCat>::gpu_cat3(a, b, c),
        None => <Dispatch as GpuCat>::gpu_cat2(a, b),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::Distribution;

    /// On wgpu (lavapipe where there is no GPU) the kernels equal burn's `cat`, forward and
    /// the gradient of a random linear function of the result, with two parts and three.
    #[test]
    fn kernels_equal_burns_cat_on_wgpu() {
        let Some(plain) = crate::testing::wgpu_or_skip() else { return };
        let ad = plain.autodiff();
        for widths in [vec![3, 5], vec![4, 1, 7]] {
            let rows = 6;
            let parts: Vec<Tensor<2>> = widths
                .iter()
                .map(|&w| Tensor::random([rows, w], Distribution::Normal(0.0, 1.0), &ad))
                .collect();
            let total: usize = widths.iter().sum();
            let r = Tensor::<2>::random([rows, total], Distribution::Normal(0.0, 1.0), &ad);
            let run = |ours: bool| {
                let ps: Vec<Tensor<2>> = parts.iter().map(|p| p.clone().require_grad()).collect();
                let y = if ours { cat_columns(ps.clone()) } else { Tensor::cat(ps.clone(), 1) };
                let g = (y.clone() * r.clone()).sum().backward();
                let grads: Vec<Tensor<2>> = ps.iter().map(|p| p.grad(&g).unwrap()).collect();
                (y.inner(), grads)
            };
            let ((y1, g1), (y2, g2)) = (run(true), run(false));
            assert_eq!(y1.to_data(), y2.to_data(), "forward, widths {widths:?}");
            for (i, (a, b)) in g1.into_iter().zip(g2).enumerate() {
                assert!(max_diff(a, b) < 1e-7, "gradient of part {i}, widths {widths:?}");
            }
        }
    }
}
