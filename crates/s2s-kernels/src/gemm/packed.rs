//! A small-batch matrix product against a right-hand matrix packed once.
//!
//! A recurrent layer multiplies the same `W_h` (`[hidden, 4·hidden]`) by a new `[batch, hidden]`
//! state at every step. burn's CPU backend hands each of those products to the `gemm` crate,
//! which re-packs all of `W_h` every call and, below 64 rows, takes a path that runs at about
//! half its large-matrix rate (measured on the 2-core AVX2 VM: 26 GFLOP/s for
//! `[32, 512] × [512, 2048]` against 57 at 64 rows, while PyTorch reaches 66–69 at both).
//!
//! [`PackedB`] packs the matrix (or any subset of its columns) once, in panels of [`NR`]
//! columns stored `k`-major, and [`PackedB::matmul`] runs the classic register-blocked kernel
//! over it: [`MR`] rows × 16 columns of `C` held in twelve AVX registers while `k` runs, one
//! broadcast of `A` and two loads of `B` per twelve fused multiply-adds, `k` cut into blocks
//! that keep a `B` panel in L1. On CPUs with AVX-512 the block is 8 rows × two neighbouring
//! panels (32 columns) in sixteen 16-lane registers: 148–160 GFLOP/s on one core of the
//! AVX-512 VM against 100–110 for the AVX2 block (`[64, 512] × [512, 2048 or 8000]`). The
//! kernel is chosen at run time (AVX-512, else AVX2+FMA, else the same loops in portable
//! code), capped by `S2S_CPU_ISA` ([`crate::cpu::fastmath::isa`]); a test runs every block the CPU
//! has, not only the one dispatched. Single-threaded: callers split the columns over threads
//! (packing one `PackedB` per thread), which is what keeps two cores busy on a 64-row product
//! (`gemm` runs one at single-thread speed).
//!
//! Two things matter once the weights no longer fit in L2 (a decoder step's weights, 20–50
//! MiB, come from L3 at every step). Each panel row is its own 64-byte cache line
//! (`#[repr(align(64))]`), so no 16-lane load straddles two lines; and while one block of `B`
//! is multiplied, every row block fetches its share of the next block into L2 (`prefetcht1`),
//! so the first row block of the next block does not wait on L3 line by line. On the AVX-512
//! VM, `[64, 1280] × [1280, 8000]` with the weight in L3: 228 → 260 GFLOP/s (aligned lines)
//! → 292 (prefetch), two cores.
//! [`PackedB::matmul_par_add`] also cuts the rows into blocks of 256, so a block of `A` stays
//! in L2 while the panels pass: at 1536 rows (an encoder's input projection while decoding)
//! `[1536, 512] × [512, 2048]` went 260 → 326 GFLOP/s (burn's `gemm`: 319), and
//! `[1536, 512] × [512, 8000]` 180 → 245 (`gemm`: 205).
//!
//! [`PackedB::from_row_blocks`] packs [`PACK_ROWS`] rows at a time into uninitialised lines,
//! each written once: packing row by row scattered each row over every panel of a zeroed
//! buffer. [`PackedB::product`] writes its result once too, never zero-filled first. A bias or
//! other base ([`PackedB::matmul_par_add`]) is added per panel, right after the panel's columns
//! are finished and while they are in cache, not in a pass over the whole output afterwards
//! (4.5 % of a beam-5 profile: the `[320, 8000]` logits read back from memory); the same
//! addition, so the same bits (a test covers row and `k` blocks).
//!
//! # Shapes
//! - `A`: `[m, k]` row-major (row stride `lda`), `B`: `[k, n]` packed, `C`: `[m, n]` (row
//!   stride `ldc`).

/// Columns per packed panel: two 8-lane AVX registers.
pub const NR: usize = 16;
/// Rows of `C` per register block.
pub const MR: usize = 6;
/// `k` per cache block: a `[KC, NR]` panel of `B` (16 KiB) stays in L1 while `MR` rows pass.
const KC: usize = 256;
/// Rows of `A` per block in [`PackedB::matmul_par_add`] (`[MC, KC]`, 256 KiB, stays in L2).
const MC: usize = 256;
/// Rows of `B` per block in [`PackedB::from_row_blocks`].
pub const PACK_ROWS: usize = 64;

/// `B` (`[k, n]`) packed in panels of [`NR`] columns, each panel `[k, NR]` row-major, the last
/// panel padded with zero columns. Every panel row is one 64-byte cache line ([`Line`]), so the
/// kernels' 16-lane loads never straddle two lines.
#[derive(Debug, Clone)]
pub struct PackedB {
    k: usize,
    n: usize,
    data: Vec<Line>,
}

/// One panel row: [`NR`] floats on a cache line of their own.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
struct Line([f32; NR]);

const ZERO_LINE: Line = Line([0.0; NR]);

impl PackedB {
    /// Packs the `[k, n]` matrix whose element `(row, col)` is `at(row, col)`. Reads run along
    /// rows of the packed matrix, so `at` should be cheap and, ideally, contiguous in `col`.
    pub fn from_fn(k: usize, n: usize, at: impl Fn(usize, usize) -> f32) -> Self {
        let panels = n.div_ceil(NR);
        let mut data = vec![ZERO_LINE; panels * k];
        // (`max(1)`: with `k = 0` there is no panel row, and `chunks_exact_mut(0)` panics.)
        for (p, panel) in data.chunks_exact_mut(k.max(1)).enumerate() {
            let (col0, width) = (p * NR, NR.min(n - p * NR));
            for (kk, row) in panel.iter_mut().enumerate() {
                for (j, v) in row.0[..width].iter_mut().enumerate() {
                    *v = at(kk, col0 + j);
                }
            }
        }
        Self { k, n, data }
    }

