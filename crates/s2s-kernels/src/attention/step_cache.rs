//! A Transformer decoder's self-attention cache: the keys and values of the positions decoded
//! so far, per hypothesis, grown by one position a step and reordered by beam search after
//! every step. One type, two layouts, picked by where it runs:
//!
//! - **by row** (`[rows, heads, room, d_k]`, positions `0..len` in use): an appended step is
//!   written into the room (in place: burn's CPU backend writes a tensor it owns alone), the
//!   room doubles when full, and reordering selects rows (a copy of each kept row). On a GPU,
//!   under autodiff, under the references.
//! - **as a tree** (CPU decoding): each step's keys and values are written once, time-major
//!   (`[room, width, heads, d_k]`: position `j` of every row in slab `j`), and each row keeps
//!   the rows its positions lie in (its ancestry). Reordering copies those short lists, not the
//!   keys: hypotheses that share a prefix share its keys, as in a prefix tree. The attention
//!   kernel reads row `r`'s position `j` from row `ancestry[r][j]` of slab `j`
//!   ([`crate::attention::step`]'s source per position). Copying every kept row's keys and
//!   values at every step (by row) was 5–7 % of a beam-5 profile on the benchmark shape
//!   (320 rows × 3 layers × 2 × up to 3 MB), and the rows' copies crowded the cache the
//!   attention reads.
//!
//! Both give the attention the same values at the same positions, so the same bits. A test
//! grows both layouts through beam openings and reorderings against a concatenation of the
//! steps, attention included. The memory is shared the same way: `SourceRows` names the
//! sentence whose memory each decoding row reads, one copy per sentence on the CPU.
//!
//! # Shapes
//! - keys and values in and out: `[rows, heads, t, d_k]`

use burn::tensor::{Int, Tensor, TensorData};

/// Positions a cache makes room for at first.
const FIRST_ROOM: usize = 16;

/// See the [module](self).
#[derive(Debug, Clone)]
pub struct StepCache {
    layout: Layout,
    len: usize,
}

#[derive(Debug, Clone)]
enum Layout {
    /// `[rows, heads, room, d_k]`.
    Rows { k: Tensor<4>, v: Tensor<4> },
    /// `[room, width, heads, d_k]`; `ancestry[r]` holds the row of each position of row `r`.
    Tree { k: Tensor<4>, v: Tensor<4>, ancestry: Vec<Vec<u32>> },
}

impl StepCache {
    /// A cache holding `k`, `v` (`[rows, heads, t, d_k]`, every position in use): by row (no
    /// copy), until the first [`append`](Self::append) where the attention kernel reads a tree
    /// ([`crate::ops::heads_step_runs`]).
    pub fn new(k: Tensor<4>, v: Tensor<4>) -> Self {
        let len = k.dims()[2];
        Self { layout: Layout::Rows { k, v }, len }
    }

    /// Positions in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no position is in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Rows (hypotheses).
    pub fn rows(&self) -> usize {
        match &self.layout {
            Layout::Rows { k, .. } => k.dims()[0],
            Layout::Tree { ancestry, .. } => ancestry.len(),
        }
    }

    /// Appends `k`, `v` (`[rows, heads, t, d_k]`) along time.
    pub fn append(self, k: Tensor<4>, v: Tensor<4>) -> Self {
        let t = k.dims()[2];
        let len = self.len;
        let layout = match self.layout {
            Layout::Rows { k: ck, v: cv } if crate::ops::heads_step_runs(&ck.device()) => {
                // The positions in use as time-major views; the append grows them into room.
                let ancestry = (0..ck.dims()[0] as u32).map(|r| vec![r; len]).collect();
                let time_major = |x: Tensor<4>| x.narrow(2, 0, len).permute([2, 0, 1, 3]);
                Self::tree_append(time_major(ck), time_major(cv), ancestry, len, k, v)
            }
            Layout::Rows { k: ck, v: cv } => {
                let [rows, heads, room, dk] = ck.dims();
                let (mut ck, mut cv) = (ck, cv);
                if len + t > room {
                    let room = (2 * room).max(len + t).max(FIRST_ROOM);
                    let grow = |x: Tensor<4>| {
                        Tensor::zeros([rows, heads, room, dk], &x.device())
                            .slice_assign([0..rows, 0..heads, 0..len, 0..dk], x.narrow(2, 0, len))
                    };
                    (ck, cv) = (grow(ck), grow(cv));
                }
                let at = [0..rows, 0..heads, len..len + t, 0..dk];
                Layout::Rows { k: ck.slice_assign(at.clone(), k), v: cv.slice_assign(at, v) }
            }
            Layout::Tree { k: ck, v: cv, ancestry } => Self::tree_append(ck, cv, ancestry, len, k, v),
        };
        Self { layout, len: len + t }
    }

