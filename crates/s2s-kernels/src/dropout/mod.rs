//! Dropout (Srivastava et al., 2014): during training each element is zeroed with
//! probability `p` and the rest scaled by `1 / (1 − p)`; identity otherwise.
//!
//! burn's `Dropout::forward` draws a Bernoulli tensor with a ChaCha generator and a per-element
//! sampler, then multiplies twice: ~10 % of a Transformer training step on the CPU. Here, on
//! flex, the mask — already scaled — comes from a counter-based generator (SplitMix64's
//! finaliser of `seed + index`, in parallel chunks), one multiplication applies it, and autodiff
//! sees `x ⊙ mask` with a constant mask.
//!
//! On a GPU (cubecl without burn's fusion) the mask is a hash of a seed and the index, one
//! kernel each way ([`crate::dropout::gpu`]). Other backends (`gpu-tuned`) use burn's
//! `Dropout::forward`.
//!
//! Every mask's seed comes from a per-thread stream on the host that the trainer restarts
//! before each step ([`reseed`]), so a run is reproducible and a resumed run draws the masks of
//! an uninterrupted one. Not the device's generator: on a GPU drawing from it would read it
//! back, a synchronisation at every dropout site, and on the CPU the parts of a step computed
//! at once on separate cores (`s2s_train::core_split`) would interleave their draws.

pub(crate) mod reference;

#[cfg(not(feature = "gpu-tuned"))]
pub mod gpu;
pub mod mask;

use std::cell::Cell;

use burn::nn::Dropout;
use burn::tensor::{Tensor, TensorData};

use crate::dropout::mask::{mask, splitmix64};

/// `dropout(x)` with `d`'s probability (see the module doc).
pub fn forward<const D: usize>(d: &Dropout, x: Tensor<D>) -> Tensor<D> {
    let device = x.device();
    #[cfg(not(feature = "gpu-tuned"))]
    if let Some((seed, keep)) = gpu_mask(d, &device) {
        return Tensor::from_dispatch(
            <burn::backend::Dispatch as crate::dropout::gpu::GpuDropout>::gpu_dropout(
                x.into_dispatch(),
                seed,
                keep,
            ),
        );
    }
    if !active(d, &device) {
        return d.forward(x);
    }
    let seed = draw_seed(&device);
    let shape = x.shape();
    let mask = mask(seed, shape.num_elements(), 1.0 - d.prob as f32);
    x * Tensor::<D>::from_data(TensorData::new(mask, shape), &device)
}

/// `dropout(relu(x))` with `d`'s probability: on a GPU one kernel each way
/// ([`crate::dropout::gpu`], a plain ReLU when nothing drops), elsewhere burn's ReLU and
/// [`forward`]. The mask's seed is drawn as [`forward`] draws it.
pub fn relu_then<const D: usize>(d: &Dropout, x: Tensor<D>) -> Tensor<D> {
    #[cfg(not(feature = "gpu-tuned"))]
    if !crate::cpu::flex_data::is_flex(&x.device()) {
        // Nothing drops: keep 1, a plain ReLU.
        let (seed, keep) = gpu_mask(d, &x.device()).unwrap_or((0, 1.0));
        return Tensor::from_dispatch(
            <burn::backend::Dispatch as crate::dropout::gpu::GpuDropout>::gpu_relu_dropout(
                x.into_dispatch(),
                seed,
                keep,
            ),
        );
    }
    forward(d, burn::tensor::activation::relu(x))
}

/// `x + dropout(y)` with `d`'s probability (a residual connection, `x` and `y` of one
/// shape): on a GPU one kernel forward where there were two ([`crate::dropout::gpu`]),
/// elsewhere (and when nothing drops) `x +` [`forward`]. The mask's seed is drawn as
/// [`forward`] draws it.
pub fn add_then<const D: usize>(d: &Dropout, x: Tensor<D>, y: Tensor<D>) -> Tensor<D> {
    #[cfg(not(feature = "gpu-tuned"))]
    if let Some((seed, keep)) = gpu_mask(d, &x.device()) {
        return Tensor::from_dispatch(
            <burn::backend::Dispatch as crate::dropout::gpu::GpuDropout>::gpu_add_dropout(
                x.into_dispatch(),
                y.into_dispatch(),
                seed,
                keep,
            ),
        );
    }
    x + forward(d, y)
}

/// The seed and keep share of `d`'s mask on a GPU (not flex), drawn from the host stream
/// ([`draw_seed`]); `None` on flex or when nothing drops.
#[cfg(not(feature = "gpu-tuned"))]
fn gpu_mask(d: &Dropout, device: &burn::tensor::Device) -> Option<(u64, f32)> {
    (drops(d, device) && !crate::cpu::flex_data::is_flex(device))
        .then(|| (draw_seed(device), 1.0 - d.prob as f32))
}

