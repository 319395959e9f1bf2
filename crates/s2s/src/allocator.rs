//! glibc `malloc` tuned for tensor workloads: keep freed memory instead of returning it.
//!
//! burn's flex backend allocates a fresh buffer for nearly every tensor operation. With glibc's
//! defaults, buffers above the (adaptive) mmap threshold are mapped and unmapped each time, and
//! the heap top is trimmed back to the kernel, so every step pays minor page faults to zero
//! pages again (`perf`: ~10 % of an LSTM training step). Raising the mmap threshold to its
//! maximum (32 MiB on 64-bit) and turning trimming off reuses that memory: +14 % training
//! throughput on the `lstm` bench shape, for a higher peak RSS (~640 → ~800 MB there). Buffers
//! above 32 MiB (a `[1536, 8000]` logits tensor) are still mapped per use. Measured in
//! docs/benchmarks.md; `S2S_MALLOC_DEFAULTS=1` keeps glibc's defaults (to compare).

#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune() {
    unsafe extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_MMAP_THRESHOLD: i32 = -3;
    if std::env::var_os("S2S_MALLOC_DEFAULTS").is_some() {
        return;
    }
    // SAFETY: mallopt only changes allocator parameters; called before any other thread runs.
    unsafe {
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
        mallopt(M_TRIM_THRESHOLD, i32::MAX);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune() {}