    /// Writes `k`, `v` (`[rows, heads, t, d_k]`) as slabs `len..len + t` of the time-major
    /// `ck`, `cv`, room and width grown (doubled) first when short; each row's new positions
    /// lie in its own row.
    fn tree_append(
        ck: Tensor<4>,
        cv: Tensor<4>,
        mut ancestry: Vec<Vec<u32>>,
        len: usize,
        k: Tensor<4>,
        v: Tensor<4>,
    ) -> Layout {
        let [rows, heads, t, dk] = k.dims();
        let [room, width, _, _] = ck.dims();
        let (mut ck, mut cv) = (ck, cv);
        if len + t > room || rows > width {
            let (room2, width2) = ((2 * room).max(len + t).max(FIRST_ROOM), width.max(rows));
            let grow = |x: Tensor<4>| {
                Tensor::zeros([room2, width2, heads, dk], &x.device())
                    .slice_assign([0..len, 0..width, 0..heads, 0..dk], x.narrow(0, 0, len))
            };
            (ck, cv) = (grow(ck), grow(cv));
        }
        let at = [len..len + t, 0..rows, 0..heads, 0..dk];
        let ck = ck.slice_assign(at.clone(), k.permute([2, 0, 1, 3]));
        let cv = cv.slice_assign(at, v.permute([2, 0, 1, 3]));
        assert_eq!(ancestry.len(), rows, "StepCache: {rows} rows appended to a cache of {}", ancestry.len());
        for (r, a) in ancestry.iter_mut().enumerate() {
            a.extend(std::iter::repeat_n(r as u32, t));
        }
        Layout::Tree { k: ck, v: cv, ancestry }
    }

    /// Keeps rows `picked` (equal to `indices`, held by the host), repeats allowed: beam
    /// search's reordering. As a tree, only the ancestries are copied.
    pub fn select(self, indices: &Tensor<1, Int>, picked: &[usize]) -> Self {
        let layout = match self.layout {
            Layout::Rows { k, v } => {
                Layout::Rows { k: k.select(0, indices.clone()), v: v.select(0, indices.clone()) }
            }
            Layout::Tree { k, v, ancestry } => {
                Layout::Tree { k, v, ancestry: picked.iter().map(|&p| ancestry[p].clone()).collect() }
            }
        };
        Self { layout, ..self }
    }

    /// The keys in use, `[rows, heads, len, d_k]`: a view by row; gathered as a tree.
    pub fn keys(&self) -> Tensor<4> {
        match &self.layout {
            Layout::Rows { k, .. } => k.clone().narrow(2, 0, self.len),
            Layout::Tree { k, ancestry, .. } => self.gather(k, ancestry),
        }
    }

    /// The values in use, `[rows, heads, len, d_k]` (as [`keys`](Self::keys)).
    pub fn values(&self) -> Tensor<4> {
        match &self.layout {
            Layout::Rows { v, .. } => v.clone().narrow(2, 0, self.len),
            Layout::Tree { v, ancestry, .. } => self.gather(v, ancestry),
        }
    }

    /// Row `r`'s positions from the time-major `x`, `[rows, heads, len, d_k]`.
    fn gather(&self, x: &Tensor<4>, ancestry: &[Vec<u32>]) -> Tensor<4> {
        let [_, _, heads, dk] = x.dims();
        let rows = ancestry.len();
        let steps = (0..self.len)
            .map(|j| {
                let idx: Vec<i64> = ancestry.iter().map(|a| a[j] as i64).collect();
                let idx = Tensor::<1, Int>::from_data(TensorData::new(idx, [rows]), &x.device());
                x.clone()
                    .narrow(0, j, 1)
                    .reshape([x.dims()[1], heads, dk])
                    .select(0, idx)
                    .unsqueeze_dim::<4>(2)
            })
            .collect();
        Tensor::cat(steps, 2)
    }

