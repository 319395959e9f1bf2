//! Corpus statistics for `s2s data stats`: sizes, length histograms, vocabulary coverage and
//! the padding ratio of the batches the trainer would make.

use serde::{Deserialize, Serialize};

use crate::Example;
use crate::batch::{BatchConfig, Batcher, bucket_padding, padding_ratio};
use crate::vocab::UNK;

/// Counts of lengths in fixed-width buckets; the last bucket is open-ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    /// Width of each bucket.
    pub width: usize,
    /// `counts[k]` = number of lengths in `[k·width, (k+1)·width)`; the last one also holds
    /// everything longer.
    pub counts: Vec<usize>,
}

impl Histogram {
    /// Buckets `lengths` into `buckets` buckets of `width`.
    pub fn of(lengths: impl Iterator<Item = usize>, width: usize, buckets: usize) -> Self {
        let mut counts = vec![0; buckets.max(1)];
        for l in lengths {
            let k = (l / width.max(1)).min(counts.len() - 1);
            counts[k] += 1;
        }
        Self { width, counts }
    }

    /// An empty histogram of `buckets` buckets of `width` (fill it with [`Histogram::add`]).
    pub fn empty(width: usize, buckets: usize) -> Self {
        Self { width, counts: vec![0; buckets.max(1)] }
    }

    /// Counts one length.
    pub fn add(&mut self, len: usize) {
        let k = (len / self.width.max(1)).min(self.counts.len() - 1);
        self.counts[k] += 1;
    }

    fn render(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let most = self.counts.iter().copied().max().unwrap_or(0).max(1);
        let last = self.counts.len() - 1;
        for (k, &c) in self.counts.iter().enumerate() {
            let label = if k == last {
                format!("{:>3}+    ", k * self.width)
            } else {
                format!("{:>3}–{:<3} ", k * self.width, (k + 1) * self.width - 1)
            };
            writeln!(f, "    {label}{c:>8}  {}", "█".repeat((c * 40).div_ceil(most)))?;
        }
        Ok(())
    }
}

/// One side's token statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideStats {
    /// Tokens (without specials).
    pub tokens: usize,
    /// Mean tokens per sentence.
    pub mean_len: f64,
    /// Longest sentence in tokens.
    pub max_len: usize,
    /// Share of tokens that are not `<unk>` under the run's vocabulary.
    pub coverage: f64,
    /// Vocabulary size (specials included).
    pub vocab_size: usize,
    /// Lengths in tokens, buckets of 10.
    pub lengths: Histogram,
}

/// Statistics of one tokenised split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorpusStats {
    /// Split name.
    pub split: String,
    /// Sentence pairs.
    pub pairs: usize,
    /// Source side.
    pub src: SideStats,
    /// Target side.
    pub tgt: SideStats,
    /// Batches one training epoch would have.
    pub batches: usize,
    /// Mean sentences per batch.
    pub mean_batch_sentences: f64,
    /// Share of padded slots (both sides) in those batches.
    pub padding_ratio: f64,
    /// The same share once the batches are padded to the bucket shapes of captured GPU
    /// steps ([`crate::bucket`]); 0 in statistics stored before it was measured.
    #[serde(default)]
    pub bucket_padding_ratio: f64,
    /// Distinct bucket shapes among those batches (graphs a captured run records).
    #[serde(default)]
    pub bucket_shapes: usize,
}

fn side(seqs: impl Iterator<Item = usize> + Clone, unks: usize, vocab_size: usize) -> SideStats {
    let n = seqs.clone().count().max(1);
    let tokens: usize = seqs.clone().sum();
    SideStats {
        tokens,
        mean_len: tokens as f64 / n as f64,
        max_len: seqs.clone().max().unwrap_or(0),
        coverage: if tokens == 0 { 1.0 } else { 1.0 - unks as f64 / tokens as f64 },
        vocab_size,
        lengths: Histogram::of(seqs, 10, 8),
    }
}

/// One side's [`SideStats`] gathered a sentence at a time (what a prepared dataset records
/// while it is written): the same numbers [`corpus_stats`] computes over a slice.
#[derive(Debug, Clone)]
pub(crate) struct SideAccumulator {
    sentences: usize,
    tokens: usize,
    unks: usize,
    max_len: usize,
    lengths: Histogram,
}

