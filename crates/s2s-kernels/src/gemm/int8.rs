//! `x W` with int8 operands and int32 accumulation, for decoding (`--quantize int8`).
//!
//! The scheme is CTranslate2's and Marian's: the weight `W` (`[k, n]`) is quantized once, one
//! scale per output unit (column `j`: `s_j = max_i |W_ij| / 127`, `q_ij = round(W_ij / s_j)` in
//! `[-127, 127]`), and packed ([`PackedI8`]); each product quantizes its input per row the same
//! way ([`QuantRows`]); the integer products are summed exactly in int32 and the result is
//! `acc · (s_row · s_j) (+ base)` in f32. Everything around the products (softmax, layer norm,
//! the cells' gates, attention's scores) stays f32.
//!
//! What it computes is defined by [`reference_i32`] (plain loops over the quantized operands)
//! and [`reference_product`] (its dequantised result): every kernel below equals it exactly
//! in int32, hence to the bit in f32 (the f32 epilogue is one function all kernels share).
//!
//! # Kernels
//! `B` is packed in panels of [`NR`] = 16 columns; each panel row is one 64-byte line holding
//! four consecutive `k` of each of its 16 columns (`k` padded with zeros to a multiple of 4),
//! the layout both instructions below read, so one packing serves every kernel:
//! - **AVX-512 VNNI** (`vpdpbusd`: 4 products of u8 × i8 summed into each of 16 int32 lanes):
//!   the input row's bytes are offset by 128 to make them unsigned, and `128 · Σ_i q_ij`
//!   (kept per column at packing) is subtracted afterwards; 6 rows × 4 panels a block (24
//!   accumulators), each broadcast of `A` feeding four instructions.
//! - **AVX2** (`vpmaddubsw` + `vpmaddwd`): the sign trick, `|a| · (w · sign a)`, keeps every
//!   pair sum within int16 (`2 · 127 · 127 < 2¹⁵`, which the offset bytes would not), so
//!   nothing saturates; 4 rows × 1 panel a block.
//! - portable code, the same loops in scalar.
//!
//! Chosen at run time like the f32 kernels (VNNI where the CPU has it and `S2S_CPU_ISA` allows
//! AVX-512, else AVX2, else portable; [`kernel_for`] names every one the CPU can run, which the
//! tests all hold to the reference). Columns are cut into one range of panels per thread.

use rayon::prelude::*;

/// Columns per packed panel (one 16-lane int32 register of VNNI).
pub const NR: usize = 16;
/// Rows of `A` per block of [`PackedI8::product`] (a block of quantized `A` stays in L2).
const MC: usize = 256;
/// Panels per VNNI block.
const VNNI_PANELS: usize = 4;
/// Rows per VNNI block.
const VNNI_ROWS: usize = 6;
/// Rows per AVX2 block.
const AVX2_ROWS: usize = 4;

/// One panel row: 16 columns × 4 consecutive `k` (`[col][k]`), on a cache line of its own.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Line([i8; 64]);

/// `1.5 · 2²³`: `y + R` rounds `y` to the nearest integer, ties to even, for `|y| < 2²²`, which
/// its low mantissa bits then hold — an addition that vectorises on every instruction set
/// (`f32::round` is a library call on the baseline build).
const ROUND: f32 = 12_582_912.0;

/// `ROUND`'s bits: `(y + ROUND)`'s bits minus these are `y` rounded, as an integer.
const ROUND_BITS: i32 = 0x4B40_0000;

/// `x · inv` rounded to the nearest integer (ties to even) as int8, for `|x · inv| ≤ 127.5`
/// (what [`quantize`] asks): read off the bits of `x · inv + 1.5·2²³`, integer operations that
/// vectorise (a float-to-int8 conversion does not, well).
#[inline(always)]
fn to_int8(x: f32, inv: f32) -> i8 {
    ((x * inv + ROUND).to_bits() as i32).wrapping_sub(ROUND_BITS) as i8
}

/// The scale of values whose largest magnitude is `max`, and the factor that quantizes them.
fn scales(max: f32) -> (f32, f32) {
    (max / 127.0, 127.0 / max)
}

