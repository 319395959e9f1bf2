//! Scaled dot-product attention over all heads as one CPU kernel, forward and backward
//! (Vaswani et al., 2017, eq. 1).
//!
//! Per sentence `b` and head `h`, with `Q`, `K`, `V` that head's columns of the projections,
//! additive mask `M` (0 or −∞) and dropout mask `D` (`1/keep` or 0):
//!
//! `P = softmax(s·QKᵀ + M)`, `O = (P ⊙ D) V`
//!
//! and back, from `∂O`: `∂V = (P ⊙ D)ᵀ ∂O`, `∂P = (∂O Vᵀ) ⊙ D`,
//! `∂S = P ⊙ (∂P − rowsum(P ⊙ ∂P))`, `∂Q = s·∂S K`, `∂K = s·∂Sᵀ Q`,
//!
//! with the scale `s` the caller's: `1/√d_k` (the paper's), or 1 (the unscaled ablation).
//!
//! Composed from burn's operations, one attention layer of the Transformer benchmark shape
//! took ~20 ms forward and backward beyond its projections, and the three `narrow`s that
//! split the fused `[Q | K | V]` projection another ~13 ms (each one's backward writes a
//! full-width zero gradient and the three are summed): the heads are split and merged by
//! copies, the scores scaled, masked and dropped out as separate passes, and every product is
//! 512 tiny batched `gemm` calls. Here the kernel reads each head's columns of the projection
//! in place, writes its output straight into the merged `[batch, t, d_model]` layout, and its
//! backward writes `∂[Q | K | V]` as one tensor; one task per sentence and head. Only `P` (the
//! weights, which callers also get) is kept for the backward; the dropout mask is drawn
//! again from its seed — element for element the mask [`crate::ops::dropout`] would
//! draw from the same seed, so the two paths agree exactly (tested).
//!
//! A burn `#[backend_extension]` for flex, and for cubecl runtimes through
//! [`crate::attention::gpu`]'s kernels; under burn's fusion (`gpu-tuned`) it does not run, and
//! the model composes the equation (`scaled_dot_product` in the models' `transformer/mha.rs`).
//! It runs whenever the projections are
//! one product (teacher-forced training; cross-attention in decoding when the memory has over
//! 1,024 rows) and the mask is `[batch or 1, 1, t_q or 1, t_k]`. The weights returned beside
//! the output carry no gradient (they are for inspection: heat maps, alignment); the output's
//! gradient is exact.
//!
//! # Shapes
//! - self-attention: `qkv` `[batch, t, 3·d_model]` (`[Q | K | V]`) → `[batch, t, d_model]`
//! - cross-attention: `q` `[batch, t_q, d_model]`, `kv` `[batch, t_k, 2·d_model]` (`[K | V]`)
//! - mask: additive, `[batch or 1, 1, t_q or 1, t_k]`; weights `[batch, heads, t_q, t_k]`

use burn::backend::flex::FlexTensor;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::tensor::{Tensor, TensorData};
use rayon::prelude::*;

use crate::attention::AttentionCall;
use crate::cpu::fastmath::LANES;
use crate::cpu::flex_data::{contiguous, f32s};
use crate::gemm::packed::SendPtr;

/// The fused attention as a burn backend extension (flex, and cubecl runtimes without
/// fusion: [`crate::attention::gpu`]; see the module doc).
#[backend_extension(Flex, Cube: cfg(not(feature = "gpu-tuned")), Autodiff)]
pub trait FusedAttention: burn::backend::Backend {
    /// Self-attention from `[Q | K | V]`: `(output, weights)`. `scale` multiplies the scores
    /// (`1/√d_k`, or 1 unscaled); `drop` is the dropout mask's seed and the share kept (`1`: no
    /// dropout).
    fn self_attention(
        qkv: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        heads: usize,
        scale: f32,
        drop: (u64, f32),
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// Attention from queries `q` to `[K | V]`: `(output, weights)`.
    fn cross_attention(
        q: FloatTensor<Self>,
        kv: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        heads: usize,
        scale: f32,
        drop: (u64, f32),
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
}

/// One operand's columns in a row-major `[batch, t, width]` buffer: head `h`'s row `i` of
/// sentence `b` starts at `((b·t + i)·width + offset + h·d_k)`.
#[derive(Clone, Copy)]
struct Operand<'a> {
    data: &'a [f32],
    t: usize,
    width: usize,
    offset: usize,
}

impl Operand<'_> {
    #[inline]
    fn row(&self, b: usize, h: usize, i: usize, dk: usize) -> &[f32] {
        let at = (b * self.t + i) * self.width + self.offset + h * dk;
        &self.data[at..at + dk]
    }

