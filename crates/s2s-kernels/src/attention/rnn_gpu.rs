//! The recurrent decoders' attention as cubecl kernels (wgpu), forward and backward: the
//! masked softmax and context (Bahdanau et al., 2015, eq. 5–6), and Bahdanau's additive
//! scores `eⱼ = vᵀ tanh(kⱼ + q)` (eq. 6: one launch forward for ~3 composed, three backward
//! for ~6). The softmax and context:
//!
//! `α = softmax(e + m)` over source positions (`m` the additive key mask: 0 on real
//! positions, `−∞` on padding, added inside the kernel), `c = Σⱼ αⱼ vⱼ`;
//! and back, from `∂c` and `∂α`: `∂α'ⱼ = ∂αⱼ + ∂c · vⱼ`, `∂eⱼ = αⱼ (∂α'ⱼ − Σₖ αₖ ∂α'ₖ)`,
//! `∂vⱼ = αⱼ ∂c`.
//!
//! Composed, this is ~7 tensor operations forward (softmax's maximum, difference, `exp`, sum
//! and quotient; the weighted sum's product and reduction) and ~10 backward, at every decoder
//! step; on a GPU through wgpu each costs ~28 µs of host time (measured on an H100). Here it is
//! one launch forward and two backward. Not with burn's fusion
//! (`gpu-tuned`), whose fused-stream tensors this does not take.
//!
//! The scores are one node each. Bahdanau's ([`additive_scores`]): one launch forward (a
//! thread a score) and three backward (`∂keys` a thread an element, `∂q` a query unit, `∂v`
//! an attention unit, `tanh` recomputed), where the composed broadcast sum, `tanh` and product
//! with `v` were ~9. Luong's dot and general scores ([`dot_scores`]): one launch forward and
//! two backward (`∂keys` an element, `∂q` a query unit), where a broadcast product and a
//! reduction forward and ~6 operations back were.
//!
//! The context and the weights are two autodiff nodes, `α` a child of `c` (`gpu::second_output`),
//! so `c` must reach the loss wherever `α` does, as in every model here (the weights reach
//! no loss at all).
//!
//! # Shapes
//! - scores `e`: `[batch, src]`, values: `[batch, src, d]` → `c`: `[batch, d]`, `α`:
//!   `[batch, src]`

use std::sync::Arc;

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::{Dispatch, backend_extension, tensor::FloatTensor};
use burn::tensor::{DType, Tensor};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::cube;
use cubecl::prelude::*;

use crate::gemm::deferred_grad::Part;
use crate::gpu::launch::{empty, launch_dims};
use crate::gpu::second_output::{SecondGrad, second_output};
use crate::own_backward::WithBackward;

