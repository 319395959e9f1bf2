//! Multi-head attention's heads specialise: trained, some heads of a layer look at the words
//! next to each one (local heads), others far away (global heads).

use burn::tensor::{Device, Int, Tensor, TensorData};
use s2s_data::vocab::{BOS, EOS};
use s2s_models::{Model, ModelSpec, Source, TransformerSpec};

use super::trained;
use crate::probes::{attention_distance, row_entropy, total_variation};
use crate::{Claim, Context, Finding, Table, Verdict, num};

pub const CLAIM: Claim = Claim {
    name: "heads-specialise",
    statement: "Trained, the heads of a layer specialise: some attend to neighbouring words, others far away",
    lecture: "multi-head-attention.md § Diversi Tipi di Attention Patterns (Pattern Locali vs Globali); § Pattern \
              di Specializzazione",
    criterion: "holds when, in every encoder layer of the trained 4-head and 8-head models, the head with the \
                longest mean attention distance looks at least twice as far as the head with the shortest",
    method: "the course's Transformer (d_model 64, 2 + 2 layers) trained 1,200 steps on the built-in pair with \
             h ∈ {1, 2, 4, 8, 16} heads (300 steps in quick mode; one seed); greedy test BLEU by h; then each \
             encoder self-attention head of the 4- and 8-head models reads the test sources one at a time: its \
             mean attention distance Σⱼ pᵢⱼ·|i − j| and entropy averaged over positions i, and how different \
             the heads of a layer are (mean total-variation distance between their maps, 0 alike … 1 disjoint)",
    run,
};

/// One head's mean attention distance (tokens) and entropy (nats).
#[derive(Debug, Clone, Copy, Default)]
struct Head {
    distance: f64,
    entropy: f64,
}

/// Per encoder layer: each head's statistics and the heads' mean pairwise total-variation
/// distance, over the sources (one sentence a pass, so no padding).
fn heads(model: &s2s_models::transformer::Transformer, sources: &[Vec<u32>], d: &Device) -> Vec<(Vec<Head>, f64)> {
    let mut sums: Vec<(Vec<Head>, f64)> = Vec::new();
    let mut rows = 0.0;
    for ids in sources {
        let mut ids = ids.clone();
        ids.push(EOS);
        let n = ids.len();
        let src = Source::new(&ids, &[n], n, d);
        let tgt = Tensor::<2, Int>::from_data(TensorData::new(vec![BOS as i64], [1, 1]), d);
        let (_, attention) = model.inspect(&src, tgt);
        for (l, w) in attention.encoder_self.iter().enumerate() {
            let [_, h, _, _] = w.dims();
            let p: Vec<f32> = w.to_data().convert::<f32>().try_to_vec::<f32>().expect("f32 weights");
            if sums.len() <= l {
                sums.push((vec![Head::default(); h], 0.0));
            }
            let map = |head: usize, i: usize| &p[(head * n + i) * n..(head * n + i + 1) * n];
            for head in 0..h {
                for i in 0..n {
                    sums[l].0[head].distance += attention_distance(map(head, i), i);
                    sums[l].0[head].entropy += row_entropy(map(head, i));
                }
            }
            // Mean total-variation distance between each pair of heads' rows.
            let mut tv = 0.0;
            let mut pairs = 0.0;
            for a in 0..h {
                for b in a + 1..h {
                    for i in 0..n {
                        tv += total_variation(map(a, i), map(b, i));
                    }
                    pairs += n as f64;
                }
            }
            sums[l].1 += if pairs > 0.0 { tv / pairs * n as f64 } else { 0.0 };
        }
        rows += n as f64;
    }
    for (hs, tv) in &mut sums {
        for head in hs.iter_mut() {
            head.distance /= rows;
            head.entropy /= rows;
        }
        *tv /= rows;
    }
    sums
}

