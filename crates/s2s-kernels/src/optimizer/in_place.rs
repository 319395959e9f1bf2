//! Passes over all of a step's gradients on flex, each once and on every thread: the global
//! norm, the clip's scaling and the sum of a split step's parts.
//!
//! Composed from burn's tensor operations these were a squared copy of every gradient (62 MB
//! of fresh pages a step for the LSTM bench shape's 15.5M parameters) summed by flex's SIMD
//! sum and a scaling: 11 ms of a 0.7–0.9 s LSTM step for the clip (5–7 ms here), and the
//! parts' sum 7–11 ms (5–10 here: it is bound by memory either way; AMX Xeon VM, capped to
//! AVX2). Here:
//!
//! - the **norm** sums each gradient in blocks of [`BLOCK`] elements, sixteen f32 lanes a
//!   block, the lanes and then the blocks added in f64 in a fixed order: the same bits at any
//!   thread count and on every CPU (flex's sum follows the vector width, so its last bits
//!   differed between an AVX2 and an AVX-512 machine);
//! - the **scaling** (`g · f32(factor)`) and the **sum** (`a + b`, parts in order) are
//!   element by element, so they give the bits of burn's `mul_scalar` and `add`, written in
//!   place into a gradient the step holds alone.
//!
//! Any gradient not on flex, or shared, or a view, takes burn's operations (`None`/`Err`
//! below), so the results never depend on which path ran.

use burn::backend::flex::FlexTensor;
use burn::backend::{BackendTensor, DispatchTensor, DispatchTensorKind};
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{DType, Tensor};
use rayon::prelude::*;

/// Elements a block: one rayon task, its f32 partial sums short enough to stay accurate.
const BLOCK: usize = 1 << 12;

/// The f32 flex tensor inside `t`, or `t` back.
fn flex_of<const D: usize>(t: Tensor<D>) -> Result<FlexTensor, Tensor<D>> {
    let DispatchTensor { kind, autodiff } = t.into_dispatch();
    match kind {
        DispatchTensorKind::Flex(BackendTensor::Float(f)) if f.dtype() == DType::F32 => Ok(f),
        kind => Err(Tensor::from_dispatch(DispatchTensor { kind, autodiff })),
    }
}

/// `t`, a flex tensor holding all of its storage alone (contiguous from offset 0), with `f`
/// applied to its elements in place; `Err(t)` untouched otherwise.
fn update<const D: usize>(t: Tensor<D>, f: impl FnOnce(&mut [f32])) -> Result<Tensor<D>, Tensor<D>> {
    let n = t.shape().num_elements();
    let mut flex = flex_of(t)?;
    let whole = flex.layout().contiguous_offsets() == Some((0, n)) && flex.storage::<f32>().len() == n;
    match flex.try_storage_mut::<f32>() {
        Some(xs) if whole => f(xs),
        _ => return Err(Tensor::from_dispatch(flex_dispatch(flex))),
    }
    #[cfg(test)]
    tests::IN_PLACE.with(|n| n.set(n.get() + 1));
    Ok(Tensor::from_dispatch(flex_dispatch(flex)))
}

fn flex_dispatch(f: FlexTensor) -> DispatchTensor {
    DispatchTensor {
        kind: DispatchTensorKind::Flex(BackendTensor::Float(f)),
        autodiff: burn::backend::DispatchAutodiffContext::Disabled,
    }
}

/// `Σ x²` of `xs` in the fixed order of the module doc.
fn sum_of_squares(xs: &[f32]) -> f64 {
    let blocks: Vec<f64> = xs
        .par_chunks(BLOCK)
        .map(|block| {
            let mut lanes = [0f32; 16];
            let mut chunks = block.chunks_exact(16);
            for c in &mut chunks {
                for (l, &x) in lanes.iter_mut().zip(c) {
                    *l += x * x;
                }
            }
            for (l, &x) in lanes.iter_mut().zip(chunks.remainder()) {
                *l += x * x;
            }
            lanes.iter().map(|&l| l as f64).sum::<f64>()
        })
        .collect();
    blocks.iter().sum()
}

struct SquaredNorm<'a> {
    grads: &'a GradientsParams,
    sum: Option<f64>,
}

