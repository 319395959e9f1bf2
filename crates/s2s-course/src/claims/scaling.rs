//! The √d_k scaling: unscaled dot products of unit-variance vectors have variance d_k, so the
//! softmax saturates and passes on little gradient; divided by √d_k the variance stays 1.

use burn::tensor::Device;
use s2s_models::{ModelSpec, TransformerSpec};

use super::{figure, series, trained};
use crate::probes::{ScoreStats, score_stats};
use crate::{Budget, Claim, Context, Figure, Finding, MeasureError, Table, num};

pub const CLAIM: Claim = Claim {
    name: "scaling-factor",
    why: "Dot products of d_k-dimensional vectors grow with d_k, and a softmax of large scores is \
          nearly one-hot with vanishing gradients. Dividing by √d_k is the Transformer's fix; this \
          measures the variance and what training does without it.",
    statement: "Unscaled dot products have variance ≈ d_k and saturate the softmax; dividing by √d_k keeps it ≈ 1",
    lecture: "self-attention-guide.md § Il Problema dello Scaling e la Sua Soluzione; § Analisi Teorica dello Scaling Factor",
    criterion: "holds when, for every d_k, the unscaled variance is within 15 % of d_k and the scaled one within \
                15 % of 1, and the unscaled softmax's entropy and Jacobian fall as d_k grows while the scaled ones \
                stay within 10 % of their value at the smallest d_k; and trained alike, a Transformer with \
                d_k = 64 (`--d-k`) reaches a lower test perplexity with the scaling than without it — for every \
                seed (of the probes' draws and of training)",
    method: "queries and 32 keys drawn from N(0, 1)^d_k; the scores' variance, each query's softmax entropy, \
             its largest weight and the Frobenius norm of the softmax's Jacobian diag(p) − ppᵀ (the gradient a \
             score can pass on), unscaled and divided by √d_k; the gradient norms of W^Q and W^K of one \
             head of width d_k at initialisation, unscaled and scaled (shown, not judged). Then Transformers (one head, so d_model = \
             d_k = 64, `--d-k`; 2 + 2 layers) trained 1,200 steps on the built-in pair with `scaled = true` and \
             `scaled = false` (300 steps in quick mode), for each seed: test perplexity, and greedy test \
             BLEU under sacreBLEU's paired bootstrap",
    run,
};

/// `(‖∂L/∂W^Q‖, ‖∂L/∂W^K‖)` of one attention head of width `dk` at initialisation (Xavier, so
/// queries and keys have unit variance), unscaled and scaled — the same weights either way —
/// reading 8 random sequences of 32 unit-variance vectors, `L = Σ out ⊙ r` with `r` random.
fn projection_grads(dk: usize, seed: u64) -> [(f64, f64); 2] {
    use burn::tensor::{Distribution, Tensor};
    use s2s_models::transformer::mha::{KeySource, MultiHeadAttention, MultiHeadAttentionConfig};
    let d = Device::flex().autodiff();
    d.seed(6 + seed);
    let scaled = MultiHeadAttentionConfig::new(dk, 1).with_dropout(0.0).init(&d).expect("one head divides");
    let mut unscaled = scaled.clone();
    unscaled.scaled = false;
    let x: Tensor<3> = Tensor::random([8, 32, dk], Distribution::Normal(0.0, 1.0), &d);
    let r: Tensor<3> = Tensor::random([8, 32, dk], Distribution::Normal(0.0, 1.0), &d);
    let norm =
        |g: Option<Tensor<2>>| g.map_or(f64::NAN, |g| g.square().sum().into_scalar::<f32>().sqrt() as f64);
    let grads = |m: &MultiHeadAttention| {
        let g = (m.forward(x.clone(), KeySource::Input, None).output * r.clone()).sum().backward();
        (norm(m.query.weight.grad(&g)), norm(m.key.weight.grad(&g)))
    };
    [grads(&unscaled), grads(&scaled)]
}

/// The scores' statistics at one d_k, unscaled and divided by √d_k.
struct Scores {
    dk: usize,
    raw: ScoreStats,
    scaled: ScoreStats,
}

/// The untrained probes by d_k: the scores' statistics and [`projection_grads`].
struct Probes {
    stats: Vec<Scores>,
    projections: Vec<[(f64, f64); 2]>,
}

/// Whether the probes meet the criterion: variances near d_k and 1, the unscaled softmax's
/// entropy and Jacobian falling with d_k, the scaled ones flat.
fn probes_hold(stats: &[Scores]) -> bool {
    variances_hold(stats)
        && falls(stats, |s| s.entropy)
        && falls(stats, |s| s.jacobian)
        && flat(stats, |s| s.entropy)
        && flat(stats, |s| s.jacobian)
}

