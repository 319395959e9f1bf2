//! The LSTM cell's gate math as one CPU kernel, forward and backward.
//!
//! From the pre-activation gates `[i f g o] = x W_x + h W_h + b` and the memory cell `c`:
//!
//! `c' = σ(f)⊙c + σ(i)⊙tanh(g)`, `h' = σ(o)⊙tanh(c')` (Hochreiter & Schmidhuber, 1997)
//!
//! and back, with `t = tanh(c')`, from `∂h'` and `∂c'`:
//!
//! `∂c'ₜₒₜ = ∂c' + ∂h'⊙σ(o)⊙(1 − t²)`; `∂i = ∂c'ₜₒₜ⊙tanh(g)⊙σ(i)(1 − σ(i))`;
//! `∂f = ∂c'ₜₒₜ⊙c⊙σ(f)(1 − σ(f))`; `∂g = ∂c'ₜₒₜ⊙σ(i)⊙(1 − tanh²(g))`;
//! `∂o = ∂h'⊙t⊙σ(o)(1 − σ(o))`; `∂c = ∂c'ₜₒₜ⊙σ(f)`.
//!
//! Composed from burn's tensor operations this is ~12 operations forward and more backward per
//! step, each allocating a tensor and calling scalar `expf`/`tanhf` (flex's `sigmoid` branches per
//! element and does not vectorise). Here it is one pass over the gates each way, through a
//! branch-free `exp` the compiler vectorises, registered with burn's autodiff as one node: a
//! `#[backend_extension]` for flex (and flex under autodiff). On wgpu the same equations run as
//! cubecl kernels ([`crate::lstm::gpu`]). The tests hold both to the equations composed from
//! burn's operations (as the models write them in `RecurrentCell::step`, which is what
//! `--kernels reference` and builds with burn's fusion, `gpu-tuned`, run).
//!
//! # The layer
//!
//! [`lstm_layer`] runs one layer and direction over a padded sequence as one kernel and one
//! autodiff node: per step one `h W_h` product ([`crate::gemm::packed`]) and the gate math in
//! one vectorised pass, no node per operation; backward one `∂gates W_hᵀ` product per step and
//! `∂W_h` as one product over all steps.
//!
//! - **Threads.** The hidden units are cut into one group per thread, each holding all four
//!   gates of a contiguous range of units, so a step is one product per thread (`gemm` runs a
//!   64-row product at single-thread speed); the threads run in lockstep, each waiting only
//!   for the buffers it reads ([`crate::lstm::lockstep`]) and gathering them (its own first)
//!   into the whole state, which it multiplies in one product for its own columns: a sum of
//!   per-group products would round by where the groups are cut, so by the thread count. Both
//!   directions double-buffer what crosses threads (`h` forward, `∂gates` backward). The
//!   groups are static: sharing a step's units in chunks that the threads take as they go cut
//!   the waits but made the gate pass slower on short rows, and sharing only the products gave
//!   equal or higher medians: no gain the VM's noise lets us show.
//! - **Packing and gathering.** Each worker packs its own group's `W_h` blocks as it starts
//!   (one fork fewer than packing on rayon's pool first), and gathers the state rows `h_0`,
//!   `c_0` with one slice copy a row. The backward `W_hᵀ` is transposed through a 16 × 16 tile
//!   (`transpose`): reading `W_h` by columns put each write 1 KiB apart in four L1 sets.
//! - **Outputs written once.** Each group writes its units' columns of the layer's outputs,
//!   the saved `h_{t−1}` and (backward) `∂gates` straight into the full-width buffers,
//!   allocated without zeroing (`Unzeroed`) and written through raw pointers, never through a
//!   reference to unwritten memory: the workers write every element of every step they run,
//!   zeros on padded rows, and the steps no row reaches are zeroed at the end.
//! - **The gate math runs one activation at a time over chunks of 64 units** (`CHUNK`), not
//!   unit by unit: each unit's math is a ~70-operation dependency chain, and unit by unit a
//!   loop iteration was too long for the reorder buffer to overlap two of them. The same
//!   operations per unit in the same order, so the same bits; tested against the unit-by-unit
//!   path. Row inputs that lie a sentence apart (`x W_x`, saved gates) are prefetched two rows
//!   ahead (`AHEAD`). `x W_x` is added inside the gate math, chunk by chunk, in the same order
//!   as a separate pass would (same bits), and each chunk's activations go to a `keep`
//!   callback that saves them for backward.
//! - **What backward alone reads is written with non-temporal stores** (`stream_units`: the
//!   saved `h_{t−1}`, `c_{t−1}` and gate activations; each worker fences before the join), so
//!   384 KiB a step and thread do not evict `W_h`'s panels. The layer output and the backward
//!   `∂gates` are written normally: they are read soon after, and more write streams than the
//!   CPU's write-combining buffers flush partially (streaming them measured slower).
//! - **The layer saves the gates' activations, not their pre-activations**: `[σ(i), σ(f),
//!   tanh(g), σ(o)]` are computed forward anyway and take the same room, and the backward gate
//!   math then recomputes only `tanh(c')`: one `exp` and division a unit instead of five. The
//!   same bits as recomputing them (tested). The single-step [`lstm_gates`] (attention
//!   decoders) still recomputes: saving would add a buffer to every decoder step for a smaller
//!   share of its time.
//! - **`h_T` and `c_T` are narrowed out of the layer output together, then apart**: burn turns
//!   each narrow's gradient into a zeroed tensor the size of what it narrowed, added to the
//!   others', so every narrow of the `[batch, time + 2, hidden]` output costs two passes over
//!   it in backward.
//!
//! Tried and not kept:
//!
//! - the gate math inside the product (16 units' four gates in four neighbouring panels, their
//!   gate math run while in L1): the training forward pass got slower (its ratio to the best
//!   product rate 0.70–0.78 → 0.51–0.64), since the gate math on 16-unit pieces cost more than
//!   over whole rows, and the product lost time to the inputs and outputs the gate math
//!   brought through L1/L2;
//! - prefetching four rows ahead instead of two; prefetching `W_h` while packing (packing is
//!   bound by reading `W_h` from memory, which each call's saved buffers evict);
//! - packing the forward `W_h` straight from its rows, a panel's 16 floats at a time: the
//!   reads then stride 8 KiB, slower than the block copy's 1 KiB runs;
//! - two interleaved half-batches, so that one half's streamed stores drain while the other
//!   half's product runs: the `[32, 512] × [512, 2048]` product runs at ~85 % of the 64-row
//!   one's rate (each half streams all of `W_h` from L3), far more than the ≤ 4 % the stores
//!   cost;
//! - not built: recomputing `h_{t−1} = o_{t−1}·tanh(c_{t−1})` in backward instead of saving
//!   it: a sixth of the saved bytes (≤ 0.7 % of the training forward pass), but it needs each
//!   row's next real step under arbitrary masks and moves the write to backward.
//!
//! # Shapes
//! - gates: `[batch, 4·hidden]`, `c`: `[batch, hidden]` → `[h' | c']`: `[batch, 2·hidden]`

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::flex::FlexTensor;
use burn::backend::ops::FloatTensorOps;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::tensor::{Shape, Tensor, TensorData};

use crate::cpu::fastmath::{LANES, chunk, chunk_mut, sigmoid, tanh};
use std::ops::Range;

use crate::cpu::flex_data::{contiguous, f32s};
use crate::gemm::packed::{PackedB, SendPtr, transpose};
use crate::lstm::lockstep::{self, Progress, Slot};
use crate::own_backward::WithBackward;

/// The fused gate math as a burn backend extension (flex only; see the module doc).
#[backend_extension(Flex, Autodiff)]
pub trait LstmGates: burn::backend::Backend {
    /// `[h' | c']` (`[batch, 2·hidden]`) from `gates` (`[batch, 4·hidden]`) and `c`.
    fn lstm_gates(gates: FloatTensor<Self>, c: FloatTensor<Self>) -> FloatTensor<Self>;

    /// A whole LSTM layer in one direction (see [`lstm_layer`]): `[outputs | h_T | c_T]`,
    /// `[batch, time + 2, hidden]`.
    fn lstm_layer(
        xw: FloatTensor<Self>,
        w_hidden: FloatTensor<Self>,
        h0: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        keep: FloatTensor<Self>,
        dense: usize,
        reverse: bool,
    ) -> FloatTensor<Self>;
}

impl LstmGates for Flex {
    fn lstm_gates(gates: FlexTensor, c: FlexTensor) -> FlexTensor {
        let (g, c, [batch, h]) = operands(&gates, &c);
        let mut out = vec![0f32; batch * 2 * h];
        for ((g, c), out) in g.chunks_exact(4 * h).zip(c.chunks_exact(h)).zip(out.chunks_exact_mut(2 * h)) {
            let (h_out, c_out) = out.split_at_mut(h);
            c_out.copy_from_slice(c);
            cell_forward(g, c_out, h_out);
        }
        FlexTensor::from_data(TensorData::new(out, [batch, 2 * h]))
    }