    /// Head `h` of sentence `b`, rows `0..t`, transposed: `[d_k, t]`.
    fn transposed(&self, b: usize, h: usize, t: usize, dk: usize) -> Vec<f32> {
        self.transposed_padded(b, h, t, t, dk)
    }

    /// As [`Operand::transposed`], each row `pad ≥ t` long, zero past `t`: `[d_k, pad]`.
    fn transposed_padded(&self, b: usize, h: usize, t: usize, pad: usize, dk: usize) -> Vec<f32> {
        let mut out = vec![0f32; dk * pad];
        for j in 0..t {
            for (c, &x) in self.row(b, h, j, dk).iter().enumerate() {
                out[c * pad + j] = x;
            }
        }
        out
    }
}

/// Sizes of one call.
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: usize,
    heads: usize,
    tq: usize,
    tk: usize,
    dk: usize,
}

/// The additive mask, broadcast: element `(b, i, j)` at `b·sb + i·si + j`.
struct Mask<'a> {
    data: &'a [f32],
    sb: usize,
    si: usize,
}

/// Reads the mask's layout; `None` when it is not `[batch or 1, 1, t_q or 1, t_k]`.
fn mask_strides(mask: &FlexTensor, d: Dims) -> Option<(usize, usize)> {
    let dims = mask.layout().shape().dims::<4>();
    let [mb, _, mq, mk] = dims;
    mask_fits(dims, d.batch, d.tq, d.tk)
        .then(|| (if mb == 1 { 0 } else { mq * mk }, if mq == 1 { 0 } else { mk }))
}

/// True when the fused kernel takes a mask of these dimensions (`[batch, heads, t_q, t_k]`
/// of the scores it is added to).
pub fn mask_fits(mask: [usize; 4], batch: usize, tq: usize, tk: usize) -> bool {
    let [mb, mh, mq, mk] = mask;
    (mb == batch || mb == 1) && mh == 1 && (mq == tq || mq == 1) && mk == tk
}

/// One call's dropout mask, drawn element by element from its seed as
/// [`crate::dropout::mask::mask`] draws it; all ones without dropout.
#[derive(Clone, Copy)]
struct DropMask {
    seed: u64,
    threshold: u32,
    scale: f32,
    on: bool,
}

impl DropMask {
    /// From `(seed, keep)`.
    fn new((seed, keep): (u64, f32)) -> Self {
        Self { seed, threshold: crate::dropout::mask::threshold(keep), scale: 1.0 / keep, on: keep < 1.0 }
    }

    /// Element `e` (of `[batch, heads, t_q, t_k]`).
    #[inline]
    fn at(&self, e: usize) -> f32 {
        if self.on { crate::dropout::mask::element(self.seed, e, self.threshold, self.scale) } else { 1.0 }
    }
}

/// `(output [batch, t_q, heads·d_k], weights [batch, heads, t_q, t_k])`.
fn forward(
    q: Operand,
    k: Operand,
    v: Operand,
    mask: &Mask,
    d: Dims,
    scale: f32,
    drop: (u64, f32),
) -> (Vec<f32>, Vec<f32>) {
    let Dims { batch, heads, tq, tk, dk } = d;
    let drop = DropMask::new(drop);
    let width = heads * dk;
    let inputs = ForwardInputs { q, k, v, mask, d, drop, scale };
    let mut out = vec![0f32; batch * tq * width];
    let mut weights = vec![0f32; batch * heads * tq * tk];
    let out_ptr = SendPtr(out.as_mut_ptr());
    weights.par_chunks_mut(tq * tk).enumerate().for_each(|(bh, w)| {
        // Compiled for this CPU's vector unit ([`crate::cpu::fastmath::wide`]): `exp` fuses its
        // multiply-adds, which baseline x86-64 code would run in software.
        crate::cpu::fastmath::wide(
            #[inline(always)]
            || {
                let out_ptr = &out_ptr;
                let (b, h) = (bh / heads, bh % heads);
                inputs.head(
                    bh,
                    w,
                    #[inline(always)]
                    |i, o| {
                        // SAFETY: task (b, h) alone writes columns h·d_k.. of row (b, i); `out`
                        // outlives the loop.
                        unsafe {
                            let dst = out_ptr.0.add((b * tq + i) * width + h * dk);
                            std::ptr::copy_nonoverlapping(o.as_ptr(), dst, dk);
                        }
                    },
                )
            },
        )
    });
    (out, weights)
}

/// What every task of [`forward`] reads: the operands, the additive mask, the sizes, the
/// dropout mask and the scores' scale.
struct ForwardInputs<'a> {
    q: Operand<'a>,
    k: Operand<'a>,
    v: Operand<'a>,
    mask: &'a Mask<'a>,
    d: Dims,
    drop: DropMask,
    scale: f32,
}