fn run(ctx: &Context) -> Finding {
    let seeds = ctx.seeds();
    let probes: Vec<Probes> = seeds.iter().map(|&s| probe(ctx.budget, s)).collect();
    let table = probe_table(&probes[0]);
    let runs = match train_pairs(ctx, seeds) {
        Ok(r) => r,
        Err(e) => return Finding::not_run("the runs did not train", e),
    };
    let d_k = ctx.knobs.d_k;
    let trained = trained::judge_paired(&runs, "unscaled", "scaled");
    let trained_figure = trained::paired_figure(
        "scaling-bleu.svg",
        &format!("Test BLEU by seed, d_k = {d_k}, unscaled and scaled attention"),
        &runs,
        "unscaled",
        "scaled",
    );
    let lower_ppl = runs.iter().filter(|r| r.ppl.1 < r.ppl.0).count();
    let (verdict, judged) = crate::by_seed(
        probes.iter().zip(&runs).map(|(p, r)| (r.seed, probes_hold(&p.stats) && r.ppl.1 < r.ppl.0)).collect(),
    );
    let by_seed = Table {
        header: ["seed", "probes' criterion", "test perplexity unscaled / scaled", "criterion met"]
            .map(String::from)
            .to_vec(),
        rows: probes
            .iter()
            .zip(&runs)
            .map(|(p, r)| {
                let yes = |b: bool| if b { "met" } else { "not met" }.to_string();
                vec![
                    r.seed.to_string(),
                    yes(probes_hold(&p.stats)),
                    format!("{} / {}", num(r.ppl.0), num(r.ppl.1)),
                    yes(probes_hold(&p.stats) && r.ppl.1 < r.ppl.0),
                ]
            })
            .collect(),
    };
    let mut figures = vec![trained_figure];
    figures.extend(probe_figures(&probes[0].stats));
    let reason = format!(
        "variance/d_k {} unscaled, scaled variance {}; trained with d_k = {d_k} the scaling lowers test perplexity in \
         {lower_ppl} of {} seeds",
        crate::span(probes.iter().flat_map(|p| p.stats.iter().map(|s| s.raw.variance / s.dk as f64))),
        crate::span(probes.iter().flat_map(|p| p.stats.iter().map(|s| s.scaled.variance))),
        runs.len()
    );
    Finding {
        runs: Vec::new(),
        seeds: judged,
        verdict,
        reason,
        because: because(&probes[0], seeds[0], d_k, lower_ppl, runs.len(), &trained.because),
        not_measured: String::new(),
        table,
        more: vec![by_seed, trained.table],
        figures,
    }
}

/// The scores' statistics and the projections' gradients at each d_k (16 … 256).
fn probe(budget: Budget, seed: u64) -> Probes {
    let queries = budget.pick(2048, 512);
    let dks = [16usize, 32, 64, 128, 256];
    let d = Device::flex();
    d.seed(3 + seed);
    let stats: Vec<Scores> = dks
        .iter()
        .map(|&dk| Scores {
            dk,
            raw: score_stats(dk, queries, 32, 1.0, &d),
            scaled: score_stats(dk, queries, 32, (dk as f64).sqrt(), &d),
        })
        .collect();
    let projections: Vec<[(f64, f64); 2]> = dks.iter().map(|&dk| projection_grads(dk, seed)).collect();
    Probes { stats, projections }
}

/// The probes' table: one row per d_k, unscaled beside scaled.
fn probe_table(probes: &Probes) -> Table {
    Table {
        header: [
            "d_k",
            "variance unscaled",
            "÷ d_k",
            "variance scaled",
            "entropy unscaled / scaled (nats; ln 32 = 3.47)",
            "largest weight unscaled / scaled",
            "‖Jacobian‖ unscaled / scaled",
            "‖∂L/∂W^Q‖ unscaled / scaled",
            "‖∂L/∂W^K‖ unscaled / scaled",
        ]
        .map(String::from)
        .to_vec(),
        rows: probes
            .stats
            .iter()
            .zip(&probes.projections)
            .map(|(Scores { dk, raw, scaled: sc }, [pu, ps])| {
                vec![
                    dk.to_string(),
                    num(raw.variance),
                    num(raw.variance / *dk as f64),
                    num(sc.variance),
                    format!("{} / {}", num(raw.entropy), num(sc.entropy)),
                    format!("{} / {}", num(raw.max_weight), num(sc.max_weight)),
                    format!("{} / {}", num(raw.jacobian), num(sc.jacobian)),
                    format!("{} / {}", num(pu.0), num(ps.0)),
                    format!("{} / {}", num(pu.1), num(ps.1)),
                ]
            })
            .collect(),
    }
}

/// Whether `x` is within the fraction `tol` of `target`.
fn within(x: f64, target: f64, tol: f64) -> bool {
    (x / target - 1.0).abs() <= tol
}

/// Whether at every d_k the unscaled variance is within 15 % of d_k and the scaled one of 1.
fn variances_hold(stats: &[Scores]) -> bool {
    stats.iter().all(|s| within(s.raw.variance, s.dk as f64, 0.15) && within(s.scaled.variance, 1.0, 0.15))
}