/// Quantizes `v` (a column of `W`) with one scale: `s = max|v| / 127`, `q = round(v · 127 /
/// max)`, ties to even (0 and scale 0 where `v` is all zeros or subnormal; a non-finite `max`
/// gives the signs, scale 1).
pub fn quantize(v: impl Iterator<Item = f32> + Clone, out: &mut [i8]) -> f32 {
    let max = v.clone().fold(0f32, |m, x| m.max(x.abs()));
    if !max.is_finite() {
        out.iter_mut().zip(v).for_each(|(o, x)| *o = x.signum() as i8);
        return 1.0;
    }
    if !(127.0 / max).is_finite() {
        // All zeros, or so small (subnormal) that `127 / max` overflows: zeros.
        out.iter_mut().for_each(|o| *o = 0);
        return 0.0;
    }
    let (scale, inv) = scales(max);
    for (o, x) in out.iter_mut().zip(v) {
        *o = to_int8(x, inv);
    }
    scale
}

/// [`quantize`] of a row held in a slice, in loops the compiler vectorises (the same bits).
#[inline(always)]
fn quantize_slice(v: &[f32], out: &mut [i8]) -> f32 {
    let max = crate::cpu::fastmath::lane_fold_map(v, 0.0, f32::abs, f32::max);
    if !(max.is_finite() && (127.0 / max).is_finite()) {
        return quantize(v.iter().copied(), out);
    }
    let (scale, inv) = scales(max);
    for (o, &x) in out.iter_mut().zip(v) {
        *o = to_int8(x, inv);
    }
    scale
}

