//! The score functions of attention: dot, multiplicative, low-rank multiplicative and
//! additive, four ways to compare the decoder state with each encoder state.

use std::path::Path;

use s2s_eval::{BleuConfig, MetricConfig, PairedOptions, PairedTest, Seed};
use s2s_models::attention::LuongScore;
use s2s_models::{AttentionRnnSpec, ModelSpec};

use super::trained;
use crate::{Claim, Context, Finding, MeasureError, NotRun, Table, Verdict, num};

pub const CLAIM: Claim = Claim {
    name: "attention-scores",
    statement: "Dot, multiplicative, low-rank multiplicative and additive scores are each a working attention, \
                at different costs in parameters and time",
    lecture: "language-models-rnn-seq2seq.md § Meccanismo di Attention in Modelli Seq2Seq (Tipi di Attention)",
    criterion: "holds when every score function's mean test BLEU is within 3 points of the best one's; the \
                differences are reported with sacreBLEU's paired bootstrap against the multiplicative score",
    method: "Luong models (embeddings 32, hidden 64, bidirectional encoder, input feeding) on the built-in pair's \
             4,000 pairs, 2,000 steps, alike but for the score: dot sᵀh, multiplicative sᵀWh, low-rank \
             (Us)ᵀ(Vh) with rank 16, additive vᵀtanh(W₁h + W₂s); 3 seeds (300 steps, 1 seed in quick mode); \
             greedy test BLEU on 200 sentences, the model's parameters, training tokens/s",
    run,
};

/// The four scores as the lecture lists them: (name, equation, Luong's score).
const SCORES: [(&str, &str, LuongScore); 4] = [
    ("dot", "sᵀh", LuongScore::Dot),
    ("multiplicative", "sᵀWh", LuongScore::General),
    ("low-rank multiplicative", "(Us)ᵀ(Vh), rank 16", LuongScore::LowRank),
    ("additive", "vᵀtanh(W₁h + W₂s)", LuongScore::Concat),
];

