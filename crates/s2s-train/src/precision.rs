//! Mixed precision, as fairseq's `--fp16` and PyTorch's `autocast` + `GradScaler` do it: the
//! matrix products of the forward and the backward take f16 operands (the device accumulates
//! in f32); the weights, Adam's moments, softmax, layer norm, the loss, the clip's norm and the
//! update stay f32. A loss scaled up before the backward keeps small gradients out of f16's
//! underflow; [`LossScaler`] adapts the scale (dynamic loss scaling) and skips the steps whose
//! gradients overflowed.
//!
//! Where mixed precision runs: on a GPU (wgpu) whose adapter does f16 arithmetic. The CPU
//! backend has no f16 products worth taking, and wgpu's GL fallback (llvmpipe, where no Vulkan
//! driver is installed) none at all, so `precision = "mixed"` there is an error that says so,
//! naming the adapter (see [`Precision::check_device`]).

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

/// The precision of a run's matrix products (`[train] precision`, `--precision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Everything in f32 (bit for bit what the toolkit always computed).
    #[default]
    F32,
    /// f16 products with f32 master weights and dynamic loss scaling.
    Mixed,
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(Self::F32),
            "mixed" => Ok(Self::Mixed),
            _ => Err(format!("unknown precision `{s}`: use f32 or mixed")),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::Mixed => "mixed",
        })
    }
}

/// Why a device cannot run `precision = "mixed"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrecisionError {
    /// The CPU backend: no f16 products worth taking.
    #[error(
        "precision = \"mixed\" runs f16 matrix products on a GPU; the CPU backend (flex) has none: \
         use precision = \"f32\" (--precision f32) or --device wgpu"
    )]
    Cpu,
    /// A GPU adapter without f16 arithmetic (wgpu's GL fallback on llvmpipe, where no Vulkan
    /// driver is installed).
    #[error(
        "precision = \"mixed\" needs f16 matrix products, which the wgpu adapter `{adapter}` does not \
         run: use precision = \"f32\" (--precision f32), or a Vulkan driver with f16 (a GPU's, or \
         Mesa's lavapipe: apt-get install mesa-vulkan-drivers)"
    )]
    NoHalfProducts {
        /// The adapter's name.
        adapter: String,
    },
}

impl Precision {
    /// Refuses `mixed` on a device that cannot run f16 products: the CPU backend, and a GPU
    /// adapter that says it has no f16 arithmetic (asked, not assumed: [`s2s_kernels::ops::has_f16_products`]).
    pub fn check_device(self, device: &Device) -> Result<(), PrecisionError> {
        if self == Self::F32 {
            return Ok(());
        }
        if s2s_kernels::ops::is_cpu(device) {
            return Err(PrecisionError::Cpu);
        }
        if !s2s_kernels::ops::has_f16_products(device) {
            let adapter = s2s_kernels::ops::adapter_name(device);
            return Err(PrecisionError::NoHalfProducts { adapter });
        }
        Ok(())
    }

    /// Runs `f` (a forward, or a decoding) with this precision's products on this thread.
    pub fn products<T>(self, f: impl FnOnce() -> T) -> T {
        s2s_kernels::mode::with_half_products(self == Self::Mixed, f)
    }
}

/// Dynamic loss scaling (Micikevicius et al., 2018; fairseq's `DynamicLossScaler`, PyTorch's
/// `GradScaler`): the loss is multiplied by [`scale`](Self::scale) before the backward and the
/// gradients divided by it after. A step whose gradients are not all finite overflowed: it is
/// skipped and the scale halved; after [`GROWTH_INTERVAL`](Self::GROWTH_INTERVAL) steps in a
/// row without overflow the scale doubles. Below [`MIN_SCALE`](Self::MIN_SCALE) the loss is
/// exploding, not the scale too high: training stops with an error. The scaler is part of the
/// checkpoint, so a resumed run scales as an uninterrupted one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossScaler {
    scale: f64,
    /// Steps taken since the last overflow or growth.
    good_steps: u64,
    /// Steps skipped because their gradients overflowed, in the whole run.
    pub skipped: u64,
}