    /// Packs the `[k, n]` matrix whose row `r` `fill(r, row)` writes into `row` (`n` long): a
    /// row at a time, so a caller copies contiguous runs instead of computing every element's
    /// source. See [`PackedB::from_row_blocks`], which this calls.
    pub fn from_rows(k: usize, n: usize, mut fill: impl FnMut(usize, &mut [f32])) -> Self {
        Self::from_row_blocks(k, n, |rows, block| {
            // (Indexed, not `chunks_exact_mut(n)`, which panics when `n = 0`.)
            for (i, r) in rows.enumerate() {
                fill(r, &mut block[i * n..(i + 1) * n]);
            }
        })
    }

    /// Packs the `[k, n]` matrix a block of [`PACK_ROWS`] rows at a time: `fill(rows, block)`
    /// writes rows `rows` into `block` (`[rows.len(), n]`, row-major), which is then copied
    /// out panel by panel, each panel's lines for those rows one contiguous run.
    ///
    /// Packing row by row scattered every row over all the panels (`n / 16` of them, `64·k`
    /// bytes apart), and the buffer was zeroed first and then written again: for `W_h` of
    /// a 512-unit LSTM that cost 3–9 % of a layer call. A block lets a caller read its
    /// source in long runs (a transposed source, too) and each line is written once.
    pub fn from_row_blocks(
        k: usize,
        n: usize,
        mut fill: impl FnMut(std::ops::Range<usize>, &mut [f32]),
    ) -> Self {
        let panels = n.div_ceil(NR);
        let mut data: Vec<Line> = Vec::with_capacity(panels * k);
        let lines = &mut data.spare_capacity_mut()[..panels * k];
        let mut block = vec![0f32; PACK_ROWS.min(k) * n];
        for r0 in (0..k).step_by(PACK_ROWS) {
            let rows = r0..(r0 + PACK_ROWS).min(k);
            let block = &mut block[..rows.len() * n];
            fill(rows.clone(), block);
            // (`max(1)`: with `n = 0` there is no panel, and `chunks_exact_mut(0)` panics.)
            for (p, panel) in lines.chunks_exact_mut(k.max(1)).enumerate() {
                let (col0, width) = (p * NR, NR.min(n - p * NR));
                for (line, src) in panel[rows.clone()].iter_mut().zip(block.chunks_exact(n)) {
                    let mut l = ZERO_LINE;
                    l.0[..width].copy_from_slice(&src[col0..col0 + width]);
                    line.write(l);
                }
            }
        }
        // SAFETY: the loops above wrote every one of the `panels · k` lines (each panel's
        // rows `0..k`, block by block); `Line` is plain data.
        unsafe { data.set_len(panels * k) };
        Self { k, n, data }
    }

    /// Rows (`k`) of the packed matrix.
    pub fn k(&self) -> usize {
        self.k
    }

    /// `C = A B` (or `C += A B` when `accumulate`), `A` `[m, k]` with row stride `lda`, `C`
    /// `[m, n]` with row stride `ldc`, on the calling thread.
    ///
    /// # Panics
    /// When `a` or `c` is too short for the shapes given.
    pub fn matmul(&self, a: &[f32], m: usize, lda: usize, c: &mut [f32], ldc: usize, accumulate: bool) {
        self.check(a, m, lda, c.len(), ldc);
        // SAFETY: bounds checked; one caller writes all of `C`.
        unsafe { self.run(a, m, lda, c.as_mut_ptr(), ldc, accumulate, None, 0..self.panels(), kernel()) };
    }

    /// As [`PackedB::matmul`] (`C = A B`), the panels of `B` (columns of `C`) cut into one
    /// range per rayon thread.
    ///
    /// # Panics
    /// When `a` or `c` is too short for the shapes given.
    pub fn matmul_par(&self, a: &[f32], m: usize, lda: usize, c: &mut [f32], ldc: usize) {
        self.matmul_par_add(a, m, lda, c, ldc, None);
    }

    /// [`PackedB::matmul_par`], then `C += base` (`base` `[m, n]`, or `[1, n]` added to every
    /// row), each thread adding to its own columns right after computing them (while they are
    /// in its cache): the same result as adding after the product, without a pass of its own.
    ///
    /// # Panics
    /// When `a`, `c` or `base` is too short for the shapes given.
    pub fn matmul_par_add(
        &self,
        a: &[f32],
        m: usize,
        lda: usize,
        c: &mut [f32],
        ldc: usize,
        base: Option<&[f32]>,
    ) {
        self.check(a, m, lda, c.len(), ldc);
        // SAFETY: bounds checked; `c` is ours alone while the call runs.
        unsafe { self.par_add_into(a, m, lda, c.as_mut_ptr(), ldc, base) };
    }

