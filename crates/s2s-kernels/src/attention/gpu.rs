//! The Transformer's scaled dot-product attention over all heads as cubecl kernels (wgpu):
//! the GPU side of [`crate::attention::fused`]'s backend extension (this module implements
//! [`crate::attention::fused::FusedAttention`] for cubecl), with its equations
//! (Vaswani et al., 2017, eq. 1) and its operands (`[Q | K | V]` or `q` and `[K | V]`, read
//! in place; the output written merged, `[batch, t_q, d_model]`):
//!
//! `P = softmax(s·QKᵀ + M)`, `O = (P ⊙ D) V`; back, from `∂O`: `∂V = (P ⊙ D)ᵀ ∂O`,
//! `∂S = P ⊙ (∂P − rowsum(P ⊙ ∂P))` with `∂P = (∂O Vᵀ) ⊙ D`, `∂Q = s·∂S K`,
//! `∂K = s·∂Sᵀ Q`; the scale `s` is the caller's (`1/√d_k`, or 1 unscaled).
//!
//! Composed from tensor operations (head split and merge, two batched products, scale,
//! mask, softmax, dropout) one attention was ~60 launches forward and backward together; on a
//! GPU through wgpu each costs ~28 µs of host time (measured on an H100), and the Transformer
//! bench shape has 9 attentions (its training step: 1,388 launches composed, 866 with these
//! kernels; docs/benchmarks.md). Here: two launches forward (weights a thread a row; output a
//! thread an element), three backward (`∂S` a thread a row; `∂Q`; `∂K` and `∂V`). The
//! dropout mask `D` is [`crate::dropout::gpu`]'s hash of the seed and the element's index,
//! recomputed in backward, so nothing is stored or drawn on the device (a different stream
//! from the CPU's, which draws it with SplitMix64; both keep each weight with probability
//! `keep`). Not with burn's fusion (`gpu-tuned`).
//!
//! # Shapes
//! - as [`crate::attention::fused`]: self `qkv` `[batch, t, 3·d_model]`; cross `q`
//!   `[batch, t_q, d_model]`, `kv` `[batch, t_k, 2·d_model]`; mask `[batch or 1, 1, t_q or 1,
//!   t_k]` → output `[batch, t_q, d_model]`, weights `[batch, heads, t_q, t_k]`

use burn::tensor::DType;
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::cube;
use cubecl::prelude::*;

use crate::attention::AttentionCall;
use crate::attention::fused::FusedAttention;
use crate::dropout::gpu::mask_in;
use crate::gpu::launch::{empty, launch_dims};

/// The sizes and layout of one call, on the host and as the kernels take them.
#[derive(CubeLaunch, CubeType, Clone, Copy, Debug)]
struct Geometry {
    batch: u32,
    heads: u32,
    tq: u32,
    tk: u32,
    dk: u32,
    /// Row width of the query operand, and of the `[K | V]` one (`3·d_model` for both in
    /// self-attention).
    wq: u32,
    wkv: u32,
    /// Where `K` and `V` start in a row of the `[K | V]` operand.
    ok: u32,
    ov: u32,
    /// Mask strides over sentences and query positions (0 where it broadcasts).
    sb: u32,
    si: u32,
    /// The scores' scale `s` (`1/√d_k`, or 1 unscaled).
    scale: f32,
    /// Dropout: on (1/0), the seed's two halves, the 24-bit keep threshold, `1/keep`.
    drop_on: u32,
    seed_lo: u32,
    seed_hi: u32,
    threshold: u32,
    drop_scale: f32,
    /// The seed's slot in a captured step (`crate::gpu::step_scalars`), else `NO_SLOT`.
    slot: u32,
}

impl Geometry {
    fn arg(&self) -> GeometryLaunch {
        GeometryLaunch::new(
            self.batch,
            self.heads,
            self.tq,
            self.tk,
            self.dk,
            self.wq,
            self.wkv,
            self.ok,
            self.ov,
            self.sb,
            self.si,
            self.scale,
            self.drop_on,
            self.seed_lo,
            self.seed_hi,
            self.threshold,
            self.drop_scale,
            self.slot,
        )
    }
}

/// `D` at element `e` of `[batch, heads, t_q, t_k]` (the seed from `seeds` in a captured step).
#[cube]
fn dropped(g: &Geometry, seeds: &[u32], e: u32) -> f32 {
    let mut d = 1.0f32;
    if g.drop_on != 0 {
        d = mask_in(e, seeds, g.slot, g.seed_lo, g.seed_hi, g.threshold, g.drop_scale);
    }
    d
}

