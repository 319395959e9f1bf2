//! Branch-free `exp`, `σ` and `tanh` on `f32` for the fused CPU kernels: loops over them
//! vectorise, unlike glibc's `expf`/`tanhf` calls (and flex's `sigmoid`, which branches per
//! element; glibc's scalar `tanhf` was 16 % of a Bahdanau step). Relative error below
//! 5·10⁻⁷. [`exp`] returns exactly 0 below −87, so a −∞ score still gets exactly zero weight.
//! Its range reduction and polynomial are explicit `mul_add`s: one instruction each where the
//! CPU has FMA, which inside [`wide`] is every x86-64-v3 CPU. The baseline path (no FMA)
//! computes the same fused results in software, so every path gives the same bits; it is
//! slower there, and no CPU we run on lacks FMA.
//!
//! # Vectorised for the CPU they run on
//!
//! The crates build for baseline x86-64 (SSE2), so the binary runs on any x86-64 CPU, and each
//! kernel body (gate math, softmax, loss, `tanh`, Adam, dropout masks) runs inside [`wide`]:
//! an AVX-512, else AVX2+FMA, `target_feature` function picked at run time. The paths compute
//! the same bits: nothing is contracted into FMAs or reordered (the reductions' 16 lanes,
//! [`LANES`], are fixed in the code), and a test compares them. Rules that keep the copies
//! vector code:
//!
//! - loops over several slices are written over 16-element arrays ([`block`]), which vectorise
//!   without run-time checks (the LSTM gate math as a plain indexed loop ran at half speed
//!   inside [`wide`]);
//! - [`exp`] reads its exponent from the rounding constant's mantissa bits, not through
//!   `as i32` (a saturating conversion that LLVM compiles to scalar code per lane);
//! - a value the loop reads from a captured slice (`lse[r]`) is read into a local first: read
//!   inside the loop, the compiler reloads it after every store (it cannot rule out aliasing)
//!   and the loop stays scalar in every copy (the loss backward was, on every CPU).
//!
//! `objdump -d` on the binary shows whether each `cpu::fastmath::x86::v3`/`v4` copy holds vector
//! (ymm/zmm) instructions.
//!
//! # The instruction set, capped for measurement
//!
//! `S2S_CPU_ISA=avx2|avx512|baseline` caps our CPU kernels ([`isa`], read once): [`wide`] and
//! the packed products' register blocks ([`crate::gemm::packed`]) take the lesser of what the
//! CPU has and the cap, so an AVX-512 machine runs what an AVX2 laptop runs (most students'
//! laptops have no AVX-512). An unknown value is reported once and ignored. [`wide`]'s results
//! do not depend on the width; the packed products' AVX2 and AVX-512 blocks each equal the
//! float64 reference within the tests' tolerance. burn's own products (`gemm`) choose for
//! themselves and take AVX-512 only in a build with burn's `x86-v4` feature, which no variable
//! caps ([`gemm_isa`]): the CLI's default `avx512` feature carries `x86-v4` through
//! `s2s-kernels/avx512`, so that this crate knows. The device line names both sets where they
//! differ (`cpu (burn flex; avx2 kernels, gemm avx512)`, `cpu (burn flex; avx2 kernels)`). The
//! default build and the test suite keep `x86-v4`: `cargo test --release --workspace` unifies
//! the CLI's default features, so it compiles burn once for both.

/// `eˣ` without branches, so that loops over it vectorise: Cody–Waite range reduction
/// `x = n·ln2 + r`, `|r| ≤ ln2/2`, a degree-6 polynomial for `eʳ` (Cephes `expf`'s
/// coefficients, relative error below 2·10⁻⁷) and `2ⁿ` built in the exponent bits. Inputs are
/// clamped to the range where the result is a normal float, except that below −87 the result
/// is 0 (so `exp(−∞) = 0`: masked scores get exactly zero weight); NaN stays NaN.
///
/// The reduction's first step and the polynomial are written as `mul_add`: one rounding
/// instead of two (the reduction is the more accurate for it), and one instruction where the
/// CPU has FMA — inside [`wide`] that is every x86-64-v3 CPU; the baseline path computes the
/// same bits in software, slower (measured: the gate math of a `[64, 256]` LSTM step,
/// 196 → 157 thousand cycles on AVX2).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5·2²³: adding and subtracting it rounds to an integer
    let c = x.clamp(-87.0, 88.0);
    let t = c * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    // `n` is an integer in −126..=127, held in `t`'s low mantissa bits: reading it from there
    // (not `n as i32`, a saturating conversion that compiles to scalar code per lane) keeps the
    // whole function in vector registers.
    let n_int = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = (-n).mul_add(0.693_359_4, c) + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p.mul_add(r, 1.398_199_9e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 0.166_666_65);
    p = p.mul_add(r, 0.5);
    let y = (p * r).mul_add(r, r) + 1.0;
    let e = y * f32::from_bits((n_int.wrapping_add(127) as u32) << 23);
    if x < -87.0 { 0.0 } else { e }
}

