//! The recurrent decoders' attention while decoding, one pass per sentence on the CPU.
//!
//! At every decoder step the scores and the context read the whole projected memory:
//!
//! - dot / general (Luong et al., 2015, eq. 8): `eⱼ = kⱼ · q`;
//! - additive (Bahdanau et al., 2015, eq. 6): `eⱼ = vᵀ tanh(kⱼ + q)`, `q = W₂s + b`;
//! - context (Bahdanau et al., 2015, eq. 5): `c = Σⱼ αⱼ hⱼ`.
//!
//! Composed from burn's operations each is a broadcast product into a `[batch, src, d]`
//! temporary (3 MiB on the benchmark shape) and a reduction over it: ~835 µs of a 9.3 ms
//! Luong greedy step on the AVX-512 VM. Here each sentence's row is one pass over its
//! `[src, d]` block, with no temporary, reading the memory in place at its batch stride (the
//! Luong encoder's memory is a narrowed view). Decoding only (no autodiff: training runs the
//! models' equations, whose gradients burn derives and the score gradient checks cover), on
//! flex; elsewhere each function returns `None` and the model computes its equation. The sums
//! run in another order than burn's, so results agree to rounding.
//!
//! # The Transformer's decoding step
//!
//! `heads_step` is the attention of one new position, self and cross, for every row and head
//! in one kernel. It reads the keys and values where they lie — the self-attention cache
//! (per position through its tree, `step_cache`) and the memory's `[K | V]`, each row reading
//! its sentence's row through an index (`step_cache::SourceRows`) — so nothing is copied per
//! head or per hypothesis. For `d_k` of 16, 32 and 64 a head runs `Head::blocks`: the general
//! loop's operations in the same order, arranged for the vector unit (a test holds their bits
//! equal). Tried and not kept: copying `K` transposed into a scratch row per head, to
//! vectorise over positions, was slower.
//!
//! # Shapes
//! - `q`: `[batch, d]`, `keys` / `values`: `[batch, src, d]`, `v`: `[d, 1]`
//! - scores and weights: `[batch, src]`, context: `[batch, d]`

use std::borrow::Cow;

use burn::backend::flex::FlexTensor;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::tensor::{DType, Tensor, TensorData};
use rayon::prelude::*;

use crate::cpu::fastmath::{LANES, block, block_mut, exp, tanh, wide};
use crate::cpu::flex_data::{contiguous, f32s};