    fn lstm_layer(
        xw: FlexTensor,
        w_hidden: FlexTensor,
        h0: FlexTensor,
        c0: FlexTensor,
        keep: FlexTensor,
        dense: usize,
        reverse: bool,
    ) -> FlexTensor {
        layer_forward(&Layer::new(&xw, w_hidden, &keep, dense, reverse), &h0, &c0, false).0
    }
}

impl<C: CheckpointStrategy> LstmGates for Autodiff<Flex, C> {
    fn lstm_gates(gates: FloatTensor<Self>, c: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::with_backward(
            [gates, c],
            // Keeps the forward inputs; the activations are recomputed (cheaper than storing four).
            |[gates, c], keep| (Flex::lstm_gates(gates.clone(), c.clone()), keep.then_some((gates, c))),
            |(gates, c), dy, _| {
                let (d_gates, d_c) = backward(&gates, &c, &dy);
                [Some(d_gates), Some(d_c)]
            },
        )
    }

    fn lstm_layer(
        xw: FloatTensor<Self>,
        w_hidden: FloatTensor<Self>,
        h0: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        keep: FloatTensor<Self>,
        dense: usize,
        reverse: bool,
    ) -> FloatTensor<Self> {
        let keep = keep.into_primitive();
        Self::with_backward(
            [xw, w_hidden, h0, c0],
            |[xw, w, h0, c0], track| {
                let layer = Layer::new(&xw, w, &keep, dense, reverse);
                let (out, saved) = layer_forward(&layer, &h0, &c0, track);
                // The layer (inputs, mask, direction) and what its forward pass saved.
                (out, saved.map(|saved| (layer, saved)))
            },
            |(layer, saved), dy, _| layer_backward(&layer, saved, &dy).map(Some),
        )
    }
}

/// One direction of one LSTM layer over a padded batch, as the kernels see it.
#[derive(Debug, Clone)]
struct Layer {
    /// Projected inputs `x W_x + b`, `[batch, time, 4·hidden]`, contiguous (shared with the
    /// caller's tensor, not copied).
    xw: FlexTensor,
    /// `W_h`, `[hidden, 4·hidden]`.
    w: FlexTensor,
    /// 1 on real tokens, `[batch, time]`.
    keep: Vec<f32>,
    batch: usize,
    time: usize,
    hidden: usize,
    dense: usize,
    reverse: bool,
}

impl Layer {
    fn new(xw: &FlexTensor, w: FlexTensor, keep: &FlexTensor, dense: usize, reverse: bool) -> Self {
        let [batch, time, four_h] = xw.layout().shape().dims::<3>();
        Self {
            xw: contiguous(xw),
            w,
            keep: f32s(keep).into_owned(),
            batch,
            time,
            hidden: four_h / 4,
            dense,
            reverse,
        }
    }

    fn xw(&self) -> &[f32] {
        self.xw.as_slice::<f32>().expect("contiguous f32 inputs")
    }

    /// Time steps in the order the layer runs them.
    fn order(&self) -> impl DoubleEndedIterator<Item = usize> + '_ {
        (0..self.time).map(|s| if self.reverse { self.time - 1 - s } else { s })
    }

    /// Whether row `b` has a real token at `t` (positions before `dense` are real in every row).
    fn real(&self, b: usize, t: usize) -> bool {
        t < self.dense || self.keep[b * self.time + t] > 0.5
    }
}

/// What the backward pass needs from the forward one: `h_{t−1}` `[batch, time, hidden]`, and
/// per group of units (as the forward pass cut them) the gates' activations
/// `[σ(i), σ(f), tanh(g), σ(o)]` `[batch, time, 4·|U|]` and `c_{t−1}` `[batch, time, |U|]`.
/// (Activations, not pre-activations: the same number of floats, and the backward gate math
/// then recomputes one `tanh` a unit instead of five `exp`s and divisions.)
#[derive(Debug, Clone)]
struct Saved {
    h_prev: Vec<f32>,
    groups: Vec<(Range<usize>, Vec<f32>, Vec<f32>)>,
}

/// The hidden units cut into one contiguous range per thread (at least 8 units each), so each
/// thread computes the gates of its own units: one `[batch, hidden] × [hidden, 4·|U|]` product
/// per thread and step instead of a 64-row product that one thread runs at half speed.
fn unit_groups(hidden: usize, threads: usize) -> Vec<Range<usize>> {
    let g = threads.min(hidden / 8).max(1);
    (0..g).map(|i| i * hidden / g..(i + 1) * hidden / g).collect()
}

/// `W_h` packed for group `i`'s forward pass: the whole state (`hidden` rows, in unit order)
/// into the four gates of group `i` (columns `g·hidden + u`, `g` ∈ 0..4, `u` ∈ `U_i`), laid
/// out `[i f g o]` over `U_i`: group `i`'s gates are `h · packed`, one product over every unit
/// of `h`, so each gate sums in the order it does with one group, whatever the groups (a sum
/// of per-group products would round by where the groups are cut, i.e. by the thread count).
/// Each lockstep worker packs its own group's as it starts, instead of a fork onto rayon's
/// pool (whose threads had to be woken) before the workers start.
fn pack_forward(w: &[f32], h: usize, ui: &Range<usize>) -> PackedB {
    let n = ui.len();
    PackedB::from_rows(h, 4 * n, |r, row| {
        let src = &w[r * 4 * h..(r + 1) * 4 * h];
        for (g, dst) in row.chunks_exact_mut(n).enumerate() {
            dst.copy_from_slice(&src[g * h + ui.start..g * h + ui.end]);
        }
    })
}

/// `W_hᵀ` packed for group `i`'s backward pass: every gate gradient (`4·hidden` rows, `[i f g
/// o]` over all units, as `∂gates` is laid out) into `∂h[:, U_i]`, one product (see
/// [`pack_forward`]). Row `r` of the packed matrix is column `r` of `W_h`, read along `W_h`'s
/// rows `U_i`.
fn pack_backward(w: &[f32], h: usize, ui: &Range<usize>) -> PackedB {
    let m = ui.len();
    PackedB::from_row_blocks(4 * h, m, |rows, block| {
        transpose(&w[ui.start * 4 * h..], 4 * h, rows.start, m, rows.len(), block, m);
    })
}

/// Copies a group's `[rows, |U|]` block into columns `U` of a `[rows, hidden]` matrix (what
/// [`gather`] takes out).
fn scatter(dst: &mut [f32], hidden: usize, units: &Range<usize>, part: &[f32]) {
    let n = units.len();
    if n == 0 {
        return;
    }
    for (row, src) in dst.chunks_exact_mut(hidden).zip(part.chunks_exact(n)) {
        row[units.clone()].copy_from_slice(src);
    }
}

/// Writes `src` at `dst + at`.
///
/// # Safety
/// `dst` points into a live buffer with `at + src.len()` elements, and no other thread
/// touches those elements meanwhile.
unsafe fn write_units(dst: &SendPtr, at: usize, src: &[f32]) {
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0.add(at), src.len()) };
}

/// As [`write_units`], with non-temporal stores where the CPU has them (x86-64: SSE's
/// `movntps` on the 16-byte aligned middle): for what is written once and read only after
/// the layer.
///
/// # Safety
/// As [`write_units`]; the writing thread calls [`stream_fence`] before the buffer is read.
unsafe fn stream_units(dst: &SendPtr, at: usize, src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    unsafe {
        use std::arch::x86_64::{_mm_loadu_ps, _mm_stream_ps};
        let p = dst.0.add(at);
        let head = p.align_offset(16).min(src.len());
        let body = (src.len() - head) / 4 * 4;
        std::ptr::copy_nonoverlapping(src.as_ptr(), p, head);
        for k in (head..head + body).step_by(4) {
            _mm_stream_ps(p.add(k), _mm_loadu_ps(src.as_ptr().add(k)));
        }
        let tail = head + body;
        std::ptr::copy_nonoverlapping(src.as_ptr().add(tail), p.add(tail), src.len() - tail);
    }
    #[cfg(not(target_arch = "x86_64"))]
    unsafe {
        write_units(dst, at, src)
    };
}

/// Orders this thread's [`stream_units`] before its later stores (the release that hands the
/// buffers on).
fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Writes `len` zeros at `dst + at`.
///
/// # Safety
/// As [`write_units`].
unsafe fn zero_units(dst: &SendPtr, at: usize, len: usize) {
    unsafe { std::ptr::write_bytes(dst.0.add(at), 0, len) };
}

/// A `[batch, time, width]` buffer that the layer's workers fill through raw pointers
/// ([`write_units`], [`zero_units`]), allocated without zeroing. On the lstm bench shape,
/// zeroing what a training layer call outputs and saves (~20 MiB) took ~1.9 ms of a ~16 ms
/// forward pass, and zeroing `∂gates` (12 MiB) ~4 ms of the backward one, almost all of it for
/// elements written right after. The workers write every element of every step they run
/// (padded rows included); [`Unzeroed::finish`] zeroes the others.
struct Unzeroed {
    buf: Vec<f32>,
    ptr: SendPtr,
    batch: usize,
    time: usize,
    width: usize,
}

impl Unzeroed {
    fn new(batch: usize, time: usize, width: usize) -> Self {
        let mut buf = Vec::with_capacity(batch * time * width);
        let ptr = SendPtr(buf.as_mut_ptr());
        Self { buf, ptr, batch, time, width }
    }