impl ForwardInputs<'_> {
    /// Task `bh = b·heads + h`, head `h` of sentence `b`: its weights `P` and, row by row,
    /// its output `oᵢ = Σⱼ (P ⊙ D)ᵢⱼ vⱼ`, handed to `emit(i, oᵢ)`.
    ///
    /// # Shapes
    /// - `w`: `[t_q, t_k]` (the task's `P`); `oᵢ`: `[d_k]`
    #[inline(always)]
    fn head(&self, bh: usize, w: &mut [f32], emit: impl Fn(usize, &[f32])) {
        let Dims { heads, tq, tk, dk, .. } = self.d;
        let (b, h) = (bh / heads, bh % heads);
        // Kᵀ, so each score row is a sum of scaled rows (no reductions), its rows
        // padded to whole blocks of `LANES` positions, whose sums stay in registers
        // while `c` runs (the same additions in the same order as one row at a time).
        let tkp = tk.div_ceil(LANES) * LANES;
        let kt = self.k.transposed_padded(b, h, tk, tkp, dk);
        let mut o = vec![0f32; dk];
        let mut p = vec![0f32; tk];
        for i in 0..tq {
            let s = &mut w[i * tk..(i + 1) * tk];
            scores_row(self.q.row(b, h, i, dk), &kt, tkp, s);
            let m = &self.mask.data[b * self.mask.sb + i * self.mask.si..][..tk];
            softmax_row(s, m, self.scale, &self.drop, (bh * tq + i) * tk, &mut p);
            weighted_sum(&p, |j| self.v.row(b, h, j, dk), &mut o);
            emit(i, &o);
        }
    }
}

/// One row of scores `s = qᵢ Kᵀ` (unscaled) from `Kᵀ` padded: a block of [`LANES`]
/// positions at a time, its sums held in registers while `c` runs.
///
/// # Shapes
/// - `qi`: `[d_k]`; `kt`: `[d_k, tkp]`, `tkp` a multiple of [`LANES`] `≥ t_k`; `s`: `[t_k]`
#[inline(always)]
fn scores_row(qi: &[f32], kt: &[f32], tkp: usize, s: &mut [f32]) {
    let tk = s.len();
    for j0 in (0..tk).step_by(LANES) {
        let mut acc = [0f32; LANES];
        for (c, &x) in qi.iter().enumerate() {
            let kc = &kt[c * tkp + j0..][..LANES];
            for (a, &y) in acc.iter_mut().zip(kc) {
                *a += x * y;
            }
        }
        let n = (tk - j0).min(LANES);
        s[j0..j0 + n].copy_from_slice(&acc[..n]);
    }
}

/// One row of weights in place, `s ← softmax(s·scale + m)`, and its dropped-out copy
/// `p = s ⊙ D` (`D`'s elements `e0..e0 + t_k`).
///
/// # Shapes
/// - `s`, `m`, `p`: `[t_k]`
#[inline(always)]
fn softmax_row(s: &mut [f32], m: &[f32], scale: f32, drop: &DropMask, e0: usize, p: &mut [f32]) {
    let mut max = f32::NEG_INFINITY;
    for (s, &m) in s.iter_mut().zip(m) {
        *s = *s * scale + m;
        max = max.max(*s);
    }
    let inv = 1.0 / super::step::softmax_numerators(s, max);
    for (j, (s, p)) in s.iter_mut().zip(p.iter_mut()).enumerate() {
        *s *= inv;
        *p = *s * drop.at(e0 + j);
    }
}

/// `o = Σⱼ pⱼ vⱼ` over the positions whose `pⱼ` is not zero, added in order of `j` (`vⱼ` =
/// `v(j)`, as long as `o`); in blocks of [`LANES`] columns held in registers across the
/// positions where `o`'s length allows, the same additions in the same order.
#[inline(always)]
fn weighted_sum<'a>(p: &[f32], v: impl Fn(usize) -> &'a [f32], o: &mut [f32]) {
    let dk = o.len();
    if dk % LANES != 0 {
        o.fill(0.0);
        for (j, &p) in p.iter().enumerate().filter(|(_, p)| **p != 0.0) {
            for (o, &y) in o.iter_mut().zip(v(j)) {
                *o += p * y;
            }
        }
        return;
    }
    for (d0, ob) in (0..dk).step_by(LANES).zip(o.chunks_exact_mut(LANES)) {
        let mut acc = [0f32; LANES];
        for (j, &p) in p.iter().enumerate().filter(|(_, p)| **p != 0.0) {
            for (a, &y) in acc.iter_mut().zip(&v(j)[d0..d0 + LANES]) {
                *a += p * y;
            }
        }
        ob.copy_from_slice(&acc);
    }
}