/// The decoding kernels as a burn backend extension (flex only).
#[backend_extension(Flex)]
pub trait AttentionStep: burn::backend::Backend {
    /// `e[b, j] = keys[b, j, :] · q[b, :]`.
    fn dot_scores(q: FloatTensor<Self>, keys: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `e[b, j] = Σₐ v[a] tanh(keys[b, j, a] + q[b, a])`.
    fn additive_scores(
        q: FloatTensor<Self>,
        keys: FloatTensor<Self>,
        v: FloatTensor<Self>,
    ) -> FloatTensor<Self>;

    /// `c[b, :] = Σⱼ weights[b, j] values[b, j, :]`.
    fn weighted_sum(weights: FloatTensor<Self>, values: FloatTensor<Self>) -> FloatTensor<Self>;

    /// Multi-head attention of one query position per row (see [`heads_step`]): (output
    /// `[rows, heads·d_k]`, weights `[rows, heads, len]`). `source` `[rows]` (or empty: row
    /// `r` itself) is the row of `keys`, `values` and `mask` each row reads, as floats.
    fn heads_step(
        q: FloatTensor<Self>,
        keys: FloatTensor<Self>,
        values: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        source: FloatTensor<Self>,
        heads: usize,
        scale: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
}

/// Where head `h`'s `d_k` elements of position `j` of row `r` start in a keys or values
/// tensor read in place: `start + r·rows + h·heads + j·positions`.
#[derive(Clone, Copy)]
struct Heads {
    start: usize,
    rows: usize,
    heads: usize,
    positions: usize,
}

impl Heads {
    /// The strides of `t`: `[rows, heads, len, d_k]` (the self-attention cache, any room
    /// beyond `len`) or `[rows, len, heads·d_k]` (a narrowed half of `[K | V]`), each head's
    /// `d_k` elements contiguous; `None` for any other layout.
    fn of(t: &FlexTensor, heads: usize, dk: usize) -> Option<(Self, usize)> {
        let layout = t.layout();
        let start = layout.start_offset();
        let st: Vec<usize> = layout.strides().iter().map(|&x| x.max(0) as usize).collect();
        match (layout.shape().as_slice(), st.as_slice()) {
            (&[_, h, len, d], &[rs, hs, ps, 1]) if h == heads && d == dk => {
                Some((Self { start, rows: rs, heads: hs, positions: ps }, len))
            }
            (&[_, len, w], &[rs, ps, 1]) if w == heads * dk => {
                Some((Self { start, rows: rs, heads: dk, positions: ps }, len))
            }
            _ => None,
        }
    }

    #[inline(always)]
    fn at(&self, r: usize, h: usize, j: usize) -> usize {
        self.start + r * self.rows + h * self.heads + j * self.positions
    }
}

/// Scaled dot-product attention (Vaswani et al., 2017, eq. 1) of one query position per row,
/// every head, for decoding: per row `r` and head `h`,
/// `sⱼ = scale · (q_rh · k_rhj) + m_rj`, `pⱼ = softmax(s)ⱼ`, `o_rh = Σⱼ pⱼ v_rhj`, the
/// scale `1/√d_k` (or 1, unscaled).
///
/// Keys and values are read where they lie — the self-attention cache `[rows, heads, room,
/// d_k]` narrowed to its `len` positions, or the halves of cross-attention's `[K | V]` — with
/// no transposed copy of `K` (which the training kernel makes per sentence and head, worth it
/// for many query positions, not for one), and the heads come out side by side. Per row the
/// sums run over `d_k` in lanes, so results agree with the composed operations to rounding.
///
/// Row `r` reads row `source[r]` of the keys, values and mask (`source` empty: row `r`), so
/// that the hypotheses of a beam read one copy of their sentence's memory instead of one copy
/// each (a fifth of the memory traffic at beam 5: the copies no longer fit in the cache).
/// `source` `[rows, len]` names a row per position instead: row `r`'s position `j` is read
/// from row `source[r, j]` (the self-attention cache kept as a tree, [`crate::attention::step_cache`]).
///
/// # Shapes
/// - `q`: `[rows, heads·d_k]`; `keys`, `values`: `[held, heads, len, d_k]` or
///   `[held, len, heads·d_k]`; `mask`: additive, `[held or 1, len]` (`[1, len]` with a source
///   per position); `source`: `[rows]`, `[rows·len]` or `[0]`
/// - returns the output `[rows, heads·d_k]` and the weights `[rows, heads, len]`
fn heads_step_flex(
    q: &FlexTensor,
    keys: &FlexTensor,
    values: &FlexTensor,
    mask: &FlexTensor,
    source: &FlexTensor,
    heads: usize,
    scale: f32,
) -> (FlexTensor, FlexTensor) {
    let [rows, width] = q.layout().shape().dims::<2>();
    let dk = width / heads;
    assert_eq!(dk * heads, width, "heads_step: {heads} heads do not divide {width}");
    let keys = if Heads::of(keys, heads, dk).is_some() { keys.clone() } else { contiguous(keys) };
    let values = if Heads::of(values, heads, dk).is_some() { values.clone() } else { contiguous(values) };
    let (kh, len) = Heads::of(&keys, heads, dk).expect("a contiguous layout is one of the two");
    let (vh, vlen) = Heads::of(&values, heads, dk).expect("a contiguous layout is one of the two");
    assert_eq!(len, vlen, "heads_step: keys and values differ in length");
    let held = keys.layout().shape().as_slice()[0].min(values.layout().shape().as_slice()[0]);
    let source: Vec<usize> = f32s(source).iter().map(|&i| i as usize).collect();
    let per_position = source_per_position(&source, rows, len, held);
    let mstride = mask_stride(mask, held, len, per_position);
    let (q, m) = (f32s(q), f32s(mask));
    let step = Step {
        q: &q,
        keys: keys.storage::<f32>(),
        kh,
        values: values.storage::<f32>(),
        vh,
        mask: &m,
        mstride,
        source: &source,
        per_position,
        rows,
        width,
        heads,
        dk,
        len,
        scale,
    };
    let mut out = vec![0f32; rows * width];
    let mut weights = vec![0f32; rows * heads * len];
    if len > 0 {
        out.par_chunks_mut(width)
            .zip(weights.par_chunks_mut(heads * len))
            .enumerate()
            .with_min_len(ROWS_PER_TASK)
            .for_each(|(r, (o, w))| {
                wide(
                    #[inline(always)]
                    || step.row(r, o, w),
                )
            });
    }
    (
        FlexTensor::from_data(TensorData::new(out, [rows, width])),
        FlexTensor::from_data(TensorData::new(weights, [rows, heads, len])),
    )
}

/// Whether `source` names a row per row and position (`[rows·len]`) rather than one per row
/// (`[rows]`) or none (`[0]`: row `r` itself); panics on any other length, or on a row past
/// the `held` rows of the keys and values.
fn source_per_position(source: &[usize], rows: usize, len: usize, held: usize) -> bool {
    // One source row per row, or per row and position (`[rows, len]`: a cache kept as a tree of
    // positions shared by the hypotheses that descend from them). With one position the two
    // say the same.
    let per_position = len > 1 && source.len() == rows * len;
    assert!(
        source.is_empty() || source.len() == rows || per_position,
        "heads_step: {} source rows for {rows} rows of {len} positions",
        source.len()
    );
    assert!(
        source.iter().all(|&i| i < held) && (!source.is_empty() || rows <= held),
        "heads_step: rows past the {held} held"
    );
    per_position
}

/// The distance between the additive mask's rows: `len` for `[held, len]`, 0 for one row
/// `[1, len]` that every row reads (the only shape with a source per position); panics on
/// any other shape.
fn mask_stride(mask: &FlexTensor, held: usize, len: usize, per_position: bool) -> usize {
    let [mr, ml] = mask.layout().shape().dims::<2>();
    assert!(
        (mr == held && !per_position || mr == 1) && ml == len,
        "heads_step: mask is [{mr}, {ml}], not [{held} or 1, {len}] (1 with a source per position)"
    );
    if mr == 1 { 0 } else { len }
}

/// What every row of [`heads_step_flex`] reads: the queries `[rows, heads·d_k]`, the keys
/// and values where they lie (`kh`, `vh`), the mask's rows `mstride` apart, the source rows
/// (`[rows]`, `[rows·len]` when `per_position`, or empty) and the scores' scale.
struct Step<'a> {
    q: &'a [f32],
    keys: &'a [f32],
    kh: Heads,
    values: &'a [f32],
    vh: Heads,
    mask: &'a [f32],
    mstride: usize,
    source: &'a [usize],
    per_position: bool,
    rows: usize,
    width: usize,
    heads: usize,
    dk: usize,
    len: usize,
    scale: f32,
}

impl Step<'_> {
    /// Row `r`, every head `h`: its weights `w[h·len..]` and output `o[h·d_k..]` ([`Head`]).
    ///
    /// # Shapes
    /// - `o`: `[heads·d_k]` (zero on entry); `w`: `[heads, len]`
    #[inline(always)]
    fn row(&self, r: usize, o: &mut [f32], w: &mut [f32]) {
        let (len, dk) = (self.len, self.dk);
        let source = self.source;
        let r_in = if source.len() == self.rows { source[r] } else { r };
        let m = &self.mask[r_in * self.mstride..][..len];
        // Row `r`'s position `j` lies in row `at(j)`.
        let at = |j: usize| if self.per_position { source[r * len + j] } else { r_in };
        for h in 0..self.heads {
            let one = Head {
                q: &self.q[r * self.width + h * dk..][..dk],
                keys: self.keys,
                key_at: |j| self.kh.at(at(j), h, j),
                values: self.values,
                value_at: |j| self.vh.at(at(j), h, j),
                mask: m,
                scale: self.scale,
            };
            let (w, o) = (&mut w[h * len..(h + 1) * len], &mut o[h * dk..(h + 1) * dk]);
            match dk {
                16 => one.blocks::<1>(w, o),
                32 => one.blocks::<2>(w, o),
                64 => one.blocks::<4>(w, o),
                _ => one.general(w, o),
            }
        }
    }
}