    /// The buffer, with time steps not in `written` (of every row) set to zero.
    ///
    /// # Safety
    /// Every element of the steps in `written` has been written, and no worker writes any more.
    unsafe fn finish(mut self, written: &[usize]) -> Vec<f32> {
        let (t_n, w) = (self.time, self.width);
        let mut done = vec![false; t_n];
        for &t in written {
            done[t] = true;
        }
        for t in (0..t_n).filter(|&t| !done[t]) {
            for b in 0..self.batch {
                // SAFETY: within the capacity; nothing else writes now.
                unsafe { zero_units(&self.ptr, (b * t_n + t) * w, w) };
            }
        }
        // SAFETY: every element is written (by the workers, or above).
        unsafe { self.buf.set_len(self.batch * t_n * w) };
        self.buf
    }
}

/// Columns `U` of the rows `rows` of `src`, a matrix with rows `width` long: one slice copy a
/// row into a buffer sized once. (Collected element by element through `flat_map`, whose size
/// hint is 0, the buffer grew by doubling: gathering `h_0` and `c_0` for a forward layer call
/// on the lstm bench shape took a median of ~370 thousand TSC cycles, now ~200 with the
/// buffers around them.)
fn gather(
    src: &[f32],
    width: usize,
    rows: impl ExactSizeIterator<Item = usize>,
    units: &Range<usize>,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows.len() * units.len());
    for r in rows {
        out.extend_from_slice(&src[r * width + units.start..r * width + units.end]);
    }
    out
}

/// Rows ahead of the one being worked on whose inputs the gate passes ask the cache for: a
/// row's slices of a `[batch, time, ·]` buffer lie a whole sentence apart, too far for the
/// hardware prefetchers to follow. On the lstm bench shape (2-core AVX2 VM, phase timers) the
/// forward pass's input add (reading `xw`) went from a median of ~200 to ~150 thousand TSC
/// cycles a step per thread, and the backward gate pass (reading the saved gates, `c_{t−1}`
/// and `∂h_t`) from 694–996 to 528–720.
const AHEAD: usize = 2;

