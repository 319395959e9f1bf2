//! Tests on the real corpora in `../shared/datasets` (never copied into the repository).

use std::path::PathBuf;
use std::time::Instant;

use s2s_data::stats::corpus_stats;
use s2s_data::{
    BatchConfig, CorpusFiles, Level, ReadOptions, TokenizerConfig, Tokenizers, UNK, encode_pairs, read_corpus,
};

/// `$S2S_SHARED/datasets/<rel>` (by default `../shared` beside the project root), or `None`
/// when it is missing: the test skips, saying what is missing (fails under `CI=true`).
fn shared(rel: &str) -> Option<PathBuf> {
    s2s_data::shared::require(&manifest_dir(), &format!("datasets/{rel}"))
}

fn multi30k_train() -> Option<s2s_data::Corpus> {
    let dir = shared("multi30k")?;
    let files = CorpusFiles::Aligned { src: dir.join("train.de"), tgt: dir.join("train.en") };
    Some(read_corpus(&files, &ReadOptions::default()).unwrap())
}

#[test]
fn multi30k_reads_all_pairs_normalised() {
    let Some(c) = multi30k_train() else { return };
    assert_eq!(c.report.lines, 29_000);
    assert_eq!(c.report.kept + c.report.skipped_empty + c.report.skipped_long, 29_000);
    // The released train.de has lines with stray and non-breaking spaces: all normalised away.
    for p in &c.pairs {
        for s in [&p.src, &p.tgt] {
            assert!(!s.contains('\u{00A0}') && !s.contains("  ") && s.trim() == s, "{s:?}");
        }
    }
}

/// Every training sentence, both sides, encodes and decodes to itself (unknowns aside).
#[test]
fn multi30k_round_trip_every_level() {
    let Some(c) = multi30k_train() else { return };
    for level in [Level::Bpe, Level::Word, Level::Char] {
        let cfg = TokenizerConfig {
            level,
            vocab_size: if level == Level::Bpe { 8000 } else { 0 },
            joint: true,
            min_freq: 1,
            ..Default::default()
        };
        let tok = Tokenizers::train(&cfg, &c.pairs).unwrap();
        let mut checked = 0;
        for p in &c.pairs {
            for (t, s) in [(&tok.src, &p.src), (&tok.tgt, &p.tgt)] {
                let ids = t.encode(s);
                if ids.contains(&UNK) {
                    continue;
                }
                assert_eq!(&t.decode(&ids), s, "{level:?}");
                checked += 1;
            }
        }
        // A vocabulary trained on this very text knows all of it.
        assert_eq!(checked, 2 * c.pairs.len(), "{level:?}");
    }
}

#[test]
fn multi30k_batches_pad_under_ten_percent() {
    let Some(c) = multi30k_train() else { return };
    let tok = Tokenizers::train(&TokenizerConfig::default(), &c.pairs).unwrap();
    let ex = encode_pairs(&tok, &c.pairs);
    for max_tokens in [1024, 4096] {
        let s = corpus_stats(
            "train",
            &ex,
            (tok.src.vocab_size(), tok.tgt.vocab_size()),
            BatchConfig { max_tokens, ..Default::default() },
            1,
        );
        assert!(s.padding_ratio < 0.10, "padding {:.3} at {max_tokens} tokens", s.padding_ratio);
    }
}

/// Preparing Multi30k gives what the in-memory path gives: the same BPE tokenizer (the corpus
/// is smaller than the sample, so it is learned whole) and the same ids for every pair.
#[test]
fn multi30k_prepared_equals_in_memory() {
    let Some(dir) = shared("multi30k") else { return };
    let files = CorpusFiles::Aligned { src: dir.join("train.de"), tgt: dir.join("train.en") };
    let cache = std::env::temp_dir().join(format!("s2s-real-prepare-{}", std::process::id()));
    let cfg = s2s_data::PrepareConfig { shard_examples: 10_000, ..Default::default() };
    let data = s2s_data::prepare(&files, &cfg, &cache).unwrap().dataset;
    let Some(c) = multi30k_train() else { return };
    let tok = Tokenizers::train(&TokenizerConfig::default(), &c.pairs).unwrap();
    assert_eq!(data.tokenizers().src.to_json().unwrap(), tok.src.to_json().unwrap());
    assert_eq!(data.examples(), encode_pairs(&tok, &c.pairs));
    assert_eq!(data.manifest().read, c.report);
    assert_eq!(data.shard_count(), 3);
    drop(data);
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn anki_tsv_reads_with_columns_swapped() {
    let Some(tsv) = shared("anki-eng-fra/eng-fra.tsv") else { return };
    let files = CorpusFiles::Tsv { tsv, src_col: 0, tgt_col: 1 };
    let start = Instant::now();
    let c = read_corpus(&files, &ReadOptions::default()).unwrap();
    let took = start.elapsed();
    assert!(c.report.lines > 140_000);
    assert_eq!(c.pairs[0].src, "Go.");
    assert_eq!(c.pairs[0].tgt, "Va !");
    // U+202F before French punctuation became an ASCII space.
    assert!(c.pairs.iter().all(|p| !p.tgt.contains('\u{202F}')));
    eprintln!("read {} pairs in {took:?}", c.report.lines);
}

/// This crate's directory: cargo's run-time `CARGO_MANIFEST_DIR` (a target directory shared by
/// clones at other paths may hold a test binary built elsewhere), else the compile-time one.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}