/// One head of one row of [`heads_step_flex`]: its query, where its keys and values lie, its
/// mask row and the scale.
struct Head<'a, K, V> {
    q: &'a [f32],
    keys: &'a [f32],
    key_at: K,
    values: &'a [f32],
    value_at: V,
    mask: &'a [f32],
    scale: f32,
}

impl<K: Fn(usize) -> usize, V: Fn(usize) -> usize> Head<'_, K, V> {
    /// Any `d_k`: scores `w[j] = (q · kⱼ)·scale + mⱼ` ([`dot`]), softmax in place, `o += Σⱼ
    /// w[j] vⱼ` (`o` zero on entry).
    #[inline(always)]
    fn general(&self, w: &mut [f32], o: &mut [f32]) {
        let dk = self.q.len();
        let mut max = f32::NEG_INFINITY;
        for (j, (s, &mj)) in w.iter_mut().zip(self.mask).enumerate() {
            *s = dot(self.q, &self.keys[(self.key_at)(j)..][..dk]) * self.scale + mj;
            max = max.max(*s);
        }
        let inv = 1.0 / softmax_numerators(w, max);
        for (j, s) in w.iter_mut().enumerate() {
            *s *= inv;
            for (o, &x) in o.iter_mut().zip(&self.values[(self.value_at)(j)..][..dk]) {
                *o += *s * x;
            }
        }
    }

    /// [`general`](Self::general) for `d_k = NB·LANES`, the same operations in the same order
    /// (so the same bits), arranged for the vector unit: the scores of [`LANES`] positions at
    /// a time, each position's lane sums added across positions lane by lane (instead of one
    /// position's sixteen lanes one after another, a chain of sixteen dependent additions per
    /// score), and the output's `d_k` sums held in registers across positions instead of
    /// stored and reloaded for each.
    #[inline(always)]
    fn blocks<const NB: usize>(&self, w: &mut [f32], o: &mut [f32]) {
        let q: [[f32; LANES]; NB] = std::array::from_fn(|b| *block(self.q, b * LANES));
        let len = w.len();
        let mut max = f32::NEG_INFINITY;
        for j0 in (0..len).step_by(LANES) {
            let n = (len - j0).min(LANES);
            let mut lanes = [[0f32; LANES]; LANES];
            for (jj, acc) in lanes.iter_mut().enumerate().take(n) {
                let k = &self.keys[(self.key_at)(j0 + jj)..][..NB * LANES];
                for (b, qb) in q.iter().enumerate() {
                    let kb = block(k, b * LANES);
                    for l in 0..LANES {
                        acc[l] += qb[l] * kb[l];
                    }
                }
            }
            // [`dot`]'s lane sum, `Σ` folded from −0 in lane order, for every position at once.
            let mut sums = [-0.0f32; LANES];
            for l in 0..LANES {
                for (s, acc) in sums.iter_mut().zip(&lanes) {
                    *s += acc[l];
                }
            }
            for (jj, &d) in sums.iter().enumerate().take(n) {
                let s = d * self.scale + self.mask[j0 + jj];
                w[j0 + jj] = s;
                max = max.max(s);
            }
        }
        let inv = 1.0 / softmax_numerators(w, max);
        let mut acc = [[0f32; LANES]; NB];
        for (j, s) in w.iter_mut().enumerate() {
            *s *= inv;
            let v = &self.values[(self.value_at)(j)..][..NB * LANES];
            for (b, a) in acc.iter_mut().enumerate() {
                let vb = block(v, b * LANES);
                for l in 0..LANES {
                    a[l] += *s * vb[l];
                }
            }
        }
        for (b, a) in acc.iter().enumerate() {
            *block_mut(o, b * LANES) = *a;
        }
    }
}

