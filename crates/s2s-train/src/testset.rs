//! The test-split evaluation of a trained run, shared by `s2s train` and `s2s experiment`:
//! decode every test source (greedy or beam), score against the references (BLEU, chrF, BLEU
//! by source length), perplexity, decoding speed, and cross-attention for a few sentences.
//! Written to `RUN/test/{hypotheses.txt, scores.json, attention.json}`.

use std::path::Path;
use std::time::Instant;

use burn::tensor::Device;
use s2s_data::{BatchConfig, Pair, Tokenizers, encode_pairs};
use s2s_decode::{MaxLength, MemoryLimit, Names, RowState, SearchSize};
use s2s_models::{Model, ModelSpec};
use serde::{Deserialize, Serialize};

use crate::error::TrainError;
use crate::evaluate::{Search, detokenize, nll, translate};

/// BLEU of one source-length bucket.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BucketScore {
    /// `0-9`, `10-19`, …, `50+` (source words).
    pub bucket: String,
    /// Sentences in the bucket.
    pub sentences: usize,
    /// Corpus BLEU of the bucket.
    pub bleu: f64,
}

/// `test/scores.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TestScores {
    /// Corpus BLEU (sacreBLEU defaults: 13a, exp smoothing, cased).
    pub bleu: f64,
    /// Its signature.
    pub bleu_signature: String,
    /// chrF2.
    pub chrf: f64,
    /// Its signature.
    pub chrf_signature: String,
    /// Teacher-forced perplexity.
    pub ppl: f64,
    /// Test sentences.
    pub sentences: usize,
    /// `greedy` or `beam-K`.
    pub decoding: String,
    /// Decoding wall time in seconds.
    pub decode_seconds: f64,
    /// Sentences per second decoded.
    pub decode_sentences_per_s: f64,
    /// BLEU per source-length bucket.
    pub bleu_by_source_length: Vec<BucketScore>,
}

/// One sentence's cross-attention, for heatmaps.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AttentionExample {
    /// Source tokens (subwords) and `</s>`.
    pub src: Vec<String>,
    /// Output tokens and `</s>`.
    pub out: Vec<String>,
    /// `weights[t][i]`.
    pub weights: Vec<Vec<f32>>,
}

/// The search's name in reports.
pub fn search_name(search: &Search) -> String {
    match search {
        Search::Greedy { .. } => "greedy".into(),
        Search::Beam(c) => format!("beam-{}", c.beam),
        Search::Sample(c) => format!("sample-t{}-k{}-p{}", c.temperature, c.top_k, c.top_p),
    }
}

/// Test sentences decoded together at most.
pub const TEST_SENTENCES: usize = 64;

/// How many test `sources` `search` decodes together with a model of `spec`:
/// [`TEST_SENTENCES`], or fewer where that many of the longest would exceed this machine's
/// search memory limit ([`MemoryLimit::from_env`]); an error naming the beam when not even
/// one fits. The output does not depend on it (a sentence's hypotheses do not depend on its
/// batch).
pub fn test_batch_sentences(
    spec: &ModelSpec,
    tok: &Tokenizers,
    sources: &[Vec<u32>],
    search: &Search,
) -> Result<usize, TrainError> {
    let (beam, max_length, attention) = match search {
        Search::Greedy { limit, attention } => (1, *limit, *attention),
        Search::Beam(c) => (c.beam, c.max_length, c.attention),
        Search::Sample(c) => (1, c.max_length, false),
    };
    let size = SearchSize {
        beam,
        sentences: TEST_SENTENCES,
        vocab: tok.tgt.vocab_size(),
        src_len: sources.iter().map(Vec::len).max().unwrap_or(0) + 1,
        max_length,
        attention,
        observed: false,
        state: RowState::of(spec),
    };
    let limit = MemoryLimit::from_env().map_err(|e| TrainError::Config(e.to_string()))?;
    match size.sentences_within(limit) {
        0 => {
            let names = Names {
                beam: "the beam ([decode] beam)",
                sentences: "the sentences decoded together",
                source: "the longest test source",
            };
            let e = SearchSize { sentences: 1, ..size }.check(limit).expect_err("not one sentence fits");
            Err(TrainError::Config(format!("test decoding: {}", e.message(&names))))
        }
        n => Ok(n),
    }
}

