//! The LSTM cell's gate math as two cubecl kernels (wgpu), forward and backward: the GPU
//! counterpart of [`crate::fused_lstm`]'s CPU kernel, with the same equations
//! (Hochreiter & Schmidhuber, 1997; the backward pass as in that module's doc):
//!
//! `c' = σ(f)⊙c + σ(i)⊙tanh(g)`, `h' = σ(o)⊙tanh(c')`
//!
//! On a GPU through wgpu a recurrent step is bound by the host time of each tensor operation
//! (~28 µs on an H100), not by arithmetic: composed from tensor operations the gate math is
//! ~12 operations forward and more backward, per layer and step. Here it is one launch each
//! way, registered with burn's autodiff as one node. Not with burn's fusion (`gpu-tuned`),
//! whose fused-stream tensors this does not take: that build keeps the composed form.
//!
//! # Shapes
//! - gates: `[batch, 4·hidden]`, `c`: `[batch, hidden]` → `[h' | c']`: `[batch, 2·hidden]`

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::{Dispatch, backend_extension, tensor::FloatTensor};
use burn::tensor::{DType, Shape, Tensor};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, cube};

/// The gate math as a burn backend extension (cubecl runtimes without fusion).
#[backend_extension(Cube, Autodiff)]
pub trait GpuLstmGates: burn::backend::Backend {
    /// `[h' | c']` (`[batch, 2·hidden]`) from `gates` (`[batch, 4·hidden]`) and `c`.
    fn gpu_lstm_gates(gates: FloatTensor<Self>, c: FloatTensor<Self>) -> FloatTensor<Self>;
}

#[cube]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + f32::exp(-x))
}

/// One unit's activations `σ(i)`, `σ(f)`, `tanh(g)`, `σ(o)`, and where its gates (`at`) and
/// its `h'` (`out`; `c'` is `hidden` further) sit.
#[derive(CubeType)]
struct Unit {
    i: f32,
    f: f32,
    g: f32,
    o: f32,
    at: usize,
    out: usize,
}

/// Unit `u` = `(row, j)` of a `[batch, hidden]` state.
#[cube]
fn unit(gates: &[f32], u: usize, h: usize) -> Unit {
    let (row, j) = (u / h, u % h);
    let at = row * 4 * h + j;
    Unit {
        i: sigmoid(gates[at]),
        f: sigmoid(gates[at + h]),
        g: f32::tanh(gates[at + 2 * h]),
        o: sigmoid(gates[at + 3 * h]),
        at,
        out: row * 2 * h + j,
    }
}

/// One unit per thread.
#[cube(launch)]
fn gates_forward(gates: &[f32], c: &[f32], out: &mut [f32], hidden: u32) {
    let n = ABSOLUTE_POS;
    if n < c.len() {
        let h = hidden as usize;
        let u = unit(gates, n, h);
        let c2 = u.f * c[n] + u.i * u.g;
        out[u.out] = u.o * f32::tanh(c2);
        out[u.out + h] = c2;
    }
}

/// One unit per thread: `∂gates` and `∂c` from `∂[h' | c']`, the activations recomputed.
#[cube(launch)]
fn gates_backward(gates: &[f32], c: &[f32], grad: &[f32], d_gates: &mut [f32], d_c: &mut [f32], hidden: u32) {
    let n = ABSOLUTE_POS;
    if n < c.len() {
        let h = hidden as usize;
        let u = unit(gates, n, h);
        let c_prev = c[n];
        let t = f32::tanh(u.f * c_prev + u.i * u.g);
        let dh = grad[u.out];
        let dc = grad[u.out + h] + dh * u.o * (1.0 - t * t);
        d_gates[u.at] = dc * u.g * u.i * (1.0 - u.i);
        d_gates[u.at + h] = dc * c_prev * u.f * (1.0 - u.f);
        d_gates[u.at + 2 * h] = dc * u.i * (1.0 - u.g * u.g);
        d_gates[u.at + 3 * h] = dh * t * u.o * (1.0 - u.o);
        d_c[n] = dc * u.f;
    }
}

/// `[batch, hidden]` of `c` (checked against the gates' `[batch, 4·hidden]`).
fn units(gates: &CubeTensor, c: &CubeTensor) -> [usize; 2] {
    let (gs, cs) = (gates.meta.shape(), c.meta.shape());
    assert!(
        gs.num_dims() == 2 && cs.num_dims() == 2 && gs[0] == cs[0] && gs[1] == 4 * cs[1],
        "LSTM gates [B, 4H] and cell [B, H] disagree"
    );
    assert!(gates.dtype == DType::F32 && c.dtype == DType::F32, "the LSTM kernels compute in f32");
    [cs[0], cs[1]]
}

fn empty(like: &CubeTensor, dims: [usize; 2]) -> CubeTensor {
    empty_device_contiguous_dtype(like.client.clone(), like.device.clone(), Shape::from(dims), DType::F32)
}

fn launch_dims(t: &CubeTensor, n: usize) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new(&t.client, n);
    (calculate_cube_count_elemwise(&t.client, n, dim), dim)
}

fn forward(gates: CubeTensor, c: CubeTensor) -> CubeTensor {
    let [batch, h] = units(&gates, &c);
    let (gates, c) = (into_contiguous(gates), into_contiguous(c));
    let out = empty(&c, [batch, 2 * h]);
    let (count, dim) = launch_dims(&c, batch * h);
    gates_forward::launch(
        &c.client.clone(),
        count,
        dim,
        gates.into_buffer_arg(),
        c.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        h as u32,
    );
    out
}

