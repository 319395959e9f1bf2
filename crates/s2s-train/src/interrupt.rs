//! Graceful stops (SIGINT/SIGTERM, set by the CLI's signal handler) and fault injection for
//! the crash tests.
//!
//! The training loop polls [`stop_requested`] between optimizer steps: when set, it finishes
//! the step, writes a checkpoint and returns with `interrupted = true`.
//!
//! Fault injection (tests only, read from the environment once per use):
//! `S2S_FAULT_ABORT_IN_CHECKPOINT=N` aborts the process in the middle of writing the
//! checkpoint of step N (model and optimizer files written, not yet renamed into place);
//! `S2S_FAULT_NAN_AT_STEP=N` makes the first loss computed for step N non-finite;
//! `S2S_FAULT_OVERFLOW_AT_STEP=N` (mixed precision) scales the loss of step N's first try by
//! infinity, so that its gradients overflow.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

/// Asks the training loop to stop after the current step (signal-handler safe).
pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
}

/// Whether a stop was requested.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

fn fault(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

/// Fault injection: abort while writing the checkpoint of `step`.
pub(crate) fn abort_in_checkpoint(step: u64) {
    if fault("S2S_FAULT_ABORT_IN_CHECKPOINT") == Some(step) {
        eprintln!("fault injection: aborting inside the checkpoint of step {step}");
        std::process::abort();
    }
}

static NAN_FIRED: AtomicBool = AtomicBool::new(false);

/// Fault injection: whether the loss of `step` must be made non-finite (once per process).
pub(crate) fn nan_at(step: u64) -> bool {
    fault("S2S_FAULT_NAN_AT_STEP") == Some(step) && !NAN_FIRED.swap(true, Ordering::SeqCst)
}

static OVERFLOW_FIRED: AtomicBool = AtomicBool::new(false);

/// Fault injection: whether the gradients of `step` must overflow (once per process).
pub(crate) fn overflow_at(step: u64) -> bool {
    fault("S2S_FAULT_OVERFLOW_AT_STEP") == Some(step) && !OVERFLOW_FIRED.swap(true, Ordering::SeqCst)
}