/// Softmax and context as a burn backend extension (cubecl runtimes without fusion).
#[backend_extension(Cube, Autodiff)]
pub trait GpuAttend: burn::backend::Backend {
    /// `(c, α)` (`[batch, d]`, `[batch, src]`) from scores `[batch, src]`, the additive key
    /// mask `[batch, src]` (no gradient) and values `[batch, src, d]` (two nodes with
    /// autodiff: see the module doc).
    fn gpu_attend(
        scores: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        values: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// Bahdanau's scores `e[b, j] = Σₐ v[a] tanh(keys[b, j, a] + q[b, a])` (`[batch, src]`)
    /// from `q` `[batch, A]`, `keys` `[batch, src, A]`, `v` `[A, 1]`.
    fn gpu_additive_scores(
        q: FloatTensor<Self>,
        keys: FloatTensor<Self>,
        v: FloatTensor<Self>,
    ) -> FloatTensor<Self>;

    /// Luong's dot and general scores `e[b, j] = keys[b, j, :] · q[b, :]` (`[batch, src]`)
    /// from `q` `[batch, A]` and `keys` `[batch, src, A]` (for `general`, `W_a` already
    /// applied to the keys).
    fn gpu_dot_scores(q: FloatTensor<Self>, keys: FloatTensor<Self>) -> FloatTensor<Self>;
}

/// Row `b`'s softmax: its maximum score and `Σ exp(e − max)`.
#[derive(CubeType)]
struct Softmax {
    at: usize,
    m: f32,
    z: f32,
}

/// Each thread recomputes its row's maximum and sum (`src` is short) of the masked scores
/// `e + mask`.
#[cube]
fn softmax(e: &[f32], mask: &[f32], b: usize, src: usize) -> Softmax {
    let at = b * src;
    let mut m = e[at] + mask[at];
    for i in 1..src {
        let x = e[at + i] + mask[at + i];
        m = select(x > m, x, m);
    }
    let mut z = 0.0f32;
    for i in 0..src {
        z += f32::exp(e[at + i] + mask[at + i] - m);
    }
    Softmax { at, m, z }
}

/// One thread per `(b, k)`, `k < max(d, src)`: `c[b, k]` for `k < d`, `α[b, k]` for `k < src`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn attend_forward(
    e: &[f32],
    mask: &[f32],
    values: &[f32],
    ctx: &mut [f32],
    weights: &mut [f32],
    src: u32,
    d: u32,
) {
    let (src, d) = (src as usize, d as usize);
    let width = select(d > src, d, src);
    let n = ABSOLUTE_POS;
    let batch = e.len() / src;
    if n < batch * width {
        let (b, k) = (n / width, n % width);
        let sm = softmax(e, mask, b, src);
        if k < d {
            let mut c = 0.0f32;
            for j in 0..src {
                c += f32::exp(e[sm.at + j] + mask[sm.at + j] - sm.m) * values[(b * src + j) * d + k];
            }
            ctx[b * d + k] = c / sm.z;
        }
        if k < src {
            weights[b * src + k] = f32::exp(e[sm.at + k] + mask[sm.at + k] - sm.m) / sm.z;
        }
    }
}

/// One thread per `(b, j)`: `∂α'ⱼ = ∂αⱼ + ∂c · vⱼ` (`∂α` zero without `has_da`, when `α`
/// reached no loss; `da` is then not read).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn attend_backward_alpha(
    dc: &[f32],
    da: &[f32],
    values: &[f32],
    d_alpha: &mut [f32],
    src: u32,
    d: u32,
    #[comptime] has_da: bool,
) {
    let (src, d) = (src as usize, d as usize);
    let n = ABSOLUTE_POS;
    if n < d_alpha.len() {
        let b = n / src;
        let mut s = 0.0f32;
        if has_da {
            s = da[n];
        }
        for k in 0..d {
            s += dc[b * d + k] * values[n * d + k];
        }
        d_alpha[n] = s;
    }
}

/// One thread per `(b, j, k)`: `∂v[b, j, k] = αⱼ ∂c[b, k]`, and at `k = 0` also
/// `∂eⱼ = αⱼ (∂α'ⱼ − Σᵢ αᵢ ∂α'ᵢ)`.
#[cube(launch)]
fn attend_backward_inputs(
    dc: &[f32],
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
        d_values[n] = a * dc[b * d + k];
        if k == 0 {
            let mut s = 0.0f32;
            for i in 0..src {
                s += weights[b * src + i] * d_alpha[b * src + i];
            }
            d_scores[row] = a * (d_alpha[row] - s);
        }
    }
}

/// One thread per `(b, j)`: `e[b, j] = Σₐ v[a] tanh(keys[b, j, a] + q[b, a])`.
#[cube(launch)]
fn additive_forward(q: &[f32], keys: &[f32], v: &[f32], e: &mut [f32], src: u32) {
    let n = ABSOLUTE_POS;
    if n < e.len() {
        let a_n = v.len();
        let b = n / src as usize;
        let mut s = 0.0f32;
        for a in 0..a_n {
            s += v[a] * f32::tanh(keys[n * a_n + a] + q[b * a_n + a]);
        }
        e[n] = s;
    }
}