/// `w[j] = exp(w[j] − max)` in place; their sum, added in order.
///
/// Two passes: the exponentials alone, in whole blocks of [`LANES`] (the tail computed as a
/// block of its own, padded), so that every one runs in vector registers, each lane computing
/// what the scalar code computes; then the sum, in the same order as one loop would add it
/// (an ordered sum is no vector reduction: in one loop with it, the exponentials stayed
/// scalar, and so did a tail shorter than a block). The same bits.
#[inline(always)]
pub(super) fn softmax_numerators(w: &mut [f32], max: f32) -> f32 {
    let numerators = |b: &mut [f32; LANES]| {
        for s in b.iter_mut() {
            *s = exp(*s - max);
        }
    };
    let mut blocks = w.chunks_exact_mut(LANES);
    for b in &mut blocks {
        numerators(b.try_into().expect("a whole block"));
    }
    let tail = blocks.into_remainder();
    if !tail.is_empty() {
        let mut pad = [0f32; LANES];
        pad[..tail.len()].copy_from_slice(tail);
        numerators(&mut pad);
        tail.copy_from_slice(&pad[..tail.len()]);
    }
    w.iter().fold(0.0, |sum, &s| sum + s)
}

/// Sentences per rayon task (a sentence is ~12k multiply-adds on the benchmark shape).
const ROWS_PER_TASK: usize = 4;

impl AttentionStep for Flex {
    fn dot_scores(q: FlexTensor, keys: FlexTensor) -> FlexTensor {
        per_row(
            &q,
            &keys,
            #[inline(always)]
            |q, keys, e| {
                for (e, key) in e.iter_mut().zip(keys.chunks_exact(q.len())) {
                    *e = dot(q, key);
                }
            },
        )
    }