/// Where the backward writes `∂Q`, `∂K`, `∂V`: like [`Operand`], mutable.
#[derive(Clone, Copy)]
struct Target {
    ptr: *mut f32,
    t: usize,
    width: usize,
    offset: usize,
}

/// `∂Q`, `∂K`, `∂V` from `∂O` (`[batch, t_q, heads·d_k]`) and the kept weights `P`.
///
/// # Safety
/// The targets point into buffers of `[batch, t, width]` that outlive the call; no two of
/// them overlap in the columns they cover.
#[allow(clippy::too_many_arguments)]
unsafe fn backward(
    q: Operand,
    k: Operand,
    v: Operand,
    p: &[f32],
    grad: &[f32],
    d: Dims,
    scale: f32,
    drop: (u64, f32),
    dq: Target,
    dkk: Target,
    dv: Target,
) {
    let Dims { batch, heads, tq, tk, dk } = d;
    let drop = DropMask::new(drop);
    let go = Operand { data: grad, t: tq, width: heads * dk, offset: 0 };
    let inputs = BackwardInputs { q, k, v, p, go, d, drop, scale };
    let targets = [SendTarget(dq), SendTarget(dkk), SendTarget(dv)];
    (0..batch * heads).into_par_iter().for_each(|bh| {
        let targets = &targets;
        let (b, h) = (bh / heads, bh % heads);
        let grads = inputs.head(bh, |i, dq_row| {
            // SAFETY: task (b, h) alone writes these columns (see the function's contract).
            unsafe { targets[0].write(b, h, i, dk, dq_row) };
        });
        for j in 0..tk {
            // SAFETY: as above.
            unsafe {
                targets[1].write(b, h, j, dk, &grads.g_k[j * dk..(j + 1) * dk]);
                targets[2].write(b, h, j, dk, &grads.g_v[j * dk..(j + 1) * dk]);
            }
        }
    });
}

/// What every task of [`backward`] reads: the operands, the kept weights `P`, `∂O` as an
/// operand (`go`), the sizes, the dropout mask and the scores' scale `s`.
struct BackwardInputs<'a> {
    q: Operand<'a>,
    k: Operand<'a>,
    v: Operand<'a>,
    p: &'a [f32],
    go: Operand<'a>,
    d: Dims,
    drop: DropMask,
    scale: f32,
}

impl BackwardInputs<'_> {
    /// Task `bh = b·heads + h`, head `h` of sentence `b`: row by row, `∂qᵢ = s·∂Sᵢ K`
    /// handed to `emit(i, ∂qᵢ)`; then its sums `∂K = s·∂Sᵀ Q` and `∂V = (P ⊙ D)ᵀ ∂O`.
    ///
    /// # Shapes
    /// - `∂qᵢ`: `[d_k]`; the returned `g_k`, `g_v`: `[t_k, d_k]`
    #[inline(always)]
    fn head(&self, bh: usize, emit: impl Fn(usize, &[f32])) -> HeadGrads {
        let Dims { heads, tq, tk, dk, .. } = self.d;
        let (b, h) = (bh / heads, bh % heads);
        let vt = self.v.transposed(b, h, tk, dk);
        let mut s = HeadGrads::new(tk, dk);
        for i in 0..tq {
            let p = &self.p[(bh * tq + i) * tk..][..tk];
            let e0 = (bh * tq + i) * tk;
            for (j, m) in s.mask.iter_mut().enumerate() {
                *m = self.drop.at(e0 + j);
            }
            // ∂(P⊙D) = ∂O Vᵀ, and ∂V += (P⊙D)ᵀ ∂O.
            s.weights_row(self.go.row(b, h, i, dk), &vt, p);
            // ∂S = P ⊙ (∂P − Σ P ⊙ ∂P), scaled by s for ∂Q and ∂K.
            s.scores_row(p, self.q.row(b, h, i, dk), |j| self.k.row(b, h, j, dk), self.scale);
            emit(i, &s.dq_row);
        }
        s
    }
}

/// One task's sums in [`backward`], `∂K` (`g_k`) and `∂V` (`g_v`) of its head, and its
/// scratch for one query row: `∂P` (`dp`), the dropout mask's row (`mask`) and `∂q`
/// (`dq_row`).
///
/// # Shapes
/// - `g_k`, `g_v`: `[t_k, d_k]`; `dp`, `mask`: `[t_k]`; `dq_row`: `[d_k]`
struct HeadGrads {
    g_k: Vec<f32>,
    g_v: Vec<f32>,
    dp: Vec<f32>,
    dq_row: Vec<f32>,
    mask: Vec<f32>,
}