/// One thread per `(b, j, a)`: `∂keys = ∂e · v[a] (1 − t²)`, `t = tanh(keys + q)`.
#[cube(launch)]
fn additive_backward_keys(q: &[f32], keys: &[f32], v: &[f32], de: &[f32], d_keys: &mut [f32], src: u32) {
    let n = ABSOLUTE_POS;
    if n < d_keys.len() {
        let a_n = v.len();
        let (row, a) = (n / a_n, n % a_n);
        let b = row / src as usize;
        let t = f32::tanh(keys[n] + q[b * a_n + a]);
        d_keys[n] = de[row] * v[a] * (1.0 - t * t);
    }
}

/// One thread per `(b, a)`: `∂q = Σⱼ ∂keys[b, j, a]`.
#[cube(launch)]
fn additive_backward_query(q: &[f32], keys: &[f32], v: &[f32], de: &[f32], d_q: &mut [f32], src: u32) {
    let n = ABSOLUTE_POS;
    if n < d_q.len() {
        let (a_n, src) = (v.len(), src as usize);
        let (b, a) = (n / a_n, n % a_n);
        let mut s = 0.0f32;
        for j in 0..src {
            let t = f32::tanh(keys[(b * src + j) * a_n + a] + q[n]);
            s += de[b * src + j] * (1.0 - t * t);
        }
        d_q[n] = s * v[a];
    }
}

/// One thread per `a`: `∂v[a] = Σ_{b, j} ∂e[b, j] tanh(keys[b, j, a] + q[b, a])`.
#[cube(launch)]
fn additive_backward_v(q: &[f32], keys: &[f32], de: &[f32], d_v: &mut [f32], src: u32) {
    let a = ABSOLUTE_POS;
    let a_n = d_v.len();
    if a < a_n {
        let src = src as usize;
        let mut s = 0.0f32;
        for row in 0..de.len() {
            s += de[row] * f32::tanh(keys[row * a_n + a] + q[(row / src) * a_n + a]);
        }
        d_v[a] = s;
    }
}

/// One thread per `(b, j)`: `e[b, j] = Σₐ keys[b, j, a] q[b, a]`.
#[cube(launch)]
fn dot_forward(q: &[f32], keys: &[f32], e: &mut [f32], src: u32) {
    let n = ABSOLUTE_POS;
    if n < e.len() {
        let a_n = keys.len() / e.len();
        let b = n / src as usize;
        let mut s = 0.0f32;
        for a in 0..a_n {
            s += keys[n * a_n + a] * q[b * a_n + a];
        }
        e[n] = s;
    }
}

/// One thread per `(b, j, a)`: `∂keys[b, j, a] = ∂e[b, j] q[b, a]`.
#[cube(launch)]
fn dot_backward_keys(q: &[f32], de: &[f32], d_keys: &mut [f32], src: u32) {
    let n = ABSOLUTE_POS;
    if n < d_keys.len() {
        let a_n = d_keys.len() / de.len();
        let row = n / a_n;
        d_keys[n] = de[row] * q[(row / src as usize) * a_n + n % a_n];
    }
}

/// One thread per `(b, a)`: `∂q[b, a] = Σⱼ ∂e[b, j] keys[b, j, a]`.
#[cube(launch)]
fn dot_backward_query(keys: &[f32], de: &[f32], d_q: &mut [f32], src: u32) {
    let n = ABSOLUTE_POS;
    if n < d_q.len() {
        let src = src as usize;
        let a_n = keys.len() / de.len();
        let (b, a) = (n / a_n, n % a_n);
        let mut s = 0.0f32;
        for j in 0..src {
            s += de[b * src + j] * keys[(b * src + j) * a_n + a];
        }
        d_q[n] = s;
    }
}

