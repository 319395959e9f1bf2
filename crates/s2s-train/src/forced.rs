//! Forced decoding: the log-probability of given targets under a model (or an ensemble), each
//! token's and the sentence's, teacher-forced as training computes its loss (one
//! [`Model::forward`] over `<s> y₁ … y_T`, scored against `y₁ … y_T </s>`), and the
//! cross-attention that scored them, for word alignments.

use burn::tensor::{Device, Int, Tensor};
use s2s_data::{Batch, BatchConfig, Batcher, Example};
use s2s_kernels::ops;
use s2s_models::{AttentionKind, Model};

use crate::step::DeviceBatch;

/// One target's forced decoding.
#[derive(Debug, Clone, PartialEq)]
pub struct Forced {
    /// `log p` of each target token, then of `</s>`.
    pub log_probs: Vec<f32>,
    /// Cross-attention `[target tokens + 1][source tokens + 1]` (`</s>` last on both sides),
    /// when asked for.
    pub attention: Option<Vec<Vec<f32>>>,
}

impl Forced {
    /// The sentence's log-probability: the sum of its tokens' (`</s>` included), as greedy
    /// search sums the tokens it picks.
    pub fn score(&self) -> f64 {
        self.log_probs.iter().map(|&l| l as f64).sum()
    }
}

/// The decoder layers whose cross-attention [`force`] can keep: a Transformer's decoder layers,
/// 1 for an attention RNN, 0 for the LSTM without attention.
pub fn cross_layers(model: &Model) -> usize {
    match model {
        Model::Transformer(t) => t.decoder.len(),
        Model::AttentionRnn(_) => 1,
        Model::Lstm(_) => 0,
    }
}

/// Forced decoding of every example (`src`, `tgt`: ids without specials) under `models`, in
/// input order, batched by length with `batch`. One model scores with its log-softmax; several
/// score as [`s2s_decode::Ensemble`] decodes: the mean of their log-probabilities, normalised
/// again by a log-softmax.
///
/// With `attention = Some(layer)`, each result keeps the cross-attention of decoder layer
/// `layer` (`None`: the last, as fairseq's `--alignment-layer`) averaged over its heads on the
/// host, in head order, as the studio's alignment map is (the mean over the members for an
/// ensemble); the caller checks that every model has that layer ([`cross_layers`]).
pub fn force(
    models: &[&Model],
    examples: &[Example],
    batch: BatchConfig,
    device: &Device,
    attention: Option<Option<usize>>,
) -> Vec<Forced> {
    let mut out = vec![Forced { log_probs: Vec::new(), attention: None }; examples.len()];
    for idx in Batcher::new(examples, batch).ordered() {
        let b = Batch::collate(examples, &idx);
        let d = DeviceBatch::new(&b, device);
        let mut sum: Option<Tensor<3>> = None;
        let mut maps: Vec<Vec<Vec<Vec<f32>>>> = Vec::new();
        for m in models {
            let logits = match attention {
                Some(layer) => {
                    let (logits, all) = m.inspect(&d.src, d.tgt_in.clone());
                    let cross: Vec<_> = all.into_iter().filter(|a| a.kind == AttentionKind::Cross).collect();
                    let at = layer.unwrap_or(cross.len().saturating_sub(1));
                    if let Some(map) = cross.into_iter().find(|a| a.layer == at) {
                        maps.push(head_means(map.weights, &b));
                    }
                    logits
                }
                None => m.forward(&d.src, d.tgt_in.clone()).logits,
            };
            let lp = ops::log_softmax(logits);
            sum = Some(match sum {
                None => lp,
                Some(acc) => acc + lp,
            });
        }
        let Some(mut lp) = sum else { return out };
        if models.len() > 1 {
            lp = ops::log_softmax(lp / models.len() as f32);
        }
        let [n, t, _] = lp.dims();
        let picked: Tensor<3, Int> = d.tgt_out.clone().reshape([n, t, 1]);
        let v = floats(lp.gather(2, picked));
        for (r, &i) in idx.iter().enumerate() {
            let len = b.tgt_lens[r];
            out[i].log_probs = v[r * t..r * t + len].to_vec();
            if attention.is_some() && maps.len() == models.len() {
                let k = maps.len() as f32;
                let mut mean = maps[0][r].clone();
                for other in &maps[1..] {
                    for (row, o) in mean.iter_mut().zip(&other[r]) {
                        row.iter_mut().zip(o).for_each(|(a, b)| *a += b);
                    }
                }
                if maps.len() > 1 {
                    mean.iter_mut().flatten().for_each(|a| *a /= k);
                }
                out[i].attention = Some(mean);
            }
        }
    }
    out
}

/// Per row of the batch, its attention `[batch, heads, tgt, src]` trimmed to the row's real
/// target and source positions and averaged over the heads (summed in head order, then
/// divided by their number).
fn head_means(weights: Tensor<4>, b: &Batch) -> Vec<Vec<Vec<f32>>> {
    let [n, heads, q, k] = weights.dims();
    let w = floats(weights);
    (0..n)
        .map(|r| {
            (0..b.tgt_lens[r].min(q))
                .map(|i| {
                    (0..b.src_lens[r].min(k))
                        .map(|j| {
                            (0..heads).map(|h| w[((r * heads + h) * q + i) * k + j]).sum::<f32>()
                                / heads as f32
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap_or_default()
}