/// Asks for the cache lines of `x` to be fetched into L1 (a hint: it never faults, and it does
/// nothing on other architectures).
#[inline(always)]
fn prefetch(x: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    for line in x.chunks(16) {
        // SAFETY: a prefetch only reads, and never faults whatever the address.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.as_ptr().cast())
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// One thread's share of the forward pass: its units' state and what it saves.
struct ForwardGroup {
    units: Range<usize>,
    c: Vec<f32>,
    gates: Vec<f32>,
    /// Saved for backward (empty when not saving): the gates' activations
    /// `[batch, time, 4·|U|]` and `c_{t−1}` `[batch, time, |U|]` (`h_{t−1}` goes to the layer's
    /// buffer directly).
    s_gates: Unzeroed,
    s_c: Unzeroed,
}

/// Runs the layer: per step and group of units one product `h_{t−1} W_h[:, gates of U]` (the
/// whole `h_{t−1}`)
/// ([`PackedB`], `W_h` packed once per call) and the fused gate math on the rows with a real
/// token (padded rows keep their state and output 0); each group runs on a thread of its own
/// for the whole layer, and takes the other groups' `h_{t−1}` as they are published
/// ([`crate::lstm::lockstep`]; `h` double-buffered). Returns `[outputs | h_T | c_T]` and, when `save`, what the backward
/// pass needs.
fn layer_forward(l: &Layer, h0: &FlexTensor, c0: &FlexTensor, save: bool) -> (FlexTensor, Option<Saved>) {
    let w = f32s(&l.w);
    let f = ForwardBuffers::new(l, h0, c0, save);
    // SAFETY: `lockstep::run` runs one worker for each group, each with its own `i`, at once.
    lockstep::run(f.groups.len(), |i, progress| unsafe { forward_worker(l, &f, &w, i, progress) });
    // SAFETY: the workers ran every step of `f.steps`, and `lockstep::run` returns once all are done.
    unsafe { forward_finish(l, f) }
}

/// What the workers of one forward layer call share ([`forward_worker`]): the groups of units,
/// each group's state, and the layer's output buffers.
struct ForwardBuffers {
    groups: Vec<Range<usize>>,
    /// Each group's `h`, double-buffered (see [`ForwardBuffers::new`]).
    h_bufs: Vec<[Slot<Vec<f32>>; 2]>,
    states: Vec<Slot<ForwardGroup>>,
    /// `[outputs | h_T | c_T]` `[batch, time + 2, hidden]`, and (empty when not saving)
    /// `h_{t−1}` `[batch, time, hidden]`.
    out: Unzeroed,
    h_prev_all: Unzeroed,
    /// The steps with a real token in some row, in the order the layer runs them.
    steps: Vec<usize>,
    save: bool,
}

impl ForwardBuffers {
    /// The groups of units (one per thread), their state gathered from `h0` and `c0`, and the
    /// output buffers, unwritten.
    fn new(l: &Layer, h0: &FlexTensor, c0: &FlexTensor, save: bool) -> Self {
        let (b_n, t_n, h) = (l.batch, l.time, l.hidden);
        let groups = unit_groups(h, rayon::current_num_threads());
        let (h0, c0) = (f32s(h0), f32s(c0));
        // Each group's state `h` double-buffered: step `s` reads every group's `[s % 2]` and
        // writes its own `[(s + 1) % 2]` (see `lstm::lockstep::Slot`).
        let h_bufs: Vec<[Slot<Vec<f32>>; 2]> = groups
            .iter()
            .map(|u| [Slot::new(gather(&h0, h, 0..b_n, u)), Slot::new(vec![0f32; b_n * u.len()])])
            .collect();
        let keep = if save { 1 } else { 0 };
        let states: Vec<Slot<ForwardGroup>> = groups
            .iter()
            .map(|u| {
                let n = u.len();
                Slot::new(ForwardGroup {
                    units: u.clone(),
                    c: gather(&c0, h, 0..b_n, u),
                    gates: vec![0f32; b_n * 4 * n],
                    s_gates: Unzeroed::new(keep * b_n, t_n, 4 * n),
                    s_c: Unzeroed::new(keep * b_n, t_n, n),
                })
            })
            .collect();
        // The layer's outputs `[batch, time + 2, hidden]` (`h_t` for every step, then `h_T` and
        // `c_T`) and, when saving, `h_{t−1}` `[batch, time, hidden]`: each group writes its own
        // units' columns there directly (gathering per-group buffers afterwards took ~4 ms a
        // layer on the lstm bench shape). Padded positions are 0.
        let out = Unzeroed::new(b_n, t_n + 2, h);
        let h_prev_all = Unzeroed::new(keep * b_n, t_n, h);
        let steps: Vec<usize> = l.order().filter(|&t| (0..b_n).any(|b| l.real(b, t))).collect();
        Self { groups, h_bufs, states, out, h_prev_all, steps, save }
    }
}

/// Worker `i`'s share of the forward pass: per step, its group's gates ([`forward_product`]),
/// their gate math over the rows ([`forward_rows`]), then publishing its new `h`.
///
/// # Safety
/// Runs as worker `i` of a [`lockstep::run`] with one worker for each group of `f`.
unsafe fn forward_worker(l: &Layer, f: &ForwardBuffers, w: &[f32], i: usize, progress: &Progress) {
    let b_n = l.batch;
    // SAFETY: only worker `i` touches group `i`'s state.
    let g = unsafe { f.states[i].get_mut() };
    let n = g.units.len();
    let packed = pack_forward(w, l.hidden, &f.groups[i]);
    let zeros = vec![0f32; 4 * n];
    // The whole `h_{t−1}`, gathered from the groups' buffers (with one group, its own).
    let mut state = vec![0f32; if f.groups.len() > 1 { b_n * l.hidden } else { 0 }];
    for (s, &t) in f.steps.iter().enumerate() {
        let (cur, next) = (s % 2, (s + 1) % 2);
        // SAFETY: worker `i` in its step `s` (this function's contract).
        unsafe { forward_product(&packed, &f.h_bufs, &f.groups, b_n, g, &mut state, i, s, progress) };
        let h_prev = unsafe { f.h_bufs[i][cur].get() };
        // SAFETY: the other workers read it in step `s − 1`, done before their writes of
        // that step, which this worker waited for; they read it again only after this
        // worker publishes it (below).
        let h_next = unsafe { f.h_bufs[i][next].get_mut() };
        // The rows' gate math, vectorised for this CPU as a whole (`forward_rows` is inlined
        // into `wide`'s closure). SAFETY: columns `U` of step `t` in the layer's buffers, and
        // group `i`'s own, are this worker's alone; `t` is a step of the layer.
        crate::cpu::fastmath::wide(
            #[inline(always)]
            || unsafe { forward_rows(l, f, g, t, h_prev, h_next, &zeros) },
        );
        progress.publish(i, s);
    }
    stream_fence();
}

/// Group `i`'s pre-activation gates of step `s` without `x W_x`, `h_{t−1} · packed`, into
/// `g.gates`: every group's state gathered into `state` (its own first, then each other
/// group's as published), then one product over all of it, as with one group.
///
/// # Safety
/// Called by worker `i` of [`forward_worker`]'s [`lockstep::run`] in its step `s`, before
/// it writes `h_bufs[i][(s + 1) % 2]`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn forward_product(
    packed: &PackedB,
    h_bufs: &[[Slot<Vec<f32>>; 2]],
    groups: &[Range<usize>],
    b_n: usize,
    g: &mut ForwardGroup,
    state: &mut [f32],
    i: usize,
    s: usize,
    progress: &Progress,
) {
    let (cur, n) = (s % 2, g.units.len());
    if groups.len() == 1 {
        // SAFETY: this worker's own buffer, written by it in step `s − 1`.
        let h = unsafe { h_bufs[0][cur].get() };
        step_product(packed, h, b_n, &mut g.gates, 4 * n, false, 1);
        return;
    }
    // Every group's state (this worker's own first: it wrote it), each as it is published,
    // into the whole `h_{t−1}`; then one product over it.
    for j in std::iter::once(i).chain(progress.others(i)) {
        if j != i && s > 0 {
            progress.wait_published(j, s - 1);
        }
        // SAFETY: worker `j` wrote `h_bufs[j][cur]` in step `s − 1` and writes it next
        // in step `s + 1`, after waiting for this worker's step `s` (`lstm::lockstep`).
        let h = unsafe { h_bufs[j][cur].get() };
        scatter(state, packed.k(), &groups[j], h);
    }
    step_product(packed, state, b_n, &mut g.gates, 4 * n, false, groups.len());
}

/// `C (+)= A · packed` for a step of a layer cut into `groups` groups. Alone (one group: a
/// part of a split step, [`crate::cpu::crew`]) the product's columns are offered to a crew
/// member waiting idle ([`PackedB::matmul_par`], the same bits however they are cut): the
/// recurrences were the one part of a slower vCPU's half that the other core could not help
/// with. With several groups the workers already share the step.
#[inline(always)]
fn step_product(p: &PackedB, a: &[f32], m: usize, c: &mut [f32], ldc: usize, add: bool, groups: usize) {
    if groups == 1 && !add {
        p.matmul_par(a, m, p.k(), c, ldc);
    } else {
        p.matmul(a, m, p.k(), c, ldc, add);
    }
}

/// Group `g`'s gate math of step `t` over every row: `h_t` into `h_next` and the layer's
/// output, `c_t` into `g.c`, and, when saving, `h_{t−1}`, `c_{t−1}` and the gates'
/// activations; padded rows keep their state and output 0.
///
/// # Safety
/// `t < l.time`, and columns `g.units` of step `t` in `f`'s buffers, and `g`'s own buffers,
/// are the caller's alone while it runs.
#[inline(always)]
unsafe fn forward_rows(
    l: &Layer,
    f: &ForwardBuffers,
    g: &mut ForwardGroup,
    t: usize,
    h_prev: &[f32],
    h_next: &mut [f32],
    zeros: &[f32],
) {
    let (b_n, t_n, h, n, save) = (l.batch, l.time, l.hidden, g.units.len(), f.save);
    let (out_ptr, h_prev_ptr) = (&f.out.ptr, &f.h_prev_all.ptr);
    // SAFETY (each write): columns `U` of row `at` (and group `g`'s own buffers) are this
    // worker's alone; the buffers outlive the workers, and every element of the step is written.
    for b in 0..b_n {
        let at = b * t_n + t;
        if b + AHEAD < b_n {
            let ahead = ((b + AHEAD) * t_n + t) * 4 * h + g.units.start;
            for s in 0..4 {
                prefetch(&l.xw()[ahead + s * h..][..n]);
            }
        }
        let (hb, cb) = (&mut h_next[b * n..(b + 1) * n], &mut g.c[b * n..(b + 1) * n]);
        let out_at = (b * (t_n + 2) + t) * h + g.units.start;
        if save {
            unsafe { stream_units(h_prev_ptr, at * h + g.units.start, &h_prev[b * n..(b + 1) * n]) };
            unsafe { stream_units(&g.s_c.ptr, at * n, cb) };
        }
        if !l.real(b, t) {
            hb.copy_from_slice(&h_prev[b * n..(b + 1) * n]);
            unsafe { write_units(out_ptr, out_at, &zeros[..n]) };
            if save {
                unsafe { stream_units(&g.s_gates.ptr, at * 4 * n, zeros) };
            }
            continue;
        }
        let gates = &g.gates[b * 4 * n..(b + 1) * 4 * n];
        let xw = &l.xw()[at * 4 * h..(at + 1) * 4 * h];
        let input = [0, 1, 2, 3].map(|s| &xw[s * h + g.units.start..][..n]);
        let s_gates = &g.s_gates.ptr;
        cell_forward_body(gates, Some(input), cb, hb, |s, j, act| {
            if save {
                unsafe { stream_units(s_gates, at * 4 * n + s * n + j, act) };
            }
        });
        unsafe { write_units(out_ptr, out_at, hb) };
    }
}

/// `[outputs | h_T | c_T]` from the workers' buffers, with `h_T` and `c_T` written and the
/// steps no row reaches zeroed, and, when saving, what the backward pass needs.
///
/// # Safety
/// The workers ([`forward_worker`]) have run every step of `f.steps` and are done.
unsafe fn forward_finish(l: &Layer, f: ForwardBuffers) -> (FlexTensor, Option<Saved>) {
    let (b_n, t_n, h) = (l.batch, l.time, l.hidden);
    let ForwardBuffers { h_bufs, states, out, h_prev_all, steps, save, .. } = f;
    let last = steps.len() % 2;
    let h_cur: Vec<Vec<f32>> =
        h_bufs.into_iter().map(|[a, b]| if last == 0 { a } else { b }.into_inner()).collect();
    let states: Vec<ForwardGroup> = states.into_iter().map(Slot::into_inner).collect();
    for (g, h_fin) in states.iter().zip(&h_cur) {
        let n = g.units.len();
        for b in 0..b_n {
            let row = b * (t_n + 2) + t_n;
            // SAFETY: within `out`; the workers are done.
            unsafe { write_units(&out.ptr, row * h + g.units.start, &h_fin[b * n..(b + 1) * n]) };
            unsafe { write_units(&out.ptr, (row + 1) * h + g.units.start, &g.c[b * n..(b + 1) * n]) };
        }
    }
    // SAFETY (each `finish`): the workers wrote every element of the steps they ran, and the
    // loop above `out`'s last two rows.
    let out = unsafe { out.finish(&[&steps[..], &[t_n, t_n + 1]].concat()) };
    let saved = save.then(|| Saved {
        h_prev: unsafe { h_prev_all.finish(&steps) },
        groups: states
            .into_iter()
            .map(|g| (g.units, unsafe { g.s_gates.finish(&steps) }, unsafe { g.s_c.finish(&steps) }))
            .collect(),
    });
    (FlexTensor::from_data(TensorData::new(out, [b_n, t_n + 2, h])), saved)
}

/// One thread's share of the backward pass: its units' gradients.
struct BackwardGroup<'a> {
    units: Range<usize>,
    /// What the forward pass saved for these units (the gates' activations, and `c_{t−1}`).
    gates: &'a [f32],
    c_prev: &'a [f32],
    /// `∂h_t` and `∂c_t` of the group's units, `[batch, |U|]`.
    dh: Vec<f32>,
    dc: Vec<f32>,
    /// `∂h_{t−1}` of the group's units, `[batch, |U|]` (scratch).
    dh_prev: Vec<f32>,
}

/// `[∂xw, ∂W_h, ∂h0, ∂c0]` from `grad = ∂[outputs | h_T | c_T]`: back through the steps in
/// reverse order — per step each group (a thread of its own, [`crate::lstm::lockstep`]) runs its
/// units' gate math, then `∂h_{t−1}[:, U] = ∂gates W_hᵀ[.., U]` over every group's `∂gates`
/// (gathered as they are published, [`crate::lstm::lockstep`]), with `W_hᵀ` packed once —
/// and `∂W_h = Σ_t h_{t−1}ᵀ ∂gates_t` as one product over every step.
fn layer_backward(l: &Layer, s: Saved, grad: &FlexTensor) -> [FlexTensor; 4] {
    let w = f32s(&l.w);
    let grad = f32s(grad);
    let bb = BackwardBuffers::new(l, &s.groups, &grad);
    // SAFETY: `lockstep::run` runs one worker for each group, each with its own `i`, at once.
    lockstep::run(bb.groups.len(), |i, progress| unsafe { backward_worker(l, &bb, &w, &grad, i, progress) });
    // SAFETY: the workers ran every step of `bb.steps`, and `lockstep::run` returns once all are done.
    unsafe { backward_finish(l, s.h_prev, bb) }
}