/// [`quantize_slice`] of each of the `scale.len()` rows of `a` (stride `lda`) into `data`
/// (stride `kp`), compiled for the widest instruction set `S2S_CPU_ISA` allows. Its own
/// `#[target_feature]` functions rather than [`crate::cpu::fastmath::wide`]: a closure the
/// compiler does not inline there runs as baseline (SSE2) code, which this loop did.
fn quantize_rows(a: &[f32], k: usize, lda: usize, kp: usize, data: &mut [i8], scale: &mut [f32]) {
    #[inline(always)]
    fn body(a: &[f32], k: usize, lda: usize, kp: usize, data: &mut [i8], scale: &mut [f32]) {
        for (r, s) in scale.iter_mut().enumerate() {
            *s = quantize_slice(&a[r * lda..r * lda + k], &mut data[r * kp..r * kp + k]);
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
        unsafe fn v4(a: &[f32], k: usize, lda: usize, kp: usize, data: &mut [i8], scale: &mut [f32]) {
            body(a, k, lda, kp, data, scale)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn v3(a: &[f32], k: usize, lda: usize, kp: usize, data: &mut [i8], scale: &mut [f32]) {
            body(a, k, lda, kp, data, scale)
        }
        use crate::cpu::fastmath::{Isa, isa};
        match isa() {
            // SAFETY: `isa` answers at most what the CPU has.
            Isa::Avx512 => return unsafe { v4(a, k, lda, kp, data, scale) },
            // SAFETY: as above.
            Isa::Avx2 => return unsafe { v3(a, k, lda, kp, data, scale) },
            Isa::Baseline => {}
        }
    }
    body(a, k, lda, kp, data, scale)
}

/// The rows of `A` (`[m, k]`) quantized, each with its scale, `k` padded with zeros to a
/// multiple of 4.
#[derive(Debug, Clone)]
pub struct QuantRows {
    m: usize,
    /// `k` rounded up to a multiple of 4: each row's stride in `data`.
    kp: usize,
    data: Vec<i8>,
    scale: Vec<f32>,
}

impl QuantRows {
    /// Quantizes the `[m, k]` row-major `a` (row stride `lda`) per row ([`quantize`]).
    pub fn new(a: &[f32], m: usize, k: usize, lda: usize) -> Self {
        let kp = k.div_ceil(4) * 4;
        let mut data = vec![0i8; m * kp];
        let mut scale = vec![0f32; m];
        quantize_rows(a, k, lda, kp, &mut data, &mut scale);
        Self { m, kp, data, scale }
    }

    /// Row `r`'s quantized values (`k` of them, then the padding).
    pub fn row(&self, r: usize) -> &[i8] {
        &self.data[r * self.kp..(r + 1) * self.kp]
    }

    /// Row `r`'s scale.
    pub fn scale(&self, r: usize) -> f32 {
        self.scale[r]
    }
}

/// `W` (`[k, n]`) quantized per column and packed once for the kernels.
#[derive(Debug, Clone)]
pub struct PackedI8 {
    k: usize,
    n: usize,
    /// Groups of 4 `k`: the lines of one panel.
    groups: usize,
    data: Vec<Line>,
    /// Per column (padded to whole panels with 0).
    scale: Vec<f32>,
    /// `Σ_i q_ij` per column (padded): VNNI's correction for its offset input.
    col_sum: Vec<i32>,
}

/// `W` quantized per column: its values `[k, n]` row-major and its `n` scales ([`quantize`]).
/// `at(row, col)` reads the weight.
pub fn quantize_columns(k: usize, n: usize, at: impl Fn(usize, usize) -> f32) -> (Vec<i8>, Vec<f32>) {
    let mut q = vec![0i8; k * n];
    let mut scale = vec![0f32; n];
    let mut col = vec![0i8; k];
    for (j, s) in scale.iter_mut().enumerate() {
        *s = quantize((0..k).map(|i| at(i, j)), &mut col);
        for (i, &v) in col.iter().enumerate() {
            q[i * n + j] = v;
        }
    }
    (q, scale)
}

/// A `[rows, cols]` row-major matrix quantized per column (`per_column`: a product's `W`) or
/// per row (an embedding's table): its values (row-major) and one scale per column or row.
pub fn quantize_matrix(v: &[f32], rows: usize, cols: usize, per_column: bool) -> (Vec<i8>, Vec<f32>) {
    if per_column {
        return quantize_columns(rows, cols, |i, j| v[i * cols + j]);
    }
    let mut q = vec![0i8; rows * cols];
    let scale = (0..rows)
        .map(|r| quantize(v[r * cols..(r + 1) * cols].iter().copied(), &mut q[r * cols..(r + 1) * cols]))
        .collect();
    (q, scale)
}

/// [`quantize_matrix`]'s values back in f32 (`q · s`) into `out`.
pub fn dequantize_matrix(
    q: &[i8],
    scale: &[f32],
    rows: usize,
    cols: usize,
    per_column: bool,
    out: &mut [f32],
) {
    for r in 0..rows {
        for c in 0..cols {
            let s = if per_column { scale[c] } else { scale[r] };
            out[r * cols + c] = q[r * cols + c] as f32 * s;
        }
    }
}

impl PackedI8 {
    /// Quantizes (per column, [`quantize_columns`]) and packs the `[k, n]` weight whose
    /// element `(row, col)` is `at(row, col)`.
    pub fn new(k: usize, n: usize, at: impl Fn(usize, usize) -> f32) -> Self {
        let (q, scale) = quantize_columns(k, n, at);
        Self::from_quantized(k, n, &q, scale)
    }

    /// Packs values already quantized (`q`: `[k, n]` row-major, `scale`: `n`).
    pub fn from_quantized(k: usize, n: usize, q: &[i8], mut scale: Vec<f32>) -> Self {
        assert!(q.len() == k * n && scale.len() == n, "PackedI8: operand sizes");
        let groups = k.div_ceil(4);
        let panels = n.div_ceil(NR);
        let mut data = vec![Line([0; 64]); panels * groups];
        let mut col_sum = vec![0i32; panels * NR];
        for p in 0..panels {
            for g in 0..groups {
                let line = &mut data[p * groups + g].0;
                for c in 0..NR.min(n - p * NR) {
                    let j = p * NR + c;
                    for d in 0..4 {
                        let i = 4 * g + d;
                        if i < k {
                            line[4 * c + d] = q[i * n + j];
                        }
                    }
                }
            }
        }
        for i in 0..k {
            for j in 0..n {
                col_sum[j] += q[i * n + j] as i32;
            }
        }
        scale.resize(panels * NR, 0.0);
        Self { k, n, groups, data, scale, col_sum }
    }

    /// `[k, n]`.
    pub fn dims(&self) -> [usize; 2] {
        [self.k, self.n]
    }

    /// The bytes it holds (values, scales and sums).
    pub fn bytes(&self) -> usize {
        self.data.len() * 64 + self.scale.len() * 8
    }

    fn panels(&self) -> usize {
        self.n.div_ceil(NR)
    }

    /// `A W (+ base)` for the `[m, k]` row-major `a` (row stride `lda`), quantized per row
    /// here, in a new `[m, n]` buffer; `base` is `[m, n]` or `[1, n]` (a bias). The columns
    /// are cut over this pool's threads (the same bits however they are cut).
    pub fn product(&self, a: &[f32], m: usize, lda: usize, base: Option<&[f32]>) -> Vec<f32> {
        assert!(m == 0 || a.len() >= (m - 1) * lda + self.k, "PackedI8: A shorter than [m, k]");
        let qa = QuantRows::new(a, m, self.k, lda);
        self.product_quantized(&qa, base, kernel())
    }

    /// [`PackedI8::product`] from rows already quantized, through `kernel`. Each register
    /// block's sums are scaled into `C` as soon as they are done, while in L1 (no int32
    /// matrix of their own), and `C` is written once, never zero-filled first.
    fn product_quantized(&self, qa: &QuantRows, base: Option<&[f32]>, kernel: Kernel) -> Vec<f32> {
        let (m, n) = (qa.m, self.n);
        if let Some(b) = base {
            assert!(b.len() == n || b.len() == m * n, "PackedI8: base is neither [1, n] nor [m, n]");
        }
        let mut c: Vec<f32> = Vec::with_capacity(m * n);
        let out = Out(c.as_mut_ptr());
        self.par_panels(kernel, |p0, p1, kernel| {
            let mut sink = ToF32 { out: &out, n, base, s_row: &qa.scale, s_col: &self.scale };
            for r0 in (0..m).step_by(MC) {
                self.block_i32(qa, r0..(r0 + MC).min(m), p0..p1, kernel, &mut sink);
            }
        });
        // SAFETY: the panel ranges cover every column and the row blocks every row, so all
        // `m·n` elements were written.
        unsafe { c.set_len(m * n) };
        c
    }

    /// The int32 sums `Σ_i qa_ri q_ij`, `[m, n]`, through `kernel` (what the tests compare).
    pub fn product_i32(&self, qa: &QuantRows, kernel: Kernel) -> Vec<i32> {
        let (m, n) = (qa.m, self.n);
        let mut out = vec![0i32; m * n];
        self.block_i32(qa, 0..m, 0..self.panels(), kernel, &mut ToI32 { out: &mut out, n });
        out
    }

    /// Runs `f(p0, p1, kernel)` over ranges of panels, one per thread of this pool.
    fn par_panels(&self, kernel: Kernel, f: impl Fn(usize, usize, Kernel) + Sync) {
        let panels = self.panels();
        if panels == 0 {
            return;
        }
        let blocks = rayon::current_num_threads().min(panels.div_ceil(VNNI_PANELS)).max(1);
        let per = panels.div_ceil(blocks).div_ceil(VNNI_PANELS) * VNNI_PANELS;
        let starts: Vec<usize> = (0..panels).step_by(per).collect();
        starts
            .par_iter()
            .for_each(|&p0| crate::cpu::fastmath::wide(|| f(p0, (p0 + per).min(panels), kernel)));
    }

    /// The int32 sums of rows `rows` against panels `panels`, handed to `sink` a register
    /// block at a time ([`Sink::put`]).
    fn block_i32<S: Sink>(
        &self,
        qa: &QuantRows,
        rows: std::ops::Range<usize>,
        panels: std::ops::Range<usize>,
        kernel: Kernel,
        sink: &mut S,
    ) {
        assert_eq!(qa.kp, self.groups * 4, "PackedI8: A's k differs from W's");
        assert!(rows.end <= qa.m && panels.end <= self.panels(), "PackedI8: block out of range");
        #[allow(unreachable_patterns)]
        match kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `kernel_for` offers VNNI only where the CPU has it; the bounds are
            // asserted above.
            Kernel::Vnni => unsafe { x86::vnni(self, qa, rows, panels, sink) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above, AVX2.
            Kernel::Avx2 => unsafe { x86::avx2(self, qa, rows, panels, sink) },
            _ => portable(self, qa, rows, panels, sink),
        }
    }

    /// Panel `p`'s lines.
    fn panel(&self, p: usize) -> &[Line] {
        &self.data[p * self.groups..(p + 1) * self.groups]
    }
}

/// Where a kernel's register blocks of int32 sums go: `put(r0, rows, c0, width, sums)` for
/// rows `r0..r0 + rows` and columns `c0..c0 + width` (whole panels: past `n` in the last),
/// `sums` `[rows, width]` row-major. `put` is `#[inline(always)]` so that it is compiled into
/// each kernel with the kernel's instruction set (a closure here was not inlined, and its
/// epilogue ran as baseline SSE2 code beside the AVX2 kernel).
trait Sink {
    fn put(&mut self, r0: usize, nr: usize, c0: usize, w: usize, acc: &[i32]);
}

/// The product's sink: each block scaled into the f32 output ([`epilogue`]).
struct ToF32<'a> {
    out: &'a Out,
    n: usize,
    base: Option<&'a [f32]>,
    s_row: &'a [f32],
    s_col: &'a [f32],
}

impl Sink for ToF32<'_> {
    #[inline(always)]
    fn put(&mut self, r0: usize, nr: usize, c0: usize, w: usize, acc: &[i32]) {
        let n = self.n;
        let cols = w.min(n - c0);
        for i in 0..nr {
            let row = r0 + i;
            let base_row = self.base.map(|b| {
                if b.len() == n { &b[c0..c0 + cols] } else { &b[row * n + c0..row * n + c0 + cols] }
            });
            // SAFETY: each panel range writes only its own columns `c0..c0 + cols` of row
            // `row` of the `[m, n]` output, whose capacity outlives the products.
            unsafe {
                epilogue(
                    &acc[i * w..i * w + cols],
                    self.s_row[row],
                    &self.s_col[c0..c0 + cols],
                    base_row,
                    self.out.ptr().add(row * n + c0),
                )
            };
        }
    }
}

