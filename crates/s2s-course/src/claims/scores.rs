//! The score functions of attention: dot, multiplicative, low-rank multiplicative and
//! additive, four ways to compare the decoder state with each encoder state.

use std::path::Path;

use burn::tensor::Device;
use s2s_eval::{BleuConfig, MetricConfig, PairedOptions, PairedTest, Seed};
use s2s_models::attention::LuongScore;
use s2s_models::{AttentionRnnSpec, LstmSpec, ModelSpec};

use super::trained;
use crate::{Claim, Context, Finding, MeasureError, NotRun, Table, num};

pub const CLAIM: Claim = Claim {
    name: "attention-scores",
    why: "The lectures list several ways to score a decoder state against an encoder state; choosing \
          one is a cost trade-off only if each works. Each is compared with no attention at all, at \
          the same size.",
    statement: "Dot, multiplicative, low-rank multiplicative and additive scores are each a working attention, \
                at different costs in parameters and time",
    lecture: "language-models-rnn-seq2seq.md § Meccanismo di Attention in Modelli Seq2Seq (Tipi di Attention)",
    criterion: "holds when each score works: for every seed, its model's test BLEU is above that of an \
                encoder-decoder without attention of about the same number of parameters, with sacreBLEU's paired \
                bootstrap p < 0.05 — the course's one rule for a BLEU comparison. The costs (parameters, training \
                tokens/s with their range over the seeds) are reported, not judged",
    method: "Luong models (embeddings 32, hidden 64, bidirectional encoder, input feeding) on the built-in pair's \
             4,000 pairs, 2,000 steps, alike but for the score: dot sᵀh, multiplicative sᵀWh, low-rank \
             (Us)ᵀ(Vh) with rank 16, additive vᵀtanh(W₁h + W₂s); beside them the LSTM encoder-decoder without \
             attention (embeddings 32, bidirectional encoder) whose hidden size gives the parameter count \
             nearest the multiplicative model's; for each seed (300 steps in quick mode); greedy test BLEU \
             on 200 sentences, each score's seed against the baseline's under the paired bootstrap",
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

/// Per system (the four scores, then the baseline without attention): BLEU by seed, p by seed
/// (against the baseline), parameters, tokens/s by seed.
struct Measured {
    bleu: Vec<Vec<f64>>,
    p: Vec<Vec<Option<f64>>>,
    params: Vec<f64>,
    speed: Vec<Vec<f64>>,
}

/// Index of the baseline in [`Measured`]'s vectors.
const BASE: usize = SCORES.len();

fn run(ctx: &Context) -> Finding {
    let seeds = ctx.seeds();
    let m = match measure(ctx, seeds) {
        Ok(m) => m,
        Err(not_run) => return not_run.into(),
    };
    let means: Vec<f64> = m.bleu.iter().map(|b| mean(b)).collect();
    // A score works when it beats the baseline for every seed, significantly.
    let works: Vec<bool> = (0..SCORES.len())
        .map(|i| {
            m.bleu[i]
                .iter()
                .zip(&m.bleu[BASE])
                .zip(&m.p[i])
                .all(|((b, base), p)| b > base && p.is_some_and(|p| p < 0.05))
        })
        .collect();
    let holds = works.iter().all(|&w| w);
    // Seed by seed: every score above the baseline, significantly.
    let (verdict, judged) = crate::by_seed(
        seeds
            .iter()
            .enumerate()
            .map(|(k, &seed)| {
                let beats = |i: usize| m.bleu[i][k] > m.bleu[BASE][k] && m.p[i][k].is_some_and(|p| p < 0.05);
                (seed, (0..SCORES.len()).all(beats))
            })
            .collect(),
    );
    let failing: Vec<&str> = SCORES.iter().zip(&works).filter(|(_, w)| !**w).map(|(s, _)| s.0).collect();
    let speeds: Vec<String> = SCORES
        .iter()
        .enumerate()
        .map(|(i, (name, _, _))| {
            let (lo, hi) = range(&m.speed[i]);
            format!("{name} {}–{}", num(lo), num(hi))
        })
        .collect();
    let (blo, bhi) = range(&m.speed[BASE]);
    let reason = format!(
        "mean test BLEU {} without attention, {} with the four scores; {}",
        num(means[BASE]),
        crate::span(means[..BASE].iter().copied()),
        if holds {
            "each beats the baseline for every seed, significantly"
        } else {
            "not every score beats it significantly"
        }
    );
    Finding {
        runs: Vec::new(),
        seeds: judged,
        verdict,
        reason,
        because: format!(
            "mean test BLEU without attention {} ({} parameters); with attention {}; {}; costs: {}–{} \
             parameters with attention, training tokens/s over the seeds {} (without attention {}–{})",
            num(means[BASE]),
            m.params[BASE],
            SCORES
                .iter()
                .zip(&means)
                .map(|(s, b)| format!("{} {}", s.0, num(*b)))
                .collect::<Vec<_>>()
                .join(", "),
            if holds {
                "each score beats the baseline for every seed, each with p < 0.05".to_string()
            } else {
                format!("not above the baseline for every seed with p < 0.05: {}", failing.join(", "))
            },
            range(&m.params[..BASE]).0,
            range(&m.params[..BASE]).1,
            speeds.join(", "),
            num(blo),
            num(bhi),
        ),
        not_measured: String::new(),
        table: table(&m, &means),
        more: Vec::new(),
        figures: vec![bleu_figure(seeds, &m.bleu)],
    }
}

/// Every score's runs and paired test, seed by seed, or the finding of the first that failed.
fn measure(ctx: &Context, seeds: &[u64]) -> Result<Measured, NotRun> {
    let mut m = Measured {
        bleu: vec![Vec::new(); SCORES.len() + 1],
        p: vec![Vec::new(); SCORES.len() + 1],
        params: vec![f64::NAN; SCORES.len() + 1],
        speed: vec![Vec::new(); SCORES.len() + 1],
    };
    for &seed in seeds {
        let (hyps, refs) = train_seed(ctx, seed, &mut m)?;
        compare(&hyps, &refs, &mut m)?;
    }
    Ok(m)
}

/// The encoder-decoder without attention whose parameter count, at these vocabularies, is the
/// nearest to `target`: embeddings 32, bidirectional encoder, hidden 64 to 160 in steps of 8.
fn baseline(vocab: (usize, usize), target: f64) -> ModelSpec {
    let spec = |hidden: usize| {
        ModelSpec::Lstm(LstmSpec { emb: 32, hidden, layers: 1, bidirectional: true, ..Default::default() })
    };
    let d = Device::flex();
    let params = |h: usize| {
        use burn::module::Module;
        spec(h).init(vocab.0, vocab.1, &d).map_or(f64::INFINITY, |m| m.num_params() as f64)
    };
    let best = (64..=160)
        .step_by(8)
        .min_by(|&a, &b| (params(a) - target).abs().total_cmp(&(params(b) - target).abs()));
    spec(best.unwrap_or(64))
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
    // The baseline, sized after the multiplicative model at its vocabularies.
    let mult = ctx.work.join(format!("luong-multiplicative-seed{seed}-{}", budget.pick("full", "quick")));
    let vocab = match s2s_data::Tokenizers::load(&mult.join("tokenizer")) {
        Ok(t) => (t.src.vocab_size(), t.tgt.vocab_size()),
        Err(source) => {
            return Err(NotRun::new(
                "the multiplicative run has no tokenizer",
                MeasureError::Tokenizers { dir: mult, source },
            ));
        }
    };
    let mut cfg =
        trained::run_config(baseline(vocab, m.params[1]), budget.pick(2000, 300), budget.pick(200, 100));
    cfg.train.seed = seed;
    let dir = match trained::train(ctx, &format!("lstm-no-attention-seed{seed}"), &cfg) {
        Ok(d) => d,
        Err(e) => return Err(NotRun::new("the baseline did not train", e)),
    };
    let (n, tok) = cost(&dir);
    m.params[BASE] = n;
    m.speed[BASE].push(tok);
    match lines(&dir.join("test/hypotheses.txt")) {
        Ok(h) => hyps.push(h),
        Err(e) => return Err(NotRun::new("the baseline has no test output", e)),
    }
    Ok((hyps, refs))
}

/// One seed's paired test of the scores' hypotheses against the baseline's, its BLEU and
/// p-values noted in `m`.
fn compare(hyps: &[Vec<String>], refs: &[String], m: &mut Measured) -> Result<(), NotRun> {
    // The baseline without attention first: what each score is tested against.
    let order = [BASE, 0, 1, 2, 3];
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

/// The smallest and largest of `v`.
fn range(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| (l.min(x), h.max(x)))
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
            "p against no attention, by seed",
            "training tokens/s (range over seeds)",
        ]
        .map(String::from)
        .to_vec(),
        rows: SCORES
            .iter()
            .copied()
            .chain(std::iter::once(("no attention (baseline)", "—", LuongScore::Dot)))
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
                    {
                        let (lo, hi) = range(&m.speed[i]);
                        format!("{lo:.0}–{hi:.0}")
                    },
                ]
            })
            .collect(),
    }
}

/// The figure of each score's test BLEU by seed.
fn bleu_figure(seeds: &[u64], bleu: &[Vec<f64>]) -> crate::Figure {
    super::points_figure(
        "attention-scores.svg",
        "Test BLEU by seed for each score function (Luong, hidden 64)",
        "seed",
        "test BLEU (greedy)",
        SCORES
            .iter()
            .map(|s| s.0)
            .chain(std::iter::once("no attention"))
            .enumerate()
            .map(|(i, name)| {
                super::series(name, seeds.iter().zip(&bleu[i]).map(|(s, b)| (*s as f64, *b)).collect())
            })
            .collect(),
    )
}