    /// `A B (+ base)` (as [`PackedB::matmul_par_add`]) in a new `[m, n]` buffer, written once:
    /// not zero-filled first (a `[64, 8000]` decoder output is 2 MiB a step).
    ///
    /// # Panics
    /// When `a` or `base` is too short for the shapes given.
    pub fn product(&self, a: &[f32], m: usize, lda: usize, base: Option<&[f32]>) -> Vec<f32> {
        let n = self.n;
        if self.k == 0 {
            // Nothing to multiply: the loops would write nothing.
            let mut c = vec![0f32; m * n];
            self.matmul_par_add(a, m, lda, &mut c, n, base);
            return c;
        }
        self.check(a, m, lda, m * n, n);
        let mut c = Vec::with_capacity(m * n);
        // SAFETY: bounds checked against the capacity; with `k > 0` the first block of `k`
        // writes every element of `C` without reading it, and the rest (and `base`) only
        // after; so all `m·n` elements are written before `set_len`.
        unsafe {
            self.par_add_into(a, m, lda, c.as_mut_ptr(), n, base);
            c.set_len(m * n);
        }
        c
    }

    /// [`PackedB::matmul_par_add`] into `c`.
    ///
    /// # Safety
    /// `c` has room for `[m, n]` at row stride `ldc`, nothing else touches it meanwhile, and
    /// `a` holds `[m, k]` at `lda` (checked by the callers).
    unsafe fn par_add_into(
        &self,
        a: &[f32],
        m: usize,
        lda: usize,
        c: *mut f32,
        ldc: usize,
        base: Option<&[f32]>,
    ) {
        use rayon::prelude::*;
        let n = self.n;
        if let Some(base) = base {
            assert!(base.len() == n || base.len() == m * n, "packed_gemm: base is neither [1, n] nor [m, n]");
        }
        let panels = self.panels();
        // One range of panels per thread of this pool and, in a part of a split step, one
        // for each crew member waiting idle (`cpu::crew`); the result has the same bits
        // however the panels are cut (tested).
        let threads = rayon::current_num_threads();
        let blocks = (threads + crate::cpu::crew::idle()).min(panels.div_ceil(4)).max(1);
        let per = panels.div_ceil(blocks);
        let out = SendPtr(c);
        let kernel = kernel();
        let starts: Vec<usize> = (0..panels).step_by(per.max(1)).collect();
        let block = |p0: usize| {
            let out = &out;
            let p1 = (p0 + per).min(panels);
            // Rows in blocks of `MC`, so a block of `A` stays in L2 while the panels pass.
            for r0 in (0..m).step_by(MC) {
                let rows = MC.min(m - r0);
                let base = base.map(|b| if b.len() == n { (b, 0) } else { (&b[r0 * n..], n) });
                // SAFETY: bounds checked; each range of panels writes only its own columns of
                // `C`, which outlives the loop.
                unsafe {
                    self.run(&a[r0 * lda..], rows, lda, out.0.add(r0 * ldc), ldc, false, base, p0..p1, kernel)
                };
            }
        };
        // This pool's ranges at once here, the rest offered to the crew (none outside one).
        let (own, offered) = starts.split_at(threads.min(starts.len()));
        crate::cpu::crew::offer(1 + offered.len(), &|i| match i {
            0 => own.par_iter().for_each(|&p0| block(p0)),
            i => block(offered[i - 1]),
        });
    }

    fn panels(&self) -> usize {
        self.n.div_ceil(NR)
    }

    fn check(&self, a: &[f32], m: usize, lda: usize, c_len: usize, ldc: usize) {
        if m == 0 || self.n == 0 {
            return;
        }
        assert!(lda >= self.k && ldc >= self.n, "packed_gemm: row strides shorter than rows");
        assert!(a.len() >= (m - 1) * lda + self.k, "packed_gemm: A shorter than [m, k]");
        assert!(c_len >= (m - 1) * ldc + self.n, "packed_gemm: C shorter than [m, n]");
    }