/// A run's parameters and mean training tokens/s.
fn cost(dir: &Path) -> (f64, f64) {
    let params = std::fs::read_to_string(dir.join("run.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["params"].as_f64())
        .unwrap_or(f64::NAN);
    let speed = csv::Reader::from_path(dir.join("metrics.csv"))
        .ok()
        .map(|mut r| {
            let v: Vec<f64> = r
                .deserialize::<std::collections::HashMap<String, String>>()
                .filter_map(|row| row.ok()?.get("tokens_per_s")?.parse().ok())
                .collect();
            v.iter().sum::<f64>() / v.len().max(1) as f64
        })
        .unwrap_or(f64::NAN);
    (params, speed)
}

fn lines(path: &Path) -> Result<Vec<String>, MeasureError> {
    std::fs::read_to_string(path)
        .map(|t| t.lines().map(str::to_string).collect())
        .map_err(|source| MeasureError::io(path, source))
}

/// Per score: BLEU by seed, p by seed (against multiplicative), parameters, tokens/s by seed.
struct Measured {
    bleu: Vec<Vec<f64>>,
    p: Vec<Vec<Option<f64>>>,
    params: Vec<f64>,
    speed: Vec<Vec<f64>>,
}

fn run(ctx: &Context) -> Finding {
    let seeds: &[u64] = ctx.budget.pick(&[1, 2, 3], &[1]);
    let m = match measure(ctx, seeds) {
        Ok(m) => m,
        Err(not_run) => return not_run.into(),
    };
    let means: Vec<f64> = m.bleu.iter().map(|b| mean(b)).collect();
    let best = means.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let worst = means.iter().cloned().fold(f64::INFINITY, f64::min);
    let holds = best - worst <= 3.0;
    let named = |x: f64| SCORES[means.iter().position(|&y| y == x).unwrap_or(0)].0;
    Finding {
        runs: Vec::new(),
        verdict: if holds { Verdict::Holds } else { Verdict::DoesNotHold },
        because: format!(
            "mean test BLEU from {} ({}) to {} ({}), {} points apart; parameters {}–{}",
            num(worst),
            named(worst),
            num(best),
            named(best),
            num(best - worst),
            m.params.iter().cloned().fold(f64::INFINITY, f64::min),
            m.params.iter().cloned().fold(0.0, f64::max),
        ),
        not_measured: if seeds.len() < 3 {
            "one seed in quick mode: run the full course for three".into()
        } else {
            String::new()
        },
        table: table(&m, &means),
        more: Vec::new(),
        figures: vec![bleu_figure(seeds, &m.bleu)],
    }
}

/// Every score's runs and paired test, seed by seed, or the finding of the first that failed.
fn measure(ctx: &Context, seeds: &[u64]) -> Result<Measured, NotRun> {
    let mut m = Measured {
        bleu: vec![Vec::new(); SCORES.len()],
        p: vec![Vec::new(); SCORES.len()],
        params: vec![f64::NAN; SCORES.len()],
        speed: vec![Vec::new(); SCORES.len()],
    };
    for &seed in seeds {
        let (hyps, refs) = train_seed(ctx, seed, &mut m)?;
        compare(&hyps, &refs, &mut m)?;
    }
    Ok(m)
}

/// The Luong model with `score`.
fn model(score: LuongScore) -> ModelSpec {
    ModelSpec::Luong(AttentionRnnSpec { emb: 32, hidden: 64, score, rank: 16, ..Default::default() })
}

/// Each score's test hypotheses for `seed`, and the references (each run's cost noted in `m`).
fn train_seed(ctx: &Context, seed: u64, m: &mut Measured) -> Result<(Vec<Vec<String>>, Vec<String>), NotRun> {
    let budget = ctx.budget;
    let mut hyps = Vec::new();
    let mut refs = Vec::new();
    for (i, (name, _, score)) in SCORES.iter().enumerate() {
        let mut cfg = trained::run_config(model(*score), budget.pick(2000, 300), budget.pick(200, 100));
        cfg.train.seed = seed;
        let dir = match trained::train(ctx, &format!("luong-{}-seed{seed}", name.replace(' ', "-")), &cfg) {
            Ok(d) => d,
            Err(e) => return Err(NotRun::new("the runs did not train", e)),
        };
        let (n, tok) = cost(&dir);
        m.params[i] = n;
        m.speed[i].push(tok);
        match (lines(&dir.join("test/hypotheses.txt")), lines(&dir.join("test/references.txt"))) {
            (Ok(h), Ok(r)) => {
                hyps.push(h);
                refs = r;
            }
            (Err(e), _) | (_, Err(e)) => return Err(NotRun::new("a run has no test output", e)),
        }
    }
    Ok((hyps, refs))
}

/// One seed's paired test of the scores' hypotheses, its BLEU and p-values noted in `m`.
fn compare(hyps: &[Vec<String>], refs: &[String], m: &mut Measured) -> Result<(), NotRun> {
    // Multiplicative (Luong's default, `general`) first: the baseline of the paired test.
    let order = [1usize, 0, 2, 3];
    let systems: Vec<&[String]> = order.iter().map(|&i| hyps[i].as_slice()).collect();
    let opts = PairedOptions { test: PairedTest::Bootstrap, samples: 1000, seed: Seed::default() };
    let columns =
        match s2s_eval::paired_test(&systems, &[refs], &[MetricConfig::Bleu(BleuConfig::default())], &opts) {
            Ok(c) => c,
            Err(e) => return Err(NotRun::new("the paired test failed", MeasureError::PairedTest(e))),
        };
    for (k, &i) in order.iter().enumerate() {
        let r = &columns[0].results[k];
        m.bleu[i].push(r.score);
        m.p[i].push(r.p_value);
    }
    Ok(())
}

/// The mean of `v`.
fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// The table: each score's parameters, BLEU by seed and mean, p-values and speed.
fn table(m: &Measured, means: &[f64]) -> Table {
    Table {
        header: [
            "score",
            "e_i",
            "parameters",
            "test BLEU by seed",
            "mean",
            "p against multiplicative, by seed",
            "training tokens/s",
        ]
        .map(String::from)
        .to_vec(),
        rows: SCORES
            .iter()
            .enumerate()
            .map(|(i, (name, eq, _))| {
                vec![
                    name.to_string(),
                    eq.to_string(),
                    format!("{:.0}", m.params[i]),
                    m.bleu[i].iter().map(|b| num(*b)).collect::<Vec<_>>().join(", "),
                    num(means[i]),
                    m.p[i]
                        .iter()
                        .map(|p| p.map_or("baseline".to_string(), |p| format!("{p:.3}")))
                        .collect::<Vec<_>>()
                        .join(", "),
                    format!("{:.0}", mean(&m.speed[i])),
                ]
            })
            .collect(),
    }
}

/// The figure of each score's test BLEU by seed.
fn bleu_figure(seeds: &[u64], bleu: &[Vec<f64>]) -> crate::Figure {
    super::figure(
        "attention-scores.svg",
        "Test BLEU by seed for each score function (Luong, hidden 64)",
        "seed",
        "test BLEU (greedy)",
        SCORES
            .iter()
            .enumerate()
            .map(|(i, (name, _, _))| {
                super::series(name, seeds.iter().zip(&bleu[i]).map(|(s, b)| (*s as f64, *b)).collect())
            })
            .collect(),
    )
}