/// What the workers of one backward layer call share ([`backward_worker`]): the groups of
/// units, each group's state, and the `∂gates` buffers.
struct BackwardBuffers<'a> {
    groups: Vec<Range<usize>>,
    states: Vec<Slot<BackwardGroup<'a>>>,
    /// Each group's gate gradients of a step, double-buffered (see [`BackwardBuffers::new`]).
    step: Vec<[Slot<Vec<f32>>; 2]>,
    /// The steps with a real token in some row, in the order the backward pass runs them.
    steps: Vec<usize>,
    /// `∂gates` `[batch, time, 4·hidden]`.
    d_gates: Unzeroed,
}

impl<'a> BackwardBuffers<'a> {
    /// The groups of units as the forward pass cut them, their state from what it `saved` and
    /// from `grad`'s `∂h_T` and `∂c_T`, and the `∂gates` buffers, unwritten.
    fn new(l: &Layer, saved: &'a [(Range<usize>, Vec<f32>, Vec<f32>)], grad: &[f32]) -> Self {
        let (b_n, t_n, h) = (l.batch, l.time, l.hidden);
        let groups: Vec<Range<usize>> = saved.iter().map(|g| g.0.clone()).collect();
        let row = |b: usize, t: usize| b * (t_n + 2) + t;
        let states: Vec<Slot<BackwardGroup>> = saved
            .iter()
            .map(|(u, gates, c_prev)| {
                Slot::new(BackwardGroup {
                    units: u.clone(),
                    dh: gather(grad, h, (0..b_n).map(|b| row(b, t_n)), u),
                    dc: gather(grad, h, (0..b_n).map(|b| row(b, t_n + 1)), u),
                    dh_prev: vec![0f32; b_n * u.len()],
                    gates,
                    c_prev,
                })
            })
            .collect();
        // Each group's gate gradients of a step, read by every group's `∂h_{t−1}`; two buffers a
        // group, step `s` writing `[s % 2]` (see `lstm::lockstep`), so that a worker may start step
        // `s + 1` while the others still read its step `s` (with one buffer, each step waited for
        // the slowest reader: backward waits grew from a median of 76–204 to 283–348 thousand TSC
        // cycles a step per thread instead of shrinking).
        let step: Vec<[Slot<Vec<f32>>; 2]> =
            groups.iter().map(|u| [(); 2].map(|_| Slot::new(vec![0f32; b_n * 4 * u.len()]))).collect();
        let steps: Vec<usize> = l.order().rev().filter(|&t| (0..b_n).any(|b| l.real(b, t))).collect();
        // `∂gates` `[batch, time, 4·hidden]`, each group writing its own units' columns (no
        // per-group buffer to scatter afterwards: that pass took ~5 ms a layer on the lstm bench
        // shape); padded positions are 0.
        let d_gates = Unzeroed::new(b_n, t_n, 4 * h);
        Self { groups, states, step, steps, d_gates }
    }
}

/// Worker `i`'s share of the backward pass: per step, its group's `∂gates`
/// ([`backward_rows`]), published, then its units' `∂h_{t−1}` ([`backward_product`]).
///
/// # Safety
/// Runs as worker `i` of a [`lockstep::run`] with one worker for each group of `bb`.
unsafe fn backward_worker(
    l: &Layer,
    bb: &BackwardBuffers<'_>,
    w: &[f32],
    grad: &[f32],
    i: usize,
    progress: &Progress,
) {
    let b_n = l.batch;
    // SAFETY: only worker `i` touches group `i`'s state.
    let g = unsafe { bb.states[i].get_mut() };
    let n = g.units.len();
    let packed = pack_backward(w, l.hidden, &bb.groups[i]);
    // Every group's `∂gates` of a step, gathered (with one group, its own).
    let mut all = vec![0f32; if bb.groups.len() > 1 { b_n * 4 * l.hidden } else { 0 }];
    for (s, &t) in bb.steps.iter().enumerate() {
        {
            // SAFETY: the other workers read it in step `s − 2`, done before their writes
            // of step `s − 1`, which this worker waited for (see `lstm::lockstep`); they read it
            // again only after this worker publishes it (below).
            let step = unsafe { bb.step[i][s % 2].get_mut() };
            // SAFETY: columns `U` of each gate of step `t` in `∂gates` are this group's alone,
            // and `t` is a step of the layer.
            unsafe { backward_rows(l, g, grad, t, step, &bb.d_gates.ptr) };
        }
        progress.publish(i, s);
        // SAFETY: worker `i` in its step `s`, published (this function's contract).
        unsafe { backward_product(&packed, &bb.step, &bb.groups, b_n, g, &mut all, i, s, progress) };
        for b in (0..b_n).filter(|&b| l.real(b, t)) {
            g.dh[b * n..(b + 1) * n].copy_from_slice(&g.dh_prev[b * n..(b + 1) * n]);
        }
    }
}

/// Group `g`'s gate math back through step `t`, row by row: `∂gates` into `step`
/// (`[batch, 4·|U|]`) and into `d_gates` (zeros on padded rows), `∂c_{t−1}` into `g.dc`, after
/// adding the output's `∂h_t` from `grad` to `g.dh`.
///
/// # Safety
/// `t < l.time`; `d_gates` points to a live `[batch, time, 4·hidden]` buffer whose columns
/// `s·hidden + U` (`s` ∈ 0..4) of step `t` are the caller's alone while it runs.
#[inline(always)]
unsafe fn backward_rows(
    l: &Layer,
    g: &mut BackwardGroup<'_>,
    grad: &[f32],
    t: usize,
    step: &mut [f32],
    d_gates: &SendPtr,
) {
    let (b_n, t_n, h, n) = (l.batch, l.time, l.hidden, g.units.len());
    let row = |b: usize, t: usize| b * (t_n + 2) + t;
    for b in 0..b_n {
        let dg = &mut step[b * 4 * n..(b + 1) * 4 * n];
        let at = b * t_n + t;
        if b + AHEAD < b_n {
            let ahead = (b + AHEAD) * t_n + t;
            prefetch(&g.gates[ahead * 4 * n..(ahead + 1) * 4 * n]);
            prefetch(&g.c_prev[ahead * n..(ahead + 1) * n]);
            prefetch(&grad[row(b + AHEAD, t) * h + g.units.start..][..n]);
        }
        if l.real(b, t) {
            let dhb = &mut g.dh[b * n..(b + 1) * n];
            for (d, x) in dhb.iter_mut().zip(&grad[row(b, t) * h + g.units.start..]) {
                *d += x;
            }
            let (gates, c_prev) = (&g.gates[at * 4 * n..(at + 1) * 4 * n], &g.c_prev[at * n..(at + 1) * n]);
            cell_backward::<true>(gates, c_prev, dhb, &mut g.dc[b * n..(b + 1) * n], dg);
        } else {
            dg.fill(0.0);
        }
        for (s, dg) in dg.chunks_exact(n).enumerate() {
            // SAFETY: columns `s·hidden + U` of row `at` are this group's alone, and
            // `d_gates` outlives the workers.
            unsafe { write_units(d_gates, at * 4 * h + s * h + g.units.start, dg) };
        }
    }
}

/// Group `i`'s `∂h_{t−1}[:, U_i]` of step `s` into `g.dh_prev`, `∂gates · packed` over every
/// group's `∂gates` (its own first, then each other group's as published, gathered into the
/// one-group layout `[i f g o]` over all units): one product, as with one group.
///
/// # Safety
/// Called by worker `i` of [`backward_worker`]'s [`lockstep::run`] in its step `s`, after
/// publishing it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn backward_product(
    packed: &PackedB,
    step: &[[Slot<Vec<f32>>; 2]],
    groups: &[Range<usize>],
    b_n: usize,
    g: &mut BackwardGroup<'_>,
    all: &mut [f32],
    i: usize,
    s: usize,
    progress: &Progress,
) {
    let n = g.units.len();
    if groups.len() == 1 {
        // SAFETY: this worker's own buffer of step `s`.
        let dg = unsafe { step[0][s % 2].get() };
        step_product(packed, dg, b_n, &mut g.dh_prev, n, false, 1);
        return;
    }
    let h = packed.k() / 4;
    for j in std::iter::once(i).chain(progress.others(i)) {
        if j != i {
            progress.wait_published(j, s);
        }
        // SAFETY: worker `j` wrote `[s % 2]` in step `s` and writes it next in step
        // `s + 2`, after waiting for this worker's step `s + 1` (`lstm::lockstep`).
        let dg = unsafe { step[j][s % 2].get() };
        let uj = &groups[j];
        let nj = uj.len();
        for (row, src) in all.chunks_exact_mut(4 * h).zip(dg.chunks_exact(4 * nj)) {
            for (gate, part) in src.chunks_exact(nj).enumerate() {
                row[gate * h + uj.start..gate * h + uj.end].copy_from_slice(part);
            }
        }
    }
    step_product(packed, all, b_n, &mut g.dh_prev, n, false, groups.len());
}

