//! The masked softmax and context of the recurrent decoders' attention as cubecl kernels
//! (wgpu), forward and backward (Bahdanau et al., 2015, eq. 5–6):
//!
//! `α = softmax(e)` over source positions (padding already `−∞` in `e`), `c = Σⱼ αⱼ vⱼ`;
//! and back, from `∂c` and `∂α`: `∂α'ⱼ = ∂αⱼ + ∂c · vⱼ`, `∂eⱼ = αⱼ (∂α'ⱼ − Σₖ αₖ ∂α'ₖ)`,
//! `∂vⱼ = αⱼ ∂c`.
//!
//! Composed, this is ~7 tensor operations forward (softmax's maximum, difference, `exp`, sum
//! and quotient; the weighted sum's product and reduction) and ~10 backward, at every decoder
//! step; on a GPU through wgpu each costs ~28 µs of host time (H100, session 16). Here it is
//! one launch forward and two backward, one autodiff node. Not with burn's fusion
//! (`gpu-tuned`), whose fused-stream tensors this does not take.
//!
//! # Shapes
//! - scores `e`: `[batch, src]`, values: `[batch, src, d]` → `[c | α]`: `[batch, d + src]`

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

use crate::cube_launch::{empty, launch_dims};

/// Softmax and context as a burn backend extension (cubecl runtimes without fusion).
#[backend_extension(Cube, Autodiff)]
pub trait GpuAttend: burn::backend::Backend {
    /// `[c | α]` (`[batch, d + src]`) from masked scores `[batch, src]` and values
    /// `[batch, src, d]`.
    fn gpu_attend(scores: FloatTensor<Self>, values: FloatTensor<Self>) -> FloatTensor<Self>;
}

/// Row `b`'s softmax: its maximum score and `Σ exp(e − max)`.
#[derive(CubeType)]
struct Softmax {
    at: usize,
    m: f32,
    z: f32,
}

/// Each thread recomputes its row's maximum and sum (`src` is short).
#[cube]
fn softmax(e: &[f32], b: usize, src: usize) -> Softmax {
    let at = b * src;
    let mut m = e[at];
    for i in 1..src {
        m = select(e[at + i] > m, e[at + i], m);
    }
    let mut z = 0.0f32;
    for i in 0..src {
        z += f32::exp(e[at + i] - m);
    }
    Softmax { at, m, z }
}

/// One thread per `(b, k)`, `k < max(d, src)`: `c[b, k]` for `k < d`, `α[b, k]` for `k < src`
/// (into `out` and into `weights`, what the backward keeps).
#[cube(launch)]
fn attend_forward(e: &[f32], values: &[f32], out: &mut [f32], weights: &mut [f32], src: u32, d: u32) {
    let (src, d) = (src as usize, d as usize);
    let width = select(d > src, d, src);
    let n = ABSOLUTE_POS;
    let batch = e.len() / src;
    if n < batch * width {
        let (b, k) = (n / width, n % width);
        let sm = softmax(e, b, src);
        if k < d {
            let mut c = 0.0f32;
            for j in 0..src {
                c += f32::exp(e[sm.at + j] - sm.m) * values[(b * src + j) * d + k];
            }
            out[b * (d + src) + k] = c / sm.z;
        }
        if k < src {
            let a = f32::exp(e[sm.at + k] - sm.m) / sm.z;
            out[b * (d + src) + d + k] = a;
            weights[b * src + k] = a;
        }
    }
}

/// One thread per `(b, j)`: `∂α'ⱼ = ∂αⱼ + ∂c · vⱼ`.
#[cube(launch)]
fn attend_backward_alpha(grad: &[f32], values: &[f32], d_alpha: &mut [f32], src: u32, d: u32) {
    let (src, d) = (src as usize, d as usize);
    let n = ABSOLUTE_POS;
    if n < d_alpha.len() {
        let (b, j) = (n / src, n % src);
        let g = b * (d + src);
        let mut s = grad[g + d + j];
        for k in 0..d {
            s += grad[g + k] * values[n * d + k];
        }
        d_alpha[n] = s;
    }
}

