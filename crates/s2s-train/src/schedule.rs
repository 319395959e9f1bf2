//! Learning-rate schedules: constant; linear warm-up then inverse square root (Noam, Vaswani
//! et al., 2017, eq. 3, with the peak given directly as `lr`); reduce-on-plateau on the
//! validation metric.

use serde::{Deserialize, Serialize};

/// A schedule and its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Schedule {
    /// `lr` throughout.
    Constant,
    /// `lr · min(step / warmup, sqrt(warmup / step))`: linear warm-up to `lr` at `warmup`,
    /// then decay as `1/√step`.
    Noam {
        /// Warm-up steps.
        warmup: u64,
    },
    /// Multiply by `factor` when the validation metric has not improved for `patience`
    /// validations, down to `min_lr`.
    Plateau {
        /// Multiplier (0 < factor < 1).
        factor: f64,
        /// Validations without improvement before a reduction.
        patience: u32,
        /// Floor.
        min_lr: f64,
    },
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule::Constant
    }
}

/// Mutable state of a schedule (saved in checkpoints).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ScheduleState {
    /// Current multiplier of the base rate (plateau reductions).
    pub scale: f64,
    /// Validations since the last improvement (plateau).
    pub stale: u32,
}

impl Schedule {
    /// The initial state.
    pub fn start(&self) -> ScheduleState {
        ScheduleState { scale: 1.0, stale: 0 }
    }

    /// The rate for (1-based) `step`.
    pub fn lr(&self, base: f64, step: u64, state: &ScheduleState) -> f64 {
        match self {
            Schedule::Constant => base,
            Schedule::Noam { warmup } => {
                let (s, w) = (step.max(1) as f64, (*warmup).max(1) as f64);
                base * (s / w).min((w / s).sqrt())
            }
            Schedule::Plateau { min_lr, .. } => (base * state.scale).max(*min_lr),
        }
    }

    /// Updates the state after a validation (`improved`: the metric got better).
    pub fn after_validation(&self, improved: bool, state: &mut ScheduleState) {
        if let Schedule::Plateau { factor, patience, .. } = self {
            if improved {
                state.stale = 0;
            } else {
                state.stale += 1;
                if state.stale >= *patience {
                    state.scale *= factor;
                    state.stale = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noam_peaks_at_warmup_then_decays_as_inverse_sqrt() {
        let s = Schedule::Noam { warmup: 100 };
        let st = s.start();
        assert!((s.lr(1e-3, 50, &st) - 5e-4).abs() < 1e-12);
        assert!((s.lr(1e-3, 100, &st) - 1e-3).abs() < 1e-12);
        assert!((s.lr(1e-3, 400, &st) - 5e-4).abs() < 1e-12);
    }

    #[test]
    fn plateau_reduces_after_patience() {
        let s = Schedule::Plateau { factor: 0.5, patience: 2, min_lr: 1e-5 };
        let mut st = s.start();
        s.after_validation(false, &mut st);
        assert_eq!(s.lr(1e-3, 10, &st), 1e-3);
        s.after_validation(false, &mut st);
        assert_eq!(s.lr(1e-3, 10, &st), 5e-4);
        s.after_validation(true, &mut st);
        assert_eq!(st.stale, 0);
    }
}