fn backward(gates: CubeTensor, c: CubeTensor, grad: CubeTensor) -> (CubeTensor, CubeTensor) {
    let [batch, h] = units(&gates, &c);
    let (gates, c, grad) = (into_contiguous(gates), into_contiguous(c), into_contiguous(grad));
    let (d_gates, d_c) = (empty(&c, [batch, 4 * h]), empty(&c, [batch, h]));
    let (count, dim) = launch_dims(&c, batch * h);
    gates_backward::launch(
        &c.client.clone(),
        count,
        dim,
        gates.into_buffer_arg(),
        c.into_buffer_arg(),
        grad.into_buffer_arg(),
        d_gates.clone().into_buffer_arg(),
        d_c.clone().into_buffer_arg(),
        h as u32,
    );
    (d_gates, d_c)
}

impl GpuLstmGates for CubeBackend {
    fn gpu_lstm_gates(gates: CubeTensor, c: CubeTensor) -> CubeTensor {
        forward(gates, c)
    }
}

impl<C: CheckpointStrategy> GpuLstmGates for Autodiff<CubeBackend, C> {
    fn gpu_lstm_gates(gates: FloatTensor<Self>, c: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct GatesBackward;

        impl Backward<CubeBackend, 2> for GatesBackward {
            /// The forward inputs; the activations are recomputed (cheaper than storing four).
            type State = (CubeTensor, CubeTensor);

            fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
                let [node_gates, node_c] = ops.parents;
                let grad = grads.consume::<CubeBackend>(&ops.node);
                let (gates, c) = ops.state;
                let (d_gates, d_c) = backward(gates, c, grad);
                if let Some(node) = node_gates {
                    grads.register::<CubeBackend>(node.id, d_gates);
                }
                if let Some(node) = node_c {
                    grads.register::<CubeBackend>(node.id, d_c);
                }
            }
        }

        let (g, g_node) = gates.into_parts();
        let (c, c_node) = c.into_parts();
        match GatesBackward.prepare::<C>([g_node, c_node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let out = forward(g.clone(), c.clone());
                prep.finish((g, c), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(forward(g, c)),
        }
    }
}

/// `(h', c')` of an LSTM step from pre-activation `gates` `[batch, 4·hidden]` and `c`
/// `[batch, hidden]` on a cubecl device (not flex; not with `gpu-tuned`).
pub fn lstm_gates(gates: Tensor<2>, c: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
    let h = c.dims()[1];
    let out = Tensor::<2>::from_dispatch(<Dispatch as GpuLstmGates>::gpu_lstm_gates(
        gates.into_dispatch(),
        c.into_dispatch(),
    ));
    (out.clone().narrow(1, 0, h), out.narrow(1, h, h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::lstm_gates_composed;
    use crate::test_support::max_diff;
    use burn::tensor::{Device, DeviceKind, Distribution};

    /// The kernels equal the composed tensor operations on wgpu (lavapipe where there is no
    /// GPU), forward and backward (gradients of a random linear function of `h'` and `c'` with
    /// respect to the gates and `c`), and without autodiff (decoding).
    #[test]
    fn kernels_equal_the_composed_operations_on_wgpu() {
        let Ok(plain) = std::panic::catch_unwind(|| {
            let d = Device::wgpu(DeviceKind::DefaultDevice);
            let _ = Tensor::<1>::ones([1], &d).into_scalar::<f32>();
            d
        }) else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI must provide a Vulkan adapter (lavapipe)"
            );
            eprintln!("skipped: no wgpu adapter (apt-get install mesa-vulkan-drivers)");
            return;
        };
        let ad = plain.clone().autodiff();
        for (batch, h) in [(3, 5), (4, 83)] {
            let normal =
                |dims: [usize; 2], d: &Device| Tensor::<2>::random(dims, Distribution::Normal(0.0, 2.0), d);
            let (gates, c) = (normal([batch, 4 * h], &plain), normal([batch, h], &plain));
            let (wh, wc) = (normal([batch, h], &plain), normal([batch, h], &plain));
            let (h1, c1) = lstm_gates(gates.clone(), c.clone());
            let (h2, c2) = lstm_gates_composed(gates.clone(), c.clone());
            assert!(max_diff(h1, h2) < 1e-5 && max_diff(c1, c2) < 1e-5, "forward, h = {h}");
            let grads = |f: fn(Tensor<2>, Tensor<2>) -> (Tensor<2>, Tensor<2>)| {
                let on = |t: &Tensor<2>| Tensor::<2>::from_data(t.to_data(), &ad).require_grad();
                let (g, cc) = (on(&gates), on(&c));
                let (h_out, c_out) = f(g.clone(), cc.clone());
                let on_const = |t: &Tensor<2>| Tensor::<2>::from_data(t.to_data(), &ad);
                let loss = (h_out * on_const(&wh) + c_out * on_const(&wc)).sum();
                let gr = loss.backward();
                (g.grad(&gr).unwrap(), cc.grad(&gr).unwrap())
            };
            let ((dg1, dc1), (dg2, dc2)) = (grads(lstm_gates), grads(lstm_gates_composed));
            assert!(max_diff(dg1, dg2) < 1e-5, "d gates, h = {h}");
            assert!(max_diff(dc1, dc2) < 1e-5, "d c, h = {h}");
        }
    }
}