impl Default for LossScaler {
    fn default() -> Self {
        Self { scale: Self::INITIAL, good_steps: 0, skipped: 0 }
    }
}

impl LossScaler {
    /// The starting scale, 2⁷ (fairseq's `--fp16-init-scale` default).
    pub const INITIAL: f64 = 128.0;
    /// Steps without overflow before the scale doubles (fairseq's `--fp16-scale-window` for
    /// one worker, PyTorch's `growth_interval`).
    pub const GROWTH_INTERVAL: u64 = 2000;
    /// The floor (fairseq's `--min-loss-scale`).
    pub const MIN_SCALE: f64 = 1e-4;

    /// The scale the next step's loss is multiplied by.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Records a step: `finite` when every gradient was. Returns whether the step is taken
    /// (its gradients applied); an overflowed step is skipped and halves the scale.
    pub fn update(&mut self, finite: bool) -> bool {
        if !finite {
            self.scale /= 2.0;
            self.good_steps = 0;
            self.skipped += 1;
            return false;
        }
        self.good_steps += 1;
        if self.good_steps >= Self::GROWTH_INTERVAL {
            self.scale *= 2.0;
            self.good_steps = 0;
        }
        true
    }

    /// Whether the scale fell below [`MIN_SCALE`](Self::MIN_SCALE).
    pub fn below_floor(&self) -> bool {
        self.scale < Self::MIN_SCALE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overflow_halves_the_scale_and_skips_and_a_quiet_window_doubles_it() {
        let mut s = LossScaler::default();
        assert_eq!(s.scale(), 128.0);
        assert!(!s.update(false), "an overflowed step is skipped");
        assert_eq!((s.scale(), s.skipped), (64.0, 1));
        for _ in 0..LossScaler::GROWTH_INTERVAL - 1 {
            assert!(s.update(true));
        }
        assert_eq!(s.scale(), 64.0, "not before the window is full");
        assert!(s.update(true));
        assert_eq!(s.scale(), 128.0);
        // An overflow restarts the window.
        for _ in 0..10 {
            s.update(true);
        }
        s.update(false);
        for _ in 0..LossScaler::GROWTH_INTERVAL - 1 {
            s.update(true);
        }
        assert_eq!(s.scale(), 64.0);
    }

    #[test]
    fn repeated_overflows_reach_the_floor() {
        let mut s = LossScaler::default();
        let mut n = 0;
        while !s.below_floor() {
            s.update(false);
            n += 1;
        }
        // 128 / 2^21 < 1e-4 <= 128 / 2^20.
        assert_eq!(n, 21);
    }

    #[test]
    fn precision_parses_and_mixed_is_refused_on_the_cpu() {
        assert_eq!("mixed".parse::<Precision>(), Ok(Precision::Mixed));
        assert!("f16".parse::<Precision>().unwrap_err().contains("f32 or mixed"));
        let e = Precision::Mixed.check_device(&Device::flex()).unwrap_err().to_string();
        assert!(e.contains("GPU") && e.contains("precision = \"f32\""), "{e}");
        assert!(Precision::F32.check_device(&Device::flex()).is_ok());
    }

    /// On a wgpu adapter the answer is the adapter's: where it has f16 products mixed is
    /// accepted; where it has none (the GL fallback) refused, naming it and `--precision f32`.
    #[test]
    fn mixed_on_a_gpu_follows_the_adapters_f16() {
        let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() else { return };
        assert!(Precision::F32.check_device(&gpu).is_ok());
        match Precision::Mixed.check_device(&gpu) {
            Ok(()) => assert!(s2s_kernels::ops::has_f16_products(&gpu)),
            Err(e) => {
                assert!(!s2s_kernels::ops::has_f16_products(&gpu));
                let adapter = gpu.identity().map(|i| i.name).unwrap();
                let e = e.to_string();
                assert!(e.contains(&adapter) && e.contains("--precision f32"), "{e}");
            }
        }
    }
}
