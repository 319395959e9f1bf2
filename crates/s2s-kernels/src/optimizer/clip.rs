//! Global-norm gradient clipping (Pascanu et al., 2013): if `‖g‖₂ > max_norm` over *all*
//! parameters together, every gradient is scaled by `max_norm / ‖g‖₂`. (burn's
//! `GradientClippingConfig::Norm` clips each tensor on its own, which changes the direction.)
//!
//! On flex the norm, the scaling and the sum of a split step's parts are each one pass over
//! every gradient on every thread ([`crate::optimizer::in_place`]); `--kernels reference`
//! keeps the composed operations ([`crate::optimizer::reference`]). [`crate::ops`] chooses.
//!
//! On a GPU (cubecl without burn's fusion) the sum of squares and the scaling each run one
//! launch for up to 64 parameters, a kernel over a cubecl `Sequence` of the gradients' buffers
//! (fewer where the device binds fewer buffers to a kernel: `max_bindings`), as Adam does
//! ([`crate::optimizer::adam`]). The scaling is in place: each gradient is taken out of
//! `GradientsParams` held alone and contiguous. One launch a parameter for the clip and Adam
//! was 268 of the Transformer's 797 launches a step.
//!
//! On a GPU nothing is read back: one thread computes `‖g‖` and the factor
//! `min(1, max_norm/‖g‖)` in f32, and the scaling kernel, launched whether or not it clips,
//! reads the factor from its buffer; the norm is read only when asked ([`GradientNorm`]). So a step can
//! be captured, and an eager step waits for the device once less.

use burn::tensor::Tensor;

/// The global norm before clipping, as [`clip_global_norm`] left it: known on the CPU, still on
/// the device on a GPU (read only when asked: reading is a synchronisation, which a step that
/// ignores it, or one replayed from a graph, should not pay).
#[derive(Debug, Clone)]
pub enum GradientNorm {
    /// Already read: computed on the host (the CPU, the references).
    Known(f64),
    /// Still on the device, `[1]` (a GPU): not read until [`value`](Self::value) is asked.
    OnDevice(Tensor<1>),
}

impl GradientNorm {
    /// The norm's value (on a GPU, read back).
    pub fn value(&self) -> f64 {
        match self {
            GradientNorm::Known(v) => *v,
            GradientNorm::OnDevice(t) => t.clone().into_scalar::<f32>() as f64,
        }
    }
}

/// The norm on a GPU: composed from tensor operations it is three launches a parameter
/// (square, sum, add to the total), each ~28 µs of host time through wgpu (measured on an H100):
/// ~400 a step for the Transformer's 134 parameters. Here one kernel takes many gradients at
/// once (a cubecl `Sequence` of tensors, as many as the device binds in one kernel) and
/// writes [`PARTIALS`] partial sums of squares for each into its slot of one buffer, and one
/// sum over the buffer gives `‖g‖²`: two launches for the Transformer.
#[cfg(not(feature = "gpu-tuned"))]
pub(crate) mod gpu {
    use crate::gpu::launch::{self as cube_launch, cube_of, dispatch_of};
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::optim::GradientsParams;
    use burn::tensor::{DType, Tensor as BurnTensor};
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::tensor::CubeTensor;
    use cubecl::cube;
    use cubecl::prelude::*;

    /// Partial sums a parameter (each thread sums every `PARTIALS`-th element).
    pub(super) const PARTIALS: usize = 4096;

    /// Thread `i` of each gradient `s` of the sequence: the squares of its elements `i`,
    /// `i + PARTIALS`, … into `partials[(first + s)·PARTIALS + i]`.
    #[cube(launch)]
    fn sum_of_squares(gs: &Sequence<Box<[f32]>>, partials: &mut [f32], first: u32) {
        let i = ABSOLUTE_POS;
        let p = PARTIALS;
        if i < p {
            #[unroll]
            for s in 0..gs.len() {
                let g = gs.index(s);
                let n = g.len();
                let mut acc = 0.0f32;
                for j in 0..(n + p - 1) / p {
                    let k = i + j * p;
                    if k < n {
                        acc += g[k] * g[k];
                    }
                }
                partials[(first as usize + s) * p + i] = acc;
            }
        }
    }