/// Evaluates `model` (of `spec`) on `test` and writes `run_dir/test/`.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_test(
    run_dir: &Path,
    model: &Model,
    spec: &ModelSpec,
    tok: &Tokenizers,
    test: &[Pair],
    batch: BatchConfig,
    search: &Search,
    device: &Device,
) -> Result<TestScores, TrainError> {
    let ex = encode_pairs(tok, test);
    let refs: Vec<String> = test.iter().map(|p| p.tgt.clone()).collect();
    let sources: Vec<Vec<u32>> = ex.iter().map(|e| e.src.clone()).collect();
    let sentences = test_batch_sentences(spec, tok, &sources, search)?;
    let decode_batch =
        BatchConfig { max_tokens: batch.max_tokens.max(1024), max_sentences: sentences, ..batch };
    let t0 = Instant::now();
    let hyps = translate(model, &sources, decode_batch, search, device, false);
    let decode_seconds = t0.elapsed().as_secs_f64();
    let text = detokenize(&tok.tgt, &hyps);
    let (sum, tokens) = nll(model, &ex, batch, device);
    let src_lens: Vec<usize> = test.iter().map(|p| s2s_eval::word_count(&p.src)).collect();
    let ppl = s2s_eval::perplexity(sum, tokens);
    let scores = test_scores(&text, &refs, &src_lens, ppl, search, decode_seconds)?;
    // Cross-attention of three sentences of at least 10 words (greedy, for heatmaps).
    let picked: Vec<usize> = (0..test.len()).filter(|&i| src_lens[i] >= 10).take(3).collect();
    let few: Vec<Vec<u32>> = picked.iter().map(|&i| sources[i].clone()).collect();
    let attention = attention_examples(model, tok, &few, max_length(search), decode_batch, device);
    write_test(run_dir, &text, &refs, &scores, &attention)?;
    Ok(scores)
}

/// Scores the outputs `text` against `refs`: BLEU, chrF, BLEU by source length (`src_lens`, one
/// per test sentence), with the perplexity `ppl` and the decoding speed.
fn test_scores(
    text: &[String],
    refs: &[String],
    src_lens: &[usize],
    ppl: f64,
    search: &Search,
    decode_seconds: f64,
) -> Result<TestScores, TrainError> {
    let bleu = s2s_eval::corpus_bleu(text, &[refs])?;
    let chrf = s2s_eval::corpus_chrf(text, &[refs])?;
    let buckets = s2s_eval::bleu_by_length(
        &s2s_eval::BleuConfig::default(),
        src_lens,
        text,
        &[refs],
        &s2s_eval::DEFAULT_LENGTH_EDGES,
    )?;
    let sentences = src_lens.len();
    Ok(TestScores {
        bleu: bleu.score,
        bleu_signature: bleu.signature,
        chrf: chrf.score,
        chrf_signature: chrf.signature,
        ppl,
        sentences,
        decoding: search_name(search),
        decode_seconds,
        decode_sentences_per_s: sentences as f64 / decode_seconds.max(1e-9),
        bleu_by_source_length: buckets
            .iter()
            .map(|b| BucketScore { bucket: b.label.clone(), sentences: b.count, bleu: b.bleu.score })
            .collect(),
    })
}

/// Returns the search's output length limit.
fn max_length(search: &Search) -> MaxLength {
    match search {
        Search::Greedy { limit, .. } => *limit,
        Search::Beam(c) => c.max_length,
        Search::Sample(c) => c.max_length,
    }
}

/// Decodes the sources `few` greedily (up to `limit`) keeping cross-attention, and returns each
/// one's tokens and weights (none for a model without attention).
fn attention_examples(
    model: &Model,
    tok: &Tokenizers,
    few: &[Vec<u32>],
    limit: MaxLength,
    batch: BatchConfig,
    device: &Device,
) -> Vec<AttentionExample> {
    let with_att = translate(model, few, batch, &Search::Greedy { limit, attention: true }, device, false);
    few.iter()
        .zip(with_att)
        .filter_map(|(src, h)| {
            let h = h.into_iter().next()?;
            // Models without attention (the plain LSTM) leave no weights.
            let weights = h.attention.filter(|w| w.iter().any(|row| !row.is_empty()))?;
            let eos = || std::iter::once("</s>".to_string());
            Some(AttentionExample {
                src: src.iter().map(|&i| tok.src.token(i)).chain(eos()).collect(),
                out: h.tokens.iter().map(|&i| tok.tgt.token(i)).chain(eos()).collect(),
                weights,
            })
        })
        .collect()
}

/// Writes `run_dir/test/`: the hypotheses, the references, the scores and the attention examples.
fn write_test(
    run_dir: &Path,
    text: &[String],
    refs: &[String],
    scores: &TestScores,
    attention: &[AttentionExample],
) -> Result<(), TrainError> {
    let dir = run_dir.join("test");
    std::fs::create_dir_all(&dir).map_err(|e| TrainError::io(&dir, e))?;
    let write = |name: &str, bytes: Vec<u8>| s2s_data::write_atomic(&dir.join(name), &bytes);
    write("hypotheses.txt", (text.join("\n") + "\n").into_bytes())?;
    // What they were scored against, for the report's paired significance tests.
    write("references.txt", (refs.join("\n") + "\n").into_bytes())?;
    write("scores.json", serde_json::to_vec_pretty(scores).expect("scores serialise"))?;
    write("attention.json", serde_json::to_vec(attention).expect("attention serialises"))?;
    Ok(())
}

/// Reads `run_dir/test/scores.json`, if the run has been evaluated.
pub fn read_scores(run_dir: &Path) -> Option<TestScores> {
    let text = std::fs::read_to_string(run_dir.join("test/scores.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// The default test search of `s2s train` (greedy, the run's length limit).
pub fn greedy(limit: MaxLength) -> Search {
    Search::Greedy { limit, attention: false }
}
