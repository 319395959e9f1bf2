//! What one kernel launch costs the host, eager against replayed from a captured graph.
//!
//! A pass is a chain of `kernels` small dependent launches ping-ponging between two buffers
//! (`b ← a + 1`, `a ← b + 1`, …): the shape of a launch-bound step, where nothing hides a
//! launch's cost. The eager path launches them one by one, as a training step does today;
//! the replayed path captures the same pass once (cubecl's software graph on wgpu: pipeline
//! lookup, bindings, uniforms and bind groups resolved at capture) and replays it, which only
//! re-encodes the dispatches. The two are interleaved round by round so that drift lands on
//! both. Each round is one pass and a read of one element (the sync).
//!
//! The figure is **host CPU time per launch** of the calling thread plus cubecl's
//! device-service threads ([`crate::gpu::host_clock`]), beside wall time per launch. On lavapipe
//! the dispatches run on the CPU in the driver's threads, so wall time there measures lavapipe
//! and host time measures us; on a GPU both mean what they say.
//!
//! The result is checked, not assumed: after the rounds `a` holds `rounds × kernels` more on
//! both paths, or the probe says the replay computed something else.

use burn::tensor::{Device, Tensor};
use burn_cubecl::tensor::CubeTensor;
use cubecl::client::Client;
use cubecl::cube;
use cubecl::prelude::*;
use serde::Serialize;
use std::time::Instant;

use crate::gpu::graph::StepGraph;
use crate::gpu::host_clock::{HostTime, Snapshot};
use crate::gpu::launch::{cube_of, launch_dims};

#[cube(launch)]
fn add_one(input: &[f32], output: &mut [f32]) {
    if ABSOLUTE_POS < output.len() {
        output[ABSOLUTE_POS] = input[ABSOLUTE_POS] + 1.0;
    }
}

/// The probe's size.
#[derive(Debug, Clone, Copy)]
pub struct ProbeConfig {
    /// Dependent launches a pass (even, so each pass ends in `a`).
    pub kernels: usize,
    /// f32 elements each launch touches.
    pub elems: usize,
    /// Timed passes on each path.
    pub rounds: usize,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self { kernels: 200, elems: 64, rounds: 20 }
    }
}

/// One path's cost, per launch.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PathCost {
    /// Host CPU µs a launch: the calling thread plus cubecl's device-service threads.
    pub host_us: f64,
    /// Of which the calling thread's.
    pub caller_us: f64,
    /// Of which the device-service threads'.
    pub device_service_us: f64,
    /// CPU µs a launch of every other thread (lavapipe's execution, on lavapipe).
    pub other_us: f64,
    /// Wall µs a launch, the sync included.
    pub wall_us: f64,
}

impl PathCost {
    fn per_launch(t: HostTime, wall_s: f64, launches: usize) -> Self {
        let per = |s: f64| 1e6 * s / launches.max(1) as f64;
        Self {
            host_us: per(t.launch_s()),
            caller_us: per(t.caller_s),
            device_service_us: per(t.device_service_s),
            other_us: per(t.other_s),
            wall_us: per(wall_s),
        }
    }
}

/// The probe's figures (one JSON object with `s2s bench --launch-probe --json`).
#[derive(Debug, Clone, Serialize)]
pub struct ProbeResult {
    /// Dependent launches a pass.
    pub kernels: usize,
    /// f32 elements a launch.
    pub elems: usize,
    /// Timed passes a path.
    pub rounds: usize,
    /// Launching one by one.
    pub eager: PathCost,
    /// Replaying the captured pass.
    pub replay: PathCost,
    /// `eager.host_us / replay.host_us`.
    pub host_ratio: f64,
    /// Milliseconds to capture the pass (recording it once).
    pub capture_ms: f64,
    /// Whether the per-thread clocks were read (Linux).
    pub host_measured: bool,
}

/// Why the probe could not run.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The device is not a cubecl one (flex): nothing is launched there.
    #[error("the launch probe needs a GPU device (wgpu); the CPU backend launches no kernels")]
    NotCube,
    /// The pass must end where it began.
    #[error("--probe-kernels must be even and at least 2 (got {0})")]
    Kernels(usize),
    /// cubecl refused a step of the capture or replay.
    #[error(transparent)]
    Graph(#[from] crate::gpu::graph::GraphError),
    /// A path computed something other than `rounds × kernels` more.
    #[error("{path} pass computed {got}, expected {want}")]
    Wrong {
        /// Which path.
        path: &'static str,
        /// The first element after its rounds.
        got: f32,
        /// What it should be.
        want: f32,
    },
}

/// Runs the probe on `device` (see the module doc).
pub fn launch_probe(device: &Device, cfg: ProbeConfig) -> Result<ProbeResult, ProbeError> {
    if cfg.kernels < 2 || cfg.kernels % 2 != 0 {
        return Err(ProbeError::Kernels(cfg.kernels));
    }
    let pass = Pass::new(device, cfg)?;
    let (graph, capture_ms) = pass.capture(device)?;
    let start_value = pass.first();
    let (eager, replay) = time_rounds(&pass, &graph, cfg.rounds)?;
    let want = start_value + (2 * cfg.rounds * cfg.kernels) as f32;
    let got = pass.first();
    if got != want {
        return Err(ProbeError::Wrong { path: "eager + replayed", got, want });
    }
    Ok(probe_result(cfg, eager, replay, capture_ms))
}

