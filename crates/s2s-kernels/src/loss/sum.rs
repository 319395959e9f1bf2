//! A run's training loss summed on the GPU: each step adds its per-token loss × its token
//! count, and its token count, into a two-float buffer in place, and the trainer reads it back
//! only when it logs or validates. A captured step records the addition with the rest, so a
//! replayed step needs no read-back (a synchronisation that keeps the host from queueing the
//! next step while the device runs this one).
//!
//! The reference is plain: `sum += loss · tokens; tokens_sum += tokens` on the host, as the
//! eager trainer keeps it (`tests` hold the two equal).

use burn::tensor::Tensor;

/// The device buffer `[Σ loss·tokens, Σ tokens]` (f32), or nothing on the CPU (flex), where
/// the trainer adds on the host.
pub struct LossSum {
    #[cfg(not(feature = "gpu-tuned"))]
    acc: burn_cubecl::tensor::CubeTensor,
}

#[cfg(not(feature = "gpu-tuned"))]
mod gpu {
    use cubecl::cube;
    use cubecl::prelude::*;

    /// `acc[0] += loss[0] · tokens[0]; acc[1] += tokens[0]` (one thread).
    #[cube(launch)]
    pub(super) fn accumulate(acc: &mut [f32], loss: &[f32], tokens: &[f32]) {
        if ABSOLUTE_POS == 0 {
            acc[0] += loss[0] * tokens[0];
            acc[1] += tokens[0];
        }
    }
}

impl LossSum {
    /// A zeroed sum on `like`'s device; `None` on the CPU (flex) or with burn's fusion.
    pub fn new(like: &Tensor<1>) -> Option<Self> {
        #[cfg(feature = "gpu-tuned")]
        {
            let _ = like;
            None
        }
        #[cfg(not(feature = "gpu-tuned"))]
        {
            let zeros = Tensor::<1>::zeros([2], &like.device()).inner();
            let acc = crate::gpu::launch::cube_of(zeros.into_dispatch()).ok()?;
            Some(Self { acc })
        }
    }

    /// Adds a step's per-token `loss` `[1]` weighted by its `tokens` `[1]` (both on the device,
    /// outside autodiff): one launch, nothing read back.
    pub fn add(&self, loss: Tensor<1>, tokens: Tensor<1>) {
        #[cfg(feature = "gpu-tuned")]
        let _ = (loss, tokens);
        #[cfg(not(feature = "gpu-tuned"))]
        {
            use crate::gpu::launch::cube_of;
            let cube = |t: Tensor<1>| {
                let t = burn_cubecl::kernel::into_contiguous(
                    cube_of(t.into_dispatch()).ok().expect("a GPU tensor"),
                );
                assert_eq!(t.dtype, burn::tensor::DType::F32, "the loss sum adds f32");
                t
            };
            let (loss, tokens) = (cube(loss), cube(tokens));
            let (count, dim) = crate::gpu::launch::launch_dims(&self.acc, 1);
            gpu::accumulate::launch(
                &self.acc.client.clone(),
                count,
                dim,
                self.acc.clone().into_buffer_arg(),
                loss.into_buffer_arg(),
                tokens.into_buffer_arg(),
            );
        }
    }

    /// Reads `(Σ loss·tokens, Σ tokens)` and starts again from zero (a synchronisation).
    pub fn take(&self) -> (f64, f64) {
        #[cfg(feature = "gpu-tuned")]
        {
            (0.0, 0.0)
        }
        #[cfg(not(feature = "gpu-tuned"))]
        {
            let t = Tensor::<1>::from_dispatch(crate::gpu::launch::dispatch_of(self.acc.clone()));
            let v: Vec<f32> = t.into_data().convert::<f32>().try_to_vec::<f32>().expect("two floats");
            let zero: Vec<u8> = [0f32, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect();
            self.acc.client.write(&self.acc.handle, cubecl::bytes::Bytes::from_bytes_vec(zero));
            (v[0] as f64, v[1] as f64)
        }
    }
}

#[cfg(all(test, not(feature = "gpu-tuned")))]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    /// On wgpu (lavapipe where there is no GPU) the device sum equals the host's of the same
    /// f32 values, and reading it starts a new window; on the CPU there is none.
    #[test]
    fn sums_weighted_losses_on_the_device_and_starts_again_when_read() {
        assert!(LossSum::new(&Tensor::<1>::zeros([1], &burn::tensor::Device::flex())).is_none());
        let Some(gpu) = crate::testing::wgpu_or_skip() else { return };
        let one = |v: f32| Tensor::<1>::from_data(TensorData::new(vec![v], [1]), &gpu);
        let sum = LossSum::new(&one(0.0)).expect("a GPU sum");
        let steps = [(2.5f32, 10.0f32), (1.25, 7.0), (3.0, 1.0)];
        for (l, t) in steps {
            sum.add(one(l), one(t));
        }
        let (mut s, mut n) = (0f32, 0f32);
        for (l, t) in steps {
            s += l * t;
            n += t;
        }
        assert_eq!(sum.take(), (s as f64, n as f64));
        sum.add(one(4.0), one(2.0));
        assert_eq!(sum.take(), (8.0, 2.0));
    }
}
