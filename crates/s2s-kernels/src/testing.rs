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
