//! Token-budget batches streamed from a [`PreparedDataset`] in bounded memory, deterministic
//! in (seed, epoch) and resumable at any batch.
//!
//! An epoch of [`StreamBatcher`]:
//! 1. cuts the example indices `0..n` into **blocks** of [`StreamBatcher::block_examples`]
//!    consecutive examples (default 64: a few pages of ids, so reading stays nearly
//!    sequential) and shuffles the block order — blocks of every shard are mixed;
//! 2. takes examples block after block into a **pool** of [`StreamBatcher::pool_examples`]
//!    examples (`pool_batches × max_tokens / mean length`, as [`crate::Batcher`] sizes its
//!    pools), shuffles the pool, sorts it by (source, target) length (a stable sort, so equal
//!    lengths stay in shuffled order), fills budget batches exactly as [`crate::Batcher`] does,
//!    and shuffles the order of that pool's batches;
//! 3. hands those batches out, then fills the next pool.
//!
//! All randomness comes from one [`SplitMix64`] seeded with `seed ^ epoch · 0x9E3779B97F4A7C15`
//! (as [`crate::Batcher`]), so an epoch is a function of (seed, epoch) and of the dataset only.
//! [`StreamBatcher::resume`] replays the planning of the pools before the given batch (lengths
//! only, no ids are read) and continues with exactly the batches an uninterrupted epoch gives.
//!
//! Unlike [`crate::Batcher`], batch order is shuffled within a pool rather than across the
//! epoch (the pools themselves are random draws of blocks), and examples of one block always
//! share a pool.
//!
//! # Memory
//! The shuffled block order, 4 bytes per block (10M examples in blocks of 64: 625 KiB), and one
//! pool: 24 bytes per pooled example for (index, lengths) plus 8 per index of its batches —
//! with the default 100 batches of 4096 tokens and 30-token sentences, 13,600 examples, 435 KiB.
//! Nothing else grows with the corpus: lengths are read block by block and ids batch by batch
//! with positioned reads, which map nothing (see [`mod@crate::shard`] for why not the map).

use crate::batch::{Batch, BatchConfig, fill_batches};
use crate::prepared::PreparedDataset;
use crate::rng::SplitMix64;
use crate::stats::CorpusStats;

/// Default examples per block.
pub const DEFAULT_BLOCK: usize = 64;

/// Plans token-budget batches over a prepared dataset (see the module doc).
#[derive(Debug, Clone)]
pub struct StreamBatcher<'a> {
    data: &'a PreparedDataset,
    cfg: BatchConfig,
    block: usize,
    pool: usize,
}

impl<'a> StreamBatcher<'a> {
    /// A batcher over `data` making `cfg` batches (one pass over the length index for the mean
    /// length that sizes the pools).
    pub fn new(data: &'a PreparedDataset, cfg: BatchConfig) -> Self {
        let mut sum = 0usize;
        data.for_each_len(|_, s, t| sum += cfg.budget_on.pick(s + 1, t + 1));
        let mean = sum / data.len().max(1);
        let pool = (cfg.pool_batches * cfg.max_tokens / mean.max(1)).max(1);
        let mut b = Self { data, cfg, block: DEFAULT_BLOCK, pool };
        b.block = b.block_floor(DEFAULT_BLOCK);
        b
    }

    /// Blocks are numbered in u32: a dataset of more than 2³² blocks gets larger blocks.
    fn block_floor(&self, block: usize) -> usize {
        block.max(1).max(self.data.len().div_ceil(u32::MAX as usize))
    }

    /// Uses blocks of `block` consecutive examples (1: a full shuffle, with random reads).
    pub fn with_block(mut self, block: usize) -> Self {
        self.block = self.block_floor(block);
        self
    }

    /// Uses pools of `pool` examples instead of `pool_batches` batches' worth.
    pub fn with_pool(mut self, pool: usize) -> Self {
        self.pool = pool.max(1);
        self
    }

    /// Examples per pool.
    pub fn pool_examples(&self) -> usize {
        self.pool
    }

