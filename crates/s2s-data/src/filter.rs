//! Pair filters of a prepared dataset, as the usual NMT toolkits offer them (Moses
//! `clean-corpus-n.perl`: token lengths and length ratio; OpenNMT-py `filtertoolong`; exact
//! duplicate and copy removal), each counted in a [`FilterReport`].
//!
//! Rules run in this order and a dropped pair is counted under the first rule that drops it:
//! 1. `copy`: source text equals target text (after normalisation) — [`FilterConfig::drop_copies`];
//! 2. `duplicate`: the same (source, target) pair was already kept — [`FilterConfig::dedup`],
//!    by the 64-bit [`pair_hash`] (two distinct pairs collide with probability about
//!    n²/2⁶⁵: 3·10⁻⁶ at ten million pairs);
//! 3. `too_short` / `too_long`: a side has fewer than [`FilterConfig::min_tokens`] or more than
//!    [`FilterConfig::max_tokens`] tokens (ids without specials, under the dataset's tokenizer);
//! 4. `bad_ratio`: the longer side has more than [`FilterConfig::max_ratio`] times the tokens of
//!    the shorter one.
//!
//! Every rule is off by default, so a default preparation keeps exactly the pairs
//! [`crate::read_corpus`] keeps; [`FilterConfig::recommended`] turns them all on.

use serde::{Deserialize, Serialize};

use crate::hash::Xxh64;

/// Which pairs to drop (all rules off by default).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilterConfig {
    /// Fewest tokens on either side (0: no minimum).
    pub min_tokens: usize,
    /// Most tokens on either side (0: no maximum).
    pub max_tokens: usize,
    /// Largest ratio longer side / shorter side in tokens (0: no limit; Moses uses 9).
    pub max_ratio: f64,
    /// Drop exact duplicate pairs (the first occurrence is kept).
    pub dedup: bool,
    /// Drop pairs whose source equals their target.
    pub drop_copies: bool,
}

impl Default for FilterConfig {
    fn default() -> Self {
        Self { min_tokens: 0, max_tokens: 0, max_ratio: 0.0, dedup: false, drop_copies: false }
    }
}

impl FilterConfig {
    /// Every rule on: 1–250 tokens a side, ratio at most 9 (Moses' `clean-corpus-n` default),
    /// duplicates and copies dropped.
    pub fn recommended() -> Self {
        Self { min_tokens: 1, max_tokens: 250, max_ratio: 9.0, dedup: true, drop_copies: true }
    }

    /// The token-level verdict on a pair of `src` and `tgt` tokens (rules 3 and 4).
    pub fn check_lengths(&self, src: usize, tgt: usize) -> Option<Dropped> {
        let (short, long) = (src.min(tgt), src.max(tgt));
        if short < self.min_tokens {
            Some(Dropped::TooShort)
        } else if self.max_tokens > 0 && long > self.max_tokens {
            Some(Dropped::TooLong)
        } else if self.max_ratio > 0.0 && long as f64 > self.max_ratio * short.max(1) as f64 {
            Some(Dropped::BadRatio)
        } else {
            None
        }
    }
}

/// The rule that dropped a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dropped {
    /// Source equals target.
    Copy,
    /// An exact duplicate of a pair kept before.
    Duplicate,
    /// A side under `min_tokens`.
    TooShort,
    /// A side over `max_tokens`.
    TooLong,
    /// Length ratio over `max_ratio`.
    BadRatio,
}

/// What the filters did: `input = kept + copies + duplicates + too_short + too_long + bad_ratio`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterReport {
    /// Pairs that reached the filters (those reading kept).
    pub input: usize,
    /// Pairs kept.
    pub kept: usize,
    /// Dropped: source equals target.
    pub copies: usize,
    /// Dropped: duplicate pair.
    pub duplicates: usize,
    /// Dropped: a side too short.
    pub too_short: usize,
    /// Dropped: a side too long.
    pub too_long: usize,
    /// Dropped: length ratio too large.
    pub bad_ratio: usize,
}

impl FilterReport {
    /// Counts one dropped pair.
    pub fn count(&mut self, d: Dropped) {
        self.input += 1;
        match d {
            Dropped::Copy => self.copies += 1,
            Dropped::Duplicate => self.duplicates += 1,
            Dropped::TooShort => self.too_short += 1,
            Dropped::TooLong => self.too_long += 1,
            Dropped::BadRatio => self.bad_ratio += 1,
        }
    }

    /// Counts one kept pair.
    pub fn keep(&mut self) {
        self.input += 1;
        self.kept += 1;
    }

    /// Pairs dropped by any rule.
    pub fn dropped(&self) -> usize {
        self.input - self.kept
    }
}

impl std::fmt::Display for FilterReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} pairs filtered, {} kept, dropped: {} copies, {} duplicates, {} too short, {} too long, \
             {} bad length ratio",
            self.input,
            self.kept,
            self.copies,
            self.duplicates,
            self.too_short,
            self.too_long,
            self.bad_ratio
        )
    }
}

/// The duplicate key of a normalised pair: XXH64 (seed 0) of the source length as a
/// little-endian u64, the source bytes and the target bytes.
pub fn pair_hash(src: &str, tgt: &str) -> u64 {
    let mut h = Xxh64::new(0);
    h.update(&(src.len() as u64).to_le_bytes());
    h.update(src.as_bytes());
    h.update(tgt.as_bytes());
    h.digest()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_rules_in_order() {
        let f = FilterConfig { min_tokens: 2, max_tokens: 10, max_ratio: 3.0, ..Default::default() };
        assert_eq!(f.check_lengths(1, 5), Some(Dropped::TooShort));
        assert_eq!(f.check_lengths(11, 5), Some(Dropped::TooLong));
        assert_eq!(f.check_lengths(2, 7), Some(Dropped::BadRatio));
        assert_eq!(f.check_lengths(2, 6), None);
        assert_eq!(FilterConfig::default().check_lengths(0, 1000), None);
    }

    #[test]
    fn pair_hash_separates_the_sides() {
        assert_ne!(pair_hash("ab", "c"), pair_hash("a", "bc"));
        assert_eq!(pair_hash("a b", "c"), pair_hash("a b", "c"));
    }

    #[test]
    fn report_accounts_for_every_pair() {
        let mut r = FilterReport::default();
        for d in [Dropped::Copy, Dropped::Duplicate, Dropped::Duplicate, Dropped::BadRatio] {
            r.count(d);
        }
        r.keep();
        assert_eq!((r.input, r.kept, r.duplicates, r.dropped()), (5, 1, 2, 4));
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<FilterReport>(&json).unwrap(), r);
    }
}
