//! Corpus BLEU broken down by source sentence length.
//!
//! Buckets are half-open word-count ranges `[lo, hi)`: with the default edges
//! `[10, 20, 30, 40, 50]` they are `0-9`, `10-19`, `20-29`, `30-39`, `40-49` and `50+`
//! (the first starts at 0, the last is unbounded). Each bucket's score is the corpus
//! BLEU of exactly the sentences in it, i.e. what sacreBLEU would give on that subset.
//! Every bucket is returned, also an empty one (with `count` 0 and a zero score), so
//! tables line up across systems.

use serde::{Deserialize, Serialize};

use crate::bleu::{BleuConfig, BleuScore, BleuStats};
use crate::error::EvalError;
use crate::tokenize::py_split;

/// The default bucket edges, in source words.
pub const DEFAULT_LENGTH_EDGES: [usize; 5] = [10, 20, 30, 40, 50];

/// Number of words in `source`, split on whitespace as Python's `str.split()` does.
pub fn word_count(source: &str) -> usize {
    py_split(source).count()
}

/// BLEU of the sentences whose source length falls in one bucket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LengthBucket {
    /// `lo-(hi-1)` (or just `lo` for a one-length bucket), or `lo+` for the last bucket.
    pub label: String,
    /// Smallest source length in the bucket (inclusive).
    pub lo: usize,
    /// End of the bucket (exclusive); `None` for the last, unbounded bucket.
    pub hi: Option<usize>,
    /// Number of sentences in the bucket.
    pub count: usize,
    /// Corpus BLEU of those sentences (score 0 when `count` is 0).
    pub bleu: BleuScore,
}

fn label(lo: usize, hi: Option<usize>) -> String {
    match hi {
        None => format!("{lo}+"),
        Some(hi) if hi == lo + 1 => format!("{lo}"),
        Some(hi) => format!("{lo}-{}", hi - 1),
    }
}

/// Corpus BLEU per source-length bucket.
///
/// `src_lens[i]` is the source length in words of segment `i` (see [`word_count`]);
/// `hyps` and each stream of `refs` are aligned with it. `edges` must be strictly
/// increasing and positive; they split `0..` into `edges.len() + 1` buckets
/// `[0, e0), [e0, e1), ..., [e_last, ∞)`. Empty `edges` gives one bucket `0+`.
pub fn bleu_by_length<H, R, S>(
    config: &BleuConfig,
    src_lens: &[usize],
    hyps: &[H],
    refs: &[R],
    edges: &[usize],
) -> Result<Vec<LengthBucket>, EvalError>
where
    H: AsRef<str> + Sync,
    R: AsRef<[S]> + Sync,
    S: AsRef<str> + Sync,
{
    if edges.first() == Some(&0) || edges.windows(2).any(|w| w[0] >= w[1]) {
        return Err(EvalError::InvalidOption(format!(
            "length bucket edges must be positive and strictly increasing, got {edges:?}"
        )));
    }
    if src_lens.len() != hyps.len() {
        return Err(EvalError::LengthMismatch {
            what: "source lengths",
            hyps: hyps.len(),
            len: src_lens.len(),
        });
    }
    let seg = config.segment_stats(hyps, refs)?;

    let mut sums = vec![(0usize, BleuStats::default()); edges.len() + 1];
    for (&len, stats) in src_lens.iter().zip(&seg) {
        // Index of the first edge above `len` = number of edges <= len.
        let b = edges.partition_point(|&e| e <= len);
        sums[b].0 += 1;
        sums[b].1 += stats;
    }

    Ok(sums
        .into_iter()
        .enumerate()
        .map(|(b, (count, stats))| {
            let lo = if b == 0 { 0 } else { edges[b - 1] };
            let hi = edges.get(b).copied();
            LengthBucket { label: label(lo, hi), lo, hi, count, bleu: config.score_stats(&stats, refs.len()) }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_half_open_and_match_subset_bleu() {
        let srcs = ["a b c", "a b c d e f g h i j", "x", "one two three four five six seven eight nine"];
        let lens: Vec<usize> = srcs.iter().map(|s| word_count(s)).collect();
        assert_eq!(lens, [3, 10, 1, 9]);
        let hyps = ["the cat sat", "a dog barks loudly today", "hi", "what is this"];
        let refs = [vec!["the cat sat down", "a dog barks today", "hi there", "what is that"]];
        let cfg = BleuConfig::default();
        let buckets = bleu_by_length(&cfg, &lens, &hyps, &refs, &DEFAULT_LENGTH_EDGES).unwrap();
        let labels: Vec<&str> = buckets.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(labels, ["0-9", "10-19", "20-29", "30-39", "40-49", "50+"]);
        assert_eq!(buckets.iter().map(|b| b.count).collect::<Vec<_>>(), [3, 1, 0, 0, 0, 0]);
        assert_eq!((buckets[0].lo, buckets[0].hi), (0, Some(10)));
        assert_eq!((buckets[5].lo, buckets[5].hi), (50, None));

        // Bucket 0 is the corpus BLEU of sentences 0, 2, 3.
        let sub = cfg
            .corpus_score(&[hyps[0], hyps[2], hyps[3]], &[vec![refs[0][0], refs[0][2], refs[0][3]]])
            .unwrap();
        assert_eq!(buckets[0].bleu, sub);
        let sub = cfg.corpus_score(&[hyps[1]], &[vec![refs[0][1]]]).unwrap();
        assert_eq!(buckets[1].bleu, sub);
        assert_eq!(buckets[2].bleu.score, 0.0);
        assert_eq!(buckets[2].bleu.sys_len, 0);
    }

    #[test]
    fn custom_edges_and_errors() {
        let cfg = BleuConfig::default();
        let b = bleu_by_length(&cfg, &[0, 1, 5], &["a", "b", "c"], &[vec!["a", "b", "c"]], &[1, 2]).unwrap();
        let labels: Vec<&str> = b.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(labels, ["0", "1", "2+"]);
        assert_eq!(b.iter().map(|b| b.count).collect::<Vec<_>>(), [1, 1, 1]);
        let b = bleu_by_length(&cfg, &[3], &["a"], &[vec!["a"]], &[]).unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].label, "0+");
        assert!(bleu_by_length(&cfg, &[3], &["a"], &[vec!["a"]], &[5, 5]).is_err());
        assert!(bleu_by_length(&cfg, &[3], &["a"], &[vec!["a"]], &[0, 5]).is_err());
        assert!(matches!(
            bleu_by_length(&cfg, &[3, 4], &["a"], &[vec!["a"]], &[5]),
            Err(EvalError::LengthMismatch { .. })
        ));
    }
}