    /// Examples per block.
    pub fn block_examples(&self) -> usize {
        self.block
    }

    /// The batch config.
    pub fn config(&self) -> BatchConfig {
        self.cfg
    }

    /// The batches (index lists) of epoch `epoch` (0-based), from the first.
    pub fn epoch(&self, seed: u64, epoch: u64) -> EpochPlan<'a> {
        let mut rng = SplitMix64::new(seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let n_blocks = self.data.len().div_ceil(self.block);
        let mut blocks: Vec<u32> = (0..n_blocks as u32).collect();
        rng.shuffle(&mut blocks);
        EpochPlan {
            data: self.data,
            cfg: self.cfg,
            block: self.block,
            pool_size: self.pool,
            rng,
            blocks,
            next_block: 0,
            in_block: 0,
            pool: Vec::new(),
            lens: Vec::new(),
            ready: Vec::new(),
            position: 0,
        }
    }

    /// The batches of epoch `epoch` from batch `batch` on: the same batches
    /// `epoch(seed, epoch).skip(batch)` gives, without collating the skipped ones.
    pub fn resume(&self, seed: u64, epoch: u64, batch: usize) -> EpochPlan<'a> {
        let mut plan = self.epoch(seed, epoch);
        plan.skip_batches(batch);
        plan
    }

    /// Batches in epoch `epoch` (a planning pass over the lengths).
    pub fn epoch_len(&self, seed: u64, epoch: u64) -> usize {
        let mut plan = self.epoch(seed, epoch);
        plan.skip_batches(usize::MAX);
        plan.position()
    }

    /// The padded batches of epoch `epoch` from batch `batch` on (an error only if a shard
    /// changed on disk after it was checked).
    pub fn batches(
        &self,
        seed: u64,
        epoch: u64,
        batch: usize,
    ) -> impl Iterator<Item = crate::Result<Batch>> + 'a {
        let data = self.data;
        self.resume(seed, epoch, batch).map(move |ix| data.collate(&ix))
    }

    /// (batches, padding ratio over both sides) of epoch `epoch`, from the lengths alone.
    pub fn summary(&self, seed: u64, epoch: u64) -> (usize, f64) {
        let (mut batches, mut real, mut slots) = (0usize, 0usize, 0usize);
        for b in self.epoch(seed, epoch) {
            batches += 1;
            let (mut ms, mut mt) = (0, 0);
            for &i in &b {
                let (s, t) = self.data.lens(i);
                real += s + t + 2;
                ms = ms.max(s + 1);
                mt = mt.max(t + 1);
            }
            slots += b.len() * (ms + mt);
        }
        (batches, if slots == 0 { 0.0 } else { 1.0 - real as f64 / slots as f64 })
    }

    /// Epoch `epoch`'s batches padded to the bucket shapes of captured GPU steps
    /// ([`crate::bucket`]): the share of padded slots, both sides, and the distinct shapes.
    pub fn bucket_summary(&self, seed: u64, epoch: u64) -> (f64, usize) {
        let (mut real, mut slots) = (0usize, 0usize);
        let mut shapes = std::collections::BTreeSet::new();
        for b in self.epoch(seed, epoch) {
            let (mut ms, mut mt) = (0, 0);
            for &i in &b {
                let (s, t) = self.data.lens(i);
                real += s + t + 2;
                ms = ms.max(s + 1);
                mt = mt.max(t + 1);
            }
            let shape = crate::bucket(b.len(), ms, mt);
            slots += shape.0 * (shape.1 + shape.2);
            shapes.insert(shape);
        }
        (if slots == 0 { 0.0 } else { 1.0 - real as f64 / slots as f64 }, shapes.len())
    }
}

