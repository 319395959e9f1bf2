//! Memory allocation tuned for tensor workloads: freed memory is kept for the next step.
//!
//! burn's flex backend allocates a fresh buffer for nearly every tensor operation, and a
//! training step allocates the same sizes as the step before. With glibc's defaults, buffers
//! above the (adaptive) mmap threshold are mapped and unmapped each time and the heap top is
//! trimmed back to the kernel, so every step pays minor page faults to zero pages again
//! (`perf`: ~10 % of an LSTM training step). Two remedies, measured below:
//!
//! - [`tune`]: glibc's mmap threshold at its maximum (32 MiB on 64-bit) and trimming off, so
//!   buffers up to 32 MiB are reused from the heap (+14 % training throughput on the `lstm`
//!   bench shape).
//! - [`LargeBlocks`], the global allocator: glibc maps anything larger afresh on every use (a
//!   `[1536, 8000]` logits tensor and its gradient, 49 MB each, page-faulted at every step).
//!   Freed blocks of 32 MiB or more are kept, up to [`KEPT_BYTES`] (1 GiB), and handed out
//!   again, best fit, to requests of the same size or up to a quarter smaller. Every request
//!   of 64 KiB or more also starts on a cache line ([`lined`]; never less aligned than asked
//!   for, and `alloc`, `realloc` and `dealloc` apply the same rule, so a block goes back as it
//!   came): on glibc's 16-byte boundaries each of the LSTM layer's streamed runs began and
//!   ended in a partly written line. The lining lives here, in the binary's allocator, not in
//!   the kernels, so every tensor buffer gets it and the libraries stay on the standard
//!   allocator.
//!
//! `S2S_MALLOC_DEFAULTS=1` turns both off (to compare); the lining stays (it changes where a
//! block starts, not which memory is reused).
//!
//! Kept over a well-kept allocator because it measured better: jemalloc 5.3 (the `jemalloc`
//! feature) with nothing purged (`_RJEM_MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1`)
//! trained the Transformer 13 % slower and the LSTM as fast, and at its defaults both ~25 %
//! slower, spending 3–8× our system time returning and refaulting pages (whole processes:
//! 10 % slower nothing purged, 29 % at its defaults). Five alternated whole processes of
//! `s2s bench --device cpu --models lstm,transformer --steps 8 --no-decode` (2026-11-26, AMX
//! Xeon VM, 76be0f7): ours 2107 / 2295 tok/s, jemalloc with nothing purged 2144 / 2005, at its
//! defaults 1583 / 1694, with 3–6× our system time.
//!
//! It also counts, once [`LargeBlocks::count_from_now`] is called, the bytes requested and not
//! yet freed and their peak: the course's peak-memory probe (`s2s_course::probes::peak_bytes`).
//! Resident memory cannot say it, since freed memory stays resident for reuse. Until then each
//! call pays one relaxed load.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// Blocks at least this large are kept when freed (glibc maps them, see the module doc).
const LARGE: usize = 32 << 20;

/// At most this many bytes of freed large blocks are kept.
pub const KEPT_BYTES: usize = 1 << 30;

/// Large blocks handed out and kept at most (more are allocated and freed as usual).
const SLOTS: usize = 64;

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

/// A block from `System`: its address and the layout it was allocated with.
#[derive(Clone, Copy)]
struct Block {
    ptr: usize,
    size: usize,
    align: usize,
}

/// The bookkeeping: blocks in use (their real size may exceed what was asked for) and freed
/// blocks kept for reuse (`kept[..kept_len]`, oldest first). Fixed arrays: the allocator must
/// not allocate.
struct Blocks {
    used: [Option<Block>; SLOTS],
    kept: [Block; SLOTS],
    kept_len: usize,
    kept_bytes: usize,
}

impl Blocks {
    /// Removes kept block `i`, keeping the others in order.
    fn unkeep(&mut self, i: usize) -> Block {
        let block = self.kept[i];
        self.kept[i..self.kept_len].rotate_left(1);
        self.kept_len -= 1;
        self.kept_bytes -= block.size;
        block
    }
}