/// The probe's pass: its two buffers, `a` and `b`, and its launches.
struct Pass {
    client: Client,
    a: CubeTensor,
    b: CubeTensor,
    count: CubeCount,
    dim: CubeDim,
    kernels: usize,
}

impl Pass {
    /// Two buffers of `cfg.elems` zeros on `device`; refused on a device that is not cubecl's.
    fn new(device: &Device, cfg: ProbeConfig) -> Result<Self, ProbeError> {
        let buffer = || cube_of(Tensor::<1>::zeros([cfg.elems.max(1)], device).into_dispatch());
        let (Ok(a), Ok(b)) = (buffer(), buffer()) else { return Err(ProbeError::NotCube) };
        let client = a.client.clone();
        let (count, dim) = launch_dims(&a, cfg.elems.max(1));
        Ok(Self { client, a, b, count, dim, kernels: cfg.kernels })
    }

    /// Launches the pass: `kernels` dependent launches, `b ← a + 1`, `a ← b + 1`, ….
    fn run(&self) {
        let (a, b) = (&self.a, &self.b);
        for i in 0..self.kernels {
            let (src, dst) = if i % 2 == 0 { (a, b) } else { (b, a) };
            add_one::launch(
                &self.client,
                self.count.clone(),
                self.dim,
                src.clone().into_buffer_arg(),
                dst.clone().into_buffer_arg(),
            );
        }
    }

    /// `a`'s first element, read back (the sync).
    fn first(&self) -> f32 {
        let bytes = self.client.read_one(self.a.handle.clone()).expect("reading the probe's buffer");
        f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
    }

    /// Captures the pass on `device`: returns its graph and the milliseconds recording took.
    fn capture(&self, device: &Device) -> Result<(StepGraph, f64), ProbeError> {
        // Warm the kernel cache and the pools, then capture: prepare, warm up, record.
        self.run();
        let _ = self.first();
        let recorder = crate::gpu::graph::Recorder::prepare(device)?;
        self.run();
        let _ = self.first();
        let t0 = Instant::now();
        let (graph, ()) = recorder.record(|| self.run())?;
        Ok((graph, 1e3 * t0.elapsed().as_secs_f64()))
    }
}

/// Host time and wall seconds of one path, summed over the rounds.
type Spent = (HostTime, f64);

/// Runs `rounds` rounds, each an eager pass then a replay of `graph`, each followed by a read:
/// what the eager path and the replayed path spent.
fn time_rounds(pass: &Pass, graph: &StepGraph, rounds: usize) -> Result<(Spent, Spent), ProbeError> {
    let (mut eager, mut replay) = ((HostTime::default(), 0.0), (HostTime::default(), 0.0));
    let add = |acc: &mut Spent, t: HostTime, wall: f64| {
        acc.0.caller_s += t.caller_s;
        acc.0.device_service_s += t.device_service_s;
        acc.0.other_s += t.other_s;
        acc.0.measured = t.measured;
        acc.1 += wall;
    };
    for _ in 0..rounds {
        let (s, t0) = (Snapshot::now(), Instant::now());
        pass.run();
        let _ = pass.first();
        add(&mut eager, Snapshot::now().since(&s), t0.elapsed().as_secs_f64());

        let (s, t0) = (Snapshot::now(), Instant::now());
        // SAFETY: `a` and `b`, the only buffers the pass touches, live as long as `pass`, which
        // outlives `graph` in `launch_probe`, and nothing else uses them meanwhile; every replay
        // is followed by a read.
        unsafe { graph.replay() }?;
        let _ = pass.first();
        add(&mut replay, Snapshot::now().since(&s), t0.elapsed().as_secs_f64());
    }
    Ok((eager, replay))
}

/// The figures per launch of the two paths' `cfg.rounds` passes, with the capture's time.
fn probe_result(cfg: ProbeConfig, eager: Spent, replay: Spent, capture_ms: f64) -> ProbeResult {
    let launches = cfg.rounds * cfg.kernels;
    let eager_measured = eager.0.measured;
    let eager = PathCost::per_launch(eager.0, eager.1, launches);
    let replay_cost = PathCost::per_launch(replay.0, replay.1, launches);
    ProbeResult {
        kernels: cfg.kernels,
        elems: cfg.elems,
        rounds: cfg.rounds,
        host_ratio: eager.host_us / replay_cost.host_us.max(1e-9),
        eager,
        replay: replay_cost,
        capture_ms,
        host_measured: eager_measured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On lavapipe: the replayed chain computes what the eager one does (the probe checks the
    /// sum), and its figures are filled in; the CPU backend is refused with a message.
    #[test]
    fn replay_computes_the_chain_and_flex_is_refused() {
        let Some(device) = crate::testing::wgpu_or_skip() else { return };
        let r = launch_probe(&device, ProbeConfig { kernels: 20, elems: 64, rounds: 3 }).unwrap();
        assert!(r.eager.wall_us > 0.0 && r.replay.wall_us > 0.0, "{r:?}");
        assert!(r.host_measured && r.eager.host_us > 0.0, "{r:?}");
        assert!(matches!(launch_probe(&Device::flex(), ProbeConfig::default()), Err(ProbeError::NotCube)));
        assert!(matches!(
            launch_probe(&device, ProbeConfig { kernels: 3, ..Default::default() }),
            Err(ProbeError::Kernels(3))
        ));
    }
}