    fn additive_scores(q: FlexTensor, keys: FlexTensor, v: FlexTensor) -> FlexTensor {
        let v = f32s(&v);
        assert_eq!(v.len(), q.layout().shape().dims::<2>()[1], "additive_scores: v is not [d, 1]");
        per_row(
            &q,
            &keys,
            #[inline(always)]
            |q, keys, e| {
                let d = q.len();
                let whole = d / LANES * LANES;
                for (e, key) in e.iter_mut().zip(keys.chunks_exact(d)) {
                    let mut acc = [0f32; LANES];
                    for j in (0..whole).step_by(LANES) {
                        let (k, q, v) = (block(key, j), block(q, j), block(&v, j));
                        for l in 0..LANES {
                            acc[l] += v[l] * tanh(k[l] + q[l]);
                        }
                    }
                    let tail: f32 = (whole..d).map(|j| v[j] * tanh(key[j] + q[j])).sum();
                    *e = acc.iter().sum::<f32>() + tail;
                }
            },
        )
    }

    fn heads_step(
        q: FlexTensor,
        keys: FlexTensor,
        values: FlexTensor,
        mask: FlexTensor,
        source: FlexTensor,
        heads: usize,
        scale: f32,
    ) -> (FlexTensor, FlexTensor) {
        heads_step_flex(&q, &keys, &values, &mask, &source, heads, scale)
    }

    fn weighted_sum(weights: FlexTensor, values: FlexTensor) -> FlexTensor {
        let [b, s, d] = values.layout().shape().dims::<3>();
        assert_eq!(
            weights.layout().shape().dims::<2>(),
            [b, s],
            "weighted_sum: weights are not [batch, src]"
        );
        let mut out = vec![0f32; b * d];
        if out.is_empty() || s == 0 {
            return FlexTensor::from_data(TensorData::new(out, [b, d]));
        }
        let w = f32s(&weights);
        let (vals, stride) = sentences(&values);
        let whole = d / LANES * LANES;
        out.par_chunks_mut(d).enumerate().with_min_len(ROWS_PER_TASK).for_each(|(r, c)| {
            let (w, h) = (&w[r * s..(r + 1) * s], &vals[r * stride..][..s * d]);
            wide(
                #[inline(always)]
                || {
                    // A column block of `c` at a time, summed over the positions in registers
                    // (summing row by row into `c` kept every partial sum in memory).
                    for j in (0..whole).step_by(LANES) {
                        let mut acc = [0f32; LANES];
                        for (i, &a) in w.iter().enumerate() {
                            let h = block(h, i * d + j);
                            for l in 0..LANES {
                                acc[l] += a * h[l];
                            }
                        }
                        *block_mut(c, j) = acc;
                    }
                    for (j, c) in c.iter_mut().enumerate().skip(whole) {
                        *c = w.iter().enumerate().map(|(i, &a)| a * h[i * d + j]).sum();
                    }
                },
            )
        });
        FlexTensor::from_data(TensorData::new(out, [b, d]))
    }
}

/// Scores for every sentence: `score(q_row, keys_block, e_row)` fills row `e_row` (`src`
/// long) from the sentence's query (`d`) and keys (`[src, d]`, row-major).
fn per_row(
    q: &FlexTensor,
    keys: &FlexTensor,
    score: impl Fn(&[f32], &[f32], &mut [f32]) + Sync,
) -> FlexTensor {
    let [b, s, d] = keys.layout().shape().dims::<3>();
    assert_eq!(q.layout().shape().dims::<2>(), [b, d], "attention scores: query is not [batch, d]");
    let mut out = vec![0f32; b * s];
    if out.is_empty() {
        return FlexTensor::from_data(TensorData::new(out, [b, s]));
    }
    let q = f32s(q);
    let (k, stride) = sentences(keys);
    out.par_chunks_mut(s).enumerate().with_min_len(ROWS_PER_TASK).for_each(|(r, e)| {
        wide(
            #[inline(always)]
            || score(&q[r * d..(r + 1) * d], &k[r * stride..][..s * d], e),
        )
    });
    FlexTensor::from_data(TensorData::new(out, [b, s]))
}

