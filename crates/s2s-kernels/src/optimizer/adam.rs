//! Adam (Kingma & Ba, 2015, Algorithm 1) as one pass over each parameter.
//!
//! With gradient `g` (plus `λ·θ` under L2 weight decay), step `t`, rate `α`:
//!
//! `m ← β₁·m + (1 − β₁)·g`, `v ← β₂·v + (1 − β₂)·g²`,
//! `θ ← θ − α · m·c / (√v + ε·√(1 − β₂ᵗ))` with `c = √(1 − β₂ᵗ) / (1 − β₁ᵗ)`
//!
//! — burn's `Adam` (the bias corrections folded into `c` and `ε`), computed here in the same
//! order, operation by operation, so the result is bit for bit burn's (tested). burn composes
//! it from thirteen tensor operations, each a pass over the parameter and most a fresh
//! buffer: 59–69 ms a step on the 11.7M and 15.5M parameters of the benchmark shapes. On flex
//! this kernel reads `θ`, `g`, `m`, `v` once and writes `θ`, `m`, `v` in place when it holds
//! them alone. On cubecl runtimes (wgpu) it is one kernel launch per parameter
//! ([`cube_adam`]) instead of thirteen: a GPU step there is bound by launches, not by bytes
//! (burn's Adam took 36.8 ms of the Transformer's ~100 ms step on an H100, one kernel a
//! parameter 4.2 ms); batched ([`FusedAdam::batched`], stepped through [`step`]) one launch
//! serves up to 64 parameters,
//! a kernel over a cubecl `Sequence` of their buffers. With burn's fusion
//! on (`gpu-tuned`) burn fuses its own Adam and that one runs. The state is burn's
//! `AdamState`, so checkpoints keep their format.
//!
//! Batching on a GPU: the `Sequence` is `Sequence<Box<[f32]>>`, unrolled in the kernel, and a
//! launch takes fewer than 64 parameters where the device binds fewer buffers to a kernel
//! (`max_bindings`); the clip's sum of squares and scaling batch the same way
//! ([`crate::optimizer::clip`]). burn's `ModuleOptimizer` calls the optimizer one parameter
//! at a time, so [`FusedAdam::batched`] queues each update (the parameter and moments made
//! exclusive: the kernel writes them in place) and [`step`] runs burn's step and then the
//! queue; the trainer and the bench call it. A plain `FusedAdam` still launches at once, so
//! code that steps burn's optimizer directly never sees a parameter before its update. burn's
//! `backend_extension` does not route `Vec` arguments, so these functions take the cubecl
//! tensors out of burn's dispatch tensors themselves (`DispatchTensorKind::Cube`). Tested
//! against the per-parameter kernels with 7 and 64 a launch.

use crate::cpu::flex_data::f32s;
use burn::backend::flex::FlexTensor;
use burn::backend::{Dispatch, Flex, backend_extension, tensor::FloatTensor};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::{Adam, AdamConfig, AdamState, AdaptiveMomentumState, LearningRate, Optimizer};
use burn::tensor::{Device, Tensor, TensorData};
use rayon::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The Adam update as a burn backend extension (flex, and cubecl without fusion; see the
/// module doc).
#[backend_extension(Flex, Cube: cfg(not(feature = "gpu-tuned")))]
pub trait AdamStep: burn::backend::Backend {
    /// `(θ', m', v')` after one step with coefficients `k`
    /// (`[β₁, β₂, ε·√(1 − β₂ᵗ), c, α, λ]`).
    fn adam_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        k: [f32; 6],
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);
}