    /// Attention of one query position per row to the cache, no mask, scores times `scale`
    /// (`1/√d_k`, or 1 unscaled): `q` `[rows, heads·d_k]`
    /// → (output `[rows, heads·d_k]`, weights `[rows, heads, len]`) from the CPU kernel
    /// ([`crate::ops::heads_step`]) reading the cache where it lies; `None` where the kernel
    /// does not run (compose the operations on [`keys`](Self::keys) and
    /// [`values`](Self::values)).
    pub fn attend(&self, q: Tensor<2>, heads: usize, scale: f32) -> Option<(Tensor<2>, Tensor<3>)> {
        let device = q.device();
        if !crate::ops::heads_step_runs(&device) {
            return None; // before making a mask the kernel would not read
        }
        let mask = Tensor::zeros([1, self.len], &device);
        match &self.layout {
            Layout::Rows { .. } => {
                crate::ops::heads_step(q, self.keys(), self.values(), mask, None, heads, scale)
            }
            Layout::Tree { k, v, ancestry } => {
                // `[width, heads, len, d_k]` views of the time-major slabs.
                let view = |x: &Tensor<4>| x.clone().narrow(0, 0, self.len).permute([1, 2, 0, 3]);
                let rows: Vec<f32> = ancestry.iter().flat_map(|a| a.iter().map(|&r| r as f32)).collect();
                let source =
                    Tensor::<1>::from_data(TensorData::new(rows, [ancestry.len() * self.len]), &device);
                crate::ops::heads_step(q, view(k), view(v), mask, Some(source), heads, scale)
            }
        }
    }
}

/// Which encoded sentence each decoding row reads its memory (cross-attention keys, values
/// and mask) from, and how tensors kept per row follow a reordering. Where the attention kernel
/// runs (the CPU) the memory keeps one row per sentence and each row reads its sentence's
/// through an index, so a beam's hypotheses share one copy (replicated per hypothesis and layer
/// it was 47 MB a step at beam 5 on the bench shape); elsewhere the memory keeps one row per
/// decoding row, copied only when a reordering changes a row's sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceRows {
    origin: Vec<usize>,
    shared: bool,
}

impl SourceRows {
    /// One row per sentence of a batch of `sentences`, on `device`.
    pub fn new(sentences: usize, device: &burn::tensor::Device) -> Self {
        Self { origin: (0..sentences).collect(), shared: crate::ops::heads_step_runs(device) }
    }

    /// Rows.
    pub fn len(&self) -> usize {
        self.origin.len()
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.origin.is_empty()
    }

    /// The rows after keeping rows `picked` (repeats allowed), and whether tensors kept one row
    /// per decoding row (the memory, its mask) must be reordered the same way.
    pub fn select(&self, picked: &[usize]) -> (Self, bool) {
        let origin: Vec<usize> = picked.iter().map(|&i| self.origin[i]).collect();
        let copy = !self.shared && origin != self.origin;
        (Self { origin, shared: self.shared }, copy)
    }