/// One thread per row `((b·heads + h)·t_q + i)`: the scores, then `P` in place.
#[cube(launch)]
fn weights_kernel(q: &[f32], kv: &[f32], mask: &[f32], w: &mut [f32], g: Geometry) {
    let r = ABSOLUTE_POS as u32;
    if r < g.batch * g.heads * g.tq {
        let (bh, i) = (r / g.tq, r % g.tq);
        let (b, h) = (bh / g.heads, bh % g.heads);
        let qrow = ((b * g.tq + i) * g.wq + h * g.dk) as usize;
        let mrow = (b * g.sb + i * g.si) as usize;
        let at = (r * g.tk) as usize;
        for j in 0..g.tk {
            let krow = ((b * g.tk + j) * g.wkv + g.ok + h * g.dk) as usize;
            let mut s = 0.0f32;
            for d in 0..g.dk as usize {
                s += q[qrow + d] * kv[krow + d];
            }
            w[at + j as usize] = s * g.scale + mask[mrow + j as usize];
        }
        let mut m = w[at];
        for j in 1..g.tk as usize {
            m = select(w[at + j] > m, w[at + j], m);
        }
        let mut z = 0.0f32;
        for j in 0..g.tk as usize {
            let e = f32::exp(w[at + j] - m);
            w[at + j] = e;
            z += e;
        }
        for j in 0..g.tk as usize {
            w[at + j] = w[at + j] / z;
        }
    }
}

/// One thread per output element `(b, i, c)`: `O = (P ⊙ D) V`, merged over heads.
#[cube(launch)]
fn output_kernel(kv: &[f32], w: &[f32], out: &mut [f32], seeds: &[u32], g: Geometry) {
    let n = ABSOLUTE_POS as u32;
    let dm = g.heads * g.dk;
    if n < g.batch * g.tq * dm {
        let (bi, c) = (n / dm, n % dm);
        let (b, i) = (bi / g.tq, bi % g.tq);
        let (h, d) = (c / g.dk, c % g.dk);
        let r = (b * g.heads + h) * g.tq + i;
        let mut o = 0.0f32;
        for j in 0..g.tk {
            let e = r * g.tk + j;
            o += w[e as usize]
                * dropped(&g, seeds, e)
                * kv[((b * g.tk + j) * g.wkv + g.ov + h * g.dk + d) as usize];
        }
        out[n as usize] = o;
    }
}

/// One thread per row: `s·∂S` (the scale of the products that follow folded in) from
/// `∂O` (`grad`, `[batch, t_q, d_model]`).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn scores_grad_kernel(kv: &[f32], w: &[f32], grad: &[f32], ds: &mut [f32], seeds: &[u32], g: Geometry) {
    let r = ABSOLUTE_POS as u32;
    if r < g.batch * g.heads * g.tq {
        let (bh, i) = (r / g.tq, r % g.tq);
        let (b, h) = (bh / g.heads, bh % g.heads);
        let grow = ((b * g.tq + i) * g.heads * g.dk + h * g.dk) as usize;
        let at = r * g.tk;
        let mut rsum = 0.0f32;
        for j in 0..g.tk {
            let vrow = ((b * g.tk + j) * g.wkv + g.ov + h * g.dk) as usize;
            let mut dp = 0.0f32;
            for d in 0..g.dk as usize {
                dp += grad[grow + d] * kv[vrow + d];
            }
            let e = at + j;
            let dp = dp * dropped(&g, seeds, e);
            ds[e as usize] = dp;
            rsum += w[e as usize] * dp;
        }
        for j in 0..g.tk {
            let e = (at + j) as usize;
            ds[e] = w[e] * (ds[e] - rsum) * g.scale;
        }
    }
}

/// One thread per element `(b, i, c)` of `∂Q`, written at column `oq` of rows `wq` wide.
#[cube(launch)]
fn query_grad_kernel(kv: &[f32], ds: &[f32], dq: &mut [f32], g: Geometry, wq: u32, oq: u32) {
    let n = ABSOLUTE_POS as u32;
    let dm = g.heads * g.dk;
    if n < g.batch * g.tq * dm {
        let (bi, c) = (n / dm, n % dm);
        let (b, i) = (bi / g.tq, bi % g.tq);
        let h = c / g.dk;
        let r = (b * g.heads + h) * g.tq + i;
        let mut s = 0.0f32;
        for j in 0..g.tk {
            s += ds[(r * g.tk + j) as usize] * kv[((b * g.tk + j) * g.wkv + g.ok + c) as usize];
        }
        dq[(bi * wq + oq + c) as usize] = s;
    }
}