/// Whether the unscaled `f` falls at each larger d_k.
fn falls(stats: &[Scores], f: fn(&ScoreStats) -> f64) -> bool {
    stats.windows(2).all(|w| f(&w[1].raw) < f(&w[0].raw))
}

/// Whether the scaled `f` stays within 10 % of its value at the smallest d_k.
fn flat(stats: &[Scores], f: fn(&ScoreStats) -> f64) -> bool {
    stats.iter().all(|s| within(f(&s.scaled), f(&stats[0].scaled), 0.10))
}

/// The Transformer with one head of `d_k` (64 by default), its scores scaled or not.
fn model(scaled: bool, d_k: usize) -> ModelSpec {
    ModelSpec::Transformer(TransformerSpec {
        d_model: d_k,
        heads: 1,
        ffn: 2 * d_k,
        enc_layers: 2,
        dec_layers: 2,
        scaled,
        ..Default::default()
    })
}

/// The unscaled and scaled models trained and compared, seed by seed (see [`trained::paired`]).
fn train_pairs(ctx: &Context, seeds: &[u64]) -> Result<Vec<trained::Paired>, MeasureError> {
    let budget = ctx.budget;
    trained::paired(seeds, |scaled, seed| {
        let d_k = ctx.knobs.d_k;
        let mut cfg = trained::run_config(model(scaled, d_k), budget.pick(1200, 300), budget.pick(200, 100));
        cfg.train.seed = seed;
        let name = format!("transformer-dk{d_k}-{}-seed{seed}", if scaled { "scaled" } else { "unscaled" });
        trained::train(ctx, &name, &cfg)
    })
}

/// The verdict's sentence: the first seed's probes from the smallest d_k to the largest, then the
/// trained runs.
fn because(
    probes: &Probes,
    seed: u64,
    d_k: usize,
    lower_ppl: usize,
    runs: usize,
    bleu_because: &str,
) -> String {
    let (stats, projections) = (&probes.stats, &probes.projections);
    let (first, last) = (&stats[0], &stats[stats.len() - 1]);
    format!(
        "seed {seed}: variance/d_k runs {}–{} unscaled, the scaled variance {}–{}; from d_k = {} to {} the unscaled entropy falls \
         {} → {} nats and the Jacobian {} → {}, the scaled ones stay {} → {} and {} → {}; yet the unscaled W^Q's \
         gradient is {}× the scaled one's at d_k = {} and {}× at {} (larger: the scores' √d_k outweighs the \
         flatter softmax at initialisation). Trained with d_k = {d_k}: \
         test perplexity lower with the scaling for {lower_ppl} of {} seeds; {bleu_because}",
        num(stats.iter().map(|s| s.raw.variance / s.dk as f64).fold(f64::INFINITY, f64::min)),
        num(stats.iter().map(|s| s.raw.variance / s.dk as f64).fold(0.0, f64::max)),
        num(stats.iter().map(|s| s.scaled.variance).fold(f64::INFINITY, f64::min)),
        num(stats.iter().map(|s| s.scaled.variance).fold(0.0, f64::max)),
        first.dk,
        last.dk,
        num(first.raw.entropy),
        num(last.raw.entropy),
        num(first.raw.jacobian),
        num(last.raw.jacobian),
        num(first.scaled.entropy),
        num(last.scaled.entropy),
        num(first.scaled.jacobian),
        num(last.scaled.jacobian),
        num(projections[0][0].0 / projections[0][1].0),
        first.dk,
        num(projections[projections.len() - 1][0].0 / projections[projections.len() - 1][1].0),
        last.dk,
        runs,
    )
}

/// The probes' figures: the scores' variance, and the softmax's entropy and Jacobian, by d_k.
fn probe_figures(stats: &[Scores]) -> [Figure; 2] {
    let pts = |f: &dyn Fn(&Scores) -> f64| stats.iter().map(|s| (s.dk as f64, f(s))).collect();
    [
        figure(
            "scaling-variance.svg",
            "Variance of attention scores by d_k",
            "d_k",
            "variance",
            vec![
                series("unscaled", pts(&|s| s.raw.variance)),
                series("scaled by 1/√d_k", pts(&|s| s.scaled.variance)),
            ],
        ),
        figure(
            "scaling-entropy.svg",
            "Softmax entropy and Jacobian norm by d_k",
            "d_k",
            "nats / Frobenius norm",
            vec![
                series("entropy, unscaled", pts(&|s| s.raw.entropy)),
                series("entropy, scaled", pts(&|s| s.scaled.entropy)),
                series("‖J‖, unscaled", pts(&|s| s.raw.jacobian)),
                series("‖J‖, scaled", pts(&|s| s.scaled.jacobian)),
            ],
        ),
    ]
}