/// `σ(x) = 1 / (1 + e⁻ˣ)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `tanh(x) = 1 − 2 / (e²ˣ + 1)` (absolute error about 10⁻⁷).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (exp(2.0 * x) + 1.0)
}

/// Runs `f` compiled for the widest vector unit this CPU has: AVX-512 (x86-64-v4), else AVX2
/// and FMA (x86-64-v3), else the baseline (SSE2 on x86-64), checked at run time and capped by
/// `S2S_CPU_ISA` ([`isa`]).
///
/// The crate is built for the baseline, so a loop over [`exp`] or [`lane_fold`] becomes 4-lane
/// SSE code. Called inside a `target_feature` function, `f` (a closure with one caller) is
/// inlined there and its loops are vectorised for that function's features: 16 lanes with
/// AVX-512. Elementwise results do not depend on the width (no operation is contracted or
/// reordered behind the code's back: multiply-adds are explicit `mul_add`, fused on every
/// path, and the reductions' lanes are fixed by [`LANES`], not by the register width), so
/// every path computes the same bits. Wrap the body a thread runs — inside a rayon closure,
/// not around the parallel loop, whose closures are compiled apart.
#[inline(always)]
pub fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    match isa() {
        // SAFETY: `isa` answers at most what the CPU has (every feature the function is
        // compiled for).
        Isa::Avx512 => return unsafe { x86::v4(f) },
        // SAFETY: as above.
        Isa::Avx2 => return unsafe { x86::v3(f) },
        Isa::Baseline => {}
    }
    f()
}

/// The instruction sets the CPU kernels choose between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// The build's baseline (SSE2 on x86-64).
    Baseline,
    /// AVX2 and FMA (x86-64-v3).
    Avx2,
    /// AVX-512 F, BW, DQ, VL (x86-64-v4).
    Avx512,
}

impl Isa {
    /// `avx512`, `avx2` or `baseline` (what `S2S_CPU_ISA` takes).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "avx512" | "avx-512" | "x86-64-v4" => Some(Self::Avx512),
            "avx2" | "x86-64-v3" => Some(Self::Avx2),
            "baseline" | "sse2" | "none" => Some(Self::Baseline),
            _ => None,
        }
    }

    /// Its name, as `S2S_CPU_ISA` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Avx512 => "avx512",
            Self::Avx2 => "avx2",
            Self::Baseline => "baseline",
        }
    }
}

/// What this CPU has.
pub fn detected_isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("fma")
        {
            return Isa::Avx512;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            return Isa::Avx2;
        }
    }
    Isa::Baseline
}

/// The instruction set burn's products (`gemm`) use: AVX-512 where the CPU has it and the build
/// has gemm's AVX-512 kernels (this crate's `avx512` feature, burn's `x86-v4`), else what the
/// CPU has up to AVX2. `S2S_CPU_ISA` does not reach them: gemm chooses at run time by itself.
pub fn gemm_isa() -> Isa {
    match detected_isa() {
        Isa::Avx512 if !cfg!(feature = "avx512") => Isa::Avx2,
        have => have,
    }
}

/// The instruction set our CPU kernels use: what the CPU has, capped by `S2S_CPU_ISA`
/// (`avx2`, `avx512`, `baseline`; read once), so that an AVX-512 machine can run what an AVX2
/// laptop runs. An unknown value is reported once on stderr and ignored. burn's products
/// (`gemm`) choose their own ([`gemm_isa`]).
pub fn isa() -> Isa {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        let have = detected_isa();
        match std::env::var("S2S_CPU_ISA") {
            Ok(v) => match Isa::parse(&v) {
                Some(cap) => cap.min(have),
                None => {
                    eprintln!("warning: S2S_CPU_ISA={v} is not avx512, avx2 or baseline: ignored");
                    have
                }
            },
            Err(_) => have,
        }
    })
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    /// `f` compiled with x86-64-v4's vector features.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW, DQ, VL, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
    pub(super) unsafe fn v4<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    /// `f` compiled with x86-64-v3's vector features.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn v3<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

/// Lanes of the row reductions below (what the compiler vectorises).
pub const LANES: usize = 16;

/// `x[j..j + LANES]` as an array: loops over such blocks vectorise without the run-time
/// length and overlap checks a loop over indexed slices needs (which [`wide`]'s functions did
/// not always hoist: the LSTM gate math ran at half speed there).
#[inline(always)]
pub fn block(x: &[f32], j: usize) -> &[f32; LANES] {
    chunk(x, j)
}

/// `x[j..j + LANES]` as a mutable array (see [`block`]).
#[inline(always)]
pub fn block_mut(x: &mut [f32], j: usize) -> &mut [f32; LANES] {
    chunk_mut(x, j)
}