impl ModuleVisitor for SquaredNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            let part = flex_of(g).ok().map(|f| sum_of_squares(&crate::cpu::flex_data::f32s(&f)));
            self.sum = self.sum.zip(part).map(|(a, b)| a + b);
        }
    }
}

/// `‖g‖₂` over `module`'s parameters; `None` unless every gradient is on flex.
pub(crate) fn global_norm<M: Module>(module: &M, grads: &GradientsParams) -> Option<f64> {
    let mut v = SquaredNorm { grads, sum: Some(0.0) };
    module.visit(&mut v);
    v.sum.map(f64::sqrt)
}

struct Scale<'a> {
    grads: &'a mut GradientsParams,
    factor: f64,
}

impl ModuleVisitor for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.remove::<D>(param.id) {
            // (`mul_scalar` multiplies by the factor as an f32, as here.)
            let f = self.factor as f32;
            let scaled =
                update(g, |xs| xs.par_chunks_mut(BLOCK).for_each(|c| c.iter_mut().for_each(|x| *x *= f)))
                    .unwrap_or_else(|g| g.mul_scalar(self.factor));
            self.grads.register(param.id, scaled);
        }
    }
}

/// Every gradient times `factor`: in place where it can be, else through `mul_scalar`.
pub(crate) fn scale<M: Module>(module: &M, grads: &mut GradientsParams, factor: f64) {
    module.visit(&mut Scale { grads, factor });
}

/// Gradients summed over the parts of a step (or the micro-steps of an accumulated one), in
/// the order they come: burn's `GradientsAccumulator`, adding in place on flex off the
/// references ([`crate::device::in_place_passes`]).
pub struct GradientSum {
    grads: GradientsParams,
    in_place: bool,
}

struct Add<'a> {
    acc: &'a mut GradientsParams,
    new: GradientsParams,
    in_place: bool,
}

impl ModuleVisitor for Add<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let sum = match (self.acc.remove::<D>(param.id), self.new.remove::<D>(param.id)) {
            (Some(acc), Some(new)) if !self.in_place => acc.add(new),
            (Some(acc), Some(new)) => match flex_of(new.clone()) {
                Ok(b) if b.is_contiguous() => {
                    let b = crate::cpu::flex_data::f32s(&b);
                    update(acc, |a| {
                        a.par_chunks_mut(BLOCK)
                            .zip(b.par_chunks(BLOCK))
                            .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, &b)| *a += b))
                    })
                    .unwrap_or_else(|acc| acc.add(new))
                }
                _ => acc.add(new),
            },
            (None, Some(new)) => new,
            (Some(acc), None) => acc,
            (None, None) => return,
        };
        self.acc.register(param.id, sum);
    }
}

impl GradientSum {
    /// No gradient yet.
    pub fn new() -> Self {
        Self { grads: GradientsParams::new(), in_place: crate::device::in_place_passes() }
    }

    /// Adds `grads` (of `module`'s parameters) to the sum.
    pub fn add<M: Module>(&mut self, module: &M, grads: GradientsParams) {
        module.visit(&mut Add { acc: &mut self.grads, new: grads, in_place: self.in_place });
    }

    /// The sum, which starts again from nothing.
    pub fn take(&mut self) -> GradientsParams {
        std::mem::replace(&mut self.grads, GradientsParams::new())
    }
}

impl Default for GradientSum {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::GradientsAccumulator;
    use burn::tensor::{Device, Distribution};

    /// Two layers and the gradients of two different losses of theirs (a weight of 5,000 ×
    /// 3: more than one block; sizes that leave partial lanes and blocks).
    fn model_and_grads() -> ((Linear, Linear), GradientsParams, GradientsParams) {
        let d = Device::flex().autodiff();
        d.seed(7);
        let model: (Linear, Linear) =
            (LinearConfig::new(3, 5001).init(&d), LinearConfig::new(5001, 3).init(&d));
        let grads = |seed: u64| {
            d.seed(seed);
            let x: Tensor<2> = Tensor::random([4, 3], Distribution::Normal(0.0, 1.0), &d);
            let loss = model.1.forward(model.0.forward(x).tanh()).square().sum();
            GradientsParams::from_grads(loss.backward(), &model)
        };
        let (a, b) = (grads(1), grads(2));
        (model, a, b)
    }