    /// The loops around the register blocks: panels `panels` of `B` (two at a time where the
    /// kernel has a two-panel block and both are full), blocks of `k`, blocks of rows, writing
    /// columns `16·panels` of `C`. With `base` (`(b, stride)`: row `r` of it at `b[r·stride..]`,
    /// stride 0 for one row for all) each panel's finished columns get `+ base` at once, while
    /// they are still in cache (a pass over the whole `C` afterwards read it back from memory:
    /// 4.5 % of a beam-5 profile, where `C` is the `[320, 8000]` logits).
    ///
    /// # Safety
    /// `a` and `c` hold `[m, k]` / `[m, n]` at strides `lda` / `ldc`, nothing else writes
    /// those columns of `C` meanwhile, and `kernel` may run on this CPU.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run(
        &self,
        a: &[f32],
        m: usize,
        lda: usize,
        c: *mut f32,
        ldc: usize,
        accumulate: bool,
        base: Option<(&[f32], usize)>,
        panels: std::ops::Range<usize>,
        kernel: Kernel,
    ) {
        let (k, n) = (self.k, self.n);
        let mr = kernel.mr;
        let row_blocks = m.div_ceil(mr);
        let pair_at = |p: usize| kernel.two.is_some() && p + 2 <= panels.end && n - p * NR >= 2 * NR;
        let mut edge = [0f32; MAX_MR * NR];
        let mut p = panels.start;
        while p < panels.end {
            let col0 = p * NR;
            let width = NR.min(n - col0);
            let pair = if pair_at(p) { kernel.two } else { None };
            let group = if pair.is_some() { 2 } else { 1 };
            for k0 in (0..k).step_by(KC) {
                let kc = KC.min(k - k0);
                let add = accumulate || k0 > 0;
                // The block after this one — the next `k` block of these panels, else the first
                // of the next panels — is fetched into L2 while this one is multiplied, a share
                // per row block: the first row block would otherwise wait on it line by line.
                let next = self.prefetch_next(p, k0, group, panels.end, &pair_at);
                for i in 0..row_blocks {
                    let (r0, rows) = row_block(i, m, row_blocks);
                    let pf = next.map_or(Prefetch::NONE, |next| next.share(i, row_blocks));
                    let a_ptr = unsafe { a.as_ptr().add(r0 * lda + k0) };
                    let b_ptr = self.data[p * k + k0..].as_ptr().cast::<f32>();
                    let c_ptr = unsafe { c.add(r0 * ldc + col0) };
                    // SAFETY (each call): the block lies within `A`, `B` and this call's columns
                    // of `C` (the function's contract), and `kernel` may run on this CPU.
                    if let Some(two) = pair {
                        // The next panel starts `k·NR` after this one.
                        unsafe { two(rows, kc, a_ptr, lda, b_ptr, k * NR, c_ptr, ldc, add, pf) };
                    } else if width == NR {
                        unsafe { (kernel.one)(rows, kc, a_ptr, lda, b_ptr, c_ptr, ldc, add, pf) };
                    } else {
                        let (one, edge) = (kernel.one, &mut edge);
                        unsafe {
                            narrow_block(one, rows, kc, a_ptr, lda, b_ptr, c_ptr, ldc, width, add, pf, edge)
                        };
                    }
                }
            }
            if let Some(base) = base {
                let cols = col0..col0 + (group * NR).min(n - col0);
                // SAFETY: as above: rows `0..m` of `C`, columns `cols`, are this call's alone.
                unsafe { add_base(c, ldc, m, base, cols) };
            }
            p += group;
        }
    }

    /// The lines to fetch into L2 while block `k0` of panels `p..p + group` is multiplied:
    /// the next `k` block of these panels, else the first of the next panels (both of them
    /// where `pair_at` says they are multiplied together); `None` past panel `end`.
    #[inline(always)]
    fn prefetch_next(
        &self,
        p: usize,
        k0: usize,
        group: usize,
        end: usize,
        pair_at: impl Fn(usize) -> bool,
    ) -> Option<Prefetch> {
        let k = self.k;
        let (np, nk0) = if k0 + KC < k { (p, k0 + KC) } else { (p + group, 0) };
        (np < end).then(|| Prefetch {
            at: self.data[np * k + nk0..].as_ptr().cast(),
            lines: KC.min(k - nk0),
            second: if (np == p && group == 2) || (np != p && pair_at(np)) { k * NR } else { 0 },
        })
    }
}

/// Rows `r0..r0 + rows` of block `i` of `blocks` over `m` rows: sizes that differ by at most
/// one, so that no block is much shorter than the rest. With 32 rows and 6-row AVX2 blocks,
/// `6, 6, 6, 6, 6, 2` left a 2-row block whose four accumulator chains cannot cover the FMA
/// latency (1.7× the time a row of the others took in a Luong step's profile); `5, 5, 6, 5, 5,
/// 6` runs every block at full rate. Each row's sums run in the same order either way.
#[inline(always)]
fn row_block(i: usize, m: usize, blocks: usize) -> (usize, usize) {
    let (r0, r1) = (i * m / blocks, (i + 1) * m / blocks);
    (r0, r1 - r0)
}

/// `C[r, cols] += b[r·stride + cols]` for every row `r < m` (`stride` 0: one row of `b` for
/// all): a base added to one panel group's finished columns while they are in cache.
///
/// # Safety
/// `c` holds rows `0..m` at stride `ldc`, each at least `cols.end` long, and nothing else
/// touches their columns `cols` meanwhile.
#[inline(always)]
unsafe fn add_base(
    c: *mut f32,
    ldc: usize,
    m: usize,
    (b, stride): (&[f32], usize),
    cols: std::ops::Range<usize>,
) {
    for r in 0..m {
        // SAFETY: row `r`'s columns `cols` of `C` are within `[m, n]` at `ldc`, and
        // this call's alone.
        let row = unsafe { std::slice::from_raw_parts_mut(c.add(r * ldc + cols.start), cols.len()) };
        for (y, &x) in row.iter_mut().zip(&b[r * stride..][cols.clone()]) {
            *y += x;
        }
    }
}

/// The last, narrower panel's register block (`width < NR` columns of `C`), through the
/// full-width scratch block `edge`: `C[rows, width] (+)= A[rows, kc] · B[kc, ·]`, the
/// operands as `one` takes them.
///
/// # Safety
/// As `one`'s, with `C` holding `width` columns of each of the `rows` rows; `one` may run on
/// this CPU.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn narrow_block(
    one: Block,
    rows: usize,
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    width: usize,
    add: bool,
    pf: Prefetch,
    edge: &mut [f32; MAX_MR * NR],
) {
    for r in 0..rows {
        for j in 0..width {
            edge[r * NR + j] = if add { unsafe { *c.add(r * ldc + j) } } else { 0.0 };
        }
    }
    unsafe { one(rows, kc, a, lda, b, edge.as_mut_ptr(), NR, true, pf) };
    for r in 0..rows {
        for j in 0..width {
            unsafe { *c.add(r * ldc + j) = edge[r * NR + j] };
        }
    }
}

/// Lines of `B` a register block fetches into L2 for the block that comes after it: `lines`
/// panel rows (one cache line each) from `at`, and as many `second` floats further on (the
/// neighbouring panel) when `second` is not zero.
#[derive(Clone, Copy)]
struct Prefetch {
    at: *const f32,
    lines: usize,
    second: usize,
}