/// `[∂xw, ∂W_h, ∂h0, ∂c0]` from what the workers left: `∂gates` with the steps no row reaches
/// zeroed, `∂W_h = h_{t−1}ᵀ ∂gates` over every step as one product, and the groups' `∂h_0` and
/// `∂c_0` scattered into whole rows.
///
/// # Safety
/// The workers ([`backward_worker`]) have run every step of `bb.steps` and are done.
unsafe fn backward_finish(l: &Layer, h_prev: Vec<f32>, bb: BackwardBuffers<'_>) -> [FlexTensor; 4] {
    let (b_n, t_n, h) = (l.batch, l.time, l.hidden);
    let BackwardBuffers { states, steps, d_gates, .. } = bb;
    let states: Vec<BackwardGroup> = states.into_iter().map(Slot::into_inner).collect();
    let (mut dh, mut dc) = (vec![0f32; b_n * h], vec![0f32; b_n * h]);
    for g in &states {
        scatter(&mut dh, h, &g.units, &g.dh);
        scatter(&mut dc, h, &g.units, &g.dc);
    }
    let h_prev = FlexTensor::from_data(TensorData::new(h_prev, [b_n * t_n, h]));
    // SAFETY: the workers wrote every element of the steps they ran.
    let d_gates =
        FlexTensor::from_data(TensorData::new(unsafe { d_gates.finish(&steps) }, [b_n * t_n, 4 * h]));
    let d_w = crate::gemm::flex::matmul_2d(&Flex::float_transpose(h_prev), &d_gates);
    [
        d_gates.reshape(Shape::new([b_n, t_n, 4 * h])),
        d_w,
        FlexTensor::from_data(TensorData::new(dh, [b_n, h])),
        FlexTensor::from_data(TensorData::new(dc, [b_n, h])),
    ]
}

/// One row's gate math: `c ← σ(f)⊙c + σ(i)⊙tanh(g)`, `h ← σ(o)⊙tanh(c)` in place (vectorised
/// for this CPU: [`crate::cpu::fastmath::wide`]).
#[inline]
fn cell_forward(gates: &[f32], c: &mut [f32], h_out: &mut [f32]) {
    crate::cpu::fastmath::wide(
        #[inline(always)]
        || cell_forward_body(gates, None, c, h_out, |_, _, _| ()),
    )
}

/// Units per pass of the chunked gate math ([`cell_forward_body`], [`cell_backward_body`]).
///
/// One unit's gate math is a chain of some 70 dependent operations (an `exp` and a division,
/// then another `exp` and division on their result). Written unit by unit, a loop iteration
/// holds five such chains and ~180 instructions, so the reorder buffer sees fewer than two
/// iterations and the loop runs at the chains' latency. Over a chunk of units, one
/// activation at a time (four short loops of independent elements, then the state update)
/// keeps ~8 chains in flight: the forward gate math of `[64, 256]` units, hot in cache, went
/// from 229 to 192 thousand TSC cycles on the 2-core AVX2 VM, the backward one from 271 to
/// 228. Each unit sees the same operations in the same order, so the results are the same
/// bits whatever the chunk: whole chunks of `CHUNK`, then of [`LANES`] (fixed-size arrays
/// vectorise without run-time length or overlap checks; a plain indexed loop ran at half the
/// speed inside `wide`), then chunks of one.
const CHUNK: usize = 64;

/// The pre-activation gates `[i f g o]` of units `j..j + W`: the product's, plus the input's
/// `x W_x` when given (added in that order, as a separate pass would).
#[inline(always)]
fn pre_activations<const W: usize>(
    gates: [&[f32]; 4],
    input: Option<[&[f32]; 4]>,
    j: usize,
) -> [[f32; W]; 4] {
    let mut pre = gates.map(|g| *chunk::<W>(g, j));
    if let Some(input) = input {
        for (p, x) in pre.iter_mut().zip(input) {
            for (y, &x) in p.iter_mut().zip(chunk::<W>(x, j)) {
                *y += x;
            }
        }
    }
    pre
}

/// The four gates' activations `[σ(i), σ(f), tanh(g), σ(o)]` of pre-activations `pre`, one
/// gate at a time.
#[inline(always)]
fn activations<const W: usize>(pre: &[[f32; W]; 4]) -> [[f32; W]; 4] {
    #[inline(always)]
    fn each<const W: usize>(x: &[f32; W], f: impl Fn(f32) -> f32) -> [f32; W] {
        let mut y = [0f32; W];
        for (y, &x) in y.iter_mut().zip(x) {
            *y = f(x);
        }
        y
    }
    let [gi, gf, gg, go] = pre;
    [each(gi, sigmoid), each(gf, sigmoid), each(gg, tanh), each(go, sigmoid)]
}

/// The rows `[i f g o]` of a gate block, each `n` long.
#[inline(always)]
fn split_gates(gates: &[f32], n: usize) -> [&[f32]; 4] {
    let (gi, rest) = gates.split_at(n);
    let (gf, rest) = rest.split_at(n);
    let (gg, go) = rest.split_at(n);
    [gi, gf, gg, &go[..n]]
}

/// One row's gate math (see [`cell_forward`]) from the product's gates `[i f g o]` (each
/// `c.len()` long) plus, when given, the input's (`x W_x`, gate by gate), handing each chunk's
/// activations `[σ(i), σ(f), tanh(g), σ(o)]` to `keep(gate, first unit, activations)` (what the
/// backward pass needs).
#[inline(always)]
fn cell_forward_body(
    gates: &[f32],
    input: Option<[&[f32]; 4]>,
    c: &mut [f32],
    h_out: &mut [f32],
    mut keep: impl FnMut(usize, usize, &[f32]),
) {
    /// One unit from its activations.
    #[inline(always)]
    fn update(a: [f32; 4], c: &mut f32, h: &mut f32) {
        let [i, f, t_g, o] = a;
        let c_new = f * *c + i * t_g;
        *c = c_new;
        *h = o * tanh(c_new);
    }
    /// Units `range` (whole chunks of `W`).
    #[inline(always)]
    fn chunks<const W: usize>(
        (gates, input): ([&[f32]; 4], Option<[&[f32]; 4]>),
        range: Range<usize>,
        c: &mut [f32],
        h: &mut [f32],
        keep: &mut impl FnMut(usize, usize, &[f32]),
    ) {
        for j in range.step_by(W) {
            let act = activations::<W>(&pre_activations::<W>(gates, input, j));
            for (s, a) in act.iter().enumerate() {
                keep(s, j, a);
            }
            let [i, f, t_g, o] = act;
            let (c, h) = (chunk_mut::<W>(c, j), chunk_mut::<W>(h, j));
            for k in 0..W {
                update([i[k], f[k], t_g[k], o[k]], &mut c[k], &mut h[k]);
            }
        }
    }
    let n = c.len();
    let operands = (split_gates(gates, n), input);
    let h_out = &mut h_out[..n];
    let (big, whole) = (n - n % CHUNK, n - n % LANES);
    chunks::<CHUNK>(operands, 0..big, c, h_out, &mut keep);
    chunks::<LANES>(operands, big..whole, c, h_out, &mut keep);
    chunks::<1>(operands, whole..n, c, h_out, &mut keep);
}

/// One row back through the gate math: from `∂h'` (`dh`) and `∂c'` (`dc`, replaced by `∂c`),
/// `∂gates` into `d_gates`. `gates` holds the pre-activations `[i f g o]`, or, when `ACTIVATED`,
/// their activations `[σ(i), σ(f), tanh(g), σ(o)]` as the forward pass computed them (what
/// the layer saves: the same values, without four of the five `exp`s and divisions a unit).
#[inline]
fn cell_backward<const ACTIVATED: bool>(
    gates: &[f32],
    c: &[f32],
    dh: &[f32],
    dc: &mut [f32],
    d_gates: &mut [f32],
) {
    crate::cpu::fastmath::wide(
        #[inline(always)]
        || cell_backward_body::<ACTIVATED>(gates, c, dh, dc, d_gates),
    )
}

#[inline(always)]
fn cell_backward_body<const ACTIVATED: bool>(
    gates: &[f32],
    c: &[f32],
    dh: &[f32],
    dc: &mut [f32],
    d_gates: &mut [f32],
) {
    /// One unit from its activations `a = [σ(i), σ(f), tanh(g), σ(o)]`; `d` = the gradients
    /// of its four pre-activations.
    #[inline(always)]
    fn grads(a: [f32; 4], c: f32, dh: f32, dc: &mut f32, d: [&mut f32; 4]) {
        let [i, f, t_g, o] = a;
        let t = tanh(f * c + i * t_g);
        let dc_total = *dc + dh * o * (1.0 - t * t);
        let [di, df, dg, d_o] = d;
        *di = dc_total * t_g * i * (1.0 - i);
        *df = dc_total * c * f * (1.0 - f);
        *dg = dc_total * i * (1.0 - t_g * t_g);
        *d_o = dh * t * o * (1.0 - o);
        *dc = dc_total * f;
    }
    /// Units `range` (whole chunks of `W`).
    #[inline(always)]
    fn chunks<const ACTIVATED: bool, const W: usize>(
        gates: [&[f32]; 4],
        range: Range<usize>,
        (c, dh, dc): (&[f32], &[f32], &mut [f32]),
        [di, df, dgg, d_o]: [&mut [f32]; 4],
    ) {
        for j in range.step_by(W) {
            let [i, f, t_g, o] = if ACTIVATED {
                gates.map(|g| *chunk::<W>(g, j))
            } else {
                activations::<W>(&pre_activations::<W>(gates, None, j))
            };
            let (cb, dhb, dcb) = (chunk::<W>(c, j), chunk::<W>(dh, j), chunk_mut::<W>(dc, j));
            let (dib, dfb) = (chunk_mut::<W>(di, j), chunk_mut::<W>(df, j));
            let (dgb, dob) = (chunk_mut::<W>(dgg, j), chunk_mut::<W>(d_o, j));
            for k in 0..W {
                let d = [&mut dib[k], &mut dfb[k], &mut dgb[k], &mut dob[k]];
                grads([i[k], f[k], t_g[k], o[k]], cb[k], dhb[k], &mut dcb[k], d);
            }
        }
    }
    let n = c.len();
    let gates = split_gates(gates, n);
    let (di, rest) = d_gates.split_at_mut(n);
    let (df, rest) = rest.split_at_mut(n);
    let (dgg, d_o) = rest.split_at_mut(n);
    let (d_o, dh, dc) = (&mut d_o[..n], &dh[..n], &mut dc[..n]);
    let (big, whole) = (n - n % CHUNK, n - n % LANES);
    chunks::<ACTIVATED, CHUNK>(gates, 0..big, (c, dh, dc), [di, df, dgg, d_o]);
    chunks::<ACTIVATED, LANES>(gates, big..whole, (c, dh, dc), [di, df, dgg, d_o]);
    chunks::<ACTIVATED, 1>(gates, whole..n, (c, dh, dc), [di, df, dgg, d_o]);
}