/// The tests' sink: the int32 sums themselves, `[m, n]`.
struct ToI32<'a> {
    out: &'a mut [i32],
    n: usize,
}

impl Sink for ToI32<'_> {
    #[inline(always)]
    fn put(&mut self, r0: usize, nr: usize, c0: usize, w: usize, acc: &[i32]) {
        let (n, cols) = (self.n, w.min(self.n - c0));
        for i in 0..nr {
            self.out[(r0 + i) * n + c0..(r0 + i) * n + c0 + cols].copy_from_slice(&acc[i * w..i * w + cols]);
        }
    }
}

/// `C = acc · (s_row · s_j) (+ base_j)`, in f32, the same in every kernel, written to `c`.
///
/// # Safety
/// `c` has room for `acc.len()` values.
#[inline(always)]
unsafe fn epilogue(acc: &[i32], s_row: f32, s_col: &[f32], base: Option<&[f32]>, c: *mut f32) {
    match base {
        Some(b) => {
            for (j, ((&a, &s), &b)) in acc.iter().zip(s_col).zip(b).enumerate() {
                // SAFETY: `j < acc.len()`.
                unsafe { c.add(j).write(a as f32 * (s_row * s) + b) };
            }
        }
        None => {
            for (j, (&a, &s)) in acc.iter().zip(s_col).enumerate() {
                // SAFETY: as above.
                unsafe { c.add(j).write(a as f32 * (s_row * s)) };
            }
        }
    }
}