/// `(batch, src, A)` of a dot-score call, checked.
fn dot_dims(q: &CubeTensor, keys: &CubeTensor) -> (usize, usize, usize) {
    let (qs, ks) = (q.meta.shape(), keys.meta.shape());
    assert!(
        qs.num_dims() == 2
            && ks.num_dims() == 3
            && qs[0] == ks[0]
            && qs[1] == ks[2]
            && ks[1] > 0
            && qs[1] > 0,
        "dot scores: q [B, A] and keys [B, S, A] disagree"
    );
    assert!(q.dtype == DType::F32 && keys.dtype == DType::F32, "the attention kernels compute in f32");
    (ks[0], ks[1], ks[2])
}

fn dot_forward_call(q: CubeTensor, keys: CubeTensor) -> CubeTensor {
    let (batch, src, _) = dot_dims(&q, &keys);
    let (q, keys) = (into_contiguous(q), into_contiguous(keys));
    let e = empty(&q, [batch, src]);
    let (count, dim) = launch_dims(&q, batch * src);
    dot_forward::launch(
        &q.client.clone(),
        count,
        dim,
        q.into_buffer_arg(),
        keys.into_buffer_arg(),
        e.clone().into_buffer_arg(),
        src as u32,
    );
    e
}

/// `(∂q, ∂keys)` from `∂e`; the inputs contiguous.
fn dot_backward_call(q: CubeTensor, keys: CubeTensor, de: CubeTensor) -> [CubeTensor; 2] {
    let (batch, src, a_n) = dot_dims(&q, &keys);
    let de = into_contiguous(de);
    let client = q.client.clone();
    let d_keys = empty(&q, [batch, src, a_n]);
    let (count, dim) = launch_dims(&q, batch * src * a_n);
    dot_backward_keys::launch(
        &client,
        count,
        dim,
        q.clone().into_buffer_arg(),
        de.clone().into_buffer_arg(),
        d_keys.clone().into_buffer_arg(),
        src as u32,
    );
    let d_q = empty(&q, [batch, a_n]);
    let (count, dim) = launch_dims(&q, batch * a_n);
    dot_backward_query::launch(
        &client,
        count,
        dim,
        keys.into_buffer_arg(),
        de.into_buffer_arg(),
        d_q.clone().into_buffer_arg(),
        src as u32,
    );
    [d_q, d_keys]
}

/// `(batch, src, A)` of an additive-score call, checked.
fn additive_dims(q: &CubeTensor, keys: &CubeTensor, v: &CubeTensor) -> (usize, usize, usize) {
    let (qs, ks) = (q.meta.shape(), keys.meta.shape());
    assert!(
        qs.num_dims() == 2 && ks.num_dims() == 3 && qs[0] == ks[0] && qs[1] == ks[2] && ks[1] > 0,
        "additive scores: q [B, A] and keys [B, S, A] disagree"
    );
    assert_eq!(v.meta.num_elements(), qs[1], "additive scores: v must be [A, 1]");
    assert!([q, keys, v].iter().all(|t| t.dtype == DType::F32), "the attention kernels compute in f32");
    (ks[0], ks[1], ks[2])
}

fn additive_forward_call(q: CubeTensor, keys: CubeTensor, v: CubeTensor) -> CubeTensor {
    let (batch, src, _) = additive_dims(&q, &keys, &v);
    let (q, keys, v) = (into_contiguous(q), into_contiguous(keys), into_contiguous(v));
    let e = empty(&q, [batch, src]);
    let (count, dim) = launch_dims(&q, batch * src);
    additive_forward::launch(
        &q.client.clone(),
        count,
        dim,
        q.into_buffer_arg(),
        keys.into_buffer_arg(),
        v.into_buffer_arg(),
        e.clone().into_buffer_arg(),
        src as u32,
    );
    e
}