impl HeadGrads {
    /// All zero.
    fn new(tk: usize, dk: usize) -> Self {
        let g_k = vec![0f32; tk * dk];
        let g_v = vec![0f32; tk * dk];
        let (dp, dq_row, mask) = (vec![0f32; tk], vec![0f32; dk], vec![0f32; tk]);
        Self { g_k, g_v, dp, dq_row, mask }
    }

    /// Query row `i`: `∂(P⊙D)ᵢ = ∂oᵢ Vᵀ` into `dp`, and `∂V += (P⊙D)ᵢᵀ ∂oᵢ`.
    ///
    /// # Shapes
    /// - `g` (`∂oᵢ`): `[d_k]`; `vt` (`Vᵀ`): `[d_k, t_k]`; `p` (`Pᵢ`): `[t_k]`
    #[inline(always)]
    fn weights_row(&mut self, g: &[f32], vt: &[f32], p: &[f32]) {
        let (tk, dk) = (self.dp.len(), g.len());
        self.dp.fill(0.0);
        for (c, &x) in g.iter().enumerate() {
            for (s, &y) in self.dp.iter_mut().zip(&vt[c * tk..(c + 1) * tk]) {
                *s += x * y;
            }
        }
        for j in 0..tk {
            let pd = p[j] * self.mask[j];
            if pd != 0.0 {
                for (a, &x) in self.g_v[j * dk..(j + 1) * dk].iter_mut().zip(g) {
                    *a += pd * x;
                }
            }
        }
    }

    /// Query row `i`: `∂Pᵢ = dp ⊙ D` in place, `∂Sᵢ = Pᵢ ⊙ (∂Pᵢ − Σⱼ Pᵢⱼ ∂Pᵢⱼ)·scale`, then
    /// `∂qᵢ = ∂Sᵢ K` into `dq_row` and `∂K += ∂Sᵢᵀ qᵢ` (`kⱼ = k(j)`).
    ///
    /// # Shapes
    /// - `p` (`Pᵢ`): `[t_k]`; `qi`, `k(j)`: `[d_k]`
    #[inline(always)]
    fn scores_row<'a>(&mut self, p: &[f32], qi: &[f32], k: impl Fn(usize) -> &'a [f32], scale: f32) {
        let (tk, dk) = (self.dp.len(), qi.len());
        let mut dot = 0.0;
        for j in 0..tk {
            self.dp[j] *= self.mask[j];
            dot += p[j] * self.dp[j];
        }
        self.dq_row.fill(0.0);
        for j in 0..tk {
            let ds = p[j] * (self.dp[j] - dot) * scale;
            if ds != 0.0 {
                for (a, &x) in self.dq_row.iter_mut().zip(k(j)) {
                    *a += ds * x;
                }
                for (a, &x) in self.g_k[j * dk..(j + 1) * dk].iter_mut().zip(qi) {
                    *a += ds * x;
                }
            }
        }
    }
}

/// A [`Target`] shared by the tasks, which write disjoint columns.
struct SendTarget(Target);
// SAFETY: every task writes only its own head's columns.
unsafe impl Sync for SendTarget {}

impl SendTarget {
    /// Writes head `h`'s row `i` of sentence `b`.
    ///
    /// # Safety
    /// No other thread writes those elements meanwhile; the buffer holds them.
    unsafe fn write(&self, b: usize, h: usize, i: usize, dk: usize, row: &[f32]) {
        let t = self.0;
        unsafe {
            let dst = t.ptr.add((b * t.t + i) * t.width + t.offset + h * dk);
            std::ptr::copy_nonoverlapping(row.as_ptr(), dst, dk);
        }
    }
}

/// `[batch, t, width]` of a 3-D tensor.
fn dims3(t: &FlexTensor) -> [usize; 3] {
    t.layout().shape().dims::<3>()
}

/// `(batch, t_q, t_k, d_model)` of a call from the operands' `[batch, t, width]`: `q` is
/// `[Q | K | V]` when `kv` is `None`, else `q` and `[K | V]` (checked; shared with
/// [`crate::attention::gpu`]).
pub(crate) fn sizes(q: [usize; 3], kv: Option<[usize; 3]>, heads: usize) -> (usize, usize, usize, usize) {
    let [batch, tq, qw] = q;
    let (tk, d_model) = match kv {
        Some([kb, tk, kw]) => {
            assert!(kb == batch && kw % 2 == 0, "fused attention: kv must be [batch, t_k, 2·d_model]");
            assert_eq!(qw, kw / 2, "fused attention: q and kv widths disagree");
            (tk, qw)
        }
        None => {
            assert_eq!(qw % 3, 0, "fused attention: qkv must be [batch, t, 3·d_model]");
            (tq, qw / 3)
        }
    };
    assert!(heads > 0 && d_model % heads == 0, "fused attention: heads must divide d_model");
    (batch, tq, tk, d_model)
}

