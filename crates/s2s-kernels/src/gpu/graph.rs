//! A step captured once as a graph of launches and replayed (cubecl's graphs; on wgpu a
//! software graph: pipelines, bindings, uniforms and bind groups resolved at capture, each
//! replay only re-encodes the dispatches; `docs/decisions.md`, "Captured steps").
//!
//! burn's own `burn::tensor::capture` refuses an autodiff device (replaying would skip the
//! tape), but a training step needs no tape after it has run: what its backward launches is
//! recorded with the rest. So the capture here is opened on the device's cubecl client itself,
//! around a whole eager step on the autodiff device. What the step must respect (cubecl's
//! rules for the capture window):
//! - no host → device write and no read-back inside it: inputs are written into stable buffers
//!   before each replay, results read after;
//! - no fresh allocation: a warm-up step after [`Recorder::prepare`] fills the pools;
//! - scalars are frozen: what changes between steps is read from a buffer
//!   ([`crate::gpu::step_scalars`]);
//! - every buffer it reads or writes stays alive and in place while the graph lives: the
//!   parameters and Adam's moments are updated in place.
//!
//! Constant tensors (positions, the causal mask) are uploaded once per device
//! (`ops::constant`), since a recording may not write host data. A replay equals the eager
//! step to the bit because a GPU step is deterministic: whole-tensor sums (the loss, the
//! clip's norm) go through `ops::sum_all`, a reduction along one axis, since burn's `sum` adds
//! its workgroups' partial sums with atomics in whatever order they finish, and Adam turns
//! those ulps into full-size steps of weights the loss hardly depends on. A recording can need
//! more pool room than its warm-up did (not understood; seen for a beam link's
//! log-probabilities): `grow_largest_pool` lets the caller grow the pool and record again.

use burn::tensor::{Device, Tensor};
use burn_cubecl::tensor::CubeTensor;
use cubecl::client::{Client, Graph};

use crate::gpu::step_scalars;

/// What went wrong capturing or replaying.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// The device is the CPU backend (flex), which launches no kernels.
    #[error("capture needs a GPU device (wgpu); the CPU backend launches no kernels")]
    NotCube,
    /// cubecl refused a step of the capture or the replay.
    #[error("graph {what}: {reason}")]
    Refused {
        /// What was being done.
        what: &'static str,
        /// cubecl's words.
        reason: String,
    },
}

fn refused(what: &'static str) -> impl Fn(cubecl::server::ServerError) -> GraphError {
    move |e| GraphError::Refused { what, reason: e.to_string() }
}

/// The compiler `device`'s kernels go through (cubecl's runtime name: `wgpu<spirv>` on a
/// Vulkan adapter that supports cubecl's SPIR-V compiler, `wgpu<wgsl>` otherwise), or `None`
/// on the CPU backend.
pub fn compiler(device: &Device) -> Option<&'static str> {
    #[cfg(feature = "gpu-tuned")]
    {
        let _ = device;
        None
    }
    #[cfg(not(feature = "gpu-tuned"))]
    crate::gpu::launch::cube_of(Tensor::<1>::zeros([1], device).into_dispatch()).ok().map(|t| t.client.name())
}

/// A capture under way on the calling thread's stream: prepared, waiting for its warm-up
/// step, then [`Recorder::record`].
pub struct Recorder {
    client: Client,
    like: CubeTensor,
    /// The stream's pool layout when prepared ([`pools`]).
    pools: Vec<u64>,
}

/// The calling stream's dynamic pools, by the largest allocation each served. cubecl sizes a
/// pool's pages to the largest allocation so far; one larger opens a new pool and retires
/// the old ones, which then serve nothing — so a warm-up step that grew them leaves less room
/// than it used, and a recording (which may not add pages) of the same step runs out.
fn pools(client: &Client) -> Vec<u64> {
    let report = client.memory_report(cubecl::MemoryScope::CurrentStream);
    report.streams.iter().flat_map(|s| s.pools.dynamic.iter().map(|p| p.largest_alloc)).collect()
}

