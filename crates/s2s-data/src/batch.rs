//! Token-budget batches from length buckets, with padding masks and seed-only shuffling.
//!
//! As in fairseq and Joey NMT: an epoch shuffles the examples (seed and epoch number only),
//! cuts the shuffled list into pools of `pool_batches` batches' worth, sorts each pool by
//! length, fills batches up to `max_tokens` *padded* tokens on the budget side, and shuffles
//! the batch order. Evaluation uses [`Batcher::ordered`]: sorted by length, no shuffle.
//! The source gets `</s>` appended; the target is split into `<s> y` (decoder input) and
//! `y </s>` (prediction target).

use serde::{Deserialize, Serialize};

use crate::rng::SplitMix64;
use crate::vocab::{BOS, EOS, PAD};

/// One tokenised pair, ids without specials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// Source ids.
    pub src: Vec<u32>,
    /// Target ids.
    pub tgt: Vec<u32>,
}

/// Which side's padded size the token budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetSide {
    /// Source tokens (with `</s>`).
    Source,
    /// Target tokens (with `</s>`).
    Target,
    /// The larger of the two.
    Max,
}

/// How batches are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// Padded tokens per batch on the budget side (a single longer example still forms a batch).
    #[serde(default = "default_max_tokens")]
    pub max_tokens: usize,
    /// Side the budget counts.
    #[serde(default = "default_side")]
    pub budget_on: BudgetSide,
    /// Batches' worth of examples sorted together: larger means less padding, less randomness.
    #[serde(default = "default_pool")]
    pub pool_batches: usize,
    /// Most sentences in a batch (0: no limit).
    #[serde(default)]
    pub max_sentences: usize,
}

fn default_max_tokens() -> usize {
    4096
}
fn default_side() -> BudgetSide {
    BudgetSide::Max
}
fn default_pool() -> usize {
    100
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self { max_tokens: 4096, budget_on: BudgetSide::Max, pool_batches: 100, max_sentences: 0 }
    }
}

/// A padded batch, row-major, ready for tensors.
///
/// # Shapes
/// - `src`: `[batch, src_len]`, `</s>` then [`PAD`]
/// - `tgt_in`: `[batch, tgt_len]`, `<s> y` then padding
/// - `tgt_out`: `[batch, tgt_len]`, `y </s>` then padding
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Example indices (into the slice given to the batcher), in row order.
    pub indices: Vec<usize>,
    /// Source ids, `[batch, src_len]`.
    pub src: Vec<u32>,
    /// Real source length per row (with `</s>`).
    pub src_lens: Vec<usize>,
    /// Padded source length.
    pub src_len: usize,
    /// Decoder input ids, `[batch, tgt_len]`.
    pub tgt_in: Vec<u32>,
    /// Prediction targets, `[batch, tgt_len]`.
    pub tgt_out: Vec<u32>,
    /// Real target length per row (with `</s>`).
    pub tgt_lens: Vec<usize>,
    /// Padded target length.
    pub tgt_len: usize,
}

impl Batch {
    /// Collates examples into a padded batch.
    pub fn collate(examples: &[Example], indices: &[usize]) -> Self {
        Self::from_rows(indices, |i| (&examples[i].src, &examples[i].tgt))
    }

