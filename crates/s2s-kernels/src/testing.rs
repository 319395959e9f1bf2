//! What the tests of this workspace share (unit tests here, and `s2s-train`'s): not for the
//! CLI's use.

use burn::tensor::{Device, DeviceKind, Tensor};

/// Adam's step with an explicit clipping factor, and the per-parameter step, for the
/// optimizer's GPU tests.
pub use crate::optimizer::adam::{AdamStep, step_with_cap};

/// A wgpu device (lavapipe where there is no GPU), or `None` — and the test skips, saying so
/// — where no Vulkan adapter answers; under `CI=true` a missing adapter fails the test.
pub fn wgpu_or_skip() -> Option<Device> {
    let probe = std::panic::catch_unwind(|| {
        let d = Device::wgpu(DeviceKind::DefaultDevice);
        // Touch the device: fails here when there is no adapter.
        let _ = Tensor::<1>::ones([1], &d).into_scalar::<f32>();
        d
    });
    if probe.is_err() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must provide a Vulkan adapter (lavapipe)");
        eprintln!("skipped: no wgpu adapter (apt-get install mesa-vulkan-drivers)");
    }
    probe.ok()
}

/// A wgpu device whose adapter runs f16 products ([`crate::ops::has_f16_products`]), or `None`
/// — and the test skips, saying why — where there is no adapter or only one without f16 (wgpu's
/// GL fallback on llvmpipe, on a machine without a Vulkan driver). Under `CI=true`, where
/// `.ci/run` installs lavapipe (which has f16), either is a failure.
pub fn wgpu_f16_or_skip() -> Option<Device> {
    let device = wgpu_or_skip()?;
    if crate::ops::has_f16_products(&device) {
        return Some(device);
    }
    let adapter = crate::ops::adapter_name(&device);
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI's wgpu adapter ({adapter}) has no f16 products: is lavapipe (mesa-vulkan-drivers) installed?"
    );
    eprintln!(
        "skipped: the wgpu adapter ({adapter}) has no f16 products (apt-get install mesa-vulkan-drivers)"
    );
    None
}