/// Adds pages to the calling stream's pool of the largest allocations: twice as many
/// allocations of that size as it holds pages, each written (so that it exists), held at once,
/// then freed (the pages stay). A recording may add no page, and one can need more room than
/// the warm-up before it did (not yet understood; a captured beam link on the H100 and on
/// lavapipe): after such a refusal the caller grows the pool and records again.
pub fn grow_largest_pool(device: &Device) {
    #[cfg(not(feature = "gpu-tuned"))]
    {
        let Ok(like) = crate::gpu::launch::cube_of(Tensor::<1>::zeros([1], device).into_dispatch()) else {
            return;
        };
        let report = like.client.memory_report(cubecl::MemoryScope::CurrentStream);
        let Some((size, pages)) = report
            .streams
            .iter()
            .flat_map(|s| s.pools.dynamic.iter().map(|p| (p.largest_alloc, p.pages)))
            .max_by_key(|&(size, _)| size)
        else {
            return;
        };
        let floats = (size as usize / 4).max(1);
        let held: Vec<Tensor<1>> = (0..2 * pages.max(1)).map(|_| Tensor::zeros([floats], device)).collect();
        for t in &held {
            let _ = t.clone().slice([0..1]).into_data();
        }
        drop(held);
    }
    #[cfg(feature = "gpu-tuned")]
    let _ = device;
}

/// Bytes the device's memory holds (every stream, every pool), for reports.
pub fn device_bytes_reserved(device: &Device) -> Option<u64> {
    #[cfg(feature = "gpu-tuned")]
    {
        let _ = device;
        None
    }
    #[cfg(not(feature = "gpu-tuned"))]
    {
        let like = crate::gpu::launch::cube_of(Tensor::<1>::zeros([1], device).into_dispatch()).ok()?;
        Some(like.client.memory_report(cubecl::MemoryScope::Device).usage().bytes_reserved)
    }
}

/// A recorded step, replayable.
pub struct StepGraph {
    graph: Graph,
    client: Client,
    /// A tensor of the device: where [`gpu::step_scalars`] keeps its buffers.
    like: CubeTensor,
    /// Dropout seeds the step draws.
    seeds: usize,
}

impl Recorder {
    /// Prepares `device`'s stream for a capture; run one warm-up step after this, then
    /// [`record`](Self::record) the same step.
    pub fn prepare(device: &Device) -> Result<Self, GraphError> {
        // With burn's fusion (`gpu-tuned`) tensors are fused streams, not cubecl's: no capture.
        #[cfg(feature = "gpu-tuned")]
        {
            let _ = device;
            Err(GraphError::NotCube)
        }
        #[cfg(not(feature = "gpu-tuned"))]
        {
            let like = crate::gpu::launch::cube_of(Tensor::<1>::zeros([1], device).into_dispatch())
                .map_err(|_| GraphError::NotCube)?;
            Self::prepared(like)
        }
    }

    #[cfg(not(feature = "gpu-tuned"))]
    fn prepared(like: CubeTensor) -> Result<Self, GraphError> {
        let client = like.client.clone();
        // The buffers a recorded step reads its per-step values from exist before it.
        let _ = (step_scalars::seeds(&like), step_scalars::adam(&like));
        client.graph_prepare().map_err(refused("prepare"))?;
        let pools = pools(&client);
        Ok(Self { client, like, pools })
    }

    /// Whether the warm-up step grew the memory pools (see [`pools`]): recording now would
    /// run out of room, so [`cancel`](Self::cancel) and capture at the shape's next step,
    /// when the pools have settled.
    pub fn warm_up_grew_pools(&self) -> bool {
        pools(&self.client) != self.pools
    }

    /// Gives the prepared stream back without recording.
    pub fn cancel(self) {
        let _ = self.client.stop_capture();
    }

    /// Records what `step` launches (nothing runs now; its dropout masks and Adam read their
    /// per-step values from [`gpu::step_scalars`]' buffers) and returns the graph with what `step`
    /// returned. Its launches run at the first [`StepGraph::replay`].
    pub fn record<T>(self, step: impl FnOnce() -> T) -> Result<(StepGraph, T), GraphError> {
        let Self { client, like, .. } = self;
        if let Err(e) = client.start_capture() {
            // Close the prepared capture, so the stream is usable again.
            let _ = client.stop_capture();
            return Err(refused("start")(e));
        }
        step_scalars::start_recording();
        let out = step();
        let seeds = step_scalars::stop_recording();
        let graph = client.stop_capture().map_err(refused("record"))?;
        Ok((StepGraph { graph, client, like, seeds }, out))
    }
}