/// The kernels of [`PackedI8`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AVX-512 VNNI (`vpdpbusd`).
    Vnni,
    /// AVX2 (`vpmaddubsw`/`vpmaddwd`).
    Avx2,
    /// Scalar loops.
    Portable,
}

impl Kernel {
    /// Its name (the device line, `s2s bench`).
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Vnni => "avx512-vnni",
            Kernel::Avx2 => "avx2",
            Kernel::Portable => "portable",
        }
    }
}

/// Every kernel this CPU can run under `S2S_CPU_ISA`'s cap, fastest first.
pub fn kernel_for() -> Vec<Kernel> {
    let mut out = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpu::fastmath::{Isa, isa};
        if isa() >= Isa::Avx512 && std::arch::is_x86_feature_detected!("avx512vnni") {
            out.push(Kernel::Vnni);
        }
        if isa() >= Isa::Avx2 {
            out.push(Kernel::Avx2);
        }
    }
    out.push(Kernel::Portable);
    out
}

/// The kernel the products run: the first of [`kernel_for`].
pub fn kernel() -> Kernel {
    static K: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
    *K.get_or_init(|| kernel_for()[0])
}

/// A raw output pointer shared by threads writing disjoint columns.
struct Out(*mut f32);
// SAFETY: the threads that share it write disjoint elements.
unsafe impl Sync for Out {}
// SAFETY: as above.
unsafe impl Send for Out {}
impl Out {
    fn ptr(&self) -> *mut f32 {
        self.0
    }
}

