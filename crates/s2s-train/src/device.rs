//! Device selection: `cpu` (burn flex), `wgpu`, or `auto` — a real GPU adapter when there is
//! one, the CPU otherwise. Software adapters (Mesa's lavapipe) are used only when `wgpu` is
//! asked for explicitly: with the `wgpu` feature compiled in, burn's default device *is*
//! lavapipe on a machine without a GPU, so `auto` checks for a physical card first.

use burn::tensor::{Device, DeviceKind};
use serde::{Deserialize, Serialize};

/// A device choice as the user spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    /// A physical GPU if present, else the CPU.
    #[default]
    Auto,
    /// burn's flex CPU backend.
    Cpu,
    /// wgpu's default adapter (on a machine without a GPU: lavapipe, a software renderer).
    Wgpu,
}

impl std::str::FromStr for DeviceChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "wgpu" => Ok(Self::Wgpu),
            _ => Err(format!("unknown device `{s}`: use auto, cpu or wgpu")),
        }
    }
}

/// The chosen device and a description for messages and `run.json`.
pub fn select(choice: DeviceChoice) -> (Device, String) {
    match choice {
        DeviceChoice::Cpu => (Device::flex(), "cpu (burn flex)".into()),
        DeviceChoice::Wgpu => {
            let d = Device::wgpu(DeviceKind::DefaultDevice);
            let name = d.identity().map(|i| i.name).unwrap_or_else(|| "unknown adapter".into());
            (d, format!("wgpu ({name})"))
        }
        DeviceChoice::Auto => match Device::enumerate_physical().into_iter().next() {
            Some(gpu) => (Device::wgpu(DeviceKind::DefaultDevice), format!("wgpu ({})", gpu.name)),
            None => (Device::flex(), "cpu (burn flex; no physical GPU found)".into()),
        },
    }
}
