//! Multi-head attention's heads specialise: trained, some heads of a layer look at the words
//! next to each one (local heads), others far away (global heads).

use std::path::PathBuf;

use burn::tensor::{Device, Int, Tensor, TensorData};
use s2s_data::vocab::{BOS, EOS};
use s2s_models::{Model, ModelSpec, Source, TransformerSpec};

use super::trained;
use crate::probes::{attention_distance, row_entropy, total_variation};
use crate::{Claim, Context, Figure, Finding, MeasureError, NotRun, Table, num};

pub const CLAIM: Claim = Claim {
    name: "heads-specialise",
    why: "Heads are meant to learn different relations, some local, some long-range. Whether trained \
          heads do, and whether more heads translate better, is measured here rather than assumed.",
    statement: "Trained, the heads of a layer specialise: some attend to neighbouring words, others far away",
    lecture: "multi-head-attention.md § Diversi Tipi di Attention Patterns (Pattern Locali vs Globali); § Pattern \
              di Specializzazione",
    criterion: "holds when, for every seed, in every encoder layer of the trained 4-head model and the 8-head one \
                (when `--heads` has 8), the head with the longest mean attention distance looks at least twice \
                as far as the head with the shortest",
    method: "the course's Transformer (d_model 64, 2 + 2 layers) trained 1,200 steps on the built-in pair with \
             h ∈ {1, 2, 4, 8, 16} heads (`--heads`; 300 steps in quick mode), for each seed; greedy test BLEU by h, each h \
             against 4 heads seed by seed under sacreBLEU's paired bootstrap; then each \
             encoder self-attention head of each seed's 4- and 8-head models reads the test sources one at a time: its \
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
fn heads(
    model: &s2s_models::transformer::Transformer,
    sources: &[Vec<u32>],
    d: &Device,
) -> Vec<(Vec<Head>, f64)> {
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

/// The trained `h`-head model of `seed`: its encoder heads, layer by layer (see [`heads`]).
struct Encoder {
    h: usize,
    seed: u64,
    layers: Vec<(Vec<Head>, f64)>,
}

/// One h's test BLEU against four heads', seed by seed.
struct Bleu {
    h: usize,
    rows: Vec<trained::Paired>,
}

/// What the experiment measured: BLEU by h, and the 4- and 8-head models' encoder heads.
struct Measured {
    bleu: Vec<Bleu>,
    specialised: Vec<Encoder>,
}

fn run(ctx: &Context) -> Finding {
    let seeds = ctx.seeds();
    let Measured { bleu, specialised } = match measure(ctx, seeds) {
        Ok(m) => m,
        Err(not_run) => return not_run.into(),
    };
    let spread_out = |e: &Encoder| e.layers.iter().all(|(hs, _)| spread(hs) >= 2.0);
    let (verdict, judged) = crate::by_seed(
        seeds.iter().map(|&s| (s, specialised.iter().filter(|e| e.seed == s).all(spread_out))).collect(),
    );
    let bleu_sentence = bleu_summary(&bleu);
    let all: Vec<f64> = specialised.iter().flat_map(|e| e.layers.iter().map(|(hs, _)| spread(hs))).collect();
    let reason = format!(
        "the farthest-looking head of an encoder layer looks {}× as far as the nearest; {} of {} layers under 2×",
        crate::span(all.iter().copied()),
        all.iter().filter(|&&x| x < 2.0).count(),
        all.len()
    );
    Finding {
        runs: Vec::new(),
        seeds: judged,
        verdict,
        reason,
        because: format!(
            "the farthest-looking head over the nearest, per encoder layer: {}; mean test BLEU by h over {} \
             seeds {bleu_sentence}",
            spreads(&specialised).join("; "),
            seeds.len(),
        ),
        not_measured: "decoder heads".into(),
        table: head_table(&specialised),
        more: vec![bleu_table(seeds, &bleu)],
        figures: vec![distance_figure(&specialised)],
    }
}

/// The course's Transformer with `h` heads.
fn spec(h: usize) -> ModelSpec {
    ModelSpec::Transformer(TransformerSpec { heads: h, ..trained::transformer() })
}

/// The run of `h` heads and seed `seed`: its directory (trained now unless it is there, finished).
fn train_heads(ctx: &Context, h: usize, seed: u64) -> Result<PathBuf, MeasureError> {
    // Four heads is the course's Transformer: seed 1 is the causal-mask claim's masked model,
    // seeds 2 and 3 the positions claim's, the same runs.
    let budget = ctx.budget;
    let mut cfg = trained::run_config(spec(h), budget.pick(1200, 300), budget.pick(100, 50));
    cfg.train.seed = seed;
    let name = if h == 4 {
        trained::transformer_name(seed)
    } else {
        crate::seeded(&format!("transformer-heads{h}"), seed)
    };
    trained::train(ctx, &name, &cfg)
}

/// BLEU by h and the 4- and 8-head models' encoder heads, or the finding of a run that failed.
fn measure(ctx: &Context, seeds: &[u64]) -> Result<Measured, NotRun> {
    let d = Device::flex();
    // Each h against four heads, seed by seed, under the paired bootstrap.
    let mut bleu = Vec::new();
    let mut specialised = Vec::new();
    for &h in &ctx.knobs.heads {
        let rows =
            trained::paired(seeds, |favoured, seed| train_heads(ctx, if favoured { h } else { 4 }, seed))
                .map_err(|e| NotRun::new("the runs did not train", e))?;
        bleu.push(Bleu { h, rows });
        if h == 4 || h == 8 {
            for &seed in seeds {
                specialised.push(Encoder { h, seed, layers: encoder_heads(ctx, h, seed, &d)? });
            }
        }
    }
    Ok(Measured { bleu, specialised })
}

/// The `h`-head model of `seed`: its encoder heads read on the test sources, or the finding of a
/// failure.
fn encoder_heads(ctx: &Context, h: usize, seed: u64, d: &Device) -> Result<Vec<(Vec<Head>, f64)>, NotRun> {
    let dir = train_heads(ctx, h, seed).map_err(|e| NotRun::new("the runs did not train", e))?;
    let (tok, model, sources, _) =
        trained::load_final(&dir, &spec(h), d).map_err(|e| NotRun::new("a trained model did not load", e))?;
    let Model::Transformer(t) = model else { unreachable!("a Transformer spec") };
    let ids: Vec<Vec<u32>> =
        sources.iter().take(ctx.budget.pick(200, 50)).map(|s| tok.src.encode(s)).collect();
    Ok(heads(&t, &ids, d))
}

/// How many times farther the farthest-looking head looks than the nearest.
fn spread(hs: &[Head]) -> f64 {
    let far = hs.iter().map(|h| h.distance).fold(0.0, f64::max);
    let near = hs.iter().map(|h| h.distance).fold(f64::INFINITY, f64::min);
    far / near.max(1e-9)
}

/// The heads table: each head's mean distance and entropy, and each layer's heads' TV apart.
fn head_table(specialised: &[Encoder]) -> Table {
    let mut table = Table {
        header: [
            "model",
            "seed",
            "encoder layer",
            "head",
            "mean distance (tokens)",
            "entropy (nats)",
            "heads' maps apart (TV)",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for Encoder { h, seed, layers } in specialised {
        for (l, (hs, tv)) in layers.iter().enumerate() {
            for (i, head) in hs.iter().enumerate() {
                table.rows.push(vec![
                    format!("{h} heads"),
                    seed.to_string(),
                    (l + 1).to_string(),
                    (i + 1).to_string(),
                    num(head.distance),
                    num(head.entropy),
                    if i == 0 { num(*tv) } else { String::new() },
                ]);
            }
        }
    }
    table
}

/// The mean test BLEU of the favoured (h-head) runs.
fn mean(rows: &[trained::Paired]) -> f64 {
    rows.iter().map(|r| r.bleu.1).sum::<f64>() / rows.len() as f64
}

/// How many seeds' BLEU differs from four heads' with p < 0.05, and in which direction.
fn differs(rows: &[trained::Paired]) -> (usize, usize) {
    let lower = rows.iter().filter(|r| r.bleu.1 < r.bleu.0 && r.p < 0.05).count();
    let higher = rows.iter().filter(|r| r.bleu.1 > r.bleu.0 && r.p < 0.05).count();
    (lower, higher)
}

/// The BLEU table: each h's test BLEU by seed, its mean, and its difference from four heads.
fn bleu_table(seeds: &[u64], bleu: &[Bleu]) -> Table {
    let mut bleu_header = vec!["heads h".to_string(), "head size".to_string()];
    bleu_header.extend(seeds.iter().map(|s| format!("BLEU, seed {s}")));
    bleu_header.extend([
        "mean BLEU".to_string(),
        "− 4 heads".to_string(),
        "paired bootstrap p by seed".to_string(),
    ]);
    Table {
        header: bleu_header,
        rows: bleu
            .iter()
            .map(|Bleu { h, rows }| {
                let mut row = vec![h.to_string(), (64 / h).to_string()];
                row.extend(rows.iter().map(|r| num(r.bleu.1)));
                row.push(num(mean(rows)));
                if *h == 4 {
                    row.extend([String::new(), "(the baseline)".to_string()]);
                } else {
                    let base = rows.iter().map(|r| r.bleu.0).sum::<f64>() / rows.len() as f64;
                    row.push(format!("{:+.2}", mean(rows) - base));
                    row.push(rows.iter().map(|r| format!("{:.3}", r.p)).collect::<Vec<_>>().join(", "));
                }
                row
            })
            .collect(),
    }
}

/// Each h's mean test BLEU and how many seeds differ significantly from four heads, in words.
fn bleu_summary(bleu: &[Bleu]) -> String {
    bleu.iter()
        .map(|Bleu { h, rows }| {
            let (lower, higher) = differs(rows);
            let tested = if *h == 4 {
                String::new()
            } else {
                let n = rows.len();
                format!(" (significantly below 4 heads in {lower} of {n} seeds, above in {higher})")
            };
            format!("{h}: {}{tested}", num(mean(rows)))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Per model, each encoder layer's [`spread`], in words.
fn spreads(specialised: &[Encoder]) -> Vec<String> {
    specialised
        .iter()
        .map(|Encoder { h, seed, layers }| {
            format!(
                "{h} heads, seed {seed}: {}",
                layers
                    .iter()
                    .enumerate()
                    .map(|(l, (hs, _))| format!("layer {} {}×", l + 1, num(spread(hs))))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect()
}

/// The figure of each encoder layer's heads' mean distances, sorted, nearest first.
fn distance_figure(specialised: &[Encoder]) -> Figure {
    super::figure(
        "heads-specialise.svg",
        &format!(
            "Mean attention distance of each encoder head, seed {} (heads sorted, nearest first)",
            specialised.first().map_or(1, |e| e.seed)
        ),
        "head (sorted by distance)",
        "mean attention distance (tokens)",
        specialised
            .iter()
            .filter(|e| e.seed == specialised[0].seed)
            .flat_map(|Encoder { h, layers, .. }| {
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
    )
}