/// One epoch's batches as index lists (global example indices), pool by pool; collate them
/// with [`PreparedDataset::collate`].
#[derive(Debug, Clone)]
pub struct EpochPlan<'a> {
    data: &'a PreparedDataset,
    cfg: BatchConfig,
    block: usize,
    pool_size: usize,
    rng: SplitMix64,
    blocks: Vec<u32>,
    next_block: usize,
    in_block: usize,
    /// (index, source length, target length) of the pooled examples.
    pool: Vec<(usize, u32, u32)>,
    /// Lengths of the block being read.
    lens: Vec<(u32, u32)>,
    /// The current pool's batches not yet handed out, last first.
    ready: Vec<Vec<usize>>,
    position: usize,
}

impl EpochPlan<'_> {
    /// Index of the next batch in the epoch (batches handed out or skipped so far).
    pub fn position(&self) -> usize {
        self.position
    }

    /// Examples held in the current pool (never more than the pool size).
    pub fn buffered(&self) -> usize {
        self.pool.len()
    }

    /// Blocks in the epoch's shuffled block order (4 bytes each).
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Plans the next pool; false at the end of the epoch.
    fn refill(&mut self) -> bool {
        self.pool.clear();
        let n = self.data.len();
        while self.pool.len() < self.pool_size && self.next_block < self.blocks.len() {
            let start = self.blocks[self.next_block] as usize * self.block;
            let end = (start + self.block).min(n);
            let from = start + self.in_block;
            let take = (end - from).min(self.pool_size - self.pool.len());
            self.lens.clear();
            // A shard that changed on disk after it was checked cannot be planned over (a map
            // would have faulted there too): stop with the error, which names the file.
            self.data.read_lens(from, take, &mut self.lens).unwrap_or_else(|e| panic!("{e}"));
            self.pool.extend(self.lens.iter().zip(from..).map(|(&(s, t), i)| (i, s, t)));
            self.in_block += take;
            if from + take == end {
                self.next_block += 1;
                self.in_block = 0;
            }
        }
        if self.pool.is_empty() {
            return false;
        }
        self.rng.shuffle(&mut self.pool);
        self.pool.sort_by_key(|&(_, s, t)| (s, t));
        let side = self.cfg.budget_on;
        let mut batches = fill_batches(
            &self.cfg,
            self.pool.iter().map(|&(i, s, t)| (i, side.pick(s as usize + 1, t as usize + 1))),
        );
        self.rng.shuffle(&mut batches);
        batches.reverse();
        self.ready = batches;
        true
    }

    /// Skips up to `k` batches (planning pools, collating nothing).
    fn skip_batches(&mut self, mut k: usize) {
        while k > 0 {
            if self.ready.is_empty() {
                if !self.refill() {
                    return;
                }
            }
            let d = k.min(self.ready.len());
            self.ready.truncate(self.ready.len() - d);
            self.position += d;
            k -= d;
        }
    }
}

impl Iterator for EpochPlan<'_> {
    type Item = Vec<usize>;

    fn next(&mut self) -> Option<Vec<usize>> {
        if self.ready.is_empty() && !self.refill() {
            return None;
        }
        self.position += 1;
        self.ready.pop()
    }
}