/// `x[j..j + W]` as an array: [`block`] at any width.
#[inline(always)]
pub fn chunk<const W: usize>(x: &[f32], j: usize) -> &[f32; W] {
    x[j..j + W].try_into().expect("a whole chunk")
}

/// `x[j..j + W]` as a mutable array.
#[inline(always)]
pub fn chunk_mut<const W: usize>(x: &mut [f32], j: usize) -> &mut [f32; W] {
    (&mut x[j..j + W]).try_into().expect("a whole chunk")
}

/// `op` folded over `x` in [`LANES`] independent lanes, then across them: a reduction the
/// compiler vectorises (a sequential fold cannot be reordered).
#[inline(always)]
pub fn lane_fold(x: &[f32], init: f32, op: impl Fn(f32, f32) -> f32) -> f32 {
    lane_fold_map(x, init, |v| v, op)
}

/// `op` folded over `f(xᵢ)`, in [`LANES`] lanes (see [`lane_fold`]).
#[inline(always)]
pub fn lane_fold_map(x: &[f32], init: f32, f: impl Fn(f32) -> f32, op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut lanes = [init; LANES];
    let mut blocks = x.chunks_exact(LANES);
    for block in &mut blocks {
        for (l, &v) in lanes.iter_mut().zip(block) {
            *l = op(*l, f(v));
        }
    }
    blocks.remainder().iter().fold(lanes.into_iter().fold(init, &op), |a, &v| op(a, f(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `S2S_CPU_ISA`'s spellings, the order of the sets, and the cap never above the CPU.
    #[test]
    fn isa_caps_parse_and_never_exceed_the_cpu() {
        assert_eq!(Isa::parse("AVX2"), Some(Isa::Avx2));
        assert_eq!(Isa::parse(" avx512 "), Some(Isa::Avx512));
        assert_eq!(Isa::parse("baseline"), Some(Isa::Baseline));
        assert_eq!(Isa::parse("avx"), None);
        assert!(Isa::Baseline < Isa::Avx2 && Isa::Avx2 < Isa::Avx512);
        assert!(isa() <= detected_isa());
        for i in [Isa::Baseline, Isa::Avx2, Isa::Avx512] {
            assert_eq!(Isa::parse(i.name()), Some(i));
        }
    }

    /// The widest path [`wide`] picks on this CPU computes the same bits as the baseline
    /// build, over the whole clamp range, its edges, infinities and NaN.
    #[test]
    fn the_wide_path_computes_the_baseline_bits() {
        let mut xs: Vec<f32> = (-100_000..=100_000).map(|k| k as f32 * 0.00095).collect();
        xs.extend([-87.0, -86.99, 88.0, 88.5, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.0, -0.0]);
        #[inline(always)]
        fn run(x: &[f32], out: &mut [[f32; 3]]) {
            for (o, &x) in out.iter_mut().zip(x) {
                *o = [exp(x), sigmoid(x), tanh(x)];
            }
        }
        let mut plain = vec![[0f32; 3]; xs.len()];
        run(&xs, &mut plain);
        let mut fast = vec![[0f32; 3]; xs.len()];
        wide(
            #[inline(always)]
            || run(&xs, &mut fast),
        );
        for ((p, f), x) in plain.iter().zip(&fast).zip(&xs) {
            for (a, b) in p.iter().zip(f) {
                assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "x = {x}: {a} vs {b}");
            }
        }
        assert!(exp(f32::NAN).is_nan() && exp(f32::NEG_INFINITY) == 0.0 && exp(-87.5) == 0.0);
    }

    #[test]
    fn exp_sigmoid_tanh_match_the_standard_library() {
        let mut worst = [0f32; 3];
        for k in -20_000..=20_000 {
            let x = k as f32 * 0.0044; // −88 … 88
            if x >= -87.0 {
                worst[0] = worst[0].max(((exp(x) - x.exp()) / x.exp()).abs());
            }
            let s = 1.0 / (1.0 + (-x).exp());
            worst[1] = worst[1].max((sigmoid(x) - s).abs());
            worst[2] = worst[2].max((tanh(x) - x.tanh()).abs());
        }
        assert!(worst[0] < 5e-7, "exp relative error {}", worst[0]);
        assert!(worst[1] < 2e-7, "sigmoid absolute error {}", worst[1]);
        assert!(worst[2] < 3e-7, "tanh absolute error {}", worst[2]);
        assert!(exp(f32::NAN).is_nan() && tanh(f32::NAN).is_nan());
        assert_eq!((exp(f32::NEG_INFINITY), exp(-1e4)), (0.0, 0.0));
        assert!(sigmoid(-1e4) < 1e-38, "saturates (e⁸⁸ is the largest exponential it forms)");
        assert_eq!((sigmoid(1e4), tanh(-1e4), tanh(1e4)), (1.0, -1.0, 1.0));
    }
}
