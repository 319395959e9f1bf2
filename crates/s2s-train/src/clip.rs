//! Global-norm gradient clipping (Pascanu et al., 2013): if `‖g‖₂ > max_norm` over *all*
//! parameters together, every gradient is scaled by `max_norm / ‖g‖₂`. (burn's
//! `GradientClippingConfig::Norm` clips each tensor on its own, which changes the direction.)

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

struct SquaredNorm<'a> {
    grads: &'a GradientsParams,
    sum: Option<Tensor<1>>,
}

impl ModuleVisitor for SquaredNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            let s = g.square().sum();
            self.sum = Some(match self.sum.take() {
                Some(acc) => acc + s,
                None => s,
            });
        }
    }
}

struct Scale<'a> {
    grads: &'a mut GradientsParams,
    factor: f64,
}

impl ModuleVisitor for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.remove::<D>(param.id) {
            self.grads.register(param.id, g.mul_scalar(self.factor));
        }
    }
}

/// The global L2 norm of `grads` over `module`'s parameters.
pub fn global_norm<M: Module>(module: &M, grads: &GradientsParams) -> f64 {
    #[cfg(not(feature = "gpu-tuned"))]
    if let Some(norm) = gpu::global_norm(module, grads) {
        return norm;
    }
    let mut v = SquaredNorm { grads, sum: None };
    module.visit(&mut v);
    v.sum.map(|s| (s.into_scalar::<f32>() as f64).sqrt()).unwrap_or(0.0)
}

/// Scales every gradient by `factor`.
pub fn scale_grads<M: Module>(module: &M, grads: &mut GradientsParams, factor: f64) {
    module.visit(&mut Scale { grads, factor });
}

/// Clips to `max_norm` (≤ 0: no clipping); returns the norm before clipping.
pub fn clip_global_norm<M: Module>(module: &M, grads: &mut GradientsParams, max_norm: f64) -> f64 {
    let norm = global_norm(module, grads);
    if max_norm > 0.0 && norm > max_norm {
        scale_grads(module, grads, max_norm / norm);
    }
    norm
}

/// The norm on a GPU: composed from tensor operations it is three launches a parameter
/// (square, sum, add to the total), each ~28 µs of host time through wgpu (H100, session 16):
/// ~400 a step for the Transformer's 134 parameters. Here one kernel a parameter writes
/// [`PARTIALS`] partial sums of squares into that parameter's slot of one buffer, and one
/// sum over the buffer gives `‖g‖²`.
#[cfg(not(feature = "gpu-tuned"))]
mod gpu {
    use burn::backend::{Dispatch, backend_extension, tensor::FloatTensor};
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::optim::GradientsParams;
    use burn::tensor::{DType, Tensor};
    use burn_cubecl::CubeBackend;
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::tensor::CubeTensor;
    use cubecl::cube;
    use cubecl::prelude::*;

    /// Partial sums a parameter (each thread sums every `PARTIALS`-th element).
    pub(super) const PARTIALS: usize = 4096;

    /// Sums of squares as a burn backend extension (cubecl runtimes without fusion).
    #[backend_extension(Cube)]
    pub trait SumOfSquares: burn::backend::Backend {
        /// `partials` with slot `slot` (`PARTIALS` entries) holding partial sums of
        /// `grad`'s squares that add up to `Σ grad²`; written in place.
        fn sum_of_squares_into(
            partials: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            slot: usize,
        ) -> FloatTensor<Self>;
    }

    #[cube(launch)]
    fn sum_of_squares(g: &[f32], partials: &mut [f32], slot: u32) {
        let i = ABSOLUTE_POS;
        let p = PARTIALS;
        if i < p {
            let n = g.len();
            let mut s = 0.0f32;
            for j in 0..(n + p - 1) / p {
                let k = i + j * p;
                if k < n {
                    s += g[k] * g[k];
                }
            }
            partials[slot as usize * p + i] = s;
        }
    }

    impl SumOfSquares for CubeBackend {
        fn sum_of_squares_into(partials: CubeTensor, grad: CubeTensor, slot: usize) -> CubeTensor {
            assert!(partials.dtype == DType::F32 && grad.dtype == DType::F32, "the norm computes in f32");
            assert!(
                (slot + 1) * PARTIALS <= partials.meta.num_elements(),
                "partials: slot {slot} out of range"
            );
            let partials = into_contiguous(partials);
            let partials = if partials.can_mut() && partials.is_contiguous_buffer() {
                partials
            } else {
                partials.copy()
            };
            let grad = into_contiguous(grad);
            let (count, dim) = s2s_models::cube_launch::launch_dims(&grad, PARTIALS);
            sum_of_squares::launch(
                &grad.client.clone(),
                count,
                dim,
                grad.into_buffer_arg(),
                partials.clone().into_buffer_arg(),
                slot as u32,
            );
            partials
        }
    }