impl AdamStep for Flex {
    fn adam_step(
        param: FlexTensor,
        grad: FlexTensor,
        m: FlexTensor,
        v: FlexTensor,
        k: [f32; 6],
    ) -> (FlexTensor, FlexTensor, FlexTensor) {
        let [beta_1, beta_2, eps, c, lr, decay] = k;
        let (mut param, mut m, mut v) = (owned(param), owned(m), owned(v));
        let g = f32s(&grad);
        const CHUNK: usize = 1 << 14;
        let (p, ms, vs) = (param.storage_mut::<f32>(), m.storage_mut::<f32>(), v.storage_mut::<f32>());
        assert!(
            p.len() == g.len() && ms.len() == g.len() && vs.len() == g.len(),
            "adam_step: shapes disagree"
        );
        p.par_chunks_mut(CHUNK)
            .zip(ms.par_chunks_mut(CHUNK))
            .zip(vs.par_chunks_mut(CHUNK))
            .zip(g.par_chunks(CHUNK))
            .for_each(|(((p, m), v), g)| {
                crate::cpu::fastmath::wide(
                    #[inline(always)]
                    || {
                        for (((p, m), v), &g) in p.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(g) {
                            // The order of burn's tensor operations (see the module doc).
                            let g = if decay != 0.0 { *p * decay + g } else { g };
                            *m = *m * beta_1 + g * (1.0 - beta_1);
                            *v = *v * beta_2 + g * g * (1.0 - beta_2);
                            *p -= (*m * c / (v.sqrt() + eps)) * lr;
                        }
                    },
                )
            });
        (param, m, v)
    }
}

/// The same update as cubecl kernels, in place: one launch a parameter, or, batched, one for
/// many (see the module doc).
#[cfg(not(feature = "gpu-tuned"))]
mod cube_adam {
    use burn::tensor::DType;
    use burn_cubecl::CubeBackend;
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::tensor::CubeTensor;
    use cubecl::cube;
    use cubecl::prelude::*;

    use crate::gpu::launch::{self as cube_launch, exclusive};

    use super::AdamStep;

    /// Adam over a sequence of parameters in one launch (as many as the device binds to a
    /// kernel): thread `i` updates elements `i`, `i + stride`, … of each, in burn's
    /// operation order, as the flex kernel does. The coefficients are the arguments, or with
    /// `from_buffer` the six of `coeffs` (a captured step's, [`crate::gpu::step_scalars`]).
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    fn adam_many(
        ps: &mut Sequence<Box<[f32]>>,
        ms: &mut Sequence<Box<[f32]>>,
        vs: &mut Sequence<Box<[f32]>>,
        gs: &Sequence<Box<[f32]>>,
        coeffs: &[f32],
        from_buffer: u32,
        beta_1: f32,
        beta_2: f32,
        eps: f32,
        c: f32,
        lr: f32,
        decay: f32,
        stride: u32,
    ) {
        let i = ABSOLUTE_POS;
        let stride = stride as usize;
        let mut b1 = beta_1;
        let mut b2 = beta_2;
        let mut ep = eps;
        let mut cc = c;
        let mut rate = lr;
        let mut wd = decay;
        if from_buffer != 0 {
            b1 = coeffs[0];
            b2 = coeffs[1];
            ep = coeffs[2];
            cc = coeffs[3];
            rate = coeffs[4];
            wd = coeffs[5];
        }
        if i < stride {
            #[unroll]
            for s in 0..gs.len() {
                let g = gs.index(s);
                let p = ps.index_mut(s);
                let m = ms.index_mut(s);
                let v = vs.index_mut(s);
                let n = g.len();
                for j in 0..(n + stride - 1) / stride {
                    let e = i + j * stride;
                    if e < n {
                        let mut gi = g[e];
                        if wd != 0.0 {
                            gi = p[e] * wd + gi;
                        }
                        let mi = m[e] * b1 + gi * (1.0 - b1);
                        let vi = v[e] * b2 + gi * gi * (1.0 - b2);
                        m[e] = mi;
                        v[e] = vi;
                        p[e] -= (mi * cc / (f32::sqrt(vi) + ep)) * rate;
                    }
                }
            }
        }
    }

    /// One parameter's update: `θ`, `m`, `v` (written in place), `g` and the coefficients.
    type Update = (CubeTensor, CubeTensor, CubeTensor, CubeTensor, [f32; 6]);

