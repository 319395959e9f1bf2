//! Validation and test measurements shared by the loop and the CLI: teacher-forced
//! perplexity and greedy-decoded BLEU.

use burn::tensor::Device;
use s2s_data::{Batch, BatchConfig, Batcher, Example, Tokenizer};
use s2s_decode::{
    BeamConfig, CapturedSearch, Hypothesis, Incremental, MaxLength, Run, SampleConfig, beam_search,
    beam_search_prefixed, greedy, greedy_prefixed, sample,
};
use s2s_models::{Model, Source};

use crate::core_split::{CoreSplit, row_ranges};
use crate::loss::label_smoothed_loss;
use crate::step::DeviceBatch;

/// Summed NLL and tokens over `examples` (teacher-forced; padding excluded, `</s>` included).
pub fn nll(model: &Model, examples: &[Example], batch: BatchConfig, device: &Device) -> (f64, u64) {
    let (mut sum, mut tokens) = (0.0, 0u64);
    for idx in Batcher::new(examples, batch).ordered() {
        let b = DeviceBatch::new(&Batch::collate(examples, &idx), device);
        let out = model.forward(&b.src, b.tgt_in.clone());
        let l = label_smoothed_loss(out.logits, b.tgt_out, &b.keep, 0.0);
        sum += l.nll.into_scalar::<f32>() as f64;
        tokens += b.tokens as u64;
    }
    (sum, tokens)
}

/// How to search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Search {
    /// Greedy search.
    Greedy {
        /// Output length limit.
        limit: MaxLength,
        /// Keep cross-attention.
        attention: bool,
    },
    /// Beam search.
    Beam(BeamConfig),
    /// Sampling (temperature, top-k, top-p), seeded.
    Sample(SampleConfig),
}

/// Translations of `sources` (ids without specials; `</s>` is appended), in input order: one
/// n-best list per source (one hypothesis for greedy search and sampling). Sources are batched
/// by length with `batch`. `model` is a [`Model`] or an [`s2s_decode::Ensemble`] of them.
///
/// With `capture`, greedy and beam search replay their steps from graphs recorded per batch
/// shape ([`s2s_decode::captured`]; GPU devices): the same tokens. Cross-attention kept for
/// the output, sampling, and a device that cannot capture run eagerly (a capture that fails
/// says so on stderr and the rest runs eagerly).
pub fn translate<M: Incremental + Sync>(
    model: &M,
    sources: &[Vec<u32>],
    batch: BatchConfig,
    search: &Search,
    device: &Device,
    capture: bool,
) -> Vec<Vec<Hypothesis>>
where
    M::State: Clone,
{
    let mut captured = capture.then(|| CapturedSearch::new(model, device, Run::Replay, CAPTURED_CHAINS));
    translate_with(model, sources, batch, search, device, &mut captured)
}

/// [`translate`] with the captured search's chains kept by the caller (`Some`), so that calls
/// after the first replay the graphs the first recorded. `None`, or a search that is not
/// captured, decodes eagerly; so does a batch shape whose graphs failed (its search says so).
pub fn translate_with<'m, M: Incremental + Sync>(
    model: &'m M,
    sources: &[Vec<u32>],
    batch: BatchConfig,
    search: &Search,
    device: &Device,
    captured: &mut Option<CapturedSearch<'m, M>>,
) -> Vec<Vec<Hypothesis>>
where
    M::State: Clone,
{
    translate_prefixed(model, sources, &[], batch, search, device, captured)
}

