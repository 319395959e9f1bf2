//! Memory allocation: the system's (glibc) allocator, tuned for tensor workloads, with two
//! things of ours on top: large requests start on a cache line, and the bytes held are counted
//! for the course's peak-memory probe.
//!
//! burn's flex backend allocates a fresh buffer for nearly every tensor operation, and a
//! training step allocates the same sizes as the step before. With glibc's defaults, buffers
//! above the (adaptive) mmap threshold are mapped and unmapped each time and the heap top is
//! trimmed back to the kernel, so every step pays minor page faults to zero pages again.
//! [`tune`] sets glibc's mmap threshold to its maximum (32 MiB on 64-bit) and turns trimming
//! off, so buffers up to 32 MiB are reused from the heap (measured +14 % training throughput on
//! the `lstm` bench shape on a 2-core AVX2 VM, 2026-11; within noise on the machine below).
//!
//! **Measured against well-kept allocators** (2026-11-29, 2-core AMD EPYC VM, 24 GiB; seven
//! alternated whole processes each of `s2s bench --device cpu --models M --steps 16
//! --no-decode`, medians of the paired wall-time ratios, ours / theirs, with their min–max):
//!
//! | against | lstm | transformer |
//! |---|---|---|
//! | glibc with the `mallopt` settings alone (`S2S_MALLOC=mallopt`) | 0.99 (0.95–1.03) | 0.99 (0.98–1.02) |
//! | glibc's defaults (`S2S_MALLOC=glibc`) | 0.99 (0.96–1.01) | 0.99 (0.97–1.02) |
//! | mimalloc 0.1 (the `mimalloc` feature) | 0.94 (0.90–0.98) | 0.91 (0.86–0.94) |
//! | jemalloc 5.3 at its defaults (the `jemalloc` feature) | 0.75 (0.73–0.76) | 0.50 (0.49–0.51) |
//!
//! mimalloc and jemalloc return freed pages to the kernel and fault them in again (3–4× and
//! 9–17× our system time). Until then this allocator also kept freed blocks of 32 MiB or
//! more for reuse (a cache behind a lock, ~250 lines of `unsafe` bookkeeping): against glibc
//! with the `mallopt` settings alone it measured within the noise on both models, above, and
//! in whole quickstart trainings (`docs/decisions.md`, "Memory"), so it went.
//!
//! Every request of 64 KiB or more starts on a cache line ([`lined`]; never less aligned than
//! asked for, and `alloc`, `realloc` and `dealloc` apply the same rule, so a block goes back as
//! it came): on glibc's 16-byte boundaries each of the LSTM layer's streamed runs began and
//! ended in a partly written line. The lining lives here, in the binary's allocator, not in
//! the kernels, so every tensor buffer gets it and the libraries stay on the standard
//! allocator.
//!
//! The count: once [`Counting::count_from_now`] is called, the bytes requested and not yet
//! freed and their peak (`s2s_course::probes::peak_bytes`). Resident memory cannot say it,
//! since freed memory stays resident for reuse. Until then each call pays one relaxed load.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// glibc's largest mmap threshold: buffers below it are reused from the heap ([`tune`]).
const MMAP_THRESHOLD: usize = 32 << 20;

/// Requests of at least this many bytes start on a cache line ([`lined`]).
const LINED: usize = 64 << 10;

/// Bytes per cache line.
const LINE: usize = 64;

/// `layout`, aligned to a cache line when it is [`LINED`] or larger (a layout's alignment only
/// grows, so every caller's request is still met; `alloc`, `realloc` and `dealloc` all line
/// the layout they are given, so a block goes back with the layout it came with).
///
/// Tensor buffers that kernels write in line-sized pieces gain from it: the fused LSTM layer
/// writes what backward needs in runs of 64 floats with non-temporal stores, and on the
/// 16-byte boundaries glibc gives, every run began and ended in a partly written line (the
/// write-combining buffers flush those piecemeal). On the lstm bench shape (2-core AVX2 VM,
/// six alternated runs each, phase timers), the training gate pass of a step took a median of
/// 583 thousand TSC cycles per thread without lining and 518 with it (medians of the per-run
/// medians; what saving costs over not saving, per-run bests: 106 → 95).
fn lined(layout: Layout) -> Layout {
    if layout.size() >= LINED && layout.align() < LINE {
        Layout::from_size_align(layout.size(), LINE).unwrap_or(layout)
    } else {
        layout
    }
}

/// The system allocator, lining large requests and counting the bytes held (see the module
/// doc).
pub struct Counting {
    /// Whether [`Counting::live`] and [`Counting::peak`] are kept.
    counting: AtomicBool,
    /// Bytes requested minus bytes freed since counting began (freeing what came before makes
    /// it fall below zero).
    live: AtomicIsize,
    /// The most `live` has been since the last [`Counting::count_from_now`].
    peak: AtomicIsize,
    /// `live` at the last [`Counting::count_from_now`].
    base: AtomicIsize,
}