    thread_local! {
        /// Updates queued by a batched optimizer, waiting for [`flush`].
        static PENDING: std::cell::RefCell<Vec<Update>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    /// `θ`, `m`, `v` made ready for an in-place update (each held alone, contiguous), with `g`
    /// contiguous.
    fn prepare(param: CubeTensor, grad: CubeTensor, m: CubeTensor, v: CubeTensor, k: [f32; 6]) -> Update {
        assert!([&param, &grad, &m, &v].iter().all(|t| t.dtype == DType::F32), "adam_step computes in f32");
        // A captured step replays against the buffers it recorded: a parameter or moment copied
        // here would be updated in the copy, and every replay would start from the original.
        assert!(
            !crate::gpu::step_scalars::in_place_required()
                || [&param, &m, &v].iter().all(|t| t.can_mut() && t.is_contiguous()),
            "adam_step while a step is recorded or replayed: a parameter or moment is shared or \
             strided, so a replayed step would not update it in place"
        );
        let (param, m, v, grad) = (exclusive(param), exclusive(m), exclusive(v), into_contiguous(grad));
        let n = param.meta.num_elements();
        assert!([&grad, &m, &v].iter().all(|t| t.meta.num_elements() == n), "adam_step: shapes disagree");
        (param, m, v, grad, k)
    }

    /// One launch over `group`, whose updates share the coefficients `k`.
    fn launch(group: &[Update], k: [f32; 6]) {
        let largest = group.iter().map(|t| t.0.meta.num_elements()).max().unwrap_or(0);
        let (count, dim, stride) = cube_launch::strided(&group[0].0, largest);
        let arg = |f: fn(&Update) -> &CubeTensor| cube_launch::buffers(group.iter().map(f));
        let [beta_1, beta_2, eps, c, lr, decay] = k;
        let recording = crate::gpu::step_scalars::recording();
        adam_many::launch(
            &group[0].0.client.clone(),
            count,
            dim,
            arg(|t| &t.0),
            arg(|t| &t.1),
            arg(|t| &t.2),
            arg(|t| &t.3),
            crate::gpu::step_scalars::adam(&group[0].0).into_buffer_arg(),
            recording as u32,
            beta_1,
            beta_2,
            eps,
            c,
            lr,
            decay,
            stride,
        );
    }

    /// Readies the update (see [`prepare`]) and queues it for [`flush`]; returns the tensors
    /// the update will write.
    pub(super) fn queue(
        param: CubeTensor,
        grad: CubeTensor,
        m: CubeTensor,
        v: CubeTensor,
        k: [f32; 6],
    ) -> (CubeTensor, CubeTensor, CubeTensor) {
        let update = prepare(param, grad, m, v, k);
        let out = (update.0.clone(), update.1.clone(), update.2.clone());
        PENDING.with(|p| p.borrow_mut().push(update));
        out
    }

    /// Runs the queued updates: one launch for each run of parameters with the same
    /// coefficients, up to the device's binding limit and `cap` parameters.
    pub(super) fn flush(cap: usize) {
        let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
        let Some(first) = pending.first() else { return };
        let per = cube_launch::per_launch(&first.0, 4, cap);
        let mut start = 0;
        while start < pending.len() {
            let k = pending[start].4;
            let end = (start..pending.len())
                .find(|&i| pending[i].4 != k || i - start == per)
                .unwrap_or(pending.len());
            launch(&pending[start..end], k);
            start = end;
        }
    }

    impl AdamStep for CubeBackend {
        fn adam_step(
            param: CubeTensor,
            grad: CubeTensor,
            m: CubeTensor,
            v: CubeTensor,
            k: [f32; 6],
        ) -> (CubeTensor, CubeTensor, CubeTensor) {
            let update = prepare(param, grad, m, v, k);
            launch(std::slice::from_ref(&update), k);
            (update.0, update.1, update.2)
        }
    }
}

/// `t` as a contiguous tensor holding its storage alone, from offset 0 (itself when it
/// already is one, else a copy), so the kernel can write it in place.
fn owned(t: FlexTensor) -> FlexTensor {
    let n = t.layout().shape().num_elements();
    let whole = t.as_slice::<f32>().is_some_and(|s| s.len() == n) && t.storage::<f32>().len() == n;
    if whole && t.is_unique() {
        return t;
    }
    let shape = t.layout().shape().clone();
    FlexTensor::from_data(TensorData::new(f32s(&t).into_owned(), shape))
}

/// burn's `Adam`, one pass per parameter on flex (see the module doc).
#[derive(Clone)]
pub struct FusedAdam {
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
    weight_decay: f32,
    burn: Adam,
    /// On a GPU, queue each parameter's update for one launch over many ([`step`]).
    #[cfg_attr(feature = "gpu-tuned", allow(dead_code))]
    batched: bool,
    /// The step count the owner keeps ([`with_clock`](Self::with_clock)), read instead of each
    /// parameter state's own.
    clock: Option<Arc<AtomicUsize>>,
}

impl FusedAdam {
    /// Adam with `β₁`, `β₂`, `ε` and L2 weight decay `λ` (0: none), like
    /// `AdamConfig::new().with_beta_1(β₁)…`; the trainer clips the global norm itself.
    pub fn new(beta_1: f32, beta_2: f32, epsilon: f32, weight_decay: f32) -> Self {
        let burn = AdamConfig::new()
            .with_beta_1(beta_1)
            .with_beta_2(beta_2)
            .with_epsilon(epsilon)
            .with_weight_decay((weight_decay > 0.0).then(|| WeightDecayConfig::new(weight_decay)))
            .build();
        Self { beta_1, beta_2, epsilon, weight_decay, burn, batched: false, clock: None }
    }

