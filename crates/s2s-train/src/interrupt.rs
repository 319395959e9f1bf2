//! Graceful stops (SIGINT/SIGTERM, set by the CLI's signal handler) and fault injection for
//! the crash tests.
//!
//! The training loop polls [`stop_requested`] between optimizer steps: when set, it finishes
//! the step, writes a checkpoint and returns with `interrupted = true`.
//!
//! Fault injection (tests only): [`Faults`], read from the environment once when a run starts
//! and passed down to the steps and the checkpoints, never read inside the loop.
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

/// The fault-injection switches of one run (tests only; none set, none fires): each names a
/// step, and the loss faults fire once, on that step's first try.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// `S2S_FAULT_ABORT_IN_CHECKPOINT`: abort while writing this step's checkpoint.
    pub abort_in_checkpoint: Option<u64>,
    /// `S2S_FAULT_NAN_AT_STEP`: this step's first loss is made non-finite.
    pub nan_at: Option<u64>,
    /// `S2S_FAULT_OVERFLOW_AT_STEP`: this step's first try scales its loss by infinity.
    pub overflow_at: Option<u64>,
}

impl Faults {
    /// The switches set in the environment (a value that is not a step number sets none).
    pub fn from_env() -> Self {
        let step = |name: &str| std::env::var(name).ok()?.parse().ok();
        Self {
            abort_in_checkpoint: step("S2S_FAULT_ABORT_IN_CHECKPOINT"),
            nan_at: step("S2S_FAULT_NAN_AT_STEP"),
            overflow_at: step("S2S_FAULT_OVERFLOW_AT_STEP"),
        }
    }

    /// Whether the loss of `step` is made non-finite now (then the switch is spent).
    pub(crate) fn nan_now(&mut self, step: u64) -> bool {
        fire(&mut self.nan_at, step)
    }

    /// Whether the gradients of `step` overflow now (then the switch is spent).
    pub(crate) fn overflow_now(&mut self, step: u64) -> bool {
        fire(&mut self.overflow_at, step)
    }
}

/// True, and the switch spent, when `switch` names `step`.
fn fire(switch: &mut Option<u64>, step: u64) -> bool {
    let now = *switch == Some(step);
    if now {
        *switch = None;
    }
    now
}

/// Fault injection: aborts the process while the checkpoint of `step` is being written, when
/// `at` names that step.
pub(crate) fn abort_in_checkpoint(at: Option<u64>, step: u64) {
    if at == Some(step) {
        eprintln!("fault injection: aborting inside the checkpoint of step {step}");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loss fault fires once, at its step, and is then spent (a retried step runs clean);
    /// the checkpoint fault is a step number the checkpoints carry.
    #[test]
    fn a_fault_fires_once_at_its_step() {
        let mut f = Faults { abort_in_checkpoint: Some(8), nan_at: Some(3), overflow_at: Some(5) };
        assert!(!f.nan_now(2) && !f.overflow_now(3));
        assert!(f.nan_now(3) && !f.nan_now(3), "once");
        assert!(f.overflow_now(5) && !f.overflow_now(5), "once");
        assert_eq!(f, Faults { abort_in_checkpoint: Some(8), nan_at: None, overflow_at: None });
        assert!(!Faults::default().nan_now(0));
    }
}