impl SideAccumulator {
    pub(crate) fn new() -> Self {
        Self { sentences: 0, tokens: 0, unks: 0, max_len: 0, lengths: Histogram::empty(10, 8) }
    }

    pub(crate) fn push(&mut self, ids: &[u32]) {
        self.sentences += 1;
        self.tokens += ids.len();
        self.unks += ids.iter().filter(|&&i| i == UNK).count();
        self.max_len = self.max_len.max(ids.len());
        self.lengths.add(ids.len());
    }

    pub(crate) fn finish(self, vocab_size: usize) -> SideStats {
        SideStats {
            tokens: self.tokens,
            mean_len: self.tokens as f64 / self.sentences.max(1) as f64,
            max_len: self.max_len,
            coverage: if self.tokens == 0 { 1.0 } else { 1.0 - self.unks as f64 / self.tokens as f64 },
            vocab_size,
            lengths: self.lengths,
        }
    }
}

/// Computes the statistics of `examples` as batched with `cfg` (epoch 0 of `seed`).
pub fn corpus_stats(
    split: &str,
    examples: &[Example],
    vocab_sizes: (usize, usize),
    cfg: BatchConfig,
    seed: u64,
) -> CorpusStats {
    let unk = |f: fn(&Example) -> &Vec<u32>| {
        examples.iter().map(|e| f(e).iter().filter(|&&i| i == UNK).count()).sum()
    };
    let batches = Batcher::new(examples, cfg).epoch(seed, 0);
    CorpusStats {
        split: split.to_string(),
        pairs: examples.len(),
        src: side(examples.iter().map(|e| e.src.len()), unk(|e| &e.src), vocab_sizes.0),
        tgt: side(examples.iter().map(|e| e.tgt.len()), unk(|e| &e.tgt), vocab_sizes.1),
        batches: batches.len(),
        mean_batch_sentences: examples.len() as f64 / batches.len().max(1) as f64,
        padding_ratio: padding_ratio(examples, &batches),
        bucket_padding_ratio: bucket_padding(examples, &batches).0,
        bucket_shapes: bucket_padding(examples, &batches).1,
    }
}

impl std::fmt::Display for CorpusStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}: {} pairs", self.split, self.pairs)?;
        for (name, s) in [("source", &self.src), ("target", &self.tgt)] {
            writeln!(
                f,
                "  {name}: {} tokens, mean {:.1}, max {}, vocabulary {}, coverage {:.2}% (non-<unk> tokens)",
                s.tokens,
                s.mean_len,
                s.max_len,
                s.vocab_size,
                100.0 * s.coverage
            )?;
            writeln!(f, "  {name} length histogram (tokens):")?;
            s.lengths.render(f)?;
        }
        writeln!(
            f,
            "  batches: {} ({:.1} sentences each), padding {:.2}%; padded to captured-step buckets \
             {:.2}% in {} shapes",
            self.batches,
            self.mean_batch_sentences,
            100.0 * self.padding_ratio,
            100.0 * self.bucket_padding_ratio,
            self.bucket_shapes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_and_overflow() {
        let h = Histogram::of([0, 9, 10, 25, 300].into_iter(), 10, 3);
        assert_eq!(h.counts, vec![2, 1, 2]);
    }

    #[test]
    fn coverage_counts_unknowns() {
        let ex = vec![Example { src: vec![5, UNK, 6, 7], tgt: vec![5] }];
        let s = corpus_stats("t", &ex, (10, 10), BatchConfig::default(), 1);
        assert!((s.src.coverage - 0.75).abs() < 1e-12);
        assert_eq!(s.tgt.coverage, 1.0);
        assert_eq!(s.batches, 1);
        assert_eq!(s.padding_ratio, 0.0);
        // One row of 5 + 2 positions in a bucket of 1 × (8 + 8): 9 of 16 slots padded.
        assert_eq!((s.bucket_padding_ratio, s.bucket_shapes), (9.0 / 16.0, 1));
    }
}