fn run(ctx: &Context) -> Finding {
    let budget = ctx.budget;
    let d = Device::flex();
    let spec = |h: usize| {
        ModelSpec::Transformer(TransformerSpec { heads: h, ..trained::transformer() })
    };
    let mut bleu = Vec::new();
    let mut specialised = Vec::new();
    for h in [1usize, 2, 4, 8, 16] {
        let cfg = trained::run_config(spec(h), budget.pick(1200, 300), budget.pick(100, 50));
        // Four heads is the causal-mask claim's masked model: the same run.
        let name = if h == 4 { "transformer-causal".to_string() } else { format!("transformer-heads{h}") };
        let dir = match trained::train(ctx, &name, &cfg) {
            Ok(dir) => dir,
            Err(e) => return Finding::not_run("the runs did not train", e),
        };
        let score = s2s_train::testset::read_scores(&dir).map_or(f64::NAN, |s| s.bleu);
        bleu.push((h, score));
        if h == 4 || h == 8 {
            let (tok, model, sources, _) = match trained::load_best(&dir, &spec(h), &d) {
                Ok(l) => l,
                Err(e) => return Finding::not_run("a trained model did not load", e),
            };
            let Model::Transformer(t) = model else { unreachable!("a Transformer spec") };
            let ids: Vec<Vec<u32>> = sources.iter().take(budget.pick(200, 50)).map(|s| tok.src.encode(s)).collect();
            specialised.push((h, heads(&t, &ids, &d)));
        }
    }
    let spread = |hs: &[Head]| {
        let far = hs.iter().map(|h| h.distance).fold(0.0, f64::max);
        let near = hs.iter().map(|h| h.distance).fold(f64::INFINITY, f64::min);
        far / near.max(1e-9)
    };
    let holds = specialised.iter().all(|(_, layers)| layers.iter().all(|(hs, _)| spread(hs) >= 2.0));
    let mut table = Table {
        header: ["model", "encoder layer", "head", "mean distance (tokens)", "entropy (nats)", "heads' maps apart (TV)"]
            .map(String::from)
            .to_vec(),
        rows: vec![],
    };
    for (h, layers) in &specialised {
        for (l, (hs, tv)) in layers.iter().enumerate() {
            for (i, head) in hs.iter().enumerate() {
                table.rows.push(vec![
                    format!("{h} heads"),
                    (l + 1).to_string(),
                    (i + 1).to_string(),
                    num(head.distance),
                    num(head.entropy),
                    if i == 0 { num(*tv) } else { String::new() },
                ]);
            }
        }
    }
    let bleu_table = Table {
        header: ["heads h", "head size", "test BLEU (greedy, one seed)"].map(String::from).to_vec(),
        rows: bleu.iter().map(|(h, b)| vec![h.to_string(), (64 / h).to_string(), num(*b)]).collect(),
    };
    let spreads: Vec<String> = specialised
        .iter()
        .map(|(h, layers)| {
            format!(
                "{h} heads: {}",
                layers
                    .iter()
                    .enumerate()
                    .map(|(l, (hs, _))| format!("layer {} {}×", l + 1, num(spread(hs))))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect();
    Finding {
        verdict: if holds { Verdict::Holds } else { Verdict::DoesNotHold },
        because: format!(
            "the farthest-looking head over the nearest, per encoder layer: {}; test BLEU by h {}",
            spreads.join("; "),
            bleu.iter().map(|(h, b)| format!("{h}: {}", num(*b))).collect::<Vec<_>>().join(", ")
        ),
        not_measured: "BLEU by h from one seed each (no significance test); decoder heads".into(),
        table,
        more: vec![bleu_table],
        figures: vec![super::figure(
            "heads-specialise.svg",
            "Mean attention distance of each encoder head (heads sorted, nearest first)",
            "head (sorted by distance)",
            "mean attention distance (tokens)",
            specialised
                .iter()
                .flat_map(|(h, layers)| {
                    layers.iter().enumerate().map(move |(l, (hs, _))| {
                        let mut d: Vec<f64> = hs.iter().map(|x| x.distance).collect();
                        d.sort_by(f64::total_cmp);
                        super::series(
                            &format!("{h} heads, layer {}", l + 1),
                            d.into_iter().enumerate().map(|(i, d)| ((i + 1) as f64, d)).collect(),
                        )
                    })
                })
                .collect(),
        )],
    }
}