/// `(∂gates, ∂c)` from the forward inputs and `grad = ∂[h' | c']` (equations in the module doc).
fn backward(gates: &FlexTensor, c: &FlexTensor, grad: &FlexTensor) -> (FlexTensor, FlexTensor) {
    let (g, c, [batch, h]) = operands(gates, c);
    let grad = f32s(grad);
    let mut d_gates = vec![0f32; batch * 4 * h];
    let mut d_c = vec![0f32; batch * h];
    let rows = g.chunks_exact(4 * h).zip(c.chunks_exact(h)).zip(grad.chunks_exact(2 * h));
    for (((g, c), grad), (dg, dc)) in rows.zip(d_gates.chunks_exact_mut(4 * h).zip(d_c.chunks_exact_mut(h))) {
        let (dh, dc_next) = grad.split_at(h);
        dc.copy_from_slice(dc_next);
        cell_backward::<false>(g, c, dh, dc, dg);
    }
    (
        FlexTensor::from_data(TensorData::new(d_gates, [batch, 4 * h])),
        FlexTensor::from_data(TensorData::new(d_c, [batch, h])),
    )
}

/// `(h', c')` of an LSTM step from pre-activation `gates` `[batch, 4·hidden]` and `c`
/// `[batch, hidden]`, through the fused kernel (flex devices only: check [`crate::cpu::flex_data::is_flex`]).
pub fn lstm_gates(gates: Tensor<2>, c: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
    let h = c.dims()[1];
    let out = Tensor::<2>::from_dispatch(<Dispatch as LstmGates>::lstm_gates(
        gates.into_dispatch(),
        c.into_dispatch(),
    ));
    (out.clone().narrow(1, 0, h), out.narrow(1, h, h))
}

/// One direction of one LSTM layer over a padded batch through the fused kernels (flex only):
/// `xw = x W_x + b` `[batch, time, 4·hidden]`, `W_h` `[hidden, 4·hidden]`, initial state,
/// `keep` `[batch, time]` (1 on real tokens; positions before `dense` are real in every row).
/// Padded steps keep the state and output zeros, as the models' padded loop (`run_steps` in
/// `rnn.rs`) defines.
/// Returns the outputs `[batch, time, hidden]` and the final `(h, c)`.
///
/// Forward: per step one product `h W_h` and the gate math, nothing else — no per-step tensors
/// for autodiff to record. Backward: per step the gate math and one product `∂gates W_hᵀ`;
/// `∂W_h` is one product over all steps (`[hidden, batch·time] × [batch·time, 4·hidden]`)
/// instead of one small one per step.
pub fn lstm_layer(
    xw: Tensor<3>,
    w_hidden: Tensor<2>,
    h0: Tensor<2>,
    c0: Tensor<2>,
    keep: Tensor<2>,
    dense: usize,
    reverse: bool,
) -> (Tensor<3>, Tensor<2>, Tensor<2>) {
    let out = Tensor::<3>::from_dispatch(<Dispatch as LstmGates>::lstm_layer(
        xw.into_dispatch(),
        w_hidden.into_dispatch(),
        h0.into_dispatch(),
        c0.into_dispatch(),
        keep.into_dispatch(),
        dense,
        reverse,
    ));
    super::outputs_and_state(out)
}