impl PreparedDataset {
    /// The statistics with batches made by `cfg` (epoch 0 of `seed`): the stored token
    /// statistics plus a batching pass over the length index.
    pub fn stats_for(&self, cfg: BatchConfig, seed: u64) -> CorpusStats {
        let batcher = StreamBatcher::new(self, cfg);
        let (batches, padding_ratio) = batcher.summary(seed, 0);
        let (bucket_padding_ratio, bucket_shapes) = batcher.bucket_summary(seed, 0);
        CorpusStats {
            batches,
            mean_batch_sentences: self.len() as f64 / batches.max(1) as f64,
            padding_ratio,
            bucket_padding_ratio,
            bucket_shapes,
            ..self.stats().clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Batch;
    use crate::testutil::{Scratch, prepared};

    fn cfg(max_tokens: usize) -> BatchConfig {
        BatchConfig { max_tokens, pool_batches: 8, ..BatchConfig::default() }
    }

    #[test]
    fn every_example_once_per_epoch_within_the_budget() {
        let dir = Scratch::new("stream-cover");
        let data = prepared(dir.path(), 1500, 400);
        let b = StreamBatcher::new(&data, cfg(300)).with_block(16);
        for epoch in 0..3 {
            let batches: Vec<Vec<usize>> = b.epoch(5, epoch).collect();
            let mut seen: Vec<usize> = batches.iter().flatten().copied().collect();
            seen.sort();
            assert_eq!(seen, (0..data.len()).collect::<Vec<_>>(), "epoch {epoch}");
            for ix in &batches {
                let c = data.collate(ix).unwrap();
                assert!(c.size() == 1 || c.size() * c.src_len.max(c.tgt_len) <= 300, "over budget");
            }
        }
    }

    #[test]
    fn epoch_is_a_function_of_seed_and_epoch() {
        let dir = Scratch::new("stream-det");
        let data = prepared(dir.path(), 800, 300);
        let a: Vec<_> = StreamBatcher::new(&data, cfg(200)).epoch(3, 1).collect();
        let b: Vec<_> = StreamBatcher::new(&data, cfg(200)).epoch(3, 1).collect();
        assert_eq!(a, b);
        let other_epoch: Vec<_> = StreamBatcher::new(&data, cfg(200)).epoch(3, 2).collect();
        let other_seed: Vec<_> = StreamBatcher::new(&data, cfg(200)).epoch(4, 1).collect();
        assert_ne!(a, other_epoch);
        assert_ne!(a, other_seed);
    }

    #[test]
    fn resume_continues_exactly_where_the_epoch_was() {
        let dir = Scratch::new("stream-resume");
        let data = prepared(dir.path(), 900, 250);
        let b = StreamBatcher::new(&data, cfg(150)).with_block(8);
        let full: Vec<Vec<usize>> = b.epoch(11, 4).collect();
        assert!(full.len() > 20, "{} batches", full.len());
        assert_eq!(b.epoch_len(11, 4), full.len());
        for k in [0, 1, 7, full.len() / 2, full.len() - 1, full.len(), full.len() + 5] {
            let mut plan = b.resume(11, 4, k);
            assert_eq!(plan.position(), k.min(full.len()));
            let rest: Vec<Vec<usize>> = plan.by_ref().collect();
            assert_eq!(rest, full[k.min(full.len())..].to_vec(), "resumed at {k}");
        }
        let collated: Vec<Batch> = b.batches(11, 4, 3).take(2).map(Result::unwrap).collect();
        assert_eq!(collated[0], data.collate(&full[3]).unwrap());
        assert_eq!(collated[1], data.collate(&full[4]).unwrap());
    }

    #[test]
    fn the_buffer_is_one_pool_whatever_the_corpus_size() {
        let dir = Scratch::new("stream-bounded");
        for n in [600, 2400] {
            let sub = dir.path().join(n.to_string());
            std::fs::create_dir_all(&sub).unwrap();
            let data = prepared(&sub, n, 500);
            let b = StreamBatcher::new(&data, cfg(100)).with_pool(64).with_block(16);
            let mut plan = b.epoch(1, 0);
            assert_eq!(plan.blocks(), n.div_ceil(16));
            let (mut most, mut batches) = (0, 0);
            while plan.next().is_some() {
                most = most.max(plan.buffered());
                batches += 1;
            }
            assert_eq!(most, 64, "n = {n}: the pool fills up to its size and no further");
            assert!(batches > n / 64, "n = {n}");
        }
    }

    #[test]
    fn pools_are_sorted_so_padding_stays_low() {
        let dir = Scratch::new("stream-padding");
        let data = prepared(dir.path(), 2000, 2000);
        let (batches, padding) =
            StreamBatcher::new(&data, BatchConfig { max_tokens: 400, ..Default::default() }).summary(1, 0);
        assert!(batches > 10);
        assert!(padding < 0.10, "padding {padding}");
        let (bucketed, shapes) =
            StreamBatcher::new(&data, BatchConfig { max_tokens: 400, ..Default::default() })
                .bucket_summary(1, 0);
        assert!(bucketed > padding && bucketed < 0.6 && shapes >= 2, "bucketed {bucketed}, {shapes} shapes");
    }
}