/// True when `d` drops anything on `device` (training, `p > 0`, autodiff): where the fused
/// attention, on flex or a GPU, draws a mask.
pub fn drops(d: &Dropout, device: &burn::tensor::Device) -> bool {
    d.prob > 0.0 && d.training.is_enabled() && device.is_autodiff()
}

/// [`drops`] on flex: where [`forward`] applies the CPU's mask.
fn active(d: &Dropout, device: &burn::tensor::Device) -> bool {
    drops(d, device) && crate::cpu::flex_data::is_flex(device)
}

thread_local! {
    /// This thread's seed stream for dropout masks: the next draw's counter.
    static STREAM: Cell<u64> = const { Cell::new(0) };
}

/// Restarts this thread's seed stream for dropout masks from `seed`: what the trainer calls
/// before each step (and before each part of a step cut over the CPU's cores, each part in
/// its own thread), so a resumed run draws the masks of an uninterrupted one, and parts
/// computed at once draw theirs whatever the other does.
pub fn reseed(seed: u64) {
    STREAM.with(|s| s.set(splitmix64(seed)));
}

/// The next seed of this thread's stream.
fn next_host_seed() -> u64 {
    STREAM.with(|s| {
        let n = s.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        s.set(n);
        splitmix64(n)
    })
}

/// The first `n` seeds [`draw_seed`] gives after [`reseed`]`(seed)`: what a replayed GPU step
/// writes into its seed slots ([`crate::gpu::step_scalars`]) so that its masks are the eager
/// step's. Leaves this thread's stream where `n` draws leave it.
pub fn host_seeds(seed: u64, n: usize) -> Vec<u64> {
    reseed(seed);
    (0..n).map(|_| next_host_seed()).collect()
}

/// A mask's seed, from this thread's stream ([`reseed`]), on every device: on a GPU it is
/// not read back from the device, and on the CPU threads computing parts of one step at once
/// do not share one generator (the device's, whose draws would interleave).
pub fn draw_seed(device: &burn::tensor::Device) -> u64 {
    let seed = next_host_seed();
    if !crate::cpu::flex_data::is_flex(device) {
        crate::gpu::step_scalars::drawn(seed);
    }
    seed
}

/// The mask drawn from `seed` for `n` elements kept with probability `keep`, built on the host
/// as `device`'s kernels build it: [`mask`] on the CPU, the GPU kernels' hash on a GPU. What the
/// references multiply by ([`crate::reference::dropout`]).
pub fn host_mask(device: &burn::tensor::Device, seed: u64, n: usize, keep: f32) -> Vec<f32> {
    #[cfg(not(feature = "gpu-tuned"))]
    if !crate::cpu::flex_data::is_flex(device) {
        return crate::dropout::gpu::dropout_mask(seed, n, keep);
    }
    let _ = device;
    mask(seed, n, keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::DropoutConfig;
    use burn::tensor::Device;

    #[test]
    fn keeps_the_right_share_scaled_reproducibly_with_the_mask_as_gradient() {
        let d = Device::flex().autodiff();
        let drop = DropoutConfig::new(0.25).init();
        let x = Tensor::<2>::ones([200, 500], &d).require_grad();
        reseed(11);
        let y = forward(&drop, x.clone());
        let v: Vec<f32> = y.clone().into_data().try_to_vec::<f32>().unwrap();
        let kept = v.iter().filter(|&&a| a != 0.0).count() as f64 / v.len() as f64;
        assert!((kept - 0.75).abs() < 0.005, "kept {kept}");
        assert!(v.iter().all(|&a| a == 0.0 || (a - 1.0 / 0.75).abs() < 1e-6));
        let g: Vec<f32> =
            x.grad(&y.clone().sum().backward()).unwrap().into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(g, v, "the gradient of Σ dropout(1) is the mask");
        reseed(11);
        assert_eq!(
            forward(&drop, x.clone()).into_data().try_to_vec::<f32>().unwrap(),
            v,
            "the seed reproduces the mask"
        );
        // Another thread's stream is its own: its draws do not move this thread's.
        reseed(11);
        let _ = forward(&drop, x.clone());
        std::thread::scope(|s| {
            s.spawn(|| {
                reseed(5);
                forward(&drop, x.clone())
            })
            .join()
            .unwrap()
        });
        let second: Vec<f32> = forward(&drop, x.clone()).into_data().try_to_vec::<f32>().unwrap();
        reseed(11);
        let _ = forward(&drop, x.clone());
        assert_eq!(forward(&drop, x.clone()).into_data().try_to_vec::<f32>().unwrap(), second);
        let other: Vec<f32> = forward(&drop, x.clone()).into_data().try_to_vec::<f32>().unwrap();
        assert_ne!(other, v, "the next call draws another mask");
        let plain = Tensor::<2>::ones([3, 4], &Device::flex());
        assert_eq!(forward(&drop, plain.clone()).into_data(), plain.into_data(), "identity without autodiff");
    }
}