    /// `[grads.len() · PARTIALS]` partial sums of squares, slot `i` for `grads[i]`, that add
    /// up to `Σ ‖gᵢ‖²`; at most `per_launch` gradients a kernel launch (fewer where the device
    /// binds fewer buffers to a kernel).
    fn sums_of_squares(grads: Vec<CubeTensor>, per_launch: usize) -> CubeTensor {
        assert!(!grads.is_empty() && per_launch > 0, "sums of squares: nothing to sum");
        assert!(grads.iter().all(|g| g.dtype == DType::F32), "the norm computes in f32");
        // One buffer a gradient; the kernel unrolls a loop over at most 256.
        let per_launch = per_launch.min(cube_launch::per_launch(&grads[0], 1, 256));
        let grads: Vec<CubeTensor> = grads.into_iter().map(into_contiguous).collect();
        let partials = cube_launch::empty(&grads[0], [grads.len() * PARTIALS]);
        let (count, dim) = cube_launch::launch_dims(&partials, PARTIALS);
        for (c, chunk) in grads.chunks(per_launch).enumerate() {
            sum_of_squares::launch(
                &partials.client.clone(),
                count.clone(),
                dim,
                cube_launch::buffers(chunk),
                partials.clone().into_buffer_arg(),
                (c * per_launch) as u32,
            );
        }
        partials
    }