/// A `[batch, src, d]` tensor's elements and the distance between two sentences' blocks: the
/// storage itself when each sentence's `[src, d]` block is contiguous (the Luong decoder's
/// memory is a narrowed view of a longer buffer, copying it cost 3 MiB a step), else a
/// contiguous copy.
fn sentences(t: &FlexTensor) -> (Cow<'_, [f32]>, usize) {
    let layout = t.layout();
    let [_, s, d] = layout.shape().dims::<3>();
    match layout.strides() {
        &[bs, rs, 1] if rs as usize == d && bs >= (s * d) as isize && t.dtype() == DType::F32 => {
            (t.storage::<f32>()[layout.start_offset()..].into(), bs as usize)
        }
        _ => (contiguous(t).as_slice::<f32>().expect("contiguous f32").to_vec().into(), s * d),
    }
}

/// `x · y` in [`LANES`] lanes.
#[inline(always)]
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let whole = x.len() / LANES * LANES;
    let mut acc = [0f32; LANES];
    for j in (0..whole).step_by(LANES) {
        let (a, b) = (block(x, j), block(y, j));
        for l in 0..LANES {
            acc[l] += a[l] * b[l];
        }
    }
    acc.iter().sum::<f32>() + (whole..x.len()).map(|j| x[j] * y[j]).sum::<f32>()
}

/// `e[b, j] = keys[b, j, :] · q[b, :]` (Luong's dot and general scores, the latter with
/// `W_a` already applied to the keys). Flex without autodiff, as all of this file's kernels
/// ([`crate::ops`] chooses).
pub fn dot_scores(q: Tensor<2>, keys: &Tensor<3>) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as AttentionStep>::dot_scores(
        q.into_dispatch(),
        keys.clone().into_dispatch(),
    ))
}

/// `e[b, j] = vᵀ tanh(keys[b, j, :] + q[b, :])` (Bahdanau's score network, `q` the projected
/// query with its bias, `v` `[d, 1]`).
pub fn additive_scores(q: Tensor<2>, keys: &Tensor<3>, v: Tensor<2>) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as AttentionStep>::additive_scores(
        q.into_dispatch(),
        keys.clone().into_dispatch(),
        v.into_dispatch(),
    ))
}

/// Multi-head attention of one query position per row, for decoding ([`heads_step_flex`]'s
/// equation): `q` `[rows, heads·d_k]`, `keys` and `values` `[held, heads, len, d_k]` or
/// `[held, len, heads·d_k]`, additive `mask` `[held or 1, len]`, row `r` reading row
/// `source[r]` of them (`None`: row `r`) → (output `[rows, heads·d_k]`, weights
/// `[rows, heads, len]`).
pub fn heads_step<const D: usize>(
    q: Tensor<2>,
    keys: Tensor<D>,
    values: Tensor<D>,
    mask: Tensor<2>,
    source: Option<Tensor<1>>,
    heads: usize,
    scale: f32,
) -> (Tensor<2>, Tensor<3>) {
    let source = source.unwrap_or_else(|| Tensor::zeros([0], &q.device()));
    let (out, weights) = <Dispatch as AttentionStep>::heads_step(
        q.into_dispatch(),
        keys.into_dispatch(),
        values.into_dispatch(),
        mask.into_dispatch(),
        source.into_dispatch(),
        heads,
        scale,
    );
    (Tensor::from_dispatch(out), Tensor::from_dispatch(weights))
}