impl Prefetch {
    const NONE: Self = Self { at: std::ptr::null(), lines: 0, second: 0 };

    /// Share `i` of `parts` (contiguous, sizes differing by at most one line).
    fn share(self, i: usize, parts: usize) -> Self {
        let (start, end) = (i * self.lines / parts, (i + 1) * self.lines / parts);
        Self { at: self.at.wrapping_add(start * NR), lines: end - start, second: self.second }
    }

    /// How many `k` steps of a `kc` block pass between two fetched lines.
    #[inline(always)]
    fn every(self, kc: usize) -> usize {
        kc.checked_div(self.lines).unwrap_or(kc).max(1)
    }

    /// Fetches line `line` (and its neighbour panel's) when `line < lines`; a hint only.
    #[inline(always)]
    fn fetch(self, line: usize) {
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if line < self.lines {
            #[cfg(target_arch = "x86")]
            use std::arch::x86::{_MM_HINT_T1, _mm_prefetch};
            #[cfg(target_arch = "x86_64")]
            use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
            let at = self.at.wrapping_add(line * NR);
            // SAFETY: a prefetch never faults, whatever the address.
            unsafe {
                _mm_prefetch::<_MM_HINT_T1>(at.cast());
                if self.second != 0 {
                    _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(self.second).cast());
                }
            }
        }
        #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
        let _ = line;
    }
}

/// `dst[i·ld_dst + c] = src[c·ld_src + col + i]` for `c < cols`, `i < rows`: columns
/// `col..col + rows` of `cols` rows of `src`, transposed, through a 16 × 16 tile on the stack,
/// so that every read and every write is a run of 16 floats. (Element by element, the
/// writes of one source row landed 1 KiB apart in `dst`, lines that share four L1 sets:
/// transposing the LSTM's `W_h` for its backward pass took 2.3–3.4 million cycles a layer
/// call.) What packing a transposed matrix calls inside [`PackedB::from_row_blocks`].
pub(crate) fn transpose(
    src: &[f32],
    ld_src: usize,
    col: usize,
    cols: usize,
    rows: usize,
    dst: &mut [f32],
    ld_dst: usize,
) {
    const T: usize = 16;
    let mut tile = [[0f32; T]; T];
    for c0 in (0..cols).step_by(T) {
        let tc = T.min(cols - c0);
        for i0 in (0..rows).step_by(T) {
            let ti = T.min(rows - i0);
            for c in 0..tc {
                for (i, &x) in src[(c0 + c) * ld_src + col + i0..][..ti].iter().enumerate() {
                    tile[i][c] = x;
                }
            }
            for (i, t) in tile[..ti].iter().enumerate() {
                dst[(i0 + i) * ld_dst + c0..][..tc].copy_from_slice(&t[..tc]);
            }
        }
    }
}

/// An output's first element, shared by threads that write disjoint elements of it (here in
/// `matmul_par`, and in `gemm::small`'s column blocks).
pub(crate) struct SendPtr(pub(crate) *mut f32);
// SAFETY: every user hands it only to threads that write disjoint elements, or only read.
unsafe impl Sync for SendPtr {}
// SAFETY: as above (a worker's own state may hold one).
unsafe impl Send for SendPtr {}

/// The register blocks this CPU runs: AVX-512 where available, else AVX2/FMA, else portable
/// code, capped by `S2S_CPU_ISA` ([`crate::cpu::fastmath::isa`]).
fn kernel() -> Kernel {
    #[cfg(target_arch = "x86_64")]
    match crate::cpu::fastmath::isa() {
        crate::cpu::fastmath::Isa::Avx512 => return avx512::KERNEL,
        crate::cpu::fastmath::Isa::Avx2 => return avx2::KERNEL,
        crate::cpu::fastmath::Isa::Baseline => {}
    }
    PORTABLE
}

/// The portable register block.
const PORTABLE: Kernel = Kernel { mr: MR, one: portable_block, two: None };

/// Rows of `C` per register block, at most (the edge scratch's size).
const MAX_MR: usize = 8;

/// A set of register blocks and the rows of `C` each takes at once.
#[derive(Clone, Copy)]
struct Kernel {
    /// Rows per block (at most [`MAX_MR`]).
    mr: usize,
    /// One panel: `[rows, NR]`.
    one: Block,
    /// Two neighbouring panels at once, `[rows, 2·NR]`, where the CPU has registers for it.
    two: Option<Block2>,
}

/// `C[rows, NR] (+)= A[rows, kc] · Bpanel[kc, NR]` for `rows ≤ mr`.
/// The last argument names lines to fetch for the next block ([`Prefetch`]).
type Block = unsafe fn(usize, usize, *const f32, usize, *const f32, *mut f32, usize, bool, Prefetch);

/// `C[rows, 2·NR] (+)= A[rows, kc] · [Bpanel | Bpanel'][kc, 2·NR]`, the second panel
/// `panel_stride` elements after the first.
type Block2 = unsafe fn(usize, usize, *const f32, usize, *const f32, usize, *mut f32, usize, bool, Prefetch);