/// The portable kernel: scalar loops over the packed lines, a row and a panel at a time.
fn portable<S: Sink>(
    w: &PackedI8,
    qa: &QuantRows,
    rows: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
    sink: &mut S,
) {
    for p in panels {
        for r in rows.clone() {
            let a = qa.row(r);
            let mut sums = [0i32; NR];
            for (g, line) in w.panel(p).iter().enumerate() {
                for (c, s) in sums.iter_mut().enumerate() {
                    for d in 0..4 {
                        *s += a[4 * g + d] as i32 * line.0[4 * c + d] as i32;
                    }
                }
            }
            sink.put(r, 1, p * NR, NR, &sums);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{AVX2_ROWS, Line, NR, PackedI8, QuantRows, Sink, VNNI_PANELS, VNNI_ROWS};
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// The four bytes of `a` at group `g` as one int32.
    #[inline(always)]
    unsafe fn word(a: *const i8, g: usize) -> i32 {
        // SAFETY: the caller's row holds `4·groups` bytes.
        unsafe { (a.add(4 * g) as *const i32).read_unaligned() }
    }

    /// VNNI over rows × panels (see the module doc), each block handed to `sink`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VNNI; `rows` and `panels` are within `qa` and `w`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn vnni<S: Sink>(
        w: &PackedI8,
        qa: &QuantRows,
        rows: Range<usize>,
        panels: Range<usize>,
        sink: &mut S,
    ) {
        let mut p = panels.start;
        while p < panels.end {
            let np = VNNI_PANELS.min(panels.end - p);
            let mut r = rows.start;
            while r < rows.end {
                let nr = VNNI_ROWS.min(rows.end - r);
                // SAFETY: as the function's.
                unsafe {
                    match (nr, np) {
                        (6, 4) => vnni_block::<6, 4, S>(w, qa, r, p, sink),
                        (5, 4) => vnni_block::<5, 4, S>(w, qa, r, p, sink),
                        (4, 4) => vnni_block::<4, 4, S>(w, qa, r, p, sink),
                        (3, 4) => vnni_block::<3, 4, S>(w, qa, r, p, sink),
                        (2, 4) => vnni_block::<2, 4, S>(w, qa, r, p, sink),
                        (1, 4) => vnni_block::<1, 4, S>(w, qa, r, p, sink),
                        (6, _) => vnni_block::<6, 1, S>(w, qa, r, p, sink),
                        (5, _) => vnni_block::<5, 1, S>(w, qa, r, p, sink),
                        (4, _) => vnni_block::<4, 1, S>(w, qa, r, p, sink),
                        (3, _) => vnni_block::<3, 1, S>(w, qa, r, p, sink),
                        (2, _) => vnni_block::<2, 1, S>(w, qa, r, p, sink),
                        _ => vnni_block::<1, 1, S>(w, qa, r, p, sink),
                    }
                }
                r += nr;
            }
            p += if np == VNNI_PANELS { VNNI_PANELS } else { 1 };
        }
    }

    /// `R` rows from `r0` × `P` panels from `p0`, handed to `sink`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn vnni_block<const R: usize, const P: usize, S: Sink>(
        w: &PackedI8,
        qa: &QuantRows,
        r0: usize,
        p0: usize,
        sink: &mut S,
    ) {
        let groups = w.groups;
        let mut acc = [[_mm512_setzero_si512(); P]; R];
        let a: [*const i8; R] = std::array::from_fn(|i| qa.row(r0 + i).as_ptr());
        let b: [*const Line; P] = std::array::from_fn(|j| w.panel(p0 + j).as_ptr());
        let flip = 0x8080_8080u32 as i32;
        for g in 0..groups {
            let mut bv = [_mm512_setzero_si512(); P];
            for j in 0..P {
                // SAFETY: `g < groups`: within each panel's lines.
                bv[j] = unsafe { _mm512_load_si512(b[j].add(g) as *const _) };
            }
            for i in 0..R {
                // SAFETY: `g < groups`: within each row's bytes.
                let av = _mm512_set1_epi32(unsafe { word(a[i], g) } ^ flip);
                for j in 0..P {
                    acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], av, bv[j]);
                }
            }
        }
        let mut out = [0i32; VNNI_ROWS * VNNI_PANELS * NR];
        for j in 0..P {
            // `Σ (q + 128) w − 128 Σ w`.
            // SAFETY: `col_sum` holds whole panels.
            let fix = _mm512_slli_epi32::<7>(unsafe {
                _mm512_loadu_si512(w.col_sum.as_ptr().add((p0 + j) * NR) as *const _)
            });
            for i in 0..R {
                let v = _mm512_sub_epi32(acc[i][j], fix);
                // SAFETY: `out` holds `R` rows of `P·NR`.
                unsafe { _mm512_storeu_si512(out.as_mut_ptr().add(i * P * NR + j * NR) as *mut _, v) };
            }
        }
        sink.put(r0, R, p0 * NR, P * NR, &out[..R * P * NR]);
    }

    /// AVX2 over rows × panels (see the module doc), each block handed to `sink`.
    ///
    /// # Safety
    /// The CPU has AVX2; `rows` and `panels` are within `qa` and `w`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2<S: Sink>(
        w: &PackedI8,
        qa: &QuantRows,
        rows: Range<usize>,
        panels: Range<usize>,
        sink: &mut S,
    ) {
        for p in panels {
            let mut r = rows.start;
            while r < rows.end {
                let nr = AVX2_ROWS.min(rows.end - r);
                // SAFETY: as the function's.
                unsafe {
                    match nr {
                        4 => avx2_block::<4, S>(w, qa, r, p, sink),
                        3 => avx2_block::<3, S>(w, qa, r, p, sink),
                        2 => avx2_block::<2, S>(w, qa, r, p, sink),
                        _ => avx2_block::<1, S>(w, qa, r, p, sink),
                    }
                }
                r += nr;
            }
        }
    }

    /// `R` rows from `r0` × panel `p`, handed to `sink`.
    #[target_feature(enable = "avx2")]
    unsafe fn avx2_block<const R: usize, S: Sink>(
        w: &PackedI8,
        qa: &QuantRows,
        r0: usize,
        p: usize,
        sink: &mut S,
    ) {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_si256(); 2]; R];
        let a: [*const i8; R] = std::array::from_fn(|i| qa.row(r0 + i).as_ptr());
        let b = w.panel(p).as_ptr() as *const __m256i;
        for g in 0..w.groups {
            // SAFETY: `g < groups`: within the panel's lines.
            let (b0, b1) = unsafe { (_mm256_load_si256(b.add(2 * g)), _mm256_load_si256(b.add(2 * g + 1))) };
            for i in 0..R {
                // SAFETY: `g < groups`: within each row's bytes.
                let av = _mm256_set1_epi32(unsafe { word(a[i], g) });
                let abs = _mm256_abs_epi8(av);
                let p0 = _mm256_maddubs_epi16(abs, _mm256_sign_epi8(b0, av));
                let p1 = _mm256_maddubs_epi16(abs, _mm256_sign_epi8(b1, av));
                acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(p0, ones));
                acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(p1, ones));
            }
        }
        let mut out = [0i32; AVX2_ROWS * NR];
        for i in 0..R {
            for h in 0..2 {
                // SAFETY: `out` holds `R` rows of `NR`.
                unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(i * NR + 8 * h) as *mut _, acc[i][h]) };
            }
        }
        sink.put(r0, R, p * NR, NR, &out[..R * NR]);
    }
}