    /// The kernel's coefficients at step `time` (from 1) with rate `lr`:
    /// `[β₁, β₂, ε·√(1 − β₂ᵗ), √(1 − β₂ᵗ)/(1 − β₁ᵗ), lr, λ]`, what a captured step writes
    /// before each replay ([`crate::gpu::step_scalars::write_adam`]).
    pub fn coefficients(&self, time: usize, lr: LearningRate) -> [f32; 6] {
        let bias_correction2_sqrt = (1.0 - self.beta_2.powi(time as i32)).sqrt();
        let c = bias_correction2_sqrt / (1.0 - self.beta_1.powi(time as i32));
        [self.beta_1, self.beta_2, self.epsilon * bias_correction2_sqrt, c, lr as f32, self.weight_decay]
    }

    /// This Adam with its GPU updates queued and run as one launch over many parameters
    /// (cubecl without fusion; elsewhere nothing changes). A module optimizer built from it
    /// must be stepped through [`step`], which runs the queue: until then the parameters it
    /// returned are not yet updated.
    pub fn batched(self) -> Self {
        Self { batched: true, ..self }
    }

    /// This Adam with its step count `t` read from `clock` (set by the owner before each step)
    /// instead of counted in each parameter's state. A captured step replayed updates the
    /// moments in place but leaves the host-side states as they were recorded, so the trainer
    /// — whose step count a checkpoint saves — is the one clock: eager steps between replays
    /// and a resumed run use the right bias corrections. The states still record the time they
    /// were last stepped eagerly with (the fused kernels' path; burn's own path, taken for
    /// the reference kernels, counts as before).
    pub fn with_clock(self, clock: Arc<AtomicUsize>) -> Self {
        Self { clock: Some(clock), ..self }
    }
}

/// `optim.step(lr, module, grads)`, then the GPU updates a [`FusedAdam::batched`] optimizer
/// queued, at most 64 parameters a launch (the kernel unrolls a loop over them): what the
/// trainer and the bench call.
pub fn step<M: burn::module::Module>(
    optim: &mut burn::optim::ModuleOptimizer,
    lr: LearningRate,
    module: M,
    grads: burn::optim::GradientsParams,
) -> M {
    step_with_cap(optim, lr, module, grads, 64)
}

/// [`step`] with at most `cap` parameters a launch (tests spread a model over several).
#[doc(hidden)]
pub fn step_with_cap<M: burn::module::Module>(
    optim: &mut burn::optim::ModuleOptimizer,
    lr: LearningRate,
    module: M,
    grads: burn::optim::GradientsParams,
    cap: usize,
) -> M {
    let module = optim.step(lr, module, grads);
    #[cfg(not(feature = "gpu-tuned"))]
    cube_adam::flush(cap);
    #[cfg(feature = "gpu-tuned")]
    let _ = cap;
    module
}

impl Optimizer for FusedAdam {
    type State<const D: usize> = AdamState<D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
        let route = crate::device::adam_route(&tensor.device(), self.batched);
        if matches!(route, crate::device::AdamRoute::Burn) || tensor.is_require_grad() {
            return self.burn.step(lr, tensor, grad, state);
        }
        let (time, m, v) = match state {
            Some(s) => (s.momentum.time + 1, s.momentum.moment_1, s.momentum.moment_2),
            None => (1, tensor.zeros_like(), tensor.zeros_like()),
        };
        let time = self.clock.as_ref().map_or(time, |c| c.load(Ordering::Relaxed));
        let k = self.coefficients(time, lr);
        #[cfg(not(feature = "gpu-tuned"))]
        if matches!(route, crate::device::AdamRoute::Batched) {
            use crate::gpu::launch::{cube_of, dispatch_of};
            let cube = |t: Tensor<D>| {
                cube_of(t.into_dispatch()).unwrap_or_else(|_| {
                    unreachable!("a GPU parameter off flex, without fusion, is a cubecl tensor")
                })
            };
            let back = |t| Tensor::<D>::from_dispatch(dispatch_of(t));
            let (p, m, v) = cube_adam::queue(cube(tensor), cube(grad), cube(m), cube(v), k);
            let momentum = AdaptiveMomentumState::new(time, back(m), back(v));
            return (back(p), Some(AdamState::new(momentum)));
        }
        let (p, m, v) = <Dispatch as AdamStep>::adam_step(
            tensor.into_dispatch(),
            grad.into_dispatch(),
            m.into_dispatch(),
            v.into_dispatch(),
            k,
        );
        let momentum = AdaptiveMomentumState::new(time, Tensor::from_dispatch(m), Tensor::from_dispatch(v));
        (Tensor::from_dispatch(p), Some(AdamState::new(momentum)))
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &Device) -> Self::State<D> {
        <Adam as Optimizer>::to_device(state, device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::{GradientsParams, ModuleOptimizer};
    use burn::tensor::Distribution;

    fn weights(m: &Linear) -> Vec<f32> {
        let mut w: Vec<f32> = m.weight.val().into_data().try_to_vec::<f32>().unwrap();
        w.extend(m.bias.as_ref().unwrap().val().into_data().try_to_vec::<f32>().unwrap());
        w
    }

    /// Five steps, with and without weight decay, give bit for bit burn's `Adam`: the
    /// parameters after every step and the moments the optimizer would save.
    #[test]
    fn equals_burns_adam_bit_for_bit() {
        let d = Device::flex().autodiff();
        for decay in [0.0, 0.01] {
            d.seed(5);
            let start = LinearConfig::new(37, 300).init(&d);
            let burn_cfg = AdamConfig::new()
                .with_beta_1(0.9)
                .with_beta_2(0.98)
                .with_epsilon(1e-9)
                .with_weight_decay((decay > 0.0).then(|| WeightDecayConfig::new(decay)));
            let mut ours = ModuleOptimizer::from(FusedAdam::new(0.9, 0.98, 1e-9, decay));
            let mut theirs = burn_cfg.init();
            let (mut a, mut b) = (start.clone(), start);
            for step in 0..5 {
                let x = Tensor::<2>::random([8, 37], Distribution::Normal(0.0, 1.0), &d);
                let grads = |m: &Linear| {
                    let loss = m.forward(x.clone()).powf_scalar(2.0).mean();
                    GradientsParams::from_grads(loss.backward(), m)
                };
                let lr = 1e-2 / (step + 1) as f64;
                a = ours.step(lr, a.clone(), grads(&a));
                b = theirs.step(lr, b.clone(), grads(&b));
                assert_eq!(weights(&a), weights(&b), "step {step}, decay {decay}");
            }
            // Each optimizer's saved state resumes under the other: one more step from each
            // file, each model, gives the same parameters.
            let dir = std::env::temp_dir().join(format!("s2s-fused-adam-{}-{decay}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            ours.save(dir.join("ours.bpk")).unwrap();
            theirs.save(dir.join("theirs.bpk")).unwrap();
            let mut ours_from_burn = ModuleOptimizer::from(FusedAdam::new(0.9, 0.98, 1e-9, decay))
                .load(dir.join("theirs.bpk"))
                .unwrap();
            let mut burn_from_ours = burn_cfg.init().load(dir.join("ours.bpk")).unwrap();
            let x = Tensor::<2>::random([8, 37], Distribution::Normal(0.0, 1.0), &d);
            let grads = |m: &Linear| GradientsParams::from_grads(m.forward(x.clone()).sum().backward(), m);
            let next = [
                ours.step(1e-3, a.clone(), grads(&a)),
                theirs.step(1e-3, b.clone(), grads(&b)),
                ours_from_burn.step(1e-3, a.clone(), grads(&a)),
                burn_from_ours.step(1e-3, b.clone(), grads(&b)),
            ];
            for (i, m) in next.iter().enumerate().skip(1) {
                assert!(weights(m) == weights(&next[0]), "resumed step {i}, decay {decay}");
            }
            std::fs::remove_dir_all(&dir).ok();
        }
    }
}