    fn values(model: &(Linear, Linear), grads: &GradientsParams) -> Vec<u32> {
        struct Values<'a>(&'a GradientsParams, Vec<u32>);
        impl ModuleVisitor for Values<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let g = self.0.get::<D>(param.id).expect("a gradient for every parameter");
                self.1.extend(g.into_data().try_to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()));
            }
        }
        let mut v = Values(grads, Vec::new());
        model.visit(&mut v);
        v.1
    }

    thread_local! {
        /// Updates made in place on this thread (the tests check that the fast path ran).
        pub(super) static IN_PLACE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn on_threads<R: Send>(n: usize, f: impl FnOnce() -> R + Send) -> R {
        rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap().install(f)
    }

    #[test]
    fn the_norm_is_the_composed_one_with_the_same_bits_on_any_thread_count() {
        let (model, grads, _) = model_and_grads();
        let one = global_norm(&model, &grads).expect("flex gradients");
        let xs: Vec<f32> = values(&model, &grads).into_iter().map(f32::from_bits).collect();
        let (t1, t3) = (on_threads(1, || sum_of_squares(&xs)), on_threads(3, || sum_of_squares(&xs)));
        assert_eq!(t1.to_bits(), t3.to_bits(), "the sum's bits follow the thread count");
        let composed =
            crate::mode::with(crate::mode::Kernels::Reference, || crate::ops::global_norm(&model, &grads));
        assert!(one > 0.0 && (one - composed).abs() < 1e-6 * composed, "{one} vs {composed}");
        // f64 over every square, summed plainly: the blocks' order loses nothing that matters.
        let exact: f64 = xs.iter().map(|&x| (x as f64).powi(2)).sum();
        assert!((one - exact.sqrt()).abs() < 1e-6 * one, "{one} vs {}", exact.sqrt());
    }

    #[test]
    fn scaling_and_summing_in_place_give_burns_bits() {
        let (model, a, b) = model_and_grads();
        let (va, vb) = (values(&model, &a), values(&model, &b));
        // burn's, on copies that share nothing with `a` and `b`.
        let copy = |g: &GradientsParams| values_as_grads(&model, g);
        let mut burns = GradientsAccumulator::<(Linear, Linear)>::new();
        burns.accumulate(&model, copy(&a));
        burns.accumulate(&model, copy(&b));
        let mut burns = burns.grads();
        crate::mode::with(crate::mode::Kernels::Reference, || {
            crate::ops::scale_grads(&model, &mut burns, 0.37)
        });

        let mut ours = GradientSum::new();
        ours.add(&model, a);
        ours.add(&model, b);
        let mut ours = ours.take();
        scale(&model, &mut ours, 0.37);
        // Four parameters, each summed and then scaled in place.
        assert_eq!(IN_PLACE.with(|n| n.get()), 8, "the in-place path ran");
        assert_eq!(values(&model, &ours), values(&model, &burns));
        assert_ne!(values(&model, &ours), va, "the sum is not its first term");
        assert_ne!(va, vb);
    }

    #[test]
    fn a_gradient_held_elsewhere_is_not_written_through() {
        let (model, a, b) = model_and_grads();
        let id = model.0.weight.id;
        let held = a.get::<2>(id).expect("a weight gradient");
        let before = held.to_data().try_to_vec::<f32>().unwrap();
        let mut sum = GradientSum::new();
        sum.add(&model, a);
        sum.add(&model, b);
        let mut sum = sum.take();
        scale(&model, &mut sum, 0.5);
        assert_eq!(held.to_data().try_to_vec::<f32>().unwrap(), before);
        assert_ne!(sum.get::<2>(id).unwrap().to_data().try_to_vec::<f32>().unwrap(), before);
    }

    /// The gradients' values as fresh tensors (sharing no storage), under the same parameter ids.
    fn values_as_grads(model: &(Linear, Linear), g: &GradientsParams) -> GradientsParams {
        let mut out = GradientsParams::new();
        struct Copy<'a>(&'a GradientsParams, &'a mut GradientsParams);
        impl ModuleVisitor for Copy<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let t = self.0.get::<D>(param.id).unwrap();
                let fresh = Tensor::<D>::from_data(t.to_data(), &t.device());
                self.1.register(param.id, fresh);
            }
        }
        model.visit(&mut Copy(g, &mut out));
        out
    }
}
