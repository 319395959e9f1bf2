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
//!   ([`crate::step_scalars`]);
//! - every buffer it reads or writes stays alive and in place while the graph lives: the
//!   parameters and Adam's moments are updated in place.

use burn::tensor::{Device, Tensor};
use burn_cubecl::tensor::CubeTensor;
use cubecl::client::{Client, Graph};

use crate::step_scalars;

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
    crate::cube_launch::cube_of(Tensor::<1>::zeros([1], device).into_dispatch()).ok().map(|t| t.client.name())
}

/// A capture under way on the calling thread's stream: prepared, waiting for its warm-up
/// step, then [`Recorder::record`].
pub struct Recorder {
    client: Client,
    like: CubeTensor,
}

/// A recorded step, replayable.
pub struct StepGraph {
    graph: Graph,
    client: Client,
    /// A tensor of the device: where [`step_scalars`] keeps its buffers.
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
        let like: CubeTensor = {
            let _ = (device, Tensor::<1>::zeros);
            return Err(GraphError::NotCube);
        };
        #[cfg(not(feature = "gpu-tuned"))]
        let like = crate::cube_launch::cube_of(Tensor::<1>::zeros([1], device).into_dispatch())
            .map_err(|_| GraphError::NotCube)?;
        let client = like.client.clone();
        // The buffers a recorded step reads its per-step values from exist before it.
        let _ = (step_scalars::seeds(&like), step_scalars::adam(&like));
        client.graph_prepare().map_err(refused("prepare"))?;
        Ok(Self { client, like })
    }

    /// Records what `step` launches (nothing runs now; its dropout masks and Adam read their
    /// per-step values from [`step_scalars`]' buffers) and returns the graph with what `step`
    /// returned. Its launches run at the first [`StepGraph::replay`].
    pub fn record<T>(self, step: impl FnOnce() -> T) -> Result<(StepGraph, T), GraphError> {
        let Self { client, like } = self;
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
    /// ([`crate::fused_adam::FusedAdam::coefficients`]). Then [`replay`](Self::replay).
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