    /// The gradients as cubecl tensors; `None` once one is not (flex, or a fused stream).
    struct Collect<'a> {
        grads: &'a GradientsParams,
        all: Option<Vec<CubeTensor>>,
    }

    impl ModuleVisitor for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<BurnTensor<D>>) {
            if let Some(g) = self.grads.get::<D>(param.id) {
                let cube = cube_of(g.into_dispatch()).ok();
                self.all = self.all.take().zip(cube).map(|(mut all, t)| {
                    all.push(t);
                    all
                });
            }
        }
    }

    /// `Σ ‖gᵢ‖²` of `grads` through the kernel, at most `per` gradients a launch.
    pub(super) fn squared_norm(grads: Vec<CubeTensor>, per: usize) -> f64 {
        let partials = dispatch_of(sums_of_squares(grads, per));
        BurnTensor::<1>::from_dispatch(partials).sum().into_scalar::<f32>() as f64
    }

    /// Thread `i` scales elements `i`, `i + stride`, … of each gradient in place by
    /// `factor[0]`.
    #[cube(launch)]
    fn scale_in_place(gs: &mut Sequence<Box<[f32]>>, factor: &[f32], stride: u32) {
        let i = ABSOLUTE_POS;
        let stride = stride as usize;
        let factor = factor[0];
        if i < stride {
            #[unroll]
            for s in 0..gs.len() {
                let g = gs.index_mut(s);
                let n = g.len();
                for j in 0..(n + stride - 1) / stride {
                    let e = i + j * stride;
                    if e < n {
                        g[e] *= factor;
                    }
                }
            }
        }
    }

    /// Takes each cubecl gradient out of `grads`, held alone and contiguous (a copy where it
    /// was not), and puts it back: the buffers a kernel may then write in place. Others (flex)
    /// go back as they were.
    struct Exclusive<'a> {
        grads: &'a mut GradientsParams,
        all: Vec<CubeTensor>,
    }

    impl ModuleVisitor for Exclusive<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<BurnTensor<D>>) {
            let Some(g) = self.grads.remove::<D>(param.id) else { return };
            let g = match cube_of(g.into_dispatch()) {
                Ok(t) => {
                    let t = cube_launch::exclusive(t);
                    self.all.push(t.clone());
                    dispatch_of(t)
                }
                Err(other) => other,
            };
            self.grads.register(param.id, BurnTensor::<D>::from_dispatch(g));
        }
    }

    /// One thread: `norm[0] = √sum[0]`, `factor[0] = max_norm / norm` where the norm exceeds
    /// `max_norm > 0`, else 1.
    #[cube(launch)]
    fn clip_factor(sum: &[f32], norm: &mut [f32], factor: &mut [f32], max_norm: f32) {
        if ABSOLUTE_POS == 0 {
            let n = f32::sqrt(sum[0]);
            norm[0] = n;
            factor[0] = select(max_norm > 0.0f32 && n > max_norm, max_norm / n, 1.0f32);
        }
    }

    /// Clips on the device (see [`crate::ops::clip_global_norm`]): the norm `[1]`, or `None` on the
    /// CPU (flex) or without gradients.
    pub(crate) fn clip<M: Module>(
        module: &M,
        grads: &mut GradientsParams,
        max_norm: f32,
    ) -> Option<BurnTensor<1>> {
        let all = collect(module, grads)?;
        let partials = dispatch_of(sums_of_squares(all, usize::MAX));
        let sum =
            cube_of(crate::device::sum_all(BurnTensor::<1>::from_dispatch(partials)).into_dispatch()).ok()?;
        let (norm, factor) = (cube_launch::empty(&sum, [1]), cube_launch::empty(&sum, [1]));
        let (count, dim) = cube_launch::launch_dims(&sum, 1);
        clip_factor::launch(
            &sum.client.clone(),
            count,
            dim,
            sum.into_buffer_arg(),
            norm.clone().into_buffer_arg(),
            factor.clone().into_buffer_arg(),
            max_norm,
        );
        if max_norm > 0.0 {
            scale_by(module, grads, &factor);
        }
        Some(BurnTensor::<1>::from_dispatch(dispatch_of(norm)))
    }

    /// Scales every gradient by `factor` in place, 64 a launch; `false` (nothing scaled) on the
    /// CPU (flex).
    pub(crate) fn scale<M: Module>(module: &M, grads: &mut GradientsParams, factor: f32) -> bool {
        let Some(first) = collect(module, grads).and_then(|all| all.into_iter().next()) else { return false };
        let f = BurnTensor::<1>::from_data(
            burn::tensor::TensorData::new(vec![factor], [1]),
            &first_device(&first),
        );
        let f = cube_of(f.into_dispatch()).ok().expect("a cubecl device's tensor");
        scale_by(module, grads, &f)
    }

    fn first_device(t: &CubeTensor) -> burn::tensor::Device {
        BurnTensor::<1>::from_dispatch(dispatch_of(t.clone())).device()
    }

    /// Scales every gradient in place by `factor[0]` (on the device), 64 a launch.
    fn scale_by<M: Module>(module: &M, grads: &mut GradientsParams, factor: &CubeTensor) -> bool {
        let mut e = Exclusive { grads, all: Vec::new() };
        module.visit(&mut e);
        let Some(first) = e.all.first() else { return false };
        let per = cube_launch::per_launch(first, 1, 64);
        for chunk in e.all.chunks(per) {
            let largest = chunk.iter().map(|t| t.meta.num_elements()).max().unwrap_or(0);
            let (count, dim, stride) = cube_launch::strided(first, largest);
            scale_in_place::launch(
                &first.client.clone(),
                count,
                dim,
                cube_launch::buffers(chunk),
                factor.clone().into_buffer_arg(),
                stride,
            );
        }
        true
    }

    /// `module`'s gradients in `grads` on a cubecl device, or `None` (flex, or no gradients).
    pub(super) fn collect<M: Module>(module: &M, grads: &GradientsParams) -> Option<Vec<CubeTensor>> {
        let mut c = Collect { grads, all: Some(Vec::new()) };
        module.visit(&mut c);
        c.all.filter(|all| !all.is_empty())
    }

    /// The global norm through the kernel, or `None` on the CPU (flex) or without gradients.
    pub(crate) fn global_norm<M: Module>(module: &M, grads: &GradientsParams) -> Option<f64> {
        Some(squared_norm(collect(module, grads)?, usize::MAX).sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::GradientsParams;
    use burn::tensor::{Device, Distribution};

    #[test]
    fn clips_the_global_norm_not_each_tensor() {
        clips_the_global_norm_not_each_tensor_on(Device::flex());
    }

    /// The same on wgpu (lavapipe where there is no GPU), where the norm comes from the
    /// sum-of-squares kernel: it equals the composed norm, for parameters smaller and larger
    /// than the kernel's partial sums, with all four gradients in one launch and spread over
    /// several (3 + 1, and one a launch).
    #[test]
    fn gpu_norm_equals_the_composed_one() {
        let Some(gpu) = crate::testing::wgpu_or_skip() else { return };
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
        let kernel = crate::ops::global_norm(&model, &grads);
        let composed = crate::optimizer::reference::global_norm(&model, &grads);
        assert!(kernel > 0.0 && (kernel - composed).abs() < 1e-5 * composed, "{kernel} vs {composed}");
        #[cfg(not(feature = "gpu-tuned"))]
        for per in [3, 1] {
            let chunked =
                gpu::squared_norm(gpu::collect(&model, &grads).expect("wgpu gradients"), per).sqrt();
            assert!((chunked - composed).abs() < 1e-5 * composed, "{per} a launch: {chunked} vs {composed}");
        }
    }

    fn clips_the_global_norm_not_each_tensor_on(plain: Device) {
        let d = plain.autodiff();
        d.seed(5);
        let lin: Linear = LinearConfig::new(4, 3).init(&d);
        let x: Tensor<2> = Tensor::random([8, 4], Distribution::Normal(0.0, 10.0), &d);
        let loss = lin.forward(x).square().sum();
        let mut grads = GradientsParams::from_grads(loss.backward(), &lin);
        let before = crate::ops::global_norm(&lin, &grads);
        assert!(before > 1.0);
        let w_before = grads.get::<2>(lin.weight.id).unwrap();
        let returned = crate::ops::clip_global_norm(&lin, &mut grads, 1.0).value();
        assert!((returned - before).abs() < 1e-3 * before);
        let after = crate::ops::global_norm(&lin, &grads);
        assert!((after - 1.0).abs() < 1e-4, "{after}");
        // Direction preserved: each tensor scaled by the same factor.
        let w_after = grads.get::<2>(lin.weight.id).unwrap();
        let ratio =
            (w_after / w_before.mul_scalar(1.0 / before)).sub_scalar(1.0).abs().max().into_scalar::<f32>();
        assert!(ratio < 1e-3, "{ratio}");
    }
}
