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

/// `x ⊙ mask` on flex for the mask of `(seed, keep)` ([`mask`], already scaled): one
/// multiplication, autodiff seeing a constant mask. [`crate::ops::dropout`] draws the seed.
pub fn cpu_dropout<const D: usize>(x: Tensor<D>, seed: u64, keep: f32) -> Tensor<D> {
    let device = x.device();
    let shape = x.shape();
    let mask = mask(seed, shape.num_elements(), keep);
    x * Tensor::<D>::from_data(TensorData::new(mask, shape), &device)
}

/// True when `d` drops anything on `device` (training, `p > 0`, autodiff): where a mask is
/// drawn, by the kernels or the references.
pub fn drops(d: &Dropout, device: &burn::tensor::Device) -> bool {
    d.prob > 0.0 && d.training.is_enabled() && device.is_autodiff()
}

/// The share of elements `d` keeps, `1 − p`.
pub fn keep(d: &Dropout) -> f32 {
    1.0 - d.prob as f32
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

/// The next seed of this thread's stream ([`reseed`]), on every device: on a GPU it is not
/// read back from the device, and on the CPU threads computing parts of one step at once do
/// not share one generator (the device's, whose draws would interleave). What a GPU step
/// records of it is [`crate::device::draw_dropout_seed`]'s.
pub fn next_seed() -> u64 {
    STREAM.with(|s| {
        let n = s.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        s.set(n);
        splitmix64(n)
    })
}

/// The first `n` seeds [`next_seed`] gives after [`reseed`]`(seed)`: what a replayed GPU step
/// writes into its seed slots ([`crate::gpu::step_scalars`]) so that its masks are the eager
/// step's. Leaves this thread's stream where `n` draws leave it.
pub fn host_seeds(seed: u64, n: usize) -> Vec<u64> {
    reseed(seed);
    (0..n).map(|_| next_seed()).collect()
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
        let y = crate::ops::dropout(&drop, x.clone());
        let v: Vec<f32> = y.clone().into_data().try_to_vec::<f32>().unwrap();
        let kept = v.iter().filter(|&&a| a != 0.0).count() as f64 / v.len() as f64;
        assert!((kept - 0.75).abs() < 0.005, "kept {kept}");
        assert!(v.iter().all(|&a| a == 0.0 || (a - 1.0 / 0.75).abs() < 1e-6));
        let g: Vec<f32> =
            x.grad(&y.clone().sum().backward()).unwrap().into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(g, v, "the gradient of Σ dropout(1) is the mask");
        reseed(11);
        assert_eq!(
            crate::ops::dropout(&drop, x.clone()).into_data().try_to_vec::<f32>().unwrap(),
            v,
            "the seed reproduces the mask"
        );
        // Another thread's stream is its own: its draws do not move this thread's.
        reseed(11);
        let _ = crate::ops::dropout(&drop, x.clone());
        std::thread::scope(|s| {
            s.spawn(|| {
                reseed(5);
                crate::ops::dropout(&drop, x.clone())
            })
            .join()
            .unwrap()
        });
        let second: Vec<f32> = crate::ops::dropout(&drop, x.clone()).into_data().try_to_vec::<f32>().unwrap();
        reseed(11);
        let _ = crate::ops::dropout(&drop, x.clone());
        assert_eq!(crate::ops::dropout(&drop, x.clone()).into_data().try_to_vec::<f32>().unwrap(), second);
        let other: Vec<f32> = crate::ops::dropout(&drop, x.clone()).into_data().try_to_vec::<f32>().unwrap();
        assert_ne!(other, v, "the next call draws another mask");
        let plain = Tensor::<2>::ones([3, 4], &Device::flex());
        assert_eq!(
            crate::ops::dropout(&drop, plain.clone()).into_data(),
            plain.into_data(),
            "identity without autodiff"
        );
    }
}