/// One thread per element `(b, j, c)`, `c < 2·d_model`, of `[∂K | ∂V]`, written at columns
/// `ok`, `ov` of rows `wkv` wide.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn key_value_grad_kernel(
    q: &[f32],
    w: &[f32],
    ds: &[f32],
    grad: &[f32],
    dkv: &mut [f32],
    seeds: &[u32],
    g: Geometry,
    wkv: u32,
    ok: u32,
    ov: u32,
) {
    let n = ABSOLUTE_POS as u32;
    let dm = g.heads * g.dk;
    if n < g.batch * g.tk * 2 * dm {
        let (bj, c2) = (n / (2 * dm), n % (2 * dm));
        let (b, j) = (bj / g.tk, bj % g.tk);
        let c = c2 % dm;
        let h = c / g.dk;
        let mut s = 0.0f32;
        if c2 < dm {
            for i in 0..g.tq {
                let e = ((b * g.heads + h) * g.tq + i) * g.tk + j;
                s += ds[e as usize] * q[((b * g.tq + i) * g.wq + c) as usize];
            }
            dkv[(bj * wkv + ok + c) as usize] = s;
        } else {
            for i in 0..g.tq {
                let e = ((b * g.heads + h) * g.tq + i) * g.tk + j;
                s += w[e as usize] * dropped(&g, seeds, e) * grad[((b * g.tq + i) * dm + c) as usize];
            }
            dkv[(bj * wkv + ov + c) as usize] = s;
        }
    }
}

/// One call: the operands (contiguous) and the geometry.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    q: CubeTensor,
    kv: Option<CubeTensor>,
    mask: CubeTensor,
    geo: Geometry,
}

impl Call {
    fn new(
        q: CubeTensor,
        kv: Option<CubeTensor>,
        mask: CubeTensor,
        heads: usize,
        scale: f32,
        drop: (u64, f32),
    ) -> Self {
        let dims3 = |t: &CubeTensor| {
            let s = t.meta.shape();
            assert!(s.num_dims() == 3, "fused attention: operands are [batch, t, width]");
            [s[0], s[1], s[2]]
        };
        let qd = dims3(&q);
        let (batch, tq, tk, dm) = crate::attention::fused::sizes(qd, kv.as_ref().map(dims3), heads);
        let qw = qd[2];
        let ms = mask.meta.shape();
        assert!(ms.num_dims() == 4, "fused attention: mask must be [batch|1, 1, t_q|1, t_k]");
        let md = [ms[0], ms[1], ms[2], ms[3]];
        assert!(
            crate::attention::fused::mask_fits(md, batch, tq, tk),
            "fused attention: mask must be [batch|1, 1, t_q|1, t_k]"
        );
        assert!(
            q.dtype == DType::F32
                && mask.dtype == DType::F32
                && kv.as_ref().is_none_or(|k| k.dtype == DType::F32),
            "the attention kernels compute in f32"
        );
        let (seed, keep) = drop;
        let (wkv, ok, ov) = if kv.is_some() { (2 * dm, 0, dm) } else { (3 * dm, dm, 2 * dm) };
        let geo = Geometry {
            batch: batch as u32,
            heads: heads as u32,
            tq: tq as u32,
            tk: tk as u32,
            dk: (dm / heads) as u32,
            wq: qw as u32,
            wkv: wkv as u32,
            ok: ok as u32,
            ov: ov as u32,
            sb: if md[0] == 1 { 0 } else { (md[2] * md[3]) as u32 },
            si: if md[2] == 1 { 0 } else { md[3] as u32 },
            scale,
            drop_on: (keep < 1.0) as u32,
            seed_lo: seed as u32,
            seed_hi: (seed >> 32) as u32,
            threshold: crate::dropout::mask::threshold(keep),
            drop_scale: 1.0 / keep,
            slot: if keep < 1.0 {
                crate::gpu::step_scalars::slot_of(seed)
            } else {
                crate::gpu::step_scalars::NO_SLOT
            },
        };
        Self { q: into_contiguous(q), kv: kv.map(into_contiguous), mask: into_contiguous(mask), geo }
    }

    /// The `[K | V]` operand (`qkv` itself in self-attention).
    fn kv(&self) -> &CubeTensor {
        self.kv.as_ref().unwrap_or(&self.q)
    }

    fn rows(&self) -> usize {
        (self.geo.batch * self.geo.heads * self.geo.tq) as usize
    }

    fn d_model(&self) -> usize {
        (self.geo.heads * self.geo.dk) as usize
    }

