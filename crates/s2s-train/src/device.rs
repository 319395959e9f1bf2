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
        DeviceChoice::Cpu => (Device::flex(), format!("cpu (burn flex; {})", cpu_isa())),
        DeviceChoice::Wgpu => {
            let d = Device::wgpu(DeviceKind::DefaultDevice);
            let name = s2s_kernels::ops::adapter_name(&d);
            let compiler = compiler_of(&d);
            (d, format!("wgpu ({name}; {compiler})"))
        }
        DeviceChoice::Auto => match Device::enumerate_physical().into_iter().next() {
            Some(gpu) => {
                let d = Device::wgpu(DeviceKind::DefaultDevice);
                let compiler = compiler_of(&d);
                (d, format!("wgpu ({}; {compiler})", gpu.name))
            }
            None => (Device::flex(), format!("cpu (burn flex; {}; no physical GPU found)", cpu_isa())),
        },
    }
}

/// The instruction set of our CPU kernels (`S2S_CPU_ISA` caps it).
/// `avx2 kernels`, or `avx2 kernels, gemm avx512` where burn's products use another set than
/// our kernels.
fn cpu_isa() -> String {
    use s2s_kernels::mode::{gemm_isa, isa};
    match (isa(), gemm_isa()) {
        (ours, gemm) if ours == gemm => format!("{} kernels", ours.name()),
        (ours, gemm) => format!("{} kernels, gemm {}", ours.name(), gemm.name()),
    }
}

/// Which compiler a GPU device's kernels go through: `wgpu<spirv>` (cubecl's SPIR-V compiler,
/// on a Vulkan adapter that supports it) or `wgpu<wgsl>`.
fn compiler_of(device: &Device) -> &'static str {
    s2s_kernels::mode::gpu_compiler(device).unwrap_or("unknown compiler")
}

/// `n` devices of `choice` for data-parallel training (`devices = n`): the first `n` physical
/// GPUs, each through the first runtime that reaches it, or the one device of [`select`] when
/// `n` is 1. Never several CPUs: flex is one device and already spreads its work over every
/// core; on a machine with fewer GPUs than asked for, the error says how many there are.
pub fn select_many(choice: DeviceChoice, n: u32) -> Result<(Vec<Device>, String), crate::TrainError> {
    if n <= 1 {
        let (device, name) = select(choice);
        return Ok((vec![device], name));
    }
    if choice == DeviceChoice::Cpu {
        return Err(crate::TrainError::Config(format!(
            "devices = {n}: the CPU backend (flex) is a single device that already uses every core; \
             data-parallel training needs several GPUs (--device wgpu or auto)"
        )));
    }
    let gpus = Device::enumerate_physical();
    let names: Vec<&str> = gpus.iter().map(|g| g.name.as_str()).collect();
    if gpus.len() < n as usize {
        return Err(crate::TrainError::Config(format!(
            "devices = {n} needs {n} GPUs, this machine has {} ({}); use devices = {} or fewer",
            gpus.len(),
            if names.is_empty() { "none".to_string() } else { names.join(", ") },
            gpus.len().max(1)
        )));
    }
    let n = n as usize;
    let devices = gpus[..n].iter().map(|g| g.devices[0].clone()).collect();
    Ok((devices, format!("{n} GPUs ({})", names[..n].join(", "))))
}