    /// Collates the rows `indices`, reading each example's (source ids, target ids) through
    /// `row` (ids without specials) — [`Batch::collate`] for examples stored elsewhere, e.g. a
    /// [`crate::PreparedDataset`].
    pub fn from_rows<'e>(indices: &[usize], row: impl Fn(usize) -> (&'e [u32], &'e [u32])) -> Self {
        let rows: Vec<(&[u32], &[u32])> = indices.iter().map(|&i| row(i)).collect();
        let src_lens: Vec<usize> = rows.iter().map(|r| r.0.len() + 1).collect();
        let tgt_lens: Vec<usize> = rows.iter().map(|r| r.1.len() + 1).collect();
        let src_len = src_lens.iter().copied().max().unwrap_or(1);
        let tgt_len = tgt_lens.iter().copied().max().unwrap_or(1);
        let b = indices.len();
        let (mut src, mut tgt_in, mut tgt_out) =
            (vec![PAD; b * src_len], vec![PAD; b * tgt_len], vec![PAD; b * tgt_len]);
        for (row, &(es, et)) in rows.iter().enumerate() {
            let s = &mut src[row * src_len..];
            s[..es.len()].copy_from_slice(es);
            s[es.len()] = EOS;
            let ti = &mut tgt_in[row * tgt_len..];
            ti[0] = BOS;
            ti[1..=et.len()].copy_from_slice(et);
            let to = &mut tgt_out[row * tgt_len..];
            to[..et.len()].copy_from_slice(et);
            to[et.len()] = EOS;
        }
        Self { indices: indices.to_vec(), src, src_lens, src_len, tgt_in, tgt_out, tgt_lens, tgt_len }
    }

    /// This batch padded to `rows` rows of `src_len` and `tgt_len` positions (each at least
    /// the batch's own), the shape a captured training step was recorded for. A filler row
    /// (index `usize::MAX`) is a source of one `</s>` and a target of no tokens: it attends
    /// to something, and adds nothing to the loss.
    pub fn padded_to(&self, rows: usize, src_len: usize, tgt_len: usize) -> Self {
        assert!(rows >= self.size() && src_len >= self.src_len && tgt_len >= self.tgt_len, "padding shrinks");
        let widen = |v: &[u32], from: usize, to: usize, fill: &dyn Fn(usize) -> Vec<u32>| -> Vec<u32> {
            let mut out: Vec<u32> = v
                .chunks(from.max(1))
                .take(self.size())
                .flat_map(|r| r.iter().copied().chain(std::iter::repeat_n(PAD, to - from)))
                .collect();
            for _ in self.size()..rows {
                let mut row = fill(to);
                row.resize(to, PAD);
                out.extend(row);
            }
            out
        };
        let (s, t) = (self.src_len, self.tgt_len);
        let mut indices = self.indices.clone();
        indices.resize(rows, usize::MAX);
        let mut src_lens = self.src_lens.clone();
        src_lens.resize(rows, 1);
        let mut tgt_lens = self.tgt_lens.clone();
        tgt_lens.resize(rows, 0);
        Self {
            indices,
            src: widen(&self.src, s, src_len, &|_| vec![EOS]),
            src_lens,
            src_len,
            tgt_in: widen(&self.tgt_in, t, tgt_len, &|_| vec![BOS]),
            tgt_out: widen(&self.tgt_out, t, tgt_len, &|_| vec![]),
            tgt_lens,
            tgt_len,
        }
    }

    /// Sentences in the batch.
    pub fn size(&self) -> usize {
        self.indices.len()
    }

    /// Source padding mask, `[batch, src_len]`: true on real tokens.
    pub fn src_mask(&self) -> Vec<bool> {
        mask(&self.src_lens, self.src_len)
    }

    /// Target padding mask, `[batch, tgt_len]`: true on real tokens.
    pub fn tgt_mask(&self) -> Vec<bool> {
        mask(&self.tgt_lens, self.tgt_len)
    }

    /// Real target tokens (the loss is summed over these).
    pub fn tgt_tokens(&self) -> usize {
        self.tgt_lens.iter().sum()
    }

    /// (real tokens, padded slots) over both sides.
    pub fn padding(&self) -> (usize, usize) {
        let real = self.src_lens.iter().sum::<usize>() + self.tgt_tokens();
        let slots = self.size() * (self.src_len + self.tgt_len);
        (real, slots)
    }
}

/// The shape `(rows, src_len, tgt_len)` a batch is padded to for a captured step: lengths
/// up to a multiple of 8, rows up to the next of 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, …
/// (2ᵏ, and 1.5·2ᵏ from 16 on), so a run meets few shapes and pads at most half of its rows
/// (a third from 16 on).
pub fn bucket(rows: usize, src_len: usize, tgt_len: usize) -> (usize, usize, usize) {
    let len = |n: usize| n.max(1).div_ceil(8) * 8;
    (bucket_rows(rows as u128) as usize, len(src_len), len(tgt_len))
}

/// [`bucket`]'s rows for `rows`, in `u128` so that a memory estimate can ask it of any count
/// without overflow.
pub fn bucket_rows(rows: u128) -> u128 {
    let mut r = 1;
    while r < rows {
        r = if r < 16 {
            2 * r
        } else if r.is_power_of_two() {
            r / 2 * 3
        } else {
            r / 3 * 4
        };
    }
    r
}

fn mask(lens: &[usize], len: usize) -> Vec<bool> {
    lens.iter().flat_map(|&l| (0..len).map(move |j| j < l)).collect()
}

/// Plans batches (as index lists) over a fixed set of examples.
#[derive(Debug, Clone)]
pub struct Batcher {
    cfg: BatchConfig,
    /// (source length, target length) with `</s>`, per example.
    lens: Vec<(usize, usize)>,
}

impl Batcher {
    /// A batcher over `examples`.
    pub fn new(examples: &[Example], cfg: BatchConfig) -> Self {
        Self { cfg, lens: examples.iter().map(|e| (e.src.len() + 1, e.tgt.len() + 1)).collect() }
    }