/// The system allocator, with freed large blocks kept for reuse (see the module doc).
pub struct LargeBlocks {
    blocks: Mutex<Blocks>,
    off: AtomicBool,
    /// Whether [`LargeBlocks::live`] and [`LargeBlocks::peak`] are kept.
    counting: AtomicBool,
    /// Bytes requested minus bytes freed since counting began (freeing what came before makes
    /// it fall below zero).
    live: AtomicIsize,
    /// The most `live` has been since the last [`LargeBlocks::count_from_now`].
    peak: AtomicIsize,
    /// `live` at the last [`LargeBlocks::count_from_now`].
    base: AtomicIsize,
}

impl LargeBlocks {
    /// An empty cache.
    pub const fn new() -> Self {
        Self {
            blocks: Mutex::new(Blocks {
                used: [None; SLOTS],
                kept: [Block { ptr: 0, size: 0, align: 0 }; SLOTS],
                kept_len: 0,
                kept_bytes: 0,
            }),
            off: AtomicBool::new(false),
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

    /// The most bytes held at once, since [`LargeBlocks::count_from_now`], beyond those held
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

    fn large(&self, layout: &Layout) -> bool {
        layout.size() >= LARGE && !self.off.load(Ordering::Relaxed)
    }

    /// A kept block for `layout` (the smallest that fits and wastes at most a quarter), moved
    /// to the used list; else a new one from `System`, recorded as used when there is room.
    unsafe fn take(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        let mut b = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        let Some(slot) = b.used.iter().position(Option::is_none) else {
            drop(b);
            return unsafe { if zeroed { System.alloc_zeroed(layout) } else { System.alloc(layout) } };
        };
        let fits = |k: &Block| {
            k.align == layout.align()
                && k.size >= layout.size()
                && k.size - layout.size() <= layout.size() / 4
        };
        let best = (0..b.kept_len).filter(|&i| fits(&b.kept[i])).min_by_key(|&i| b.kept[i].size);
        if let Some(i) = best {
            let block = b.unkeep(i);
            b.used[slot] = Some(block);
            drop(b);
            let ptr = block.ptr as *mut u8;
            if zeroed {
                // SAFETY: the block is `block.size ≥ layout.size()` bytes, owned by the caller now.
                unsafe { ptr.write_bytes(0, layout.size()) };
            }
            return ptr;
        }
        // Reserve the slot before allocating (the lock is not held across `System`).
        b.used[slot] = Some(Block { ptr: 0, size: layout.size(), align: layout.align() });
        drop(b);
        let ptr = unsafe { if zeroed { System.alloc_zeroed(layout) } else { System.alloc(layout) } };
        let mut b = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        b.used[slot] = (!ptr.is_null()).then_some(Block {
            ptr: ptr as usize,
            size: layout.size(),
            align: layout.align(),
        });
        ptr
    }

    /// Keeps a used block (evicting the oldest kept ones past [`KEPT_BYTES`]); a block not
    /// recorded as used goes back to `System` with the caller's layout.
    unsafe fn give(&self, ptr: *mut u8, layout: Layout) {
        let mut freed = [None; SLOTS];
        let mut b = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        let Some(slot) = b.used.iter().position(|u| u.is_some_and(|u| u.ptr == ptr as usize)) else {
            drop(b);
            return unsafe { System.dealloc(ptr, layout) };
        };
        let block = b.used[slot].take().expect("found above");
        let mut n = 0;
        if block.size > KEPT_BYTES {
            freed[n] = Some(block);
        } else {
            while b.kept_len == SLOTS || b.kept_bytes + block.size > KEPT_BYTES {
                freed[n] = Some(b.unkeep(0)); // the oldest
                n += 1;
            }
            let end = b.kept_len;
            b.kept[end] = block;
            b.kept_len += 1;
            b.kept_bytes += block.size;
        }
        drop(b);
        for f in freed.into_iter().flatten() {
            // SAFETY: each block was allocated by `System` with this size and alignment.
            unsafe { System.dealloc(f.ptr as *mut u8, Layout::from_size_align_unchecked(f.size, f.align)) };
        }
    }
}

impl Default for LargeBlocks {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: small requests go to `System` unchanged; a large block is handed to one caller at a
// time (moved between the used and kept lists under the lock), is at least as large as the
// request with the requested alignment, and goes back to `System` with the layout it was
// allocated with.
unsafe impl GlobalAlloc for LargeBlocks {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let layout = lined(layout);
        let p = if self.large(&layout) {
            unsafe { self.take(layout, false) }
        } else {
            unsafe { System.alloc(layout) }
        };
        if !p.is_null() {
            self.count(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let layout = lined(layout);
        let p = if self.large(&layout) {
            unsafe { self.take(layout, true) }
        } else {
            unsafe { System.alloc_zeroed(layout) }
        };
        if !p.is_null() {
            self.count(layout.size() as isize);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees a valid new layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if layout.size() < LARGE && new_size < LARGE && lined(layout).align() == lined(new_layout).align() {
            let p = unsafe { System.realloc(ptr, lined(layout), new_size) };
            if !p.is_null() {
                self.count(new_size as isize - layout.size() as isize);
            }
            return p;
        }
        // Copy the smaller of the two sizes (`alloc` and `dealloc` line the layouts).
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
        let layout = lined(layout);
        self.count(-(layout.size() as isize));
        if layout.size() >= LARGE {
            unsafe { self.give(ptr, layout) }
        } else {
            unsafe { System.dealloc(ptr, layout) }
        }
    }
}

/// Applies the tuning (call first in `main`, before other threads start): glibc's mmap
/// threshold and trimming, and [`LargeBlocks`] on unless `S2S_MALLOC_DEFAULTS` is set.
pub fn tune(global: &LargeBlocks) {
    if std::env::var_os("S2S_MALLOC_DEFAULTS").is_some() {
        global.off.store(true, Ordering::Relaxed);
        return;
    }
    tune_glibc();
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
        mallopt(M_MMAP_THRESHOLD, LARGE as i32);
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
        let a = LargeBlocks::new();
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

    /// A freed large block is handed out again, to the same size and to one up to a quarter
    /// smaller, zeroed when asked, the smallest that fits first; a request no kept block fits
    /// gets a new block.
    #[test]
    fn freed_large_blocks_are_reused() {
        let a = LargeBlocks::new();
        unsafe {
            let p = a.alloc(layout(40 * MIB));
            p.write_bytes(7, 40 * MIB);
            a.dealloc(p, layout(40 * MIB));
            let q = a.alloc(layout(40 * MIB));
            assert_eq!(q, p, "same size: the kept block");
            a.dealloc(q, layout(40 * MIB));
            let z = a.alloc_zeroed(layout(33 * MIB));
            assert_eq!(z, p, "a fifth smaller: the kept block");
            assert!(std::slice::from_raw_parts(z, 33 * MIB).iter().all(|&b| b == 0), "zeroed");
            // Freed with the smaller layout it was asked for: the block keeps its real size.
            a.dealloc(z, layout(33 * MIB));
            assert_eq!(a.blocks.lock().unwrap().kept_bytes, 40 * MIB);
            let other = a.alloc(layout(60 * MIB));
            assert_ne!(other, p, "larger than any kept block");
            a.dealloc(other, layout(60 * MIB));
            // Kept: 40 and 60 MiB. The best fit for 32 MiB is the 40 MiB block …
            let fit = a.alloc(layout(32 * MIB));
            assert_eq!((fit, a.blocks.lock().unwrap().kept_bytes), (p, 60 * MIB));
            // … and 45 MiB fits none (60 MiB wastes more than a quarter): a new block.
            let new = a.alloc(layout(45 * MIB));
            assert!(new != p && new != other);
            assert_eq!(a.blocks.lock().unwrap().kept_bytes, 60 * MIB);
            a.dealloc(fit, layout(32 * MIB));
            a.dealloc(new, layout(45 * MIB));
        }
    }

    /// At most `KEPT_BYTES` are kept: the oldest blocks go back to the system first.
    #[test]
    fn kept_bytes_are_bounded() {
        let a = LargeBlocks::new();
        let size = 300 * MIB;
        unsafe {
            let ps: Vec<*mut u8> = (0..4).map(|_| a.alloc(layout(size))).collect();
            for &p in &ps {
                a.dealloc(p, layout(size));
            }
            let b = a.blocks.lock().unwrap();
            assert_eq!(b.kept_len, KEPT_BYTES / size);
            assert!(b.kept_bytes <= KEPT_BYTES);
            assert_eq!(b.kept[0].ptr, ps[1] as usize, "the first freed was evicted");
        }
    }

    /// Requests of [`LINED`] bytes or more start on a cache line whatever alignment they ask
    /// for, smaller ones keep theirs, and `realloc` across the threshold (both ways, and
    /// between lined sizes) keeps the contents and lines the new block.
    #[test]
    fn large_requests_start_on_a_cache_line() {
        let a = LargeBlocks::new();
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