/// `(∂q, ∂keys, ∂v)` from `∂e`; the inputs contiguous.
fn additive_backward_call(q: CubeTensor, keys: CubeTensor, v: CubeTensor, de: CubeTensor) -> [CubeTensor; 3] {
    let (batch, src, a_n) = additive_dims(&q, &keys, &v);
    let de = into_contiguous(de);
    let client = q.client.clone();
    let d_keys = empty(&q, [batch, src, a_n]);
    let (count, dim) = launch_dims(&q, batch * src * a_n);
    additive_backward_keys::launch(
        &client,
        count,
        dim,
        q.clone().into_buffer_arg(),
        keys.clone().into_buffer_arg(),
        v.clone().into_buffer_arg(),
        de.clone().into_buffer_arg(),
        d_keys.clone().into_buffer_arg(),
        src as u32,
    );
    let d_q = empty(&q, [batch, a_n]);
    let (count, dim) = launch_dims(&q, batch * a_n);
    additive_backward_query::launch(
        &client,
        count,
        dim,
        q.clone().into_buffer_arg(),
        keys.clone().into_buffer_arg(),
        v.clone().into_buffer_arg(),
        de.clone().into_buffer_arg(),
        d_q.clone().into_buffer_arg(),
        src as u32,
    );
    let d_v = empty(&q, v.meta.shape().clone());
    let (count, dim) = launch_dims(&q, a_n);
    additive_backward_v::launch(
        &client,
        count,
        dim,
        q.into_buffer_arg(),
        keys.into_buffer_arg(),
        de.into_buffer_arg(),
        d_v.clone().into_buffer_arg(),
        src as u32,
    );
    [d_q, d_keys, d_v]
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

/// `(c, α)`.
fn forward(scores: CubeTensor, mask: CubeTensor, values: CubeTensor) -> (CubeTensor, CubeTensor) {
    let (batch, src, d) = dims(&scores, &values);
    let ms = mask.meta.shape();
    assert!(
        ms.num_dims() == 2 && [ms[0], ms[1]] == [batch, src] && mask.dtype == DType::F32,
        "attention: the key mask is not f32 [B, S]"
    );
    let (scores, mask, values) = (into_contiguous(scores), into_contiguous(mask), into_contiguous(values));
    let (ctx, weights) = (empty(&values, [batch, d]), empty(&values, [batch, src]));
    let (count, dim) = launch_dims(&values, batch * d.max(src));
    attend_forward::launch(
        &values.client.clone(),
        count,
        dim,
        scores.into_buffer_arg(),
        mask.into_buffer_arg(),
        values.into_buffer_arg(),
        ctx.clone().into_buffer_arg(),
        weights.clone().into_buffer_arg(),
        src as u32,
        d as u32,
    );
    (ctx, weights)
}

/// `(∂e, ∂v)` from `∂c` and, when `α` reached the loss, `∂α`.
fn backward(
    weights: CubeTensor,
    values: CubeTensor,
    dc: CubeTensor,
    da: Option<CubeTensor>,
) -> (CubeTensor, CubeTensor) {
    let vs = values.meta.shape();
    let (batch, src, d) = (vs[0], vs[1], vs[2]);
    let dc = into_contiguous(dc);
    let has_da = da.is_some();
    // Without `∂α` the kernel reads no `da`; `dc` fills its binding.
    let da = da.map_or_else(|| dc.clone(), into_contiguous);
    let d_alpha = empty(&values, [batch, src]);
    let (count, dim) = launch_dims(&values, batch * src);
    attend_backward_alpha::launch(
        &values.client.clone(),
        count,
        dim,
        dc.clone().into_buffer_arg(),
        da.into_buffer_arg(),
        values.clone().into_buffer_arg(),
        d_alpha.clone().into_buffer_arg(),
        src as u32,
        d as u32,
        has_da,
    );
    let (d_scores, d_values) = (empty(&values, [batch, src]), empty(&values, [batch, src, d]));
    let (count, dim) = launch_dims(&values, batch * src * d);
    attend_backward_inputs::launch(
        &values.client.clone(),
        count,
        dim,
        dc.into_buffer_arg(),
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
    fn gpu_attend(scores: CubeTensor, mask: CubeTensor, values: CubeTensor) -> (CubeTensor, CubeTensor) {
        forward(scores, mask, values)
    }

    fn gpu_additive_scores(q: CubeTensor, keys: CubeTensor, v: CubeTensor) -> CubeTensor {
        additive_forward_call(q, keys, v)
    }

    fn gpu_dot_scores(q: CubeTensor, keys: CubeTensor) -> CubeTensor {
        dot_forward_call(q, keys)
    }
}

impl<C: CheckpointStrategy> GpuAttend for Autodiff<CubeBackend, C> {
    fn gpu_attend(
        scores: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        values: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        // A constant: no gradient.
        let mask = mask.into_primitive();
        let mut second = None;
        let ctx = Self::with_deferrable_backward(
            [scores, values],
            // The values' gradient waits when they are deferred (the memory every step reads).
            [false, true],
            |[e, v], keep| {
                if !keep {
                    let (ctx, weights) = forward(e, mask, v);
                    second = Some((Arc::default(), weights));
                    return (ctx, None);
                }
                let v = into_contiguous(v);
                let (ctx, weights) = forward(e, mask, v.clone());
                let slot = Arc::new(SecondGrad::default());
                second = Some((slot.clone(), weights.clone()));
                // `α`, the values, and where `∂α` arrives.
                (ctx, Some((weights, v, slot)))
            },
            |(weights, values, slot): (CubeTensor, CubeTensor, Arc<SecondGrad>), dc, _| {
                let (d_scores, d_values) = backward(weights, values, dc, slot.take());
                [Some(Part::Whole(d_scores)), Some(Part::Whole(d_values))]
            },
        );
        let (slot, weights) = second.expect("the forward ran");
        let weights = second_output::<C>(&ctx, slot, weights);
        (ctx, weights)
    }

    fn gpu_additive_scores(
        q: FloatTensor<Self>,
        keys: FloatTensor<Self>,
        v: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        Self::with_deferrable_backward(
            [q, keys, v],
            // `∂keys` and `∂v` wait when deferred: every decoder step reads them.
            [false, true, true],
            |[q, keys, v], keep| {
                if !keep {
                    return (additive_forward_call(q, keys, v), None);
                }
                // `q`, `keys` and `v`, contiguous; `tanh` is recomputed.
                let (q, keys, v) = (into_contiguous(q), into_contiguous(keys), into_contiguous(v));
                (additive_forward_call(q.clone(), keys.clone(), v.clone()), Some((q, keys, v)))
            },
            |(q, keys, v), de, _| additive_backward_call(q, keys, v, de).map(|g| Some(Part::Whole(g))),
        )
    }

    fn gpu_dot_scores(q: FloatTensor<Self>, keys: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::with_deferrable_backward(
            [q, keys],
            // `∂keys` waits when deferred: every decoder step reads them.
            [false, true],
            |[q, keys], keep| {
                if !keep {
                    return (dot_forward_call(q, keys), None);
                }
                let (q, keys) = (into_contiguous(q), into_contiguous(keys));
                (dot_forward_call(q.clone(), keys.clone()), Some((q, keys)))
            },
            |(q, keys), de, _| dot_backward_call(q, keys, de).map(|g| Some(Part::Whole(g))),
        )
    }
}

/// Softmax of `scores + mask` (`[batch, src]`; `mask` additive, `−∞` on padding, no
/// gradient) and the weighted sum of `values` `[batch, src, d]` on a cubecl device (not flex;
/// not with `gpu-tuned`): (context `[batch, d]`, weights `[batch, src]`).
pub fn attend(scores: Tensor<2>, mask: &Tensor<2>, values: &Tensor<3>) -> (Tensor<2>, Tensor<2>) {
    let (c, a) = <Dispatch as GpuAttend>::gpu_attend(
        scores.into_dispatch(),
        mask.clone().into_dispatch(),
        values.clone().into_dispatch(),
    );
    (Tensor::from_dispatch(c), Tensor::from_dispatch(a))
}

/// Bahdanau's scores `vᵀ tanh(keys + q)` on a cubecl device (not flex; not with `gpu-tuned`):
/// `q` `[batch, A]`, `keys` `[batch, src, A]`, `v` `[A, 1]` → `[batch, src]`.
pub fn additive_scores(q: Tensor<2>, keys: &Tensor<3>, v: Tensor<2>) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as GpuAttend>::gpu_additive_scores(
        q.into_dispatch(),
        keys.clone().into_dispatch(),
        v.into_dispatch(),
    ))
}