    /// Row `r`'s sentence as an index tensor on `device` when the memory is shared (the
    /// attention reads row `r` from there); `None` when each row holds its own.
    pub fn sources(&self, device: &burn::tensor::Device) -> Option<Tensor<1, Int>> {
        self.shared.then(|| {
            let rows: Vec<i64> = self.origin.iter().map(|&o| o as i64).collect();
            Tensor::from_data(TensorData::new(rows, [self.origin.len()]), device)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, Distribution};

    /// Rows read their sentence's memory through an index where the kernel runs; elsewhere
    /// tensors kept per row are reordered only when a row's sentence changes.
    #[test]
    fn source_rows_share_the_memory_where_the_kernel_runs() {
        let cpu = Device::flex();
        let shared = SourceRows::new(2, &cpu);
        let (beams, copy) = shared.select(&[0, 0, 1, 1, 1]);
        assert!(!copy && beams.len() == 5);
        let idx =
            beams.sources(&cpu).expect("shared").into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
        assert_eq!(idx, vec![0, 0, 1, 1, 1]);
        let (within, copy) = beams.select(&[1, 0, 4, 2, 2]);
        assert!(!copy && within.len() == 5);
        let own = SourceRows::new(2, &cpu.clone().autodiff());
        assert!(own.sources(&cpu).is_none());
        let (beams, copy) = own.select(&[0, 0, 1, 1, 1]);
        assert!(copy, "rows change sentence: the per-row memory follows");
        let (_, copy) = beams.select(&[1, 0, 4, 2, 3]);
        assert!(!copy, "reordered within each sentence: nothing to copy");
    }

    /// A cache grown one step at a time past its first room and past a doubling, with beam
    /// reorderings on the way (rows repeated, dropped, and more rows than before, as beam
    /// search's first step makes), holds what concatenating the steps gives, in both layouts;
    /// and its attention equals the composed operations on those keys and values.
    #[test]
    fn growing_cache_equals_concatenation_in_both_layouts() {
        use crate::mode::{Kernels, with};
        let d = Device::flex();
        d.seed(11);
        let (heads, dk) = (2, 4);
        // (step, picked rows): 3 rows → 5 at step 1 (a beam opening), then reorderings.
        let orders: [(usize, Vec<usize>); 3] =
            [(1, vec![2, 0, 0, 1, 2]), (6, vec![4, 4, 1, 0, 3]), (17, vec![0, 1, 2, 3, 3])];
        for kernels in [Kernels::Fast, Kernels::Reference] {
            with(kernels, || {
                let step = |rows: usize| {
                    Tensor::<4>::random([rows, heads, 1, dk], Distribution::Normal(0.0, 1.0), &d)
                };
                let (k0, v0) = (step(3), step(3));
                let mut cache = StepCache::new(k0.clone(), v0.clone());
                let (mut ks, mut vs) = (vec![k0], vec![v0]);
                for t in 1..(2 * FIRST_ROOM + 3) {
                    if let Some((_, picked)) = orders.iter().find(|(at, _)| *at == t) {
                        let idx = Tensor::<1, Int>::from_data(
                            TensorData::new(
                                picked.iter().map(|&i| i as i64).collect::<Vec<_>>(),
                                [picked.len()],
                            ),
                            &d,
                        );
                        cache = cache.select(&idx, picked);
                        ks = ks.into_iter().map(|x| x.select(0, idx.clone())).collect();
                        vs = vs.into_iter().map(|x| x.select(0, idx.clone())).collect();
                    }
                    let rows = ks[0].dims()[0];
                    let (k, v) = (step(rows), step(rows));
                    cache = cache.append(k.clone(), v.clone());
                    ks.push(k);
                    vs.push(v);
                    assert_eq!((cache.len(), cache.rows()), (t + 1, rows));
                    let (want_k, want_v) = (Tensor::cat(ks.clone(), 2), Tensor::cat(vs.clone(), 2));
                    assert_eq!(
                        cache.keys().into_data(),
                        want_k.clone().into_data(),
                        "{kernels:?}: keys after step {t}"
                    );
                    assert_eq!(
                        cache.values().into_data(),
                        want_v.clone().into_data(),
                        "{kernels:?}: values after {t}"
                    );
                    let q = Tensor::<2>::random([rows, heads * dk], Distribution::Normal(0.0, 1.0), &d);
                    let mask = Tensor::zeros([1, t + 1], &d);
                    match (
                        cache.attend(q.clone(), heads, 0.5),
                        crate::ops::heads_step(q, want_k, want_v, mask, None, heads, 0.5),
                    ) {
                        (Some((o, w)), Some((o_ref, w_ref))) => {
                            assert_eq!(o.into_data(), o_ref.into_data(), "{kernels:?}: output after {t}");
                            assert_eq!(w.into_data(), w_ref.into_data(), "{kernels:?}: weights after {t}");
                        }
                        (None, None) => assert_eq!(kernels, Kernels::Reference),
                        _ => panic!("{kernels:?}: the cache's attention and the kernel disagree on running"),
                    }
                }
            });
        }
    }
}