impl Counting {
    /// Not counting yet.
    pub const fn new() -> Self {
        Self {
            counting: AtomicBool::new(false),
            live: AtomicIsize::new(0),
            peak: AtomicIsize::new(0),
            base: AtomicIsize::new(0),
        }
    }

    /// Starts counting (if not yet) and measures the peak from here.
    pub fn count_from_now(&self) {
        self.counting.store(true, Ordering::SeqCst);
        let now = self.live.load(Ordering::SeqCst);
        self.base.store(now, Ordering::SeqCst);
        self.peak.store(now, Ordering::SeqCst);
    }

    /// The most bytes held at once, since [`Counting::count_from_now`], beyond those held
    /// then.
    pub fn peak_bytes(&self) -> usize {
        (self.peak.load(Ordering::SeqCst) - self.base.load(Ordering::SeqCst)).max(0) as usize
    }

    /// Counts `delta` bytes requested (> 0) or freed (< 0) while counting.
    fn count(&self, delta: isize) {
        if self.counting.load(Ordering::Relaxed) {
            let now = self.live.fetch_add(delta, Ordering::Relaxed) + delta;
            if delta > 0 {
                self.peak.fetch_max(now, Ordering::Relaxed);
            }
        }
    }
}

impl Default for Counting {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every request goes to `System` with its layout lined ([`lined`] only raises the
// alignment, so the caller's is met), and every block goes back to `System` with the same
// lined layout.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(lined(layout)) };
        if !p.is_null() {
            self.count(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(lined(layout)) };
        if !p.is_null() {
            self.count(layout.size() as isize);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees a valid new layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if lined(layout).align() == lined(new_layout).align() {
            let p = unsafe { System.realloc(ptr, lined(layout), new_size) };
            if !p.is_null() {
                self.count(new_size as isize - layout.size() as isize);
            }
            return p;
        }
        // Across the lining threshold: a new block, the smaller of the two sizes copied.
        unsafe {
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.count(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, lined(layout)) }
    }
}

/// Applies glibc's tuning (call first in `main`, before other threads start): its mmap
/// threshold and trimming, unless `S2S_MALLOC=glibc` asks for its defaults (to compare).
pub fn tune() {
    if std::env::var_os("S2S_MALLOC").is_none_or(|v| v != "glibc") {
        tune_glibc();
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune_glibc() {
    unsafe extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_MMAP_THRESHOLD: i32 = -3;
    // SAFETY: mallopt only changes allocator parameters; called before any other thread runs.
    unsafe {
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD as i32);
        mallopt(M_TRIM_THRESHOLD, i32::MAX);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_glibc() {}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 64).unwrap()
    }

    /// Counting starts when asked: the peak is what was held at once beyond the bytes held
    /// then, through small, large and reallocated blocks.
    #[test]
    fn counts_the_peak_from_when_asked() {
        let a = Counting::new();
        unsafe {
            let before = a.alloc(layout(MIB));
            a.count_from_now();
            let p = a.alloc(layout(3 * MIB));
            let big = a.alloc(layout(40 * MIB));
            a.dealloc(big, layout(40 * MIB));
            let p = a.realloc(p, layout(3 * MIB), 5 * MIB);
            assert_eq!(a.peak_bytes(), 43 * MIB, "3 + 40 at once; 5 after the realloc is less");
            a.dealloc(before, layout(MIB));
            a.count_from_now();
            let q = a.alloc(layout(2 * MIB));
            assert_eq!(a.peak_bytes(), 2 * MIB, "measured from the new start, below the first");
            a.dealloc(q, layout(2 * MIB));
            a.dealloc(p, layout(5 * MIB));
        }
    }

    /// Requests of [`LINED`] bytes or more start on a cache line whatever alignment they ask
    /// for, smaller ones keep theirs, and `realloc` across the threshold (both ways, and
    /// between lined sizes) keeps the contents and lines the new block.
    #[test]
    fn large_requests_start_on_a_cache_line() {
        let a = Counting::new();
        let bytes = |n: usize| Layout::from_size_align(n, 4).unwrap();
        unsafe {
            // Several, so that a 64-byte-aligned result is not a coincidence of the heap.
            let big: Vec<*mut u8> = (0..8).map(|i| a.alloc(bytes(LINED + 4 * i))).collect();
            assert!(big.iter().all(|p| p.align_offset(LINE) == 0));
            assert_eq!(lined(bytes(LINED - 4)).align(), 4, "smaller requests keep their alignment");
            for (i, &p) in big.iter().enumerate() {
                a.dealloc(p, bytes(LINED + 4 * i));
            }
            let mut p = a.alloc(bytes(1000));
            for k in 0..1000 {
                *p.add(k) = k as u8;
            }
            for (old, new) in [(1000, 3 * LINED), (3 * LINED, 5 * LINED), (5 * LINED, 500)] {
                p = a.realloc(p, bytes(old), new);
                assert!(new < LINED || p.align_offset(LINE) == 0, "{old} -> {new} bytes");
                assert!((0..500).all(|k| *p.add(k) == k as u8), "{old} -> {new} bytes: contents kept");
            }
            a.dealloc(p, bytes(500));
        }
    }
}
