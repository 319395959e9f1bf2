//! Which implementation the operations of [`crate::ops`] run: the fast kernels (the default)
//! or their plain-tensor references ([`crate::reference`]).
//!
//! The process-wide choice comes from [`set`] (what `--kernels` on the command line calls) or,
//! until then, from the environment variable `S2S_KERNELS` (`fast` or `reference`). A thread
//! can override it for a closure ([`with`]), which is how tests run the same model both ways
//! side by side without disturbing tests on other threads.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

/// Which code the kernels compile to on this machine: the CPU kernels' instruction set
/// (`isa`, capped by `S2S_CPU_ISA`), burn's products' (`gemm_isa`), and a GPU device's
/// kernel compiler (`gpu_compiler`).
pub use crate::cpu::fastmath::{Isa, gemm_isa, isa};
pub use crate::gpu::graph::compiler as gpu_compiler;

/// The implementation behind the operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kernels {
    /// The fused CPU and GPU kernels, where one exists for the device.
    #[default]
    Fast,
    /// The equations in plain burn tensor operations, calling no kernel.
    Reference,
}

/// A `--kernels` or `S2S_KERNELS` value that is neither `fast` nor `reference`.
#[derive(Debug, thiserror::Error)]
#[error("unknown kernels '{0}': use 'fast' or 'reference'")]
pub struct UnknownKernels(pub String);

impl std::str::FromStr for Kernels {
    type Err = UnknownKernels;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fast" => Ok(Kernels::Fast),
            "reference" => Ok(Kernels::Reference),
            _ => Err(UnknownKernels(s.to_string())),
        }
    }
}

impl std::fmt::Display for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kernels::Fast => "fast",
            Kernels::Reference => "reference",
        })
    }
}

/// 0: not chosen yet (read the environment), 1: fast, 2: reference.
static GLOBAL: AtomicU8 = AtomicU8::new(0);

thread_local! {
    static OVERRIDE: Cell<Option<Kernels>> = const { Cell::new(None) };
}

/// Chooses the implementation for the whole process (every thread without an override).
pub fn set(k: Kernels) {
    GLOBAL.store(if k == Kernels::Fast { 1 } else { 2 }, Ordering::Relaxed);
}

/// The implementation in force on this thread.
pub fn get() -> Kernels {
    if let Some(k) = OVERRIDE.with(Cell::get) {
        return k;
    }
    match GLOBAL.load(Ordering::Relaxed) {
        1 => Kernels::Fast,
        2 => Kernels::Reference,
        _ => {
            let k = from_env().unwrap_or_default();
            set(k);
            k
        }
    }
}

/// `S2S_KERNELS` parsed; `None` when unset, and an unknown value is refused by [`check_env`].
fn from_env() -> Option<Kernels> {
    std::env::var("S2S_KERNELS").ok().and_then(|v| v.parse().ok())
}

/// Refuses an `S2S_KERNELS` that is set to neither value (the CLI calls it at start, so a typo
/// is an error, not a silent fast run).
pub fn check_env() -> Result<(), UnknownKernels> {
    match std::env::var("S2S_KERNELS") {
        Ok(v) => v.parse::<Kernels>().map(|_| ()),
        Err(_) => Ok(()),
    }
}

/// True when the references run on this thread.
pub fn reference() -> bool {
    get() == Kernels::Reference
}

/// Runs `f` with `k` in force on this thread, then restores what was there (also when `f`
/// panics).
pub fn with<T>(k: Kernels, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Kernels>);
    impl Drop for Restore {
        fn drop(&mut self) {
            OVERRIDE.with(|o| o.set(self.0));
        }
    }
    let _restore = Restore(OVERRIDE.with(|o| o.replace(Some(k))));
    f()
}

thread_local! {
    static HALF_PRODUCTS: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread's matrix products take f16 operands (mixed precision: inputs cast to
/// f16, products accumulated in f32 by the device, results cast back to f32). Set only around
/// a step's forward on a GPU ([`with_half_products`]); the casts' gradients cast back, so the
/// backward's products are f16 too, and everything else stays f32.
pub fn half_products() -> bool {
    HALF_PRODUCTS.with(Cell::get)
}

/// Runs `f` with f16 products on this thread when `on` (see [`half_products`]), then
/// restores what was there (also when `f` panics).
pub fn with_half_products<T>(on: bool, f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            HALF_PRODUCTS.with(|o| o.set(self.0));
        }
    }
    let _restore = Restore(HALF_PRODUCTS.with(|o| o.replace(on)));
    f()
}

/// The weights' precision in decoding products on the CPU (`--quantize`, `[decode] quantize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quantize {
    /// f32 weights and products (the default): nothing changes.
    #[default]
    None,
    /// int8 weights (one scale per output unit, quantized once), inputs quantized per row at
    /// each product, int32 sums (`gemm::int8`); everything else f32.
    Int8,
}

/// A `--quantize` value that is neither `none` nor `int8`.
#[derive(Debug, thiserror::Error)]
#[error("unknown quantization '{0}': use 'none' or 'int8'")]
pub struct UnknownQuantize(pub String);

impl std::str::FromStr for Quantize {
    type Err = UnknownQuantize;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" | "f32" => Ok(Quantize::None),
            "int8" => Ok(Quantize::Int8),
            _ => Err(UnknownQuantize(s.to_string())),
        }
    }
}

impl std::fmt::Display for Quantize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Quantize::None => "none",
            Quantize::Int8 => "int8",
        })
    }
}

impl Quantize {
    /// The name of the int8 kernel this CPU runs (`avx512-vnni`, `avx2`, `portable`), for the
    /// device line; `None` for f32.
    pub fn kernel_name(self) -> Option<&'static str> {
        (self == Quantize::Int8).then(|| crate::gemm::int8::kernel().name())
    }
}

/// 0: none, 1: int8 (the process-wide choice).
static QUANTIZE: AtomicU8 = AtomicU8::new(0);

thread_local! {
    static QUANTIZE_OVERRIDE: Cell<Option<Quantize>> = const { Cell::new(None) };
}

/// Chooses the decoding products' precision for the whole process (every thread without an
/// override): what `s2s translate --quantize` and the studio call once at start.
pub fn set_quantize(q: Quantize) {
    QUANTIZE.store(u8::from(q == Quantize::Int8), Ordering::Relaxed);
}

/// The decoding products' precision in force on this thread.
pub fn quantize() -> Quantize {
    if let Some(q) = QUANTIZE_OVERRIDE.with(Cell::get) {
        return q;
    }
    if QUANTIZE.load(Ordering::Relaxed) == 1 { Quantize::Int8 } else { Quantize::None }
}

/// Runs `f` with `q` in force on this thread (the experiment's test-set decoding, tests), then
/// restores what was there (also when `f` panics).
pub fn with_quantize<T>(q: Quantize, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Quantize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            QUANTIZE_OVERRIDE.with(|o| o.set(self.0));
        }
    }
    let _restore = Restore(QUANTIZE_OVERRIDE.with(|o| o.replace(Some(q))));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_override_is_scoped_and_parsing_is_strict() {
        let outer = get();
        with(Kernels::Reference, || {
            assert!(reference());
            with(Kernels::Fast, || assert!(!reference()));
            assert!(reference());
        });
        assert_eq!(get(), outer);
        assert_eq!("Reference".parse::<Kernels>().unwrap(), Kernels::Reference);
        assert!("fused".parse::<Kernels>().is_err());
    }
}
