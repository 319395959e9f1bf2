//! A bidirectional encoder helps: each source state sees the words after it as well as those
//! before.

use s2s_eval::{BleuConfig, MetricConfig, PairedOptions, PairedTest, Seed};
use s2s_models::ModelSpec;

use super::trained;
use crate::{Claim, Context, Finding, Table, Verdict, num};

pub const CLAIM: Claim = Claim {
    name: "bidirectional",
    statement: "A bidirectional encoder translates better than a unidirectional one of the same size",
    lecture: "language-models-rnn-seq2seq.md § Estensione Bidirezionale; § Modello Seq2Seq",
    criterion: "holds when the bidirectional encoder's test BLEU is higher for every seed and sacreBLEU's paired \
                bootstrap (1,000 resamples) gives p < 0.05 for each seed",
    method: "the course's model (Bahdanau, embeddings 32, hidden 64 — a bidirectional encoder has 32 a direction — \
             on the built-in pair's 4,000 pairs) trained with a bidirectional and a unidirectional encoder, \
             alike, for 3 seeds (1 in quick mode); greedy test BLEU on 200 sentences, each seed's pair tested \
             with the unidirectional model as the baseline",
    run,
};

/// A run's test hypotheses and references.
fn texts(dir: &std::path::Path) -> Result<(Vec<String>, Vec<String>), String> {
    let read = |name: &str| {
        std::fs::read_to_string(dir.join("test").join(name))
            .map(|t| t.lines().map(str::to_string).collect::<Vec<_>>())
            .map_err(|e| format!("{}: {e}", dir.join("test").join(name).display()))
    };
    Ok((read("hypotheses.txt")?, read("references.txt")?))
}

fn run(ctx: &Context) -> Finding {
    let seeds: &[u64] = ctx.budget.pick(&[1, 2, 3], &[1]);
    let base = trained::config(ctx);
    let mut rows = Vec::new();
    for &seed in seeds {
        let mut pair = Vec::new();
        for bidirectional in [false, true] {
            let mut cfg = base.clone();
            cfg.train.seed = seed;
            if let ModelSpec::Bahdanau(s) = &mut cfg.model {
                s.bidirectional = bidirectional;
            }
            // Seed 1's bidirectional model is the course's shared one.
            let dir = if bidirectional && seed == 1 {
                trained::bahdanau(ctx)
            } else {
                let name = format!("bahdanau-{}-seed{seed}", if bidirectional { "bi" } else { "uni" });
                trained::train(ctx, &name, &cfg)
            };
            match dir.and_then(|d| texts(&d)) {
                Ok(t) => pair.push(t),
                Err(e) => return Finding::not_run("the runs did not train", e),
            }
        }
        let systems = [pair[0].0.as_slice(), pair[1].0.as_slice()];
        let refs = [pair[0].1.as_slice()];
        let opts = PairedOptions { test: PairedTest::Bootstrap, samples: 1000, seed: Seed::default() };
        let metrics = [MetricConfig::Bleu(BleuConfig::default())];
        match s2s_eval::paired_test(&systems, &refs, &metrics, &opts) {
            Ok(columns) => {
                let r = &columns[0].results;
                rows.push((seed, r[0].score, r[1].score, r[1].p_value.unwrap_or(1.0)));
            }
            Err(e) => return Finding::not_run("the paired test failed", e.to_string()),
        }
    }
    let n = rows.len() as f64;
    let mean = |f: fn(&(u64, f64, f64, f64)) -> f64| rows.iter().map(f).sum::<f64>() / n;
    let (uni, bi) = (mean(|r| r.1), mean(|r| r.2));
    let better = rows.iter().filter(|r| r.2 > r.1).count();
    let significant = rows.iter().filter(|r| r.2 > r.1 && r.3 < 0.05).count();
    let holds = significant == rows.len();
    let mut table = Table {
        header: ["seed", "unidirectional BLEU", "bidirectional BLEU", "difference", "paired bootstrap p"]
            .map(String::from)
            .to_vec(),
        rows: rows
            .iter()
            .map(|r| vec![r.0.to_string(), num(r.1), num(r.2), num(r.2 - r.1), format!("{:.3}", r.3)])
            .collect(),
    };
    table.rows.push(vec!["mean".into(), num(uni), num(bi), num(bi - uni), String::new()]);
    Finding {
        verdict: if holds { Verdict::Holds } else { Verdict::DoesNotHold },
        because: format!(
            "mean test BLEU {} unidirectional, {} bidirectional; higher for {better} of {} seeds, significantly \
             (p < 0.05) for {significant}",
            num(uni),
            num(bi),
            rows.len()
        ),
        not_measured: if seeds.len() < 3 { "one seed in quick mode: run the full course for three".into() } else { String::new() },
        table,
        figures: Vec::new(),
    }
}