    struct Collect<'a> {
        grads: &'a GradientsParams,
        partials: Option<Tensor<1>>,
        slots: usize,
        next: usize,
    }

    impl ModuleVisitor for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let Some(g) = self.grads.get::<D>(param.id) else { return };
            let partials =
                self.partials.take().unwrap_or_else(|| Tensor::empty([self.slots * PARTIALS], &g.device()));
            self.partials = Some(Tensor::from_dispatch(<Dispatch as SumOfSquares>::sum_of_squares_into(
                partials.into_dispatch(),
                g.into_dispatch(),
                self.next,
            )));
            self.next += 1;
        }
    }

    struct Count<'a>(&'a GradientsParams, usize, bool);

    impl ModuleVisitor for Count<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.0.get::<D>(param.id) {
                self.1 += 1;
                self.2 |= s2s_models::flex_data::is_flex(&g.device());
            }
        }
    }

    /// The global norm through the kernel, or `None` on the CPU (flex) or without gradients.
    pub(super) fn global_norm<M: Module>(module: &M, grads: &GradientsParams) -> Option<f64> {
        let mut count = Count(grads, 0, false);
        module.visit(&mut count);
        if count.1 == 0 || count.2 {
            return None;
        }
        let mut c = Collect { grads, partials: None, slots: count.1, next: 0 };
        module.visit(&mut c);
        let total = c.partials?.sum().into_scalar::<f32>() as f64;
        Some(total.sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::{Device, Distribution};

    #[test]
    fn clips_the_global_norm_not_each_tensor() {
        clips_the_global_norm_not_each_tensor_on(Device::flex());
    }

    /// The same on wgpu (lavapipe where there is no GPU), where the norm comes from the
    /// sum-of-squares kernel: it equals the composed norm, for parameters smaller and larger
    /// than the kernel's partial sums.
    #[test]
    fn gpu_norm_equals_the_composed_one() {
        let Some(gpu) = s2s_models::testing::wgpu_or_skip() else { return };
        clips_the_global_norm_not_each_tensor_on(gpu.clone());
        let d = gpu.autodiff();
        d.seed(7);
        // 3·5000 + 5000 weights (more than the kernel's partial sums) and 5 + 3 biases.
        let (a, b): (Linear, Linear) =
            (LinearConfig::new(3, 5000).init(&d), LinearConfig::new(5000, 3).init(&d));
        let x: Tensor<2> = Tensor::random([4, 3], Distribution::Normal(0.0, 1.0), &d);
        let loss = b.forward(a.forward(x)).square().sum();
        let grads = GradientsParams::from_grads(loss.backward(), &(a.clone(), b.clone()));
        let model = (a, b);
        let kernel = global_norm(&model, &grads);
        let mut composed = SquaredNorm { grads: &grads, sum: None };
        model.visit(&mut composed);
        let composed = (composed.sum.expect("gradients").into_scalar::<f32>() as f64).sqrt();
        assert!(kernel > 0.0 && (kernel - composed).abs() < 1e-5 * composed, "{kernel} vs {composed}");
    }

    fn clips_the_global_norm_not_each_tensor_on(plain: Device) {
        let d = plain.autodiff();
        d.seed(5);
        let lin: Linear = LinearConfig::new(4, 3).init(&d);
        let x: Tensor<2> = Tensor::random([8, 4], Distribution::Normal(0.0, 10.0), &d);
        let loss = lin.forward(x).square().sum();
        let mut grads = GradientsParams::from_grads(loss.backward(), &lin);
        let before = global_norm(&lin, &grads);
        assert!(before > 1.0);
        let w_before = grads.get::<2>(lin.weight.id).unwrap();
        let returned = clip_global_norm(&lin, &mut grads, 1.0);
        assert!((returned - before).abs() < 1e-3 * before);
        let after = global_norm(&lin, &grads);
        assert!((after - 1.0).abs() < 1e-4, "{after}");
        // Direction preserved: each tensor scaled by the same factor.
        let w_after = grads.get::<2>(lin.weight.id).unwrap();
        let ratio =
            (w_after / w_before.mul_scalar(1.0 / before)).sub_scalar(1.0).abs().max().into_scalar::<f32>();
        assert!(ratio < 1e-3, "{ratio}");
    }
}