impl StepGraph {
    /// Dropout seeds the recorded step draws.
    pub fn seeds(&self) -> usize {
        self.seeds
    }

    /// Writes the values of the next step: the dropout seeds the eager step would draw after
    /// `reseed(seed)` ([`crate::dropout::host_seeds`]) and Adam's coefficients
    /// ([`crate::optimizer::adam::FusedAdam::coefficients`]). Then [`replay`](Self::replay).
    pub fn set_step(&self, seed: u64, adam: [f32; step_scalars::ADAM_COEFFS]) {
        step_scalars::write_seeds(&self.like, &crate::dropout::host_seeds(seed, self.seeds));
        step_scalars::write_adam(&self.like, adam);
    }

    /// Runs the recorded launches again, against the buffers they used when recorded.
    ///
    /// # Safety
    /// Every buffer the recorded step read or wrote is still alive, unmoved (the tensors that
    /// hold them are kept), and used by no other stream while the replay runs.
    pub unsafe fn replay(&self) -> Result<(), GraphError> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.graph.replay() }.map_err(refused("replay"))
    }

    /// Waits for the device to finish what was queued (a replay's launches included).
    pub fn sync(&self) {
        let _ = cubecl::future::block_on(self.client.sync());
    }
}

/// The cubecl tensor behind `t` (a float tensor, autodiff or not) or an int tensor's, for
/// writing a captured step's inputs in place.
#[cfg(not(feature = "gpu-tuned"))]
fn input_buffer(t: burn::backend::DispatchTensor) -> CubeTensor {
    use burn::backend::{BackendTensor, DispatchTensorKind};
    match t.kind {
        DispatchTensorKind::Cube(BackendTensor::Float(c) | BackendTensor::Int(c)) => c,
        _ => panic!("a captured step's input is a GPU (cubecl) float or int tensor"),
    }
}

#[cfg(not(feature = "gpu-tuned"))]
fn write_bytes(c: CubeTensor, n: usize, bytes: Vec<u8>) {
    assert!(
        c.is_contiguous() && c.meta.num_elements() == n,
        "a captured step's input is written whole, into a contiguous buffer of its size"
    );
    c.client.write(&c.handle, cubecl::bytes::Bytes::from_bytes_vec(bytes));
}

/// Writes `values` into `t`'s buffer in place: a captured step's float input (a mask), for
/// the next replay. `t` keeps its shape; nothing is launched.
pub fn write_floats<const D: usize>(t: &Tensor<D>, values: &[f32]) {
    #[cfg(feature = "gpu-tuned")]
    panic!("no captured steps with burn's fusion ({t:?}, {} values)", values.len());
    #[cfg(not(feature = "gpu-tuned"))]
    let c = input_buffer(t.clone().inner().into_dispatch());
    #[cfg(not(feature = "gpu-tuned"))]
    {
        assert_eq!(c.dtype, burn::tensor::DType::F32, "a float input is f32");
        write_bytes(c, values.len(), values.iter().flat_map(|v| v.to_le_bytes()).collect());
    }
}

/// Writes token ids into an int tensor's buffer in place (in its element type).
pub fn write_ids<const D: usize>(t: &Tensor<D, burn::tensor::Int>, ids: &[u32]) {
    #[cfg(feature = "gpu-tuned")]
    panic!("no captured steps with burn's fusion ({t:?}, {} ids)", ids.len());
    #[cfg(not(feature = "gpu-tuned"))]
    write_cube_ids(t, ids)
}

#[cfg(not(feature = "gpu-tuned"))]
fn write_cube_ids<const D: usize>(t: &Tensor<D, burn::tensor::Int>, ids: &[u32]) {
    use burn::tensor::DType;
    let c = input_buffer(t.clone().into_dispatch());
    let bytes: Vec<u8> = match c.dtype {
        DType::I64 => ids.iter().flat_map(|&i| (i as i64).to_le_bytes()).collect(),
        DType::I32 => ids.iter().flat_map(|&i| (i as i32).to_le_bytes()).collect(),
        DType::U32 => ids.iter().flat_map(|&i| i.to_le_bytes()).collect(),
        other => panic!("token ids as {other:?}"),
    };
    write_bytes(c, ids.len(), bytes);
}