/// The operands of one call: `(q, k, v)` tensors (contiguous, shared), their offsets, dims.
struct Call {
    q: FlexTensor,
    kv: Option<FlexTensor>,
    mask: FlexTensor,
    dims: Dims,
    scale: f32,
    drop: (u64, f32),
}

impl Call {
    fn new(
        q: &FlexTensor,
        kv: Option<&FlexTensor>,
        mask: &FlexTensor,
        heads: usize,
        scale: f32,
        drop: (u64, f32),
    ) -> Self {
        let (batch, tq, tk, d_model) = sizes(dims3(q), kv.map(dims3), heads);
        let dims = Dims { batch, heads, tq, tk, dk: d_model / heads };
        Self { q: contiguous(q), kv: kv.map(contiguous), mask: contiguous(mask), dims, scale, drop }
    }

    /// `(q, k, v)` as operands.
    fn operands(&self) -> (Operand<'_>, Operand<'_>, Operand<'_>) {
        let d = self.dims;
        let dm = d.heads * d.dk;
        let qs = self.q.as_slice::<f32>().expect("contiguous");
        match &self.kv {
            Some(kv) => {
                let ks = kv.as_slice::<f32>().expect("contiguous");
                (
                    Operand { data: qs, t: d.tq, width: dm, offset: 0 },
                    Operand { data: ks, t: d.tk, width: 2 * dm, offset: 0 },
                    Operand { data: ks, t: d.tk, width: 2 * dm, offset: dm },
                )
            }
            None => (
                Operand { data: qs, t: d.tq, width: 3 * dm, offset: 0 },
                Operand { data: qs, t: d.tq, width: 3 * dm, offset: dm },
                Operand { data: qs, t: d.tq, width: 3 * dm, offset: 2 * dm },
            ),
        }
    }

    fn forward(&self) -> (FlexTensor, FlexTensor) {
        let d = self.dims;
        let (sb, si) =
            mask_strides(&self.mask, d).expect("fused attention: mask must be [batch|1, 1, t_q|1, t_k]");
        let mask = Mask { data: self.mask.as_slice::<f32>().expect("contiguous"), sb, si };
        let (q, k, v) = self.operands();
        let (out, w) = forward(q, k, v, &mask, d, self.scale, self.drop);
        (
            FlexTensor::from_data(TensorData::new(out, [d.batch, d.tq, d.heads * d.dk])),
            FlexTensor::from_data(TensorData::new(w, [d.batch, d.heads, d.tq, d.tk])),
        )
    }

    /// `(∂q, ∂kv)` (`∂kv` `None` for self-attention, whose `∂qkv` is the first).
    fn backward(&self, weights: &FlexTensor, grad: &FlexTensor) -> (FlexTensor, Option<FlexTensor>) {
        let d = self.dims;
        let dm = d.heads * d.dk;
        let (q, k, v) = self.operands();
        let (p, g) = (f32s(weights), f32s(grad));
        let mut gq = vec![0f32; self.q.layout().shape().num_elements()];
        let mut gkv = self.kv.as_ref().map(|kv| vec![0f32; kv.layout().shape().num_elements()]);
        let tq = Target { ptr: gq.as_mut_ptr(), t: d.tq, width: q.width, offset: 0 };
        let (tk, tv) = match &mut gkv {
            Some(buf) => (
                Target { ptr: buf.as_mut_ptr(), t: d.tk, width: 2 * dm, offset: 0 },
                Target { ptr: buf.as_mut_ptr(), t: d.tk, width: 2 * dm, offset: dm },
            ),
            None => (Target { offset: dm, ..tq }, Target { offset: 2 * dm, ..tq }),
        };
        // SAFETY: the targets cover disjoint columns of buffers sized like the operands.
        unsafe { backward(q, k, v, &p, &g, d, self.scale, self.drop, tq, tk, tv) };
        let gq = FlexTensor::from_data(TensorData::new(gq, self.q.layout().shape().clone()));
        let gkv = gkv.map(|buf| {
            FlexTensor::from_data(TensorData::new(
                buf,
                self.kv.as_ref().expect("kv").layout().shape().clone(),
            ))
        });
        (gq, gkv)
    }
}

impl FusedAttention for Flex {
    fn self_attention(
        qkv: FlexTensor,
        mask: FlexTensor,
        heads: usize,
        scale: f32,
        drop: (u64, f32),
    ) -> (FlexTensor, FlexTensor) {
        Call::new(&qkv, None, &mask, heads, scale, drop).forward()
    }

