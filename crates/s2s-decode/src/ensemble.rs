//! Ensembles: several models decode as one, their next-token log-probabilities averaged at
//! every step, `log p(y) = (1/M) Σₘ log pₘ(y)` (the geometric mean of the members'
//! distributions, renormalised by the search's own log-softmax). Every search ([`crate::greedy`],
//! [`crate::beam_search`], [`crate::sample`]) takes an [`Ensemble`] where it takes a model.
//!
//! The members read the same source ids and must predict over the same target vocabulary:
//! the caller checks that their tokenizers are the same (`s2s translate` refuses a mix).

use burn::tensor::{Int, Tensor};
use s2s_kernels::ops;
use s2s_models::{Source, Step};

use crate::incremental::Incremental;

/// Models decoding together (any mix of kinds).
pub struct Ensemble<'a, M: Incremental> {
    members: Vec<&'a M>,
}

impl<'a, M: Incremental> Ensemble<'a, M> {
    /// An ensemble of `members` (at least one).
    ///
    /// # Panics
    /// With no member (a programming error: the CLI asks for at least one model).
    pub fn new(members: Vec<&'a M>) -> Self {
        assert!(!members.is_empty(), "an ensemble needs at least one model");
        Self { members }
    }

    /// Members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Never true (see [`Ensemble::new`]).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

impl<M: Incremental> Incremental for Ensemble<'_, M> {
    /// One state per member.
    type State = Vec<M::State>;

    fn encode(&self, src: &Source) -> Self::State {
        self.members.iter().map(|m| m.encode(src)).collect()
    }

    /// The members' mean log-probabilities as the step's logits; the members' mean
    /// cross-attention where every member attends.
    fn step(&self, state: Self::State, last: Tensor<1, Int>) -> (Step, Self::State) {
        let n = self.members.len() as f32;
        let mut next = Vec::with_capacity(self.members.len());
        let mut sum: Option<Tensor<2>> = None;
        let mut attention: Option<Option<Tensor<2>>> = None;
        for (m, s) in self.members.iter().zip(state) {
            let (step, s) = m.step(s, last.clone());
            next.push(s);
            let lp = ops::log_softmax(step.logits); // [rows, vocab]
            sum = Some(match sum {
                None => lp,
                Some(acc) => acc + lp,
            });
            attention = Some(match (attention, step.attention) {
                (None, a) => a,
                (Some(Some(acc)), Some(a)) => Some(acc + a),
                _ => None,
            });
        }
        let logits = sum.expect("at least one member") / n;
        let attention = attention.flatten().map(|a| a / n);
        (Step { logits, attention }, next)
    }

    fn select(&self, state: Self::State, indices: &Tensor<1, Int>, picked: &[usize]) -> Self::State {
        self.members.iter().zip(state).map(|(m, s)| m.select(s, indices, picked)).collect()
    }
}
