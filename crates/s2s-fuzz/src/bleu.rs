//! Fuzz property of the scorers (`s2s_eval`): BLEU (13a, intl, none) and chrF/chrF++.
//!
//! Input layout: byte 0 picks the BLEU tokeniser, lowercasing and smoothing; the rest, read as
//! UTF-8 with invalid bytes replaced, alternates hypothesis and reference lines.
//!
//! Properties: no panic; every score is finite and in `0..=100`; corpus statistics are the sum
//! of sentence statistics; a corpus scored against itself matches every n-gram it has
//! (counts == totals), has brevity penalty 1, and chrF 100 when it has any character n-gram.

use s2s_eval::{BleuConfig, BleuStats, ChrfConfig, Smoothing, Tokenizer, is_py_whitespace};

/// Runs the property on one input (see the module doc).
pub fn check(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(body);
    let lines: Vec<&str> = text.split('\n').collect();
    let hyps: Vec<&str> = lines.iter().step_by(2).copied().collect();
    let refs: Vec<&str> = lines.iter().skip(1).step_by(2).copied().collect();
    let hyps = &hyps[..refs.len()];
    let bleu = BleuConfig {
        tokenize: [Tokenizer::V13a, Tokenizer::Intl, Tokenizer::None][mode as usize % 3],
        lowercase: mode & 4 != 0,
        smoothing: [Smoothing::Exp, Smoothing::Floor(0.1), Smoothing::AddK(1.0), Smoothing::None]
            [(mode >> 3) as usize % 4],
        effective_order: mode & 32 != 0,
    };
    let in_range = |s: f64| s.is_finite() && (0.0..=100.0 + 1e-9).contains(&s);

    let score = bleu.corpus_score(hyps, &[refs.as_slice()]).expect("equal line counts");
    assert!(in_range(score.score), "BLEU {}", score.score);
    let per_segment = bleu.segment_stats(hyps, &[refs.as_slice()]).expect("equal line counts");
    let sum: BleuStats = per_segment.iter().sum();
    assert_eq!((sum.counts, sum.totals, sum.sys_len), (score.counts, score.totals, score.sys_len));
    for (h, r) in hyps.iter().zip(&refs) {
        let s = bleu.sentence_score(h, &[*r]).expect("one segment");
        assert!(in_range(s.score), "sentence BLEU {} for {h:?} / {r:?}", s.score);
    }

    let same = bleu.corpus_score(&refs, &[refs.as_slice()]).expect("equal line counts");
    assert_eq!(same.counts, same.totals, "a corpus against itself misses n-grams");
    assert!(same.bp == 1.0 || same.sys_len == 0, "brevity penalty {} against itself", same.bp);

    for word_order in [0, 2] {
        let chrf = ChrfConfig { word_order, lowercase: mode & 4 != 0, ..ChrfConfig::default() };
        let score = chrf.corpus_score(hyps, &[refs.as_slice()]).expect("equal line counts");
        assert!(in_range(score.score), "{} {}", score.name, score.score);
        let same = chrf.corpus_score(&refs, &[refs.as_slice()]).expect("equal line counts");
        let has_chars = refs.iter().any(|r| r.chars().any(|c| !is_py_whitespace(c)));
        assert!(
            !has_chars || (same.score - 100.0).abs() < 1e-9,
            "{} against itself: {}",
            same.name,
            same.score
        );
    }
}