/// One thread per `(b, j, k)`: `∂v[b, j, k] = αⱼ ∂c[b, k]`, and at `k = 0` also
/// `∂eⱼ = αⱼ (∂α'ⱼ − Σᵢ αᵢ ∂α'ᵢ)`.
#[cube(launch)]
fn attend_backward_inputs(
    grad: &[f32],
    weights: &[f32],
    d_alpha: &[f32],
    d_scores: &mut [f32],
    d_values: &mut [f32],
    src: u32,
    d: u32,
) {
    let (src, d) = (src as usize, d as usize);
    let n = ABSOLUTE_POS;
    if n < d_values.len() {
        let (row, k) = (n / d, n % d);
        let b = row / src;
        let a = weights[row];
        d_values[n] = a * grad[b * (d + src) + k];
        if k == 0 {
            let mut s = 0.0f32;
            for i in 0..src {
                s += weights[b * src + i] * d_alpha[b * src + i];
            }
            d_scores[row] = a * (d_alpha[row] - s);
        }
    }
}

/// `(batch, src, d)`, checked.
fn dims(scores: &CubeTensor, values: &CubeTensor) -> (usize, usize, usize) {
    let (es, vs) = (scores.meta.shape(), values.meta.shape());
    assert!(
        es.num_dims() == 2
            && vs.num_dims() == 3
            && es[0] == vs[0]
            && es[1] == vs[1]
            && es[1] > 0
            && vs[2] > 0,
        "attention: scores [B, S] and values [B, S, D] disagree"
    );
    assert!(scores.dtype == DType::F32 && values.dtype == DType::F32, "the attention kernels compute in f32");
    (vs[0], vs[1], vs[2])
}

/// `[c | α]` and `α` alone.
fn forward(scores: CubeTensor, values: CubeTensor) -> (CubeTensor, CubeTensor) {
    let (batch, src, d) = dims(&scores, &values);
    let (scores, values) = (into_contiguous(scores), into_contiguous(values));
    let out = empty(&values, [batch, d + src]);
    let weights = empty(&values, [batch, src]);
    let (count, dim) = launch_dims(&values, batch * d.max(src));
    attend_forward::launch(
        &values.client.clone(),
        count,
        dim,
        scores.into_buffer_arg(),
        values.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        weights.clone().into_buffer_arg(),
        src as u32,
        d as u32,
    );
    (out, weights)
}

/// `(∂e, ∂v)` from the gradient of `[c | α]`.
fn backward(weights: CubeTensor, values: CubeTensor, grad: CubeTensor) -> (CubeTensor, CubeTensor) {
    let vs = values.meta.shape();
    let (batch, src, d) = (vs[0], vs[1], vs[2]);
    let grad = into_contiguous(grad);
    let d_alpha = empty(&values, [batch, src]);
    let (count, dim) = launch_dims(&values, batch * src);
    attend_backward_alpha::launch(
        &values.client.clone(),
        count,
        dim,
        grad.clone().into_buffer_arg(),
        values.clone().into_buffer_arg(),
        d_alpha.clone().into_buffer_arg(),
        src as u32,
        d as u32,
    );
    let (d_scores, d_values) = (empty(&values, [batch, src]), empty(&values, [batch, src, d]));
    let (count, dim) = launch_dims(&values, batch * src * d);
    attend_backward_inputs::launch(
        &values.client.clone(),
        count,
        dim,
        grad.into_buffer_arg(),
        weights.into_buffer_arg(),
        d_alpha.into_buffer_arg(),
        d_scores.clone().into_buffer_arg(),
        d_values.clone().into_buffer_arg(),
        src as u32,
        d as u32,
    );
    (d_scores, d_values)
}

impl GpuAttend for CubeBackend {
    fn gpu_attend(scores: CubeTensor, values: CubeTensor) -> CubeTensor {
        forward(scores, values).0
    }
}

impl<C: CheckpointStrategy> GpuAttend for Autodiff<CubeBackend, C> {
    fn gpu_attend(scores: FloatTensor<Self>, values: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct AttendBackward;

        impl Backward<CubeBackend, 2> for AttendBackward {
            /// `α` and the values.
            type State = (CubeTensor, CubeTensor);

            fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
                let [node_scores, node_values] = ops.parents;
                let grad = grads.consume::<CubeBackend>(&ops.node);
                let (weights, values) = ops.state;
                let (d_scores, d_values) = backward(weights, values, grad);
                if let Some(node) = node_scores {
                    grads.register::<CubeBackend>(node.id, d_scores);
                }
                if let Some(node) = node_values {
                    grads.register::<CubeBackend>(node.id, d_values);
                }
            }
        }

