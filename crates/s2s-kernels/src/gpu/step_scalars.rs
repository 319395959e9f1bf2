//! What changes from one training step to the next, kept in device buffers for a captured step.
//!
//! A step replayed from a graph ([`crate::gpu::graph`]) runs the launches recorded once, with the
//! scalars they had then. Three things change every step: the dropout masks' seeds, Adam's
//! bias corrections and the learning rate. While a step is recorded ([`start_recording`]),
//! each dropout site takes the next slot of a seed buffer and reads its seed from there, and
//! Adam reads its coefficients from a coefficient buffer. Before each replay the driver writes
//! the step's values into both ([`write_seeds`], [`write_adam`]): the very values the eager
//! step passes as kernel arguments (the seeds are the same draws of [`crate::dropout::reseed`]'s
//! stream), so a replayed step computes what the eager step computes, bit for bit. Outside a
//! recording nothing here is used: every site gets [`NO_SLOT`] and the kernels take their
//! arguments.
//!
//! These are host → device writes between replays (one small copy each, no launch), not
//! counters advanced on the device: the host knows the step and the schedule anyway, and a
//! resumed run needs nothing restored but what the eager trainer restores.
//!
//! `s2s-train`'s `tests/captured.rs` holds replayed steps with dropout to the eager ones, every
//! loss and parameter to the bit; freezing the seeds or Adam's coefficients at their captured
//! values fails it within the first steps.

use std::cell::RefCell;
use std::collections::HashMap;

use burn_cubecl::tensor::CubeTensor;
use cubecl::bytes::Bytes;

/// A dropout site outside a recording: the kernel takes its seed from its arguments.
pub const NO_SLOT: u32 = u32::MAX;

/// Dropout sites a recorded step may have (the reference Transformer has 32, Luong 26).
pub const MAX_SITES: usize = 1024;

/// Adam's coefficients: `[β₁, β₂, ε·√(1 − β₂ᵗ), √(1 − β₂ᵗ)/(1 − β₁ᵗ), lr, λ]`.
pub const ADAM_COEFFS: usize = 6;

struct Buffers {
    /// `[seed_lo, seed_hi]` a slot, as u32 bits.
    seeds: CubeTensor,
    /// [`ADAM_COEFFS`] f32.
    adam: CubeTensor,
}

thread_local! {
    /// While a step is recorded on this thread, the seeds drawn so far: slot `i` is the `i`-th.
    static RECORDING: RefCell<Option<Vec<u64>>> = const { RefCell::new(None) };
    /// The buffers, per device.
    static BUFFERS: RefCell<HashMap<String, Buffers>> = RefCell::new(HashMap::new());
}

/// An uninitialised f32 buffer of `n` on `like`'s device.
fn empty(like: &CubeTensor, n: usize) -> CubeTensor {
    burn_cubecl::ops::numeric::empty_device_contiguous_dtype(
        like.client.clone(),
        like.device.clone(),
        [n].into(),
        burn::tensor::DType::F32,
    )
}

fn key(t: &CubeTensor) -> String {
    format!("{:?}", t.device)
}

/// The buffers of `like`'s device, made at first use (before a recording, by its warm-up).
fn with_buffers<R>(like: &CubeTensor, f: impl FnOnce(&Buffers) -> R) -> R {
    BUFFERS.with(|b| {
        let mut b = b.borrow_mut();
        let bufs = b
            .entry(key(like))
            .or_insert_with(|| Buffers { seeds: empty(like, 2 * MAX_SITES), adam: empty(like, ADAM_COEFFS) });
        f(bufs)
    })
}

/// Starts numbering this thread's dropout seeds: from now on each GPU mask reads its seed from
/// its slot of the seed buffer, and Adam its coefficients from the coefficient buffer.
pub fn start_recording() {
    RECORDING.with(|r| *r.borrow_mut() = Some(Vec::new()));
}

/// Stops numbering; returns the number of seeds drawn (the slots a replay writes).
pub fn stop_recording() -> usize {
    RECORDING.with(|r| r.borrow_mut().take()).map_or(0, |v| v.len())
}

/// True while a step is recorded on this thread.
#[cfg_attr(feature = "gpu-tuned", allow(dead_code))] // read by our GPU kernels, not built there
pub fn recording() -> bool {
    RECORDING.with(|r| r.borrow().is_some())
}

thread_local! {
    static IN_PLACE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While captured graphs are alive on this thread (`on`), eager Adam steps must update in
/// place too: a graph replays against the parameters and moments it recorded, so an eager
/// step that copied one would leave every graph updating the old buffer.
pub fn require_in_place(on: bool) {
    IN_PLACE.with(|c| c.set(on));
}

/// Whether Adam must update in place: while recording, or while graphs are alive.
#[cfg_attr(feature = "gpu-tuned", allow(dead_code))] // read by our GPU kernels, not built there
pub fn in_place_required() -> bool {
    recording() || IN_PLACE.with(|c| c.get())
}

/// Gives a seed just drawn for a GPU mask the next slot, while recording.
pub(crate) fn drawn(seed: u64) {
    RECORDING.with(|r| {
        if let Some(v) = r.borrow_mut().as_mut() {
            assert!(v.len() < MAX_SITES, "a recorded step draws more than {MAX_SITES} dropout seeds");
            v.push(seed);
        }
    })
}

/// The slot of a seed drawn while recording (forward and backward of one site share it),
/// else [`NO_SLOT`].
#[cfg_attr(feature = "gpu-tuned", allow(dead_code))]
pub(crate) fn slot_of(seed: u64) -> u32 {
    RECORDING.with(|r| {
        r.borrow().as_ref().and_then(|v| v.iter().position(|&s| s == seed)).map_or(NO_SLOT, |i| i as u32)
    })
}

/// The seed buffer of `like`'s device, for a kernel's `seeds` argument.
pub(crate) fn seeds(like: &CubeTensor) -> CubeTensor {
    with_buffers(like, |b| b.seeds.clone())
}

/// The coefficient buffer of `like`'s device, for Adam's `coeffs` argument.
pub(crate) fn adam(like: &CubeTensor) -> CubeTensor {
    with_buffers(like, |b| b.adam.clone())
}

/// Writes the step's seeds (slot `i` ← `seeds[i]`) on `like`'s device.
pub fn write_seeds(like: &CubeTensor, seeds: &[u64]) {
    assert!(seeds.len() <= MAX_SITES, "more seeds than slots");
    let words: Vec<u32> = seeds.iter().flat_map(|&s| [s as u32, (s >> 32) as u32]).collect();
    let buf = self::seeds(like);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    if !bytes.is_empty() {
        buf.client.write(&buf.handle, Bytes::from_bytes_vec(bytes));
    }
}

/// Writes the step's Adam coefficients on `like`'s device.
pub fn write_adam(like: &CubeTensor, k: [f32; ADAM_COEFFS]) {
    let buf = adam(like);
    let bytes: Vec<u8> = k.iter().flat_map(|w| w.to_le_bytes()).collect();
    buf.client.write(&buf.handle, Bytes::from_bytes_vec(bytes));
}