/// The reference: `Σ_i qa_ri q_ij` in plain loops over the quantized operands (`q`: `[k, n]`
/// row-major, as [`quantize_columns`] returns it).
pub fn reference_i32(qa: &QuantRows, q: &[i8], k: usize, n: usize) -> Vec<i32> {
    let mut out = vec![0i32; qa.m * n];
    for r in 0..qa.m {
        let a = qa.row(r);
        for j in 0..n {
            out[r * n + j] = (0..k).map(|i| a[i] as i32 * q[i * n + j] as i32).sum();
        }
    }
    out
}

/// The reference product: `A W (+ base)` dequantised from [`reference_i32`] (`w`: `[k, n]`
/// row-major f32), what [`PackedI8::product`] returns to the bit.
pub fn reference_product(
    a: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    n: usize,
    base: Option<&[f32]>,
) -> Vec<f32> {
    let (q, scale) = quantize_columns(k, n, |i, j| w[i * n + j]);
    let qa = QuantRows::new(a, m, k, k);
    let acc = reference_i32(&qa, &q, k, n);
    let mut c = vec![0f32; m * n];
    for r in 0..m {
        let b = base.map(|b| if b.len() == n { b } else { &b[r * n..(r + 1) * n] });
        // SAFETY: row `r` of `c` holds `n` values.
        unsafe { epilogue(&acc[r * n..(r + 1) * n], qa.scale[r], &scale, b, c[r * n..].as_mut_ptr()) };
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    /// Every kernel the CPU has equals the plain loops exactly in int32 — every row and panel
    /// remainder, `k` not a multiple of 4, extreme values (±127 everywhere: the largest pair
    /// sums, where a saturating path would show) — and the product equals the reference's to
    /// the bit, base and all, however many threads cut its columns.
    #[test]
    fn every_kernel_equals_the_plain_int32_sums() {
        let kernels = kernel_for();
        eprintln!("int8 kernels: {kernels:?}");
        for &(m, k, n) in
            &[(1, 3, 5), (7, 300, 37), (13, 512, 64), (64, 257, 16), (5, 1, 17), (9, 96, 130), (320, 64, 80)]
        {
            for extreme in [false, true] {
                let (a, w) = if extreme {
                    let a: Vec<f32> = (0..m * k).map(|i| if i % 3 == 0 { -1.0 } else { 1.0 }).collect();
                    let w: Vec<f32> = (0..k * n).map(|i| if i % 5 == 0 { 1.0 } else { -1.0 }).collect();
                    (a, w)
                } else {
                    (values(m * k, 1), values(k * n, 2))
                };
                let (q, scale) = quantize_columns(k, n, |i, j| w[i * n + j]);
                let qa = QuantRows::new(&a, m, k, k);
                let want = reference_i32(&qa, &q, k, n);
                let packed = PackedI8::from_quantized(k, n, &q, scale);
                let base = values(n, 3);
                let want_f = reference_product(&a, m, k, &w, n, Some(&base));
                for &kernel in &kernels {
                    assert_eq!(packed.product_i32(&qa, kernel), want, "{kernel:?} at {m}×{k}×{n}");
                    let got = packed.product_quantized(&qa, Some(&base), kernel);
                    assert!(
                        got.iter().zip(&want_f).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{kernel:?} f32 at {m}×{k}×{n}"
                    );
                }
                let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
                let got = one.install(|| packed.product(&a, m, k, Some(&base)));
                assert_eq!(got, packed.product(&a, m, k, Some(&base)));
            }
        }
    }

    /// The dequantised product is close to the f32 one (the scheme, not only its arithmetic):
    /// within a few per cent of the output's scale on random operands.
    #[test]
    fn the_int8_product_approximates_the_f32_one() {
        let (m, k, n) = (16, 256, 48);
        let (a, w) = (values(m * k, 7), values(k * n, 9));
        let got = PackedI8::new(k, n, |i, j| w[i * n + j]).product(&a, m, k, None);
        let mut worst = 0f32;
        let mut scale = 0f32;
        for r in 0..m {
            for j in 0..n {
                let exact: f32 = (0..k).map(|i| a[r * k + i] * w[i * n + j]).sum();
                worst = worst.max((exact - got[r * n + j]).abs());
                scale = scale.max(exact.abs());
            }
        }
        assert!(worst < 0.02 * scale, "{worst} against outputs up to {scale}");
    }

    /// The vectorised row quantization has the bits of the plain one; ties go to even.
    #[test]
    fn rows_quantize_as_columns_do() {
        let mut v = values(999, 4);
        v[10] = 1.0;
        // Ties once scaled by 127: 2.5 and −1.5 go to the even neighbours.
        v[3] = 2.5 / 127.0;
        v[11] = -1.5 / 127.0;
        let (mut a, mut b) = (vec![0i8; v.len()], vec![0i8; v.len()]);
        let sa = quantize(v.iter().copied(), &mut a);
        let sb = crate::cpu::fastmath::wide(|| quantize_slice(&v, &mut b));
        assert_eq!((sa.to_bits(), &a), (sb.to_bits(), &b));
        assert_eq!(to_int8(2.5, 1.0), 2);
        assert_eq!(to_int8(-1.5, 1.0), -2);
        assert_eq!(to_int8(126.6, 1.0), 127);
    }

    /// All-zero rows and columns quantize to zeros with scale 0, and multiply to exactly 0.
    #[test]
    fn zeros_stay_zeros() {
        let (m, k, n) = (3, 8, 20);
        let mut a = values(m * k, 1);
        a[k..2 * k].fill(0.0);
        let mut w = values(k * n, 2);
        for i in 0..k {
            w[i * n + 5] = 0.0;
        }
        let c = PackedI8::new(k, n, |i, j| w[i * n + j]).product(&a, m, k, None);
        assert!(c[n..2 * n].iter().all(|&v| v == 0.0));
        assert!((0..m).all(|r| c[r * n + 5] == 0.0));
    }
}