/// Luong's dot and general scores `keys · q` on a cubecl device (not flex; not with
/// `gpu-tuned`): `q` `[batch, A]`, `keys` `[batch, src, A]` → `[batch, src]`.
pub fn dot_scores(q: Tensor<2>, keys: &Tensor<3>) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as GpuAttend>::gpu_dot_scores(
        q.into_dispatch(),
        keys.clone().into_dispatch(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::{Bool, Distribution, TensorData};

    /// The kernels, given the additive key mask, equal the composed masked softmax and
    /// weighted sum on wgpu (lavapipe where there is no GPU): context and weights, and the gradients of a random linear function of both
    /// (and of the context alone, where the weights reach no loss) with respect to the scores
    /// and the values; with padding, for `d` below and above `src`, and without autodiff.
    #[test]
    fn kernels_equal_the_composed_operations_on_wgpu() {
        let Some(plain) = crate::testing::wgpu_or_skip() else { return };
        let ad = plain.clone().autodiff();
        // α = softmax(e), c = Σⱼ αⱼ vⱼ: (context, weights).
        let composed = |e: Tensor<2>, v: &Tensor<3>| {
            let w = burn::tensor::activation::softmax(e, 1);
            ((w.clone().unsqueeze_dim::<3>(2) * v.clone()).sum_dim(1).squeeze_dim::<2>(1), w)
        };
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
            for with_weights in [true, false] {
                let run = |gpu: bool| {
                    let t2 = |v: &[f32], dims: [usize; 2]| {
                        Tensor::<2>::from_data(TensorData::new(v.to_vec(), dims), &ad)
                    };
                    let e = t2(&e, [batch, src]).require_grad();
                    let v = Tensor::<3>::from_data(TensorData::new(v.clone(), [batch, src, d]), &ad)
                        .require_grad();
                    let pad = Tensor::<2, Bool>::from_data(TensorData::new(pad.clone(), [batch, src]), &ad);
                    let (c, w) = if gpu {
                        let mask = Tensor::<2>::zeros([batch, src], &ad).mask_fill(pad, f32::NEG_INFINITY);
                        attend(e.clone(), &mask, &v)
                    } else {
                        composed(e.clone().mask_fill(pad, f32::NEG_INFINITY), &v)
                    };
                    let mut loss = (c.clone() * t2(&wc, [batch, d])).sum();
                    if with_weights {
                        loss = loss + (w.clone() * t2(&ww, [batch, src])).sum();
                    }
                    let g = loss.backward();
                    (c.inner(), w.inner(), e.grad(&g).unwrap(), v.grad(&g).unwrap())
                };
                let (c1, w1, de1, dv1) = run(true);
                let (c2, w2, de2, dv2) = run(false);
                let at = format!("batch {batch}, src {src}, d {d}, loss on the weights {with_weights}");
                assert!(max_diff(c1, c2) < 1e-5, "context, {at}");
                assert!(max_diff(w1, w2) < 1e-6, "weights, {at}");
                assert!(max_diff(de1, de2) < 1e-5, "∂scores, {at}");
                assert!(max_diff(dv1, dv2) < 1e-5, "∂values, {at}");
            }
            let e = Tensor::<2>::from_data(TensorData::new(e, [batch, src]), &plain);
            let v = Tensor::<3>::from_data(TensorData::new(v, [batch, src, d]), &plain);
            let (c1, _) = attend(e.clone(), &Tensor::zeros([batch, src], &plain), &v);
            let (c2, _) = composed(e, &v);
            assert!(max_diff(c1, c2) < 1e-5, "no autodiff, batch {batch}, src {src}, d {d}");
        }
    }

    /// Bahdanau's score kernels equal the composed operations on wgpu: scores and the
    /// gradients of a random linear function of them with respect to `q`, the keys and `v`.
    #[test]
    fn additive_scores_equal_the_composed_operations_on_wgpu() {
        let Some(plain) = crate::testing::wgpu_or_skip() else { return };
        let ad = plain.autodiff();
        ad.seed(9);
        let (batch, src, a) = (3, 7, 11);
        let q0 = Tensor::<2>::random([batch, a], Distribution::Normal(0.0, 1.0), &ad);
        let k0 = Tensor::<3>::random([batch, src, a], Distribution::Normal(0.0, 1.0), &ad);
        let v0 = Tensor::<2>::random([a, 1], Distribution::Normal(0.0, 1.0), &ad);
        let r = Tensor::<2>::random([batch, src], Distribution::Normal(0.0, 1.0), &ad);
        let run = |gpu: bool| {
            let (q, k, v) = (q0.clone().require_grad(), k0.clone().require_grad(), v0.clone().require_grad());
            let e = if gpu {
                additive_scores(q.clone(), &k, v.clone())
            } else {
                let h = (k.clone() + q.clone().unsqueeze_dim::<3>(1)).tanh().reshape([batch * src, a]);
                h.matmul(v.clone()).reshape([batch, src])
            };
            let g = (e.clone() * r.clone()).sum().backward();
            (e.inner(), q.grad(&g).unwrap(), k.grad(&g).unwrap(), v.grad(&g).unwrap())
        };
        let ((e1, q1, k1, v1), (e2, q2, k2, v2)) = (run(true), run(false));
        assert!(max_diff(e1, e2) < 1e-5, "scores");
        assert!(max_diff(q1, q2) < 1e-5, "∂q");
        assert!(max_diff(k1, k2) < 1e-5, "∂keys");
        assert!(max_diff(v1, v2) < 1e-4, "∂v");
    }

    /// Luong's dot-score kernels equal the composed operations on wgpu: scores and the
    /// gradients of a random linear function of them with respect to `q` and the keys, with
    /// a width below and above the batch, and without autodiff.
    #[test]
    fn dot_scores_equal_the_composed_operations_on_wgpu() {
        let Some(plain) = crate::testing::wgpu_or_skip() else { return };
        let ad = plain.clone().autodiff();
        ad.seed(4);
        for (batch, src, a) in [(3, 7, 2), (2, 5, 19)] {
            let q0 = Tensor::<2>::random([batch, a], Distribution::Normal(0.0, 1.0), &ad);
            let k0 = Tensor::<3>::random([batch, src, a], Distribution::Normal(0.0, 1.0), &ad);
            let r = Tensor::<2>::random([batch, src], Distribution::Normal(0.0, 1.0), &ad);
            let composed = |q: Tensor<2>, k: &Tensor<3>| {
                (k.clone() * q.unsqueeze_dim::<3>(1)).sum_dim(2).squeeze_dim::<2>(2)
            };
            let run = |gpu: bool| {
                let (q, k) = (q0.clone().require_grad(), k0.clone().require_grad());
                let e = if gpu { dot_scores(q.clone(), &k) } else { composed(q.clone(), &k) };
                let g = (e.clone() * r.clone()).sum().backward();
                (e.inner(), q.grad(&g).unwrap(), k.grad(&g).unwrap())
            };
            let ((e1, q1, k1), (e2, q2, k2)) = (run(true), run(false));
            let at = format!("batch {batch}, src {src}, A {a}");
            assert!(max_diff(e1, e2) < 1e-5, "scores, {at}");
            assert!(max_diff(q1, q2) < 1e-5, "∂q, {at}");
            assert!(max_diff(k1, k2) < 1e-5, "∂keys, {at}");
            let (q, k) = (q0.clone().inner(), k0.clone().inner());
            assert!(max_diff(dot_scores(q.clone(), &k), composed(q, &k)) < 1e-5, "no autodiff, {at}");
        }
    }
}