    fn cross_attention(
        q: FlexTensor,
        kv: FlexTensor,
        mask: FlexTensor,
        heads: usize,
        scale: f32,
        drop: (u64, f32),
    ) -> (FlexTensor, FlexTensor) {
        Call::new(&q, Some(&kv), &mask, heads, scale, drop).forward()
    }
}

/// [`Call`] as backward state.
pub(crate) struct CallState(Call);

impl std::fmt::Debug for CallState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fused attention {:?}", self.0.dims)
    }
}

impl Clone for CallState {
    fn clone(&self) -> Self {
        let c = &self.0;
        CallState(Call {
            q: c.q.clone(),
            kv: c.kv.clone(),
            mask: c.mask.clone(),
            dims: c.dims,
            scale: c.scale,
            drop: c.drop,
        })
    }
}

impl AttentionCall<Flex> for CallState {
    fn new(
        q: FlexTensor,
        kv: Option<FlexTensor>,
        mask: FlexTensor,
        heads: usize,
        scale: f32,
        drop: (u64, f32),
    ) -> Self {
        CallState(Call::new(&q, kv.as_ref(), &mask, heads, scale, drop))
    }

    fn forward(&self) -> (FlexTensor, FlexTensor) {
        self.0.forward()
    }

    fn backward(&self, weights: FlexTensor, dy: FlexTensor) -> (FlexTensor, Option<FlexTensor>) {
        self.0.backward(&weights, &dy)
    }
}

impl crate::attention::AttentionKernels for Flex {
    type Call = CallState;
}

/// Self-attention from `qkv` (`[Q | K | V]`, `[batch, t, 3·d_model]`): `(output, weights)`.
pub fn self_attention(
    qkv: Tensor<3>,
    mask: &Tensor<4>,
    heads: usize,
    scale: f32,
    drop: (u64, f32),
) -> (Tensor<3>, Tensor<4>) {
    let (o, w) = <Dispatch as FusedAttention>::self_attention(
        qkv.into_dispatch(),
        mask.clone().into_dispatch(),
        heads,
        scale,
        drop,
    );
    (Tensor::from_dispatch(o), Tensor::from_dispatch(w))
}

/// Attention from `q` (`[batch, t_q, d_model]`) to `kv` (`[K | V]`, `[batch, t_k,
/// 2·d_model]`): `(output, weights)`.
pub fn cross_attention(
    q: Tensor<3>,
    kv: Tensor<3>,
    mask: &Tensor<4>,
    heads: usize,
    scale: f32,
    drop: (u64, f32),
) -> (Tensor<3>, Tensor<4>) {
    let (o, w) = <Dispatch as FusedAttention>::cross_attention(
        q.into_dispatch(),
        kv.into_dispatch(),
        mask.clone().into_dispatch(),
        heads,
        scale,
        drop,
    );
    (Tensor::from_dispatch(o), Tensor::from_dispatch(w))
}

#[cfg(test)]
mod tests {
    use crate::test_support::max_diff;
    use burn::tensor::{Device, Distribution, Tensor, TensorData};

    /// An additive padding mask `[batch, 1, 1, t]`: sentence `b` keeps its first
    /// `t − (b mod 3)` positions.
    fn padding(batch: usize, t: usize, d: &Device) -> Tensor<4> {
        let v: Vec<f32> = (0..batch)
            .flat_map(|b| (0..t).map(move |j| if j + b % 3 >= t { f32::NEG_INFINITY } else { 0.0 }))
            .collect();
        Tensor::from_data(TensorData::new(v, [batch, 1, 1, t]), d)
    }