/// [`translate_with`] whose hypotheses for `sources[i]` start with `prefixes[i]` (empty, or no
/// entry: none), for greedy and beam search ([`greedy_prefixed`], [`beam_search_prefixed`];
/// sampling ignores them). A search with prefixes runs eagerly.
pub fn translate_prefixed<'m, M: Incremental + Sync>(
    model: &'m M,
    sources: &[Vec<u32>],
    prefixes: &[Vec<u32>],
    batch: BatchConfig,
    search: &Search,
    device: &Device,
    captured: &mut Option<CapturedSearch<'m, M>>,
) -> Vec<Vec<Hypothesis>>
where
    M::State: Clone,
{
    let examples: Vec<Example> =
        sources.iter().map(|s| Example { src: s.clone(), tgt: Vec::new() }).collect();
    let mut out: Vec<Vec<Hypothesis>> = vec![Vec::new(); sources.len()];
    let cpu = s2s_kernels::ops::is_cpu(device);
    let capturable = !cpu
        && prefixes.iter().all(Vec::is_empty)
        && match search {
            Search::Greedy { attention, .. } => !attention,
            Search::Beam(cfg) => !cfg.attention,
            Search::Sample(_) => false,
        };
    for idx in Batcher::new(&examples, batch).ordered() {
        let hyps: Vec<Vec<Hypothesis>> = match (captured.as_mut().filter(|_| capturable), search) {
            (Some(c), Search::Greedy { limit, .. }) => {
                let b = Batch::collate(&examples, &idx);
                c.greedy(&b.src, &b.src_lens, b.src_len, *limit).into_iter().map(|h| vec![h]).collect()
            }
            (Some(c), Search::Beam(cfg)) => {
                let b = Batch::collate(&examples, &idx);
                c.beam(&b.src, &b.src_lens, b.src_len, cfg)
            }
            // On the CPU the batch is cut by sentence, the parts side by side on their shares
            // of the cores (`crate::core_split`): a sentence's hypotheses do not depend on the
            // others in its batch (tested: batch-size invariance).
            _ if cpu => {
                let split = decode_split();
                let parts = row_ranges(idx.len(), split.parts());
                split
                    .run_first(parts.len(), |i| {
                        decode_eager(model, &examples, prefixes, &idx[parts[i].clone()], search, device)
                    })
                    .into_iter()
                    .flatten()
                    .collect()
            }
            _ => decode_eager(model, &examples, prefixes, &idx, search, device),
        };
        for (h, &i) in hyps.into_iter().zip(&idx) {
            out[i] = h;
        }
    }
    out
}

/// The CPU's decoding split: a batch's parts decoded side by side, each on its share of the
/// cores, made once from the pool of the first call (its threads stay, and so do the weights
/// each packs for decoding). Two parts unless `S2S_DECODE_PARTS` says otherwise (`1`: whole
/// batches); with fewer threads than parts, whole batches, since a sentence's output does not
/// depend on its batch and parts run one after another would only be slower.
pub fn decode_split() -> &'static CoreSplit {
    static SPLIT: std::sync::OnceLock<CoreSplit> = std::sync::OnceLock::new();
    SPLIT.get_or_init(|| {
        let parts = std::env::var("S2S_DECODE_PARTS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
        let split = CoreSplit::new(parts);
        if split.parallel() { split } else { CoreSplit::new(1) }
    })
}

/// The examples `idx` decoded eagerly by `search`: each source's hypotheses, in `idx`'s order.
fn decode_eager<M: Incremental>(
    model: &M,
    examples: &[Example],
    prefixes: &[Vec<u32>],
    idx: &[usize],
    search: &Search,
    device: &Device,
) -> Vec<Vec<Hypothesis>>
where
    M::State: Clone,
{
    let b = Batch::collate(examples, idx);
    let src = Source::new(&b.src, &b.src_lens, b.src_len, device);
    let picked: Vec<Vec<u32>> = idx.iter().map(|&i| prefixes.get(i).cloned().unwrap_or_default()).collect();
    let prefixed = picked.iter().any(|p| !p.is_empty());
    match search {
        Search::Greedy { limit, attention } if prefixed => {
            greedy_prefixed(model, &src, *limit, *attention, &picked).into_iter().map(|h| vec![h]).collect()
        }
        Search::Greedy { limit, attention } => {
            greedy(model, &src, *limit, *attention).into_iter().map(|h| vec![h]).collect()
        }
        Search::Beam(cfg) if prefixed => beam_search_prefixed(model, &src, cfg, &picked),
        Search::Beam(cfg) => beam_search(model, &src, cfg),
        Search::Sample(cfg) => {
            let index: Vec<u64> = idx.iter().map(|&i| cfg.first_index + i as u64).collect();
            sample(model, &src, cfg, &index).into_iter().map(|h| vec![h]).collect()
        }
    }
}

/// Most chains of captured decoding graphs alive at once (one per search and batch shape).
pub const CAPTURED_CHAINS: usize = 16;

/// Detokenised best hypotheses (an empty line where a list is empty).
pub fn detokenize(tok: &Tokenizer, hyps: &[Vec<Hypothesis>]) -> Vec<String> {
    hyps.iter().map(|h| h.first().map(|h| tok.decode(&h.tokens)).unwrap_or_default()).collect()
}