    /// `(output, weights)`.
    fn forward(&self) -> (CubeTensor, CubeTensor) {
        let g = self.geo;
        let (b, h, tq, tk) = (g.batch as usize, g.heads as usize, g.tq as usize, g.tk as usize);
        let w = empty(&self.q, [b, h, tq, tk]);
        let out = empty(&self.q, [b, tq, self.d_model()]);
        let client = self.q.client.clone();
        let (count, dim) = launch_dims(&self.q, self.rows());
        weights_kernel::launch(
            &client,
            count,
            dim,
            self.q.clone().into_buffer_arg(),
            self.kv().clone().into_buffer_arg(),
            self.mask.clone().into_buffer_arg(),
            w.clone().into_buffer_arg(),
            g.arg(),
        );
        let (count, dim) = launch_dims(&self.q, b * tq * self.d_model());
        output_kernel::launch(
            &client,
            count,
            dim,
            self.kv().clone().into_buffer_arg(),
            w.clone().into_buffer_arg(),
            out.clone().into_buffer_arg(),
            crate::gpu::step_scalars::seeds(&self.q).into_buffer_arg(),
            g.arg(),
        );
        (out, w)
    }

    /// `(∂q, ∂kv)`; in self-attention `∂qkv` and `None`.
    fn backward(&self, w: CubeTensor, grad: CubeTensor) -> (CubeTensor, Option<CubeTensor>) {
        let g = self.geo;
        let (b, tq, tk, dm) = (g.batch as usize, g.tq as usize, g.tk as usize, self.d_model());
        let grad = into_contiguous(grad);
        let client = self.q.client.clone();
        let ds = empty(&self.q, [self.rows() * tk]);
        let (count, dim) = launch_dims(&self.q, self.rows());
        scores_grad_kernel::launch(
            &client,
            count,
            dim,
            self.kv().clone().into_buffer_arg(),
            w.clone().into_buffer_arg(),
            grad.clone().into_buffer_arg(),
            ds.clone().into_buffer_arg(),
            crate::gpu::step_scalars::seeds(&self.q).into_buffer_arg(),
            g.arg(),
        );
        let dq = empty(&self.q, self.q.meta.shape().clone());
        let dkv = self.kv.as_ref().map(|kv| empty(kv, kv.meta.shape().clone()));
        let (count, dim) = launch_dims(&self.q, b * tq * dm);
        query_grad_kernel::launch(
            &client,
            count,
            dim,
            self.kv().clone().into_buffer_arg(),
            ds.clone().into_buffer_arg(),
            dq.clone().into_buffer_arg(),
            g.arg(),
            g.wq,
            0,
        );
        let target = dkv.clone().unwrap_or_else(|| dq.clone());
        let (count, dim) = launch_dims(&self.q, b * tk * 2 * dm);
        key_value_grad_kernel::launch(
            &client,
            count,
            dim,
            self.q.clone().into_buffer_arg(),
            w.into_buffer_arg(),
            ds.into_buffer_arg(),
            grad.into_buffer_arg(),
            target.into_buffer_arg(),
            crate::gpu::step_scalars::seeds(&self.q).into_buffer_arg(),
            g.arg(),
            g.wkv,
            g.ok,
            g.ov,
        );
        (dq, dkv)
    }
}

impl FusedAttention for CubeBackend {
    fn self_attention(
        qkv: CubeTensor,
        mask: CubeTensor,
        heads: usize,
        scale: f32,
        drop: (u64, f32),
    ) -> (CubeTensor, CubeTensor) {
        Call::new(qkv, None, mask, heads, scale, drop).forward()
    }

    fn cross_attention(
        q: CubeTensor,
        kv: CubeTensor,
        mask: CubeTensor,
        heads: usize,
        scale: f32,
        drop: (u64, f32),
    ) -> (CubeTensor, CubeTensor) {
        Call::new(q, Some(kv), mask, heads, scale, drop).forward()
    }
}

impl AttentionCall<CubeBackend> for Call {
    fn new(
        q: CubeTensor,
        kv: Option<CubeTensor>,
        mask: CubeTensor,
        heads: usize,
        scale: f32,
        drop: (u64, f32),
    ) -> Self {
        Call::new(q, kv, mask, heads, scale, drop)
    }

    fn forward(&self) -> (CubeTensor, CubeTensor) {
        Call::forward(self)
    }

    fn backward(&self, weights: CubeTensor, dy: CubeTensor) -> (CubeTensor, Option<CubeTensor>) {
        Call::backward(self, weights, dy)
    }
}

impl crate::attention::AttentionKernels for CubeBackend {
    type Call = Call;
}