/// The register block in portable code (the compiler vectorises the `NR`-wide rows).
///
/// # Safety
/// `a` holds `rows` rows of `kc` at stride `lda`, `b` holds `[kc, NR]`, `c` holds `rows` rows
/// of `NR` at stride `ldc`.
#[allow(clippy::too_many_arguments)]
unsafe fn portable_block(
    rows: usize,
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    add: bool,
    _pf: Prefetch,
) {
    let mut acc = [[0f32; NR]; MR];
    for kk in 0..kc {
        let b_row = unsafe { std::slice::from_raw_parts(b.add(kk * NR), NR) };
        for (r, acc) in acc.iter_mut().enumerate().take(rows) {
            let x = unsafe { *a.add(r * lda + kk) };
            for (s, &y) in acc.iter_mut().zip(b_row) {
                *s += x * y;
            }
        }
    }
    for (r, acc) in acc.iter().enumerate().take(rows) {
        let c_row = unsafe { std::slice::from_raw_parts_mut(c.add(r * ldc), NR) };
        for (d, &s) in c_row.iter_mut().zip(acc) {
            *d = if add { *d + s } else { s };
        }
    }
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod avx2 {
    #[cfg(target_arch = "x86")]
    use std::arch::x86::*;
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::*;

    use super::{Kernel, MR, NR, Prefetch};

    /// The AVX2/FMA register block.
    pub(super) const KERNEL: Kernel = Kernel { mr: MR, one: block, two: None };

    /// The register block with AVX2/FMA, dispatched on the row count so each variant keeps
    /// its `2·R` accumulators in registers.
    ///
    /// # Safety
    /// As [`super::portable_block`], and the CPU has AVX2 and FMA.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn block(
        rows: usize,
        kc: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        add: bool,
        pf: Prefetch,
    ) {
        const { assert!(MR == 6 && NR == 16) };
        unsafe {
            match rows {
                6 => kernel::<6>(kc, a, lda, b, c, ldc, add, pf),
                5 => kernel::<5>(kc, a, lda, b, c, ldc, add, pf),
                4 => kernel::<4>(kc, a, lda, b, c, ldc, add, pf),
                3 => kernel::<3>(kc, a, lda, b, c, ldc, add, pf),
                2 => kernel::<2>(kc, a, lda, b, c, ldc, add, pf),
                _ => kernel::<1>(kc, a, lda, b, c, ldc, add, pf),
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn kernel<const R: usize>(
        kc: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        add: bool,
        pf: Prefetch,
    ) {
        unsafe {
            let mut lo = [_mm256_setzero_ps(); R];
            let mut hi = [_mm256_setzero_ps(); R];
            let mut rows = [a; R];
            for (r, p) in rows.iter_mut().enumerate() {
                *p = a.add(r * lda);
            }
            let every = pf.every(kc);
            for (line, k0) in (0..kc).step_by(every).enumerate() {
                pf.fetch(line);
                for kk in k0..(k0 + every).min(kc) {
                    let b0 = _mm256_loadu_ps(b.add(kk * NR));
                    let b1 = _mm256_loadu_ps(b.add(kk * NR + 8));
                    for r in 0..R {
                        let x = _mm256_broadcast_ss(&*rows[r].add(kk));
                        lo[r] = _mm256_fmadd_ps(x, b0, lo[r]);
                        hi[r] = _mm256_fmadd_ps(x, b1, hi[r]);
                    }
                }
            }
            for r in 0..R {
                let out = c.add(r * ldc);
                let (mut l, mut h) = (lo[r], hi[r]);
                if add {
                    l = _mm256_add_ps(l, _mm256_loadu_ps(out));
                    h = _mm256_add_ps(h, _mm256_loadu_ps(out.add(8)));
                }
                _mm256_storeu_ps(out, l);
                _mm256_storeu_ps(out.add(8), h);
            }
        }
    }
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod avx512 {
    #[cfg(target_arch = "x86")]
    use std::arch::x86::*;
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::*;

    use super::{Kernel, NR, Prefetch};

    /// The AVX-512 register blocks: one panel, and two at once.
    pub(super) const KERNEL: Kernel = Kernel { mr: MR, one: block, two: Some(block2) };

    /// Rows per block: with two panels, `2·MR` = 16 accumulators of the 32 registers, enough
    /// independent chains to keep both FMA ports busy through their latency.
    pub(super) const MR: usize = 8;

    /// One panel (one 16-lane register per row).
    ///
    /// # Safety
    /// As [`super::portable_block`] with `rows ≤ MR`, and the CPU has AVX-512F.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn block(
        rows: usize,
        kc: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        add: bool,
        pf: Prefetch,
    ) {
        unsafe { by_rows::<1>(rows, kc, a, lda, b, 0, c, ldc, add, pf) }
    }

    /// Two neighbouring panels.
    ///
    /// # Safety
    /// As [`block`], and `b + panel_stride` holds the second `[kc, NR]` panel.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn block2(
        rows: usize,
        kc: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        panel_stride: usize,
        c: *mut f32,
        ldc: usize,
        add: bool,
        pf: Prefetch,
    ) {
        unsafe { by_rows::<2>(rows, kc, a, lda, b, panel_stride, c, ldc, add, pf) }
    }

    /// Dispatch on the row count so each variant keeps its `P·R` accumulators in registers.
    #[allow(clippy::too_many_arguments)]
    unsafe fn by_rows<const P: usize>(
        rows: usize,
        kc: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        stride: usize,
        c: *mut f32,
        ldc: usize,
        add: bool,
        pf: Prefetch,
    ) {
        const { assert!(MR == 8 && NR == 16) };
        unsafe {
            match rows {
                8 => kernel::<P, 8>(kc, a, lda, b, stride, c, ldc, add, pf),
                7 => kernel::<P, 7>(kc, a, lda, b, stride, c, ldc, add, pf),
                6 => kernel::<P, 6>(kc, a, lda, b, stride, c, ldc, add, pf),
                5 => kernel::<P, 5>(kc, a, lda, b, stride, c, ldc, add, pf),
                4 => kernel::<P, 4>(kc, a, lda, b, stride, c, ldc, add, pf),
                3 => kernel::<P, 3>(kc, a, lda, b, stride, c, ldc, add, pf),
                2 => kernel::<P, 2>(kc, a, lda, b, stride, c, ldc, add, pf),
                _ => kernel::<P, 1>(kc, a, lda, b, stride, c, ldc, add, pf),
            }
        }
    }

    /// `R` rows × `P` panels: per `k`, `P` loads of `B`, `R` broadcasts of `A`, `P·R` FMAs.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn kernel<const P: usize, const R: usize>(
        kc: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        stride: usize,
        c: *mut f32,
        ldc: usize,
        add: bool,
        pf: Prefetch,
    ) {
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); P]; R];
            let mut rows = [a; R];
            for (r, p) in rows.iter_mut().enumerate() {
                *p = a.add(r * lda);
            }
            let every = pf.every(kc);
            for (line, k0) in (0..kc).step_by(every).enumerate() {
                pf.fetch(line);
                for kk in k0..(k0 + every).min(kc) {
                    let mut bv = [_mm512_setzero_ps(); P];
                    for (p, v) in bv.iter_mut().enumerate() {
                        *v = _mm512_loadu_ps(b.add(p * stride + kk * NR));
                    }
                    for r in 0..R {
                        let x = _mm512_set1_ps(*rows[r].add(kk));
                        for p in 0..P {
                            acc[r][p] = _mm512_fmadd_ps(x, bv[p], acc[r][p]);
                        }
                    }
                }
            }
            for r in 0..R {
                for p in 0..P {
                    let out = c.add(r * ldc + p * NR);
                    let mut v = acc[r][p];
                    if add {
                        v = _mm512_add_ps(v, _mm512_loadu_ps(out));
                    }
                    _mm512_storeu_ps(out, v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] =
                    (0..k).map(|kk| a[i * k + kk] as f64 * b[kk * n + j] as f64).sum::<f64>() as f32;
            }
        }
        c
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    /// Every row remainder (1–6), a narrow last panel, `k` over one cache block, and
    /// accumulation, against a float64 reference.
    #[test]
    fn equals_the_plain_product_on_every_edge() {
        for &(m, k, n) in &[(1, 3, 5), (7, 300, 37), (13, 512, 48), (64, 257, 16), (5, 1, 17)] {
            let a = values(m * k, 1);
            let b = values(k * n, 2);
            let want = naive(&a, &b, m, k, n);
            let packed = PackedB::from_fn(k, n, |r, c| b[r * n + c]);
            let mut c = vec![0f32; m * n];
            packed.matmul(&a, m, k, &mut c, n, false);
            for (x, y) in c.iter().zip(&want) {
                assert!((x - y).abs() < 1e-4 * k as f32, "{m}x{k}x{n}: {x} vs {y}");
            }
            packed.matmul(&a, m, k, &mut c, n, true);
            for (x, y) in c.iter().zip(&want) {
                assert!((x - 2.0 * y).abs() < 2e-4 * k as f32, "accumulate {m}x{k}x{n}: {x} vs {y}");
            }
        }
    }

    /// Packing row by row lays out what packing element by element does: a narrow panel, more
    /// rows than one block of [`PACK_ROWS`], and empty matrices.
    #[test]
    fn packing_by_rows_equals_packing_by_elements() {
        for (k, n) in [(7, 16 * 3 + 5), (PACK_ROWS + 9, 21), (3, 0), (0, 5)] {
            let b = values(k * n, 9);
            let by_fn = PackedB::from_fn(k, n, |r, c| b[r * n + c]);
            let by_rows = PackedB::from_rows(k, n, |r, row| row.copy_from_slice(&b[r * n..(r + 1) * n]));
            assert_eq!((by_fn.k, by_fn.n, &by_fn.data), (by_rows.k, by_rows.n, &by_rows.data));
        }
    }

    /// Packing a column subset of a transposed matrix, into a `C` with a wider row stride.
    #[test]
    fn packs_selected_columns_of_a_transpose() {
        let (m, k, n_src) = (9, 20, 11);
        let w = values(n_src * k, 3); // [n_src, k] row-major: B = wᵀ
        let cols = [10, 0, 4, 7];
        let packed = PackedB::from_fn(k, cols.len(), |r, j| w[cols[j] * k + r]);
        let a = values(m * k, 4);
        let ldc = 6;
        let mut c = vec![9f32; m * ldc];
        packed.matmul(&a, m, k, &mut c, ldc, false);
        for i in 0..m {
            for (j, &col) in cols.iter().enumerate() {
                let want: f32 = (0..k).map(|kk| a[i * k + kk] * w[col * k + kk]).sum();
                assert!((c[i * ldc + j] - want).abs() < 1e-4, "({i}, {j})");
            }
            assert_eq!(&c[i * ldc + 4..i * ldc + 6], &[9.0, 9.0], "wrote past the columns of C");
        }
    }

    /// Adding a `[1, n]` or `[m, n]` base inside the parallel product gives the bits of adding
    /// it afterwards, into a given buffer or a new one ([`PackedB::product`], also with `k = 0`).
    #[test]
    fn adding_a_base_equals_adding_after_the_product() {
        // Also more rows than a row block (`MC`: the base's rows offset per block) and more
        // `k` than a cache block (`KC`: the base goes on after the last one).
        for (m, k) in [(10, 70), (MC + 37, KC + 70)] {
            let n = 16 * 9 + 5;
            let (a, b) = (values(m * k, 7), values(k * n, 8));
            let packed = PackedB::from_fn(k, n, |r, c| b[r * n + c]);
            let mut plain = vec![0f32; m * n];
            packed.matmul(&a, m, k, &mut plain, n, false);
            let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("pool");
            for rows in [1, m] {
                let base = values(rows * n, 11);
                let mut fused = vec![f32::NAN; m * n];
                pool.install(|| packed.matmul_par_add(&a, m, k, &mut fused, n, Some(&base)));
                for (i, (x, y)) in fused.iter().zip(&plain).enumerate() {
                    assert_eq!(x.to_bits(), (y + base[if rows == 1 { i % n } else { i }]).to_bits());
                }
                assert_eq!(
                    pool.install(|| packed.product(&a, m, k, Some(&base))),
                    fused,
                    "product, base rows {rows}"
                );
                let empty = PackedB::from_fn(0, n, |_, _| 1.0);
                let want: Vec<f32> = (0..m * n).map(|i| base[if rows == 1 { i % n } else { i }]).collect();
                assert_eq!(empty.product(&[], m, 0, Some(&base)), want, "k = 0, base rows {rows}");
            }
        }
    }

    /// The column ranges run on several threads (and their row blocks) write exactly what one
    /// thread does.
    #[test]
    fn parallel_panels_equal_one_thread() {
        // Also more rows than one row block of `matmul_par` (`MC`).
        for m in [10, MC + 37] {
            let (k, n) = (70, 16 * 9 + 5);
            let (a, b) = (values(m * k, 7), values(k * n, 8));
            let packed = PackedB::from_fn(k, n, |r, c| b[r * n + c]);
            let mut one = vec![0f32; m * n];
            packed.matmul(&a, m, k, &mut one, n, false);
            let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("pool");
            let mut par = vec![f32::NAN; m * n];
            pool.install(|| packed.matmul_par(&a, m, k, &mut par, n));
            assert_eq!(one, par, "{m} rows");
            assert_eq!(one, pool.install(|| packed.product(&a, m, k, None)), "{m} rows, product");
        }
    }

    /// Every register block this CPU can run (portable, AVX2, AVX-512 with its two-panel
    /// block) computes the float64 reference, on odd panel counts, a narrow last panel, row
    /// remainders and accumulation — the dispatched one is only one of them.
    #[test]
    fn every_kernel_this_cpu_runs_equals_the_reference() {
        let mut kernels = vec![("portable", PORTABLE)];
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        {
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                kernels.push(("avx2", avx2::KERNEL));
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                kernels.push(("avx512", avx512::KERNEL));
            }
        }
        for &(m, k, n) in &[(11, 40, 32), (17, 300, 16 * 5 + 3), (64, 513, 16 * 4), (3, 7, 16 * 3)] {
            let (a, b) = (values(m * k, 5), values(k * n, 6));
            let want = naive(&a, &b, m, k, n);
            let packed = PackedB::from_fn(k, n, |r, c| b[r * n + c]);
            for (name, kernel) in &kernels {
                let mut got = vec![f32::NAN; m * n];
                // SAFETY: shapes as packed; only kernels this CPU runs are listed.
                unsafe {
                    packed.run(&a, m, k, got.as_mut_ptr(), n, false, None, 0..packed.panels(), *kernel)
                };
                for (x, y) in got.iter().zip(&want) {
                    assert!((x - y).abs() < 1e-4 * k as f32, "{name} {m}x{k}x{n}: {x} vs {y}");
                }
                unsafe { packed.run(&a, m, k, got.as_mut_ptr(), n, true, None, 0..packed.panels(), *kernel) };
                for (x, y) in got.iter().zip(&want) {
                    assert!((x - 2.0 * y).abs() < 2e-4 * k as f32, "{name} accumulate {m}x{k}x{n}");
                }
            }
        }
    }

    #[test]
    fn a_row_has_the_same_bits_in_any_row_block() {
        // 32 rows run as blocks of 5 and 6 (AVX2) or 8 (AVX-512), each row alone as a block
        // of 1: every row's sums run in the same order, so the bits agree.
        let (m, k, n) = (32, 300, 16 * 3 + 5);
        let (a, b) = (values(m * k, 8), values(k * n, 9));
        let packed = PackedB::from_fn(k, n, |r, c| b[r * n + c]);
        let mut whole = vec![0f32; m * n];
        packed.matmul(&a, m, k, &mut whole, n, false);
        for r in 0..m {
            let mut row = vec![0f32; n];
            packed.matmul(&a[r * k..(r + 1) * k], 1, k, &mut row, n, false);
            assert_eq!(
                row.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                whole[r * n..(r + 1) * n].iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "row {r}"
            );
        }
        assert_eq!((0..6).map(|i| row_block(i, 32, 6).1).collect::<Vec<_>>(), [5, 5, 6, 5, 5, 6]);
        assert_eq!((0..6).map(|i| row_block(i, 32, 6)).map(|(r0, n)| r0 + n).last(), Some(32));
    }
}
