//! The device table: which implementation of an operation runs where ([`Route`]), and the
//! questions about the device that the kernels cannot leave to a `match` of [`crate::ops`] —
//! burn calls the optimiser one parameter at a time ([`adam_route`]), a sum of gradients
//! decides once whether it adds in place ([`in_place_passes`]), a dropout seed is noted for a
//! captured GPU step ([`draw_dropout_seed`]) — with the two operations whose only difference
//! between devices is how they meet the GPU's constraints ([`sum_all`], [`constant`]). No
//! kernel file asks which device or mode it runs on: they ask here, or `ops` chose for them.

use burn::module::Module;
use burn::tensor::{DType, Device, Tensor};

use crate::cpu::flex_data::is_flex;
use crate::mode;

/// Which implementation of an operation runs on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `--kernels reference` ([`mode`]): the plain-tensor equations, on any device.
    Reference,
    /// flex, the CPU backend: the fused CPU kernels.
    Cpu,
    /// A cubecl device (wgpu): the GPU kernels.
    Gpu,
    /// A cubecl device under burn's fusion (the `gpu-tuned` feature): its fused-stream tensors
    /// take none of our GPU kernels, so the references run there, fused by burn.
    Fused,
}

/// The [`Route`] of `device` under the current [`mode`].
pub fn route(device: &Device) -> Route {
    if mode::reference() {
        Route::Reference
    } else if is_flex(device) {
        Route::Cpu
    } else if cfg!(feature = "gpu-tuned") {
        Route::Fused
    } else {
        Route::Gpu
    }
}

/// True when `device` is the CPU backend (flex): where a search loop is cheapest a step at a
/// time; on a GPU it batches steps to save round trips.
pub fn is_cpu(device: &Device) -> bool {
    is_flex(device)
}

/// True when `device` runs f16 matrix products: a GPU whose adapter does f16 arithmetic and
/// conversion (what cubek's matmul asks before it runs, so a product never panics refusing
/// it). Vulkan adapters with `shaderFloat16` (Mesa's lavapipe, NVIDIA, AMD) do; wgpu's GL
/// fallback (llvmpipe, on a machine without a Vulkan driver) does not, nor the CPU backend,
/// whose products mixed precision leaves alone.
pub fn has_f16_products(device: &Device) -> bool {
    !is_flex(device) && device.supports_dtype(DType::F16)
}

/// The name of `device`'s adapter (`llvmpipe (LLVM 15.0.6, 256 bits)`, an NVIDIA card's), for
/// messages; `unknown adapter` where it gives none.
pub fn adapter_name(device: &Device) -> String {
    device.identity().map(|i| i.name).unwrap_or_else(|| "unknown adapter".into())
}

/// The [`Route`] of `module`'s parameters (its first device; the references without any).
pub(crate) fn module_route<M: Module>(module: &M) -> Route {
    module.devices().first().map_or(Route::Reference, route)
}

/// True where the passes over all gradients may run in place on flex ([`crate::ops::GradientSum`]): off the
/// references, which add with burn's operations (the same bits).
pub(crate) fn in_place_passes() -> bool {
    !mode::reference()
}

/// Which Adam updates a parameter (see [`crate::optimizer::adam`]).
pub(crate) enum AdamRoute {
    /// burn's `Adam`: the references, and burn's fusion (which fuses its own).
    Burn,
    /// Queued, to run 64 parameters a launch ([`crate::ops::FusedAdam::batched`], GPU).
    Batched,
    /// One kernel for this parameter: flex, or a GPU's unbatched optimiser.
    Kernel,
}

/// The Adam of a parameter on `device` for an optimiser `batched` or not.
pub(crate) fn adam_route(device: &Device, batched: bool) -> AdamRoute {
    match route(device) {
        Route::Reference | Route::Fused => AdamRoute::Burn,
        Route::Gpu if batched => AdamRoute::Batched,
        Route::Cpu | Route::Gpu => AdamRoute::Kernel,
    }
}

/// A dropout mask's seed, the next of this thread's stream ([`crate::ops::reseed`]), for kernels and
/// references alike; on a GPU device also noted for the step being recorded, whose replays
/// write their own draws into its slot ([`crate::gpu::step_scalars`]).
pub(crate) fn draw_dropout_seed(device: &Device) -> u64 {
    let seed = crate::dropout::next_seed();
    if !is_flex(device) {
        crate::gpu::step_scalars::drawn(seed);
    }
    seed
}

/// The mask drawn from `seed` for `n` elements kept with probability `keep`, built on the host
/// as `device`'s kernels build it — the CPU's counter-based mask, the GPU kernels' hash — for
/// the references to multiply by ([`crate::reference::dropout`]).
pub(crate) fn dropout_mask_on_host(device: &Device, seed: u64, n: usize, keep: f32) -> Vec<f32> {
    #[cfg(not(feature = "gpu-tuned"))]
    if !is_flex(device) {
        return crate::dropout::gpu::dropout_mask(seed, n, keep);
    }
    let _ = device;
    crate::dropout::mask::mask(seed, n, keep)
}

/// The sum of every element, `[1]`. On the CPU, burn's `sum`. On a GPU, a reduction along one
/// axis (`sum_dim`), whose order is fixed: burn's `sum` of a whole tensor adds the partial sums
/// of its workgroups with atomic additions, in whatever order they finish, so the same step
/// could end a few ulps apart from one run to the next (and a replayed training step from the
/// eager one).
pub fn sum_all<const D: usize>(x: Tensor<D>) -> Tensor<1> {
    if is_flex(&x.device()) {
        return x.sum();
    }
    let n = x.shape().num_elements();
    x.reshape([n]).sum_dim(0)
}

thread_local! {
    /// [`constant`]'s tensors, by key, shape and device.
    static CONSTANTS: std::cell::RefCell<std::collections::HashMap<String, Box<dyn std::any::Any>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// The most tensors [`constant`] keeps a thread (past it the cache starts afresh).
const MAX_CONSTANTS: usize = 4096;

/// A tensor that depends only on `key` and `dims` (positions, a causal mask), built by `build`
/// once per thread and GPU device and shared after; on the CPU (flex) built every time, as
/// cheap as a copy there. On a GPU building it is a host → device write, which a captured
/// step (replayed from a graph, [`crate::gpu::graph`]) may not do, and which costs a transfer a
/// step otherwise.
pub fn constant<const D: usize>(
    key: &str,
    dims: &[usize],
    device: &Device,
    build: impl FnOnce() -> Tensor<D>,
) -> Tensor<D> {
    if is_flex(device) {
        return build();
    }
    let k = format!("{key}{dims:?}@{device:?}");
    if let Some(t) =
        CONSTANTS.with(|c| c.borrow().get(&k).and_then(|t| t.downcast_ref::<Tensor<D>>().cloned()))
    {
        return t;
    }
    let t = build();
    CONSTANTS.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= MAX_CONSTANTS {
            c.clear();
        }
        c.insert(k, Box::new(t.clone()));
    });
    t
}