    /// The batches of epoch `epoch` (0-based), a function of `seed` and `epoch` only.
    pub fn epoch(&self, seed: u64, epoch: u64) -> Vec<Vec<usize>> {
        let mut rng = SplitMix64::new(seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut order: Vec<usize> = (0..self.lens.len()).collect();
        rng.shuffle(&mut order);
        let mean = self.lens.iter().map(|&(s, t)| self.side(s, t)).sum::<usize>() / self.lens.len().max(1);
        let pool = (self.cfg.pool_batches * self.cfg.max_tokens / mean.max(1)).max(1);
        let mut batches = Vec::new();
        for chunk in order.chunks_mut(pool) {
            chunk.sort_by_key(|&i| (self.lens[i], i));
            batches.extend(self.fill(chunk));
        }
        rng.shuffle(&mut batches);
        batches
    }

    /// All examples sorted by length into budget-filled batches, no shuffling (evaluation).
    pub fn ordered(&self) -> Vec<Vec<usize>> {
        let mut order: Vec<usize> = (0..self.lens.len()).collect();
        order.sort_by_key(|&i| (self.lens[i], i));
        self.fill(&order)
    }

    fn side(&self, s: usize, t: usize) -> usize {
        self.cfg.budget_on.pick(s, t)
    }

    /// Greedy fill of sorted indices: add while `rows × longest ≤ max_tokens`.
    fn fill(&self, sorted: &[usize]) -> Vec<Vec<usize>> {
        fill_batches(&self.cfg, sorted.iter().map(|&i| (i, self.side(self.lens[i].0, self.lens[i].1))))
    }
}

impl BudgetSide {
    /// The length the budget counts, of a pair of `src` and `tgt` lengths.
    pub fn pick(self, src: usize, tgt: usize) -> usize {
        match self {
            BudgetSide::Source => src,
            BudgetSide::Target => tgt,
            BudgetSide::Max => src.max(tgt),
        }
    }
}

/// Greedy fill of `(index, budget-side length with </s>)` in sorted order: a batch grows
/// while `rows × longest ≤ max_tokens` (and `rows ≤ max_sentences`); a single longer example
/// still forms a batch.
pub(crate) fn fill_batches(
    cfg: &BatchConfig,
    sorted: impl Iterator<Item = (usize, usize)>,
) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut cur: Vec<usize> = Vec::new();
    let mut longest = 0;
    for (i, len) in sorted {
        let l = longest.max(len);
        let full =
            (cur.len() + 1) * l > cfg.max_tokens || (cfg.max_sentences > 0 && cur.len() >= cfg.max_sentences);
        if full && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
            longest = len;
        } else {
            longest = l;
        }
        cur.push(i);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Padding ratio (padded slots that are padding) over a set of batches, both sides.
pub fn padding_ratio(examples: &[Example], batches: &[Vec<usize>]) -> f64 {
    let (mut real, mut slots) = (0usize, 0usize);
    for b in batches {
        let (r, s) = Batch::collate(examples, b).padding();
        real += r;
        slots += s;
    }
    if slots == 0 { 0.0 } else { 1.0 - real as f64 / slots as f64 }
}

/// What padding `batches` to [`bucket`] shapes (as captured training steps do) costs: the
/// share of padded slots, both sides, and the distinct shapes met.
pub fn bucket_padding(examples: &[Example], batches: &[Vec<usize>]) -> (f64, usize) {
    let (mut real, mut slots) = (0usize, 0usize);
    let mut shapes = std::collections::BTreeSet::new();
    for b in batches {
        let batch = Batch::collate(examples, b);
        let shape = bucket(batch.size(), batch.src_len, batch.tgt_len);
        real += batch.padding().0;
        slots += shape.0 * (shape.1 + shape.2);
        shapes.insert(shape);
    }
    (if slots == 0 { 0.0 } else { 1.0 - real as f64 / slots as f64 }, shapes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_rows_geometrically_and_lengths_to_eight() {
        let rows: Vec<usize> =
            [1, 8, 9, 16, 17, 24, 25, 33, 49, 65, 100].iter().map(|&r| bucket(r, 1, 1).0).collect();
        assert_eq!(rows, [1, 8, 16, 16, 24, 24, 32, 48, 64, 96, 128]);
        assert_eq!(bucket(3, 8, 9), (4, 8, 16));
        assert_eq!(bucket(5, 0, 17), (8, 8, 24));
    }

    #[test]
    fn padding_to_a_bucket_keeps_rows_and_adds_fillers_without_target_tokens() {
        let ex = vec![
            Example { src: vec![10, 11], tgt: vec![20] },
            Example { src: vec![12], tgt: vec![21, 22, 23] },
        ];
        let b = Batch::collate(&ex, &[0, 1]);
        let p = b.padded_to(3, 5, 6);
        assert_eq!(p.size(), 3);
        assert_eq!(p.indices, [0, 1, usize::MAX]);
        assert_eq!(p.src, [10, 11, EOS, PAD, PAD, 12, EOS, PAD, PAD, PAD, EOS, PAD, PAD, PAD, PAD]);
        assert_eq!(p.src_lens, [3, 2, 1]);
        assert_eq!(p.tgt_in[..6], [BOS, 20, PAD, PAD, PAD, PAD]);
        assert_eq!(p.tgt_in[12..], [BOS, PAD, PAD, PAD, PAD, PAD]);
        assert_eq!(p.tgt_out[6..12], [21, 22, 23, EOS, PAD, PAD]);
        assert_eq!(p.tgt_out[12..], [PAD; 6]);
        assert_eq!(p.tgt_tokens(), b.tgt_tokens(), "fillers add no target tokens");
        assert_eq!(p.tgt_mask().iter().filter(|&&k| k).count(), b.tgt_tokens());
        // Padding to the batch's own shape changes nothing.
        let same = b.padded_to(2, b.src_len, b.tgt_len);
        assert_eq!(
            (same.src, same.tgt_in, same.tgt_out),
            (b.src.clone(), b.tgt_in.clone(), b.tgt_out.clone())
        );
    }

    fn examples(n: usize) -> Vec<Example> {
        let mut rng = SplitMix64::new(3);
        (0..n)
            .map(|_| {
                // Target length correlates with source length, as in real corpora.
                let a = 1 + rng.below(40) as usize;
                let b = (a + rng.below(5) as usize).saturating_sub(2).max(1);
                Example { src: vec![7; a], tgt: vec![9; b] }
            })
            .collect()
    }

    #[test]
    fn collate_pads_and_shifts() {
        let ex =
            vec![Example { src: vec![5, 6], tgt: vec![8] }, Example { src: vec![5], tgt: vec![8, 9, 10] }];
        let b = Batch::collate(&ex, &[0, 1]);
        assert_eq!((b.src_len, b.tgt_len), (3, 4));
        assert_eq!(b.src, vec![5, 6, EOS, 5, EOS, PAD]);
        assert_eq!(b.tgt_in, vec![BOS, 8, PAD, PAD, BOS, 8, 9, 10]);
        assert_eq!(b.tgt_out, vec![8, EOS, PAD, PAD, 8, 9, 10, EOS]);
        assert_eq!(b.src_mask(), vec![true, true, true, true, true, false]);
        assert_eq!(b.tgt_tokens(), 6);
    }

    #[test]
    fn batches_respect_the_budget_and_cover_every_example_once() {
        let ex = examples(2000);
        let cfg = BatchConfig { max_tokens: 500, ..Default::default() };
        let batcher = Batcher::new(&ex, cfg);
        let batches = batcher.epoch(1, 0);
        let mut seen: Vec<usize> = batches.iter().flatten().copied().collect();
        seen.sort();
        assert_eq!(seen, (0..2000).collect::<Vec<_>>());
        for b in &batches {
            let c = Batch::collate(&ex, b);
            assert!(c.size() * c.src_len.max(c.tgt_len) <= 500, "over budget");
        }
        assert!(padding_ratio(&ex, &batches) < 0.10, "{}", padding_ratio(&ex, &batches));
    }

    #[test]
    fn shuffling_depends_only_on_seed_and_epoch() {
        let ex = examples(500);
        let batcher = Batcher::new(&ex, BatchConfig { max_tokens: 300, ..Default::default() });
        assert_eq!(
            batcher.epoch(7, 2),
            Batcher::new(&ex, BatchConfig { max_tokens: 300, ..Default::default() }).epoch(7, 2)
        );
        assert_ne!(batcher.epoch(7, 2), batcher.epoch(7, 3));
        assert_ne!(batcher.epoch(7, 2), batcher.epoch(8, 2));
    }

    #[test]
    fn an_example_over_budget_forms_its_own_batch() {
        let ex =
            vec![Example { src: vec![1; 50], tgt: vec![1; 5] }, Example { src: vec![1; 2], tgt: vec![1; 2] }];
        let batcher = Batcher::new(&ex, BatchConfig { max_tokens: 10, ..Default::default() });
        assert_eq!(batcher.ordered(), vec![vec![1], vec![0]]);
    }

    #[test]
    fn max_sentences_caps_rows() {
        let ex = examples(100);
        let cfg = BatchConfig { max_tokens: 100_000, max_sentences: 16, ..Default::default() };
        assert!(Batcher::new(&ex, cfg).ordered().iter().all(|b| b.len() <= 16));
    }
}