/// `c[b, :] = Σⱼ weights[b, j] values[b, j, :]`.
pub fn weighted_sum(weights: Tensor<2>, values: &Tensor<3>) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as AttentionStep>::weighted_sum(
        weights.into_dispatch(),
        values.clone().into_dispatch(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::max_diff;
    use burn::tensor::{Device, Distribution};

    /// Each kernel equals its equation composed from tensor operations (the vectorised `tanh`
    /// of [`crate::tanh`] in the additive score's), with a width that leaves a partial lane
    /// block and one that does not, on a contiguous memory and on a narrowed view.
    #[test]
    fn kernels_equal_the_composed_operations() {
        let d = Device::flex();
        d.seed(17);
        let rand = |dims: Vec<usize>| {
            Tensor::<3>::random([dims[0], dims[1], dims[2]], Distribution::Normal(0.0, 1.0), &d)
        };
        for (b, s, k, extra) in [(5, 7, 37, 0), (9, 3, 64, 0), (1, 1, 1, 0), (4, 6, 40, 2)] {
            // With `extra`, a narrowed view of a longer buffer (as the encoder's memory is),
            // read in place at its batch stride.
            let keys = rand(vec![b, s + extra, k]).narrow(1, 0, s);
            let q = rand(vec![b, 1, k]).squeeze_dim::<2>(1);
            let v = rand(vec![1, k, 1]).squeeze_dim::<2>(0);
            let w = rand(vec![b, 1, s]).squeeze_dim::<2>(1);
            // keys · q; vᵀ tanh(keys + q); Σⱼ wⱼ keysⱼ.
            let dot = (keys.clone() * q.clone().unsqueeze_dim::<3>(1)).sum_dim(2).squeeze_dim::<2>(2);
            let add = crate::tanh::tanh(keys.clone() + q.clone().unsqueeze_dim::<3>(1))
                .reshape([b * s, k])
                .matmul(v.clone())
                .reshape([b, s]);
            let sum = (w.clone().unsqueeze_dim::<3>(2) * keys.clone()).sum_dim(1).squeeze_dim::<2>(1);
            let pairs = [
                (dot_scores(q.clone(), &keys), dot),
                (additive_scores(q.clone(), &keys, v.clone()), add),
                (weighted_sum(w.clone(), &keys), sum),
            ];
            for (i, (fast, composed)) in pairs.into_iter().enumerate() {
                assert_eq!(fast.dims(), composed.dims(), "kernel {i}, {b}x{s}x{k}");
                assert!(max_diff(fast, composed) < 1e-5, "kernel {i}, {b}x{s}x{k}");
            }
        }
        // Under autodiff the table sends none of them to the kernels: the caller composes.
        let ad = d.autodiff();
        let q = Tensor::<2>::zeros([2, 3], &ad);
        let keys = Tensor::<3>::zeros([2, 4, 3], &ad);
        assert!(crate::ops::fast_dot_scores(&q, &keys).is_none());
        assert!(crate::ops::fast_additive_scores(&q, &keys, &Tensor::zeros([3, 1], &ad)).is_none());
        assert!(
            crate::ops::fast_attend(&Tensor::zeros([2, 4], &ad), &keys, &Tensor::zeros([2, 4], &ad))
                .is_none()
        );
    }

    /// A head's vector arrangement for `d_k` = 16, 32, 64 gives the general loop's bits: the
    /// same operations in the same order, on scores from one to past two blocks of positions
    /// and a masked position.
    #[test]
    fn head_blocks_equal_the_general_loop_to_the_bit() {
        let d = Device::flex();
        d.seed(5);
        for (nb, len) in [(1, 1), (2, 7), (2, 16), (2, 24), (4, 37), (1, 33)] {
            let dk = nb * LANES;
            let data = |n: usize| {
                Tensor::<1>::random([n], Distribution::Normal(0.0, 1.0), &d)
                    .into_data()
                    .try_to_vec::<f32>()
                    .unwrap()
            };
            let (q, keys, values) = (data(dk), data(len * dk), data(len * dk));
            // Position len/2 masked, unless it is the only one.
            let mask: Vec<f32> =
                (0..len).map(|j| if len > 1 && j == len / 2 { f32::NEG_INFINITY } else { 0.0 }).collect();
            let one = Head {
                q: &q,
                keys: &keys,
                key_at: |j| j * dk,
                values: &values,
                value_at: |j| j * dk,
                mask: &mask,
                scale: 1.0 / (dk as f32).sqrt(),
            };
            let (mut w1, mut o1, mut w2, mut o2) =
                (vec![0f32; len], vec![0f32; dk], vec![0f32; len], vec![0f32; dk]);
            one.general(&mut w1, &mut o1);
            match nb {
                1 => one.blocks::<1>(&mut w2, &mut o2),
                2 => one.blocks::<2>(&mut w2, &mut o2),
                _ => one.blocks::<4>(&mut w2, &mut o2),
            }
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&w1), bits(&w2), "weights, d_k {dk}, len {len}");
            assert_eq!(bits(&o1), bits(&o2), "output, d_k {dk}, len {len}");
        }
    }

    /// The decoding step's multi-head attention equals `softmax(QKᵀ/√d_k + M) V` composed
    /// from plain tensor operations (and unscaled, `softmax(QKᵀ + M) V`), on both layouts it
    /// reads in place: a self-attention cache with room beyond its length, and the halves of a
    /// `[K | V]` memory with a padding mask (−∞ on masked positions) per row.
    #[test]
    fn heads_step_equals_the_composed_attention() {
        let d = Device::flex();
        d.seed(23);
        let normal = Distribution::Normal(0.0, 1.0);
        let cases =
            [(5, 4, 8, 7, 16, true), (3, 2, 16, 1, 1, true), (6, 8, 4, 12, 12, true), (5, 4, 8, 7, 7, false)];
        for (rows, heads, dk, len, room, scaled) in cases {
            let scale = if scaled { 1.0 / (dk as f32).sqrt() } else { 1.0 };
            let q = Tensor::<2>::random([rows, heads * dk], normal, &d);
            let q4 = q.clone().reshape([rows, 1, heads, dk]).swap_dims(1, 2); // [rows, heads, 1, dk]
            // softmax(s·QKᵀ + M) V: [rows, heads, 1, d_k], the weights [rows, heads, 1, len].
            let composed = |k: Tensor<4>, v: Tensor<4>, m: Option<Tensor<4>>| {
                let mut scores = q4.clone().matmul(k.swap_dims(2, 3)) * scale;
                if let Some(m) = m {
                    scores = scores + m.expand([rows, heads, 1, len]);
                }
                let w = burn::tensor::activation::softmax(scores, 3);
                let o = w.clone().matmul(v).swap_dims(1, 2);
                (o.reshape([rows, heads * dk]), w.reshape([rows, heads, len]))
            };
            // The cache: [rows, heads, room, d_k], `len` positions in use.
            let (k, v) = (
                Tensor::<4>::random([rows, heads, room, dk], normal, &d),
                Tensor::<4>::random([rows, heads, room, dk], normal, &d),
            );
            let (k, v) = (k.narrow(2, 0, len), v.narrow(2, 0, len));
            let (out, w) =
                heads_step(q.clone(), k.clone(), v.clone(), Tensor::zeros([1, len], &d), None, heads, scale);
            let (o_ref, w_ref) = composed(k, v, None);
            assert!(
                max_diff(out, o_ref) < 1e-5 && max_diff(w, w_ref) < 1e-6,
                "cache {rows}x{heads}x{dk}x{len}"
            );
            // `[K | V]` `[rows, len, 2·heads·d_k]`, its halves read in place, rows masked apart.
            let kv = Tensor::<3>::random([rows, len, 2 * heads * dk], normal, &d);
            // Row r keeps its first max(1, len − r mod 3) positions (padding at the end).
            let kept = |r: usize| (len - (r % 3).min(len - 1)).max(1);
            let mask: Vec<f32> = (0..rows * len)
                .map(|e| if e % len < kept(e / len) { 0.0 } else { f32::NEG_INFINITY })
                .collect();
            let mask = Tensor::<2>::from_data(TensorData::new(mask, [rows, len]), &d);
            let (kh, vh) =
                (kv.clone().narrow(2, 0, heads * dk), kv.clone().narrow(2, heads * dk, heads * dk));
            let (out, w) = heads_step(q.clone(), kh.clone(), vh.clone(), mask.clone(), None, heads, scale);
            let split = |x: Tensor<3>| x.reshape([rows, len, heads, dk]).swap_dims(1, 2);
            let (o_ref, w_ref) =
                composed(split(kh.clone()), split(vh.clone()), Some(mask.clone().reshape([rows, 1, 1, len])));
            assert!(
                max_diff(out, o_ref) < 1e-5 && max_diff(w, w_ref) < 1e-6,
                "memory {rows}x{heads}x{dk}x{len}"
            );
            // Rows reading other rows through `source` (repeats allowed, as beams share their
            // sentence's row) get exactly what those rows picked out beforehand give.
            let picked: Vec<i64> = (0..rows as i64).map(|r| (r * 2 + 1) % rows as i64).collect();
            let source = Tensor::<1>::from_data(
                TensorData::new(picked.iter().map(|&i| i as f32).collect::<Vec<_>>(), [rows]),
                &d,
            );
            let picked = Tensor::<1, burn::tensor::Int>::from_data(TensorData::new(picked, [rows]), &d);
            let (o_src, w_src) =
                heads_step(q.clone(), kh.clone(), vh.clone(), mask.clone(), Some(source), heads, scale);
            let (o_sel, w_sel) = heads_step(
                q.clone(),
                kh.select(0, picked.clone()),
                vh.select(0, picked.clone()),
                mask.select(0, picked),
                None,
                heads,
                scale,
            );
            assert!(
                max_diff(o_src, o_sel) == 0.0 && max_diff(w_src, w_sel) == 0.0,
                "source rows {rows}x{heads}"
            );
        }
        // Under autodiff the table sends it to the equations: the caller composes.
        let ad = d.autodiff();
        let q = Tensor::<2>::zeros([1, 4], &ad);
        assert!(
            crate::ops::heads_step(
                q,
                Tensor::<3>::zeros([1, 2, 4], &ad),
                Tensor::<3>::zeros([1, 2, 4], &ad),
                Tensor::zeros([1, 2], &ad),
                None,
                2,
                1.0
            )
            .is_none()
        );
    }
}