        let (e, e_node) = scores.into_parts();
        let (v, v_node) = values.into_parts();
        match AttendBackward.prepare::<C>([e_node, v_node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let v = into_contiguous(v);
                let (out, weights) = forward(e, v.clone());
                prep.finish((weights, v), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(forward(e, v).0),
        }
    }
}

/// Softmax of `masked` scores `[batch, src]` (padding at `−∞`) and the weighted sum of
/// `values` `[batch, src, d]` on a cubecl device (not flex; not with `gpu-tuned`): (context
/// `[batch, d]`, weights `[batch, src]`).
pub fn attend(masked: Tensor<2>, values: &Tensor<3>) -> (Tensor<2>, Tensor<2>) {
    let [_, src, d] = values.dims();
    let out = Tensor::<2>::from_dispatch(<Dispatch as GpuAttend>::gpu_attend(
        masked.into_dispatch(),
        values.clone().into_dispatch(),
    ));
    (out.clone().narrow(1, 0, d), out.narrow(1, d, src))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::{Bool, Distribution, TensorData};

    /// The kernels equal the composed softmax and weighted sum on wgpu (lavapipe where there
    /// is no GPU): context and weights, and the gradients of a random linear function of both
    /// with respect to the scores and the values; with padding, for `d` below and above
    /// `src`, and without autodiff.
    #[test]
    fn kernels_equal_the_composed_operations_on_wgpu() {
        let Some(plain) = crate::test_support::wgpu_or_skip() else { return };
        let ad = plain.clone().autodiff();
        for (batch, src, d) in [(3, 7, 5), (2, 4, 19)] {
            let normal = |dims: &[usize], s: f64| -> Vec<f32> {
                Tensor::<1>::random([dims.iter().product::<usize>()], Distribution::Normal(0.0, s), &plain)
                    .into_data()
                    .try_to_vec::<f32>()
                    .unwrap()
            };
            let (e, v) = (normal(&[batch, src], 2.0), normal(&[batch, src, d], 1.0));
            let (wc, ww) = (normal(&[batch, d], 1.0), normal(&[batch, src], 1.0));
            // Row 0 is whole, the others lose their last 1, 2, … positions.
            let pad: Vec<bool> = (0..batch * src).map(|i| i % src >= src - i / src).collect();
            let run = |gpu: bool| {
                let t2 = |v: &[f32], dims: [usize; 2]| {
                    Tensor::<2>::from_data(TensorData::new(v.to_vec(), dims), &ad)
                };
                let e = t2(&e, [batch, src]).require_grad();
                let v =
                    Tensor::<3>::from_data(TensorData::new(v.clone(), [batch, src, d]), &ad).require_grad();
                let pad = Tensor::<2, Bool>::from_data(TensorData::new(pad.clone(), [batch, src]), &ad);
                let masked = e.clone().mask_fill(pad, f32::NEG_INFINITY);
                let (c, w) = if gpu { attend(masked, &v) } else { super::super::attend_composed(masked, &v) };
                let loss =
                    (c.clone() * t2(&wc, [batch, d])).sum() + (w.clone() * t2(&ww, [batch, src])).sum();
                let g = loss.backward();
                (c.inner(), w.inner(), e.grad(&g).unwrap(), v.grad(&g).unwrap())
            };
            let (c1, w1, de1, dv1) = run(true);
            let (c2, w2, de2, dv2) = run(false);
            let at = format!("batch {batch}, src {src}, d {d}");
            assert!(max_diff(c1, c2) < 1e-5, "context, {at}");
            assert!(max_diff(w1, w2) < 1e-6, "weights, {at}");
            assert!(max_diff(de1, de2) < 1e-5, "∂scores, {at}");
            assert!(max_diff(dv1, dv2) < 1e-5, "∂values, {at}");
            let e = Tensor::<2>::from_data(TensorData::new(e, [batch, src]), &plain);
            let v = Tensor::<3>::from_data(TensorData::new(v, [batch, src, d]), &plain);
            let (c1, _) = attend(e.clone(), &v);
            let (c2, _) = super::super::attend_composed(e, &v);
            assert!(max_diff(c1, c2) < 1e-5, "no autodiff, {at}");
        }
    }
}