/// The f32 data of `gates` and `c` and `[batch, hidden]`, checked.
fn operands<'a>(
    gates: &'a FlexTensor,
    c: &'a FlexTensor,
) -> (std::borrow::Cow<'a, [f32]>, std::borrow::Cow<'a, [f32]>, [usize; 2]) {
    let [batch, four_h] = gates.layout().shape().dims::<2>();
    let h = four_h / 4;
    assert_eq!(c.layout().shape().dims::<2>(), [batch, h], "LSTM gates [B, 4H] and cell [B, H] disagree");
    (f32s(gates), f32s(c), [batch, h])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::lstm_gates_equation as lstm_gates_composed;
    use crate::test_support::max_diff;
    use burn::tensor::{Device, Distribution};

    /// The kernel equals the composed tensor operations, forward and backward (gradients of a
    /// random linear function of `h'` and `c'` with respect to the gates and `c`), and without
    /// autodiff (decoding); with 83 units, through all three paths of the gate math (a chunk,
    /// a block and single units).
    #[test]
    fn fused_kernel_equals_the_composed_operations() {
        for h in [5, 83] {
            fused_kernel_equals_the_composed_operations_on(h);
        }
    }

    fn fused_kernel_equals_the_composed_operations_on(h: usize) {
        let plain = Device::flex();
        let ad = plain.clone().autodiff();
        assert!(crate::cpu::flex_data::is_flex(&plain) && crate::cpu::flex_data::is_flex(&ad));
        ad.seed(7);
        let b = 3;
        let gates = Tensor::<2>::random([b, 4 * h], Distribution::Uniform(-4.0, 4.0), &ad);
        let c = Tensor::<2>::random([b, h], Distribution::Uniform(-2.0, 2.0), &ad);
        let (wh, wc) = (
            Tensor::<2>::random([b, h], Distribution::Normal(0.0, 1.0), &ad),
            Tensor::<2>::random([b, h], Distribution::Normal(0.0, 1.0), &ad),
        );
        let run = |fused: bool| {
            let (g, c) = (gates.clone().require_grad(), c.clone().require_grad());
            let (h_new, c_new) = if fused {
                lstm_gates(g.clone(), c.clone())
            } else {
                lstm_gates_composed(g.clone(), c.clone())
            };
            let loss = (h_new.clone() * wh.clone()).sum() + (c_new.clone() * wc.clone()).sum();
            let grads = loss.backward();
            (h_new, c_new, g.grad(&grads).expect("∂gates"), c.grad(&grads).expect("∂c"))
        };
        let (h1, c1, dg1, dc1) = run(true);
        let (h2, c2, dg2, dc2) = run(false);
        assert!(max_diff(h1.inner(), h2.inner()) < 1e-6);
        assert!(max_diff(c1.inner(), c2.inner()) < 1e-6);
        assert!(max_diff(dg1, dg2) < 1e-5, "∂gates differ");
        assert!(max_diff(dc1, dc2) < 1e-5, "∂c differ");

        let (g, c) = (gates.inner(), c.inner());
        let (h1, c1) = lstm_gates(g.clone(), c.clone());
        let (h2, c2) = lstm_gates_composed(g, c);
        assert!(max_diff(h1, h2) < 1e-6 && max_diff(c1, c2) < 1e-6);
    }

    /// The packed `W_h` of both passes holds what [`pack_forward`] and [`pack_backward`] say,
    /// read back by multiplying with the identity (exact): 83 units in 3 groups, so the panels
    /// end narrow and the backward packing's `4·hidden` rows are cut by the packing's blocks of
    /// [`crate::gemm::packed::PACK_ROWS`] rows.
    #[test]
    fn packed_recurrent_weights_hold_their_definitions() {
        let h = 83;
        let w: Vec<f32> = (0..h * 4 * h).map(|i| ((i * 7919) % 1009) as f32).collect();
        let groups = unit_groups(h, 3);
        assert_eq!(groups.len(), 3);
        let unpack = |p: &PackedB, n: usize| {
            let k = p.k();
            let eye: Vec<f32> = (0..k * k).map(|e| if e / k == e % k { 1.0 } else { 0.0 }).collect();
            let mut c = vec![f32::NAN; k * n];
            p.matmul(&eye, k, k, &mut c, n, false);
            c
        };
        let at = |row: usize, col: usize| w[row * 4 * h + col];
        for ui in &groups {
            let m = ui.len();
            // Forward: `[hidden, 4·|U_i|]`, `(r, g·|U_i| + u)` = `W_h[r, g·h + U_i[u]]`.
            let f = unpack(&pack_forward(&w, h, ui), 4 * m);
            // Backward: `[4·hidden, |U_i|]`, `(g·h + r, u)` = `W_h[U_i[u], g·h + r]`.
            let b = unpack(&pack_backward(&w, h, ui), m);
            for g in 0..4 {
                for r in 0..h {
                    for u in 0..m {
                        assert_eq!(f[r * 4 * m + g * m + u], at(r, g * h + ui.start + u));
                        assert_eq!(b[(g * h + r) * m + u], at(ui.start + u, g * h + r));
                    }
                }
            }
        }
    }

    /// A layer gives the same bits, forward and backward, both directions, with padded rows,
    /// whatever the number of threads (groups of units) it runs on: each gate and each `∂h`
    /// is one product over every unit, summed in the order one group sums it (a sum of
    /// per-group products would round by where the groups are cut).
    #[test]
    fn a_layer_has_the_same_bits_whatever_the_thread_count() {
        let h = 40;
        let case = LayerCase::new(5, [9, 7, h], 2);
        let pool = |n: usize| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
        for reverse in [false, true] {
            let one = pool(1).install(|| case.bits(reverse));
            for n in [2, 3, 5] {
                assert_eq!(unit_groups(h, n).len(), n);
                let many = pool(n).install(|| case.bits(reverse));
                for (k, (a, b)) in one.iter().zip(&many).enumerate() {
                    assert!(a == b, "reverse {reverse}, {n} threads: output {k} differs from one thread's");
                }
            }
        }
    }

    /// A layer's operands, random from `seed`, for the tests that compare its bits run one way
    /// and another.
    struct LayerCase {
        xw: Tensor<3>,
        w: Tensor<2>,
        h0: Tensor<2>,
        c0: Tensor<2>,
        probe: Tensor<3>,
        keep: Tensor<2>,
        dense: usize,
    }

    impl LayerCase {
        /// `[batch, time, hidden]`; row `b` ends `b % (short + 1)` steps early, and the first
        /// `time − short` steps are real in every row.
        fn new(seed: u64, [b, t, h]: [usize; 3], short: usize) -> Self {
            let d = Device::flex().autodiff();
            d.seed(seed);
            let normal = |std: f64| Distribution::Normal(0.0, std);
            let keep: Vec<f32> =
                (0..b * t).map(|i| if i % t < t - (i / t) % (short + 1) { 1.0 } else { 0.0 }).collect();
            Self {
                xw: Tensor::random([b, t, 4 * h], normal(1.0), &d),
                w: Tensor::random([h, 4 * h], normal(2.0 / (h as f64).sqrt()), &d),
                h0: Tensor::random([b, h], normal(1.0), &d),
                c0: Tensor::random([b, h], normal(1.0), &d),
                probe: Tensor::random([b, t, h], normal(1.0), &d),
                keep: Tensor::from_data(TensorData::new(keep, [b, t]), &d),
                dense: t - short,
            }
        }

        /// The bits of the layer's outputs and of the gradients of `Σ outputs · probe + Σ h_T ·
        /// c_T` with respect to `xw`, `W_h`, `h0` and `c0`.
        fn bits(&self, reverse: bool) -> [Vec<u32>; 5] {
            let bits = |t: Tensor<3>| t.into_data().iter::<f32>().map(f32::to_bits).collect::<Vec<_>>();
            let (xw, w) = (self.xw.clone().require_grad(), self.w.clone().require_grad());
            let (h0, c0) = (self.h0.clone().require_grad(), self.c0.clone().require_grad());
            let (out, h_t, c_t) = lstm_layer(
                xw.clone(),
                w.clone(),
                h0.clone(),
                c0.clone(),
                self.keep.clone(),
                self.dense,
                reverse,
            );
            let loss = (out.clone() * self.probe.clone()).sum() + (h_t * c_t).sum();
            let grads = loss.backward();
            let g2 = |x: &Tensor<2>| bits(x.grad(&grads).expect("a gradient").unsqueeze::<3>());
            [bits(out.inner()), bits(xw.grad(&grads).expect("∂xw")), g2(&w), g2(&h0), g2(&c0)]
        }
    }

    /// The chunked gate math (see `CHUNK`) computes the same bits as the unit-by-unit one,
    /// forward and backward: units 0..63 through a chunk (in a row of 79 units) and through
    /// blocks and single units (in a row of 63).
    #[test]
    fn chunked_gate_math_equals_unit_by_unit() {
        let run = |n: usize| {
            let (gates, c0, dh) = row_operands(n);
            let (mut c, mut h) = (c0.clone(), vec![0f32; n]);
            cell_forward(&gates, &mut c, &mut h);
            let (mut dc, mut d_gates) = (c0.iter().map(|x| x / 2.0).collect::<Vec<_>>(), vec![0f32; 4 * n]);
            cell_backward::<false>(&gates, &c0, &dh, &mut dc, &mut d_gates);
            let d_gates: Vec<Vec<f32>> = d_gates.chunks_exact(n).map(|d| d[..63].to_vec()).collect();
            (c[..63].to_vec(), h[..63].to_vec(), dc[..63].to_vec(), d_gates)
        };
        let (chunked, unit_by_unit) = (run(79), run(63));
        let bits = |x: &(Vec<f32>, Vec<f32>, Vec<f32>, Vec<Vec<f32>>)| {
            let (c, h, dc, dg) = x;
            [c, h, dc].into_iter().chain(dg).flatten().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        assert!(chunked.1.iter().any(|&v| v != 0.0), "the test compares something");
        assert_eq!(bits(&chunked), bits(&unit_by_unit));
    }

    /// One row's pre-activation gates (`[i f g o]`, each `n` long), `c` and `∂h'` for the
    /// gate-math tests: unit `u` gets the same values whatever `n`.
    fn row_operands(n: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let value = |u: usize, s: usize| ((u * 37 + s * 11) % 97) as f32 / 8.0 - 6.0;
        let gates: Vec<f32> = (0..4).flat_map(|s| (0..n).map(move |u| value(u, s))).collect();
        let c0: Vec<f32> = (0..n).map(|u| value(u, 4) / 3.0).collect();
        let dh: Vec<f32> = (0..n).map(|u| value(u, 5) / 6.0).collect();
        (gates, c0, dh)
    }

    /// The backward gate math from the activations the forward pass hands over (what the layer
    /// saves) computes the same bits as from the pre-activations, through a chunk, blocks and
    /// single units (83 units), and the forward pass hands over every activation once.
    #[test]
    fn backward_from_saved_activations_equals_backward_from_gates() {
        let n = 83;
        let (gates, c0, dh) = row_operands(n);
        let (mut c, mut h) = (c0.clone(), vec![0f32; n]);
        let mut act = vec![f32::NAN; 4 * n];
        crate::cpu::fastmath::wide(|| {
            cell_forward_body(&gates, None, &mut c, &mut h, |s, j, a| {
                act[s * n + j..s * n + j + a.len()].copy_from_slice(a)
            })
        });
        assert!(act.iter().all(|a| a.is_finite()), "every activation handed over");
        let backward = |activated: bool| {
            let (mut dc, mut d_gates) = (c0.iter().map(|x| x / 2.0).collect::<Vec<_>>(), vec![0f32; 4 * n]);
            if activated {
                cell_backward::<true>(&act, &c0, &dh, &mut dc, &mut d_gates);
            } else {
                cell_backward::<false>(&gates, &c0, &dh, &mut dc, &mut d_gates);
            }
            dc.iter().chain(&d_gates).map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        let from_gates = backward(false);
        assert!(from_gates.iter().any(|&b| f32::from_bits(b) != 0.0), "the test compares something");
        assert_eq!(backward(true), from_gates);
    }

    /// A layer run alone as one part of a split step, its recurrent products helped by the
    /// other part's idle thread ([`step_product`]), gives the bits it gives outside a crew,
    /// forward and backward, both directions.
    #[test]
    fn a_layer_helped_by_the_crew_has_the_bits_of_one_alone() {
        use crate::cpu::crew::{Crew, HELPED};
        let case = LayerCase::new(3, [24, 12, 160], 0);
        // One thread for the part, as in a split step: the layer runs as one group.
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        for reverse in [false, true] {
            let alone = one.install(|| case.bits(reverse));
            for attempt in 0.. {
                let crew = Crew::new(2);
                let (helped, pieces) = std::thread::scope(|s| {
                    // The other part ends at once and helps; it reports the pieces it ran.
                    let helper = s.spawn(|| {
                        crew.part(|| ());
                        HELPED.with(|n| n.get())
                    });
                    let bits = one.install(|| {
                        crew.part(|| {
                            while crate::cpu::crew::idle() == 0 {
                                std::thread::yield_now();
                            }
                            case.bits(reverse)
                        })
                    });
                    (bits, helper.join().unwrap())
                });
                assert!(helped == alone, "reverse {reverse}: a helped layer's bits differ");
                // Again until the helper has claimed a piece (it cannot on one core).
                if pieces > 0 || cores < 2 {
                    break;
                }
                assert!(attempt < 20, "20 helped runs and no piece ever claimed by the helper");
            }
        }
    }
}