    fn causal(t: usize, d: &Device) -> Tensor<4> {
        let v: Vec<f32> =
            (0..t).flat_map(|i| (0..t).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 })).collect();
        Tensor::from_data(TensorData::new(v, [1, 1, t, t]), d)
    }

    /// `[batch, t, width]` columns `offset..offset + heads·d_k` as `[batch, heads, t, d_k]`.
    fn heads_of(x: Tensor<3>, offset: usize, heads: usize, dk: usize) -> Tensor<4> {
        let [b, t, _] = x.dims();
        x.narrow(2, offset, heads * dk).reshape([b, t, heads, dk]).swap_dims(1, 2)
    }

    /// The equations of the module doc from burn's operations, with the dropout mask drawn
    /// from `seed` by [`crate::dropout::mask::mask`].
    fn composed(
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        mask: &Tensor<4>,
        scale: f32,
        drop: (u64, f32),
        mask_of: fn(u64, usize, f32) -> Vec<f32>,
    ) -> Tensor<3> {
        let [b, h, tq, dk] = q.dims();
        let tk = k.dims()[2];
        let scores = q.matmul(k.swap_dims(2, 3)) * scale + mask.clone().expand([b, h, tq, tk]);
        let p = burn::tensor::activation::softmax(scores, 3);
        let d = Tensor::<4>::from_data(
            TensorData::new(mask_of(drop.0, b * h * tq * tk, drop.1), [b, h, tq, tk]),
            &p.device(),
        );
        (p * d).matmul(v).swap_dims(1, 2).reshape([b, tq, h * dk])
    }

    /// The kernels against the composed equations, output and gradients, with padding and
    /// causal masks, with dropout (the same seed draws the same mask) and without, scaled by
    /// `1/√d_k` and unscaled.
    #[test]
    fn kernels_equal_the_composed_equations() {
        kernels_equal_the_composed_equations_on(Device::flex(), crate::dropout::mask::mask);
    }

    /// The same for the GPU kernels ([`crate::attention::gpu`]) on wgpu (lavapipe where there
    /// is no GPU), whose dropout mask is their own hash of the seed.
    #[test]
    #[cfg(not(feature = "gpu-tuned"))]
    fn gpu_kernels_equal_the_composed_equations() {
        let Some(gpu) = crate::testing::wgpu_or_skip() else { return };
        kernels_equal_the_composed_equations_on(gpu, crate::dropout::gpu::dropout_mask);
    }

    fn kernels_equal_the_composed_equations_on(plain: Device, mask_of: fn(u64, usize, f32) -> Vec<f32>) {
        let ad = plain.autodiff();
        ad.seed(21);
        let (batch, t, tq, heads, dk) = (5, 13, 4, 3, 8);
        let dm = heads * dk;
        let qkv = Tensor::<3>::random([batch, t, 3 * dm], Distribution::Normal(0.0, 1.0), &ad);
        let q = Tensor::<3>::random([batch, tq, dm], Distribution::Normal(0.0, 1.0), &ad);
        let r = Tensor::<3>::random([batch, t, dm], Distribution::Normal(0.0, 1.0), &ad);
        let rq = Tensor::<3>::random([batch, tq, dm], Distribution::Normal(0.0, 1.0), &ad);
        let scales = [1.0 / (dk as f32).sqrt(), 1.0];
        for (scale, drop) in scales.into_iter().flat_map(|s| [(s, (0, 1.0)), (s, (0x5eed, 0.7))]) {
            for (name, mask) in [("padding", padding(batch, t, &ad)), ("causal", causal(t, &ad))] {
                let run = |fused: bool| {
                    let x = qkv.clone().require_grad();
                    let y = if fused {
                        super::self_attention(x.clone(), &mask, heads, scale, drop).0
                    } else {
                        let part = |i| heads_of(x.clone(), i * dm, heads, dk);
                        composed(part(0), part(1), part(2), &mask, scale, drop, mask_of)
                    };
                    let g = (y.clone() * r.clone()).sum().backward();
                    (y.inner(), x.grad(&g).expect("∂qkv"))
                };
                let ((y1, g1), (y2, g2)) = (run(true), run(false));
                assert!(max_diff(y1, y2) < 1e-5, "self, {name}, {drop:?}, scale {scale}: output");
                assert!(max_diff(g1, g2) < 1e-5, "self, {name}, {drop:?}, scale {scale}: ∂qkv");
            }
            let mask = padding(batch, t, &ad);
            let kv = qkv.clone().narrow(2, 0, 2 * dm);
            let run = |fused: bool| {
                let (q, kv) = (q.clone().require_grad(), kv.clone().require_grad());
                let y = if fused {
                    super::cross_attention(q.clone(), kv.clone(), &mask, heads, scale, drop).0
                } else {
                    let part = |i| heads_of(kv.clone(), i * dm, heads, dk);
                    composed(heads_of(q.clone(), 0, heads, dk), part(0), part(1), &mask, scale, drop, mask_of)
                };
                let g = (y.clone() * rq.clone()).sum().backward();
                (y.inner(), q.grad(&g).expect("∂q"), kv.grad(&g).expect("∂kv"))
            };
            let ((y1, q1, kv1), (y2, q2, kv2)) = (run(true), run(false));
            assert!(max_diff(y1, y2) < 1e-5, "cross, {drop:?}, scale {scale}: output");
            assert!(max_diff(q1, q2) < 1e-5, "cross, {drop:?}, scale {scale}: ∂q");
            assert!(max_diff(kv1, kv2) < 1e-5, "cross, {drop:?}, scale {scale}: ∂kv");
        }
    }
}
