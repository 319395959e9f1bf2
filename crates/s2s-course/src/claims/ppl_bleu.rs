//! Evaluation: lower validation perplexity goes with higher BLEU across a run's checkpoints.

use super::{figure, series};
use crate::{Claim, Context, Finding, Table, Verdict, num};

pub const CLAIM: Claim = Claim {
    name: "ppl-bleu",
    statement: "Across a run's checkpoints, lower validation perplexity goes with higher BLEU",
    lecture: "language-models-rnn-seq2seq.md § Valutazione del Modello; § BLEU (Bilingual Evaluation Understudy)",
    criterion: "holds when the rank correlation (Spearman's ρ) between the checkpoints' validation perplexity \
                and their greedy validation BLEU is −0.8 or lower",
    method: "the course's model (Bahdanau, embeddings 32, hidden 64, on the built-in pair's 4,000 pairs, \
             2,000 steps) validated every 100 steps: perplexity and greedy BLEU on 200 validation sentences \
             at each checkpoint",
    run,
};

/// Ranks of `v` (1 = smallest; ties share their mean rank).
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        for k in i..=j {
            r[idx[k]] = (i + j) as f64 / 2.0 + 1.0;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation of `a` and `b`.
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

fn run(ctx: &Context) -> Finding {
    let budget = ctx.budget;
    let _ = budget;
    let trained = super::trained::bahdanau(ctx);
    let rows = trained.as_ref().map(|dir| super::trained::metrics(dir)).unwrap_or_default();
    let ppl: Vec<f64> = rows.iter().map(|r| r.1).collect();
    let bleu: Vec<f64> = rows.iter().map(|r| r.2).collect();
    let rho = if rows.len() >= 3 { spearman(&ppl, &bleu) } else { f64::NAN };
    let holds = rho <= -0.8;
    Finding {
        runs: Vec::new(),
        verdict: if holds { Verdict::Holds } else { Verdict::DoesNotHold },
        because: format!(
            "over {} checkpoints ρ = {} (perplexity {} → {}, BLEU {} → {})",
            rows.len(),
            num(rho),
            num(*ppl.first().unwrap_or(&f64::NAN)),
            num(*ppl.last().unwrap_or(&f64::NAN)),
            num(*bleu.first().unwrap_or(&f64::NAN)),
            num(*bleu.last().unwrap_or(&f64::NAN)),
        ),
        not_measured: match &trained {
            Ok(_) => "the same across models and runs (here: one run's checkpoints)".into(),
            Err(e) => e.to_string(),
        },
        table: Table {
            header: ["step", "validation perplexity", "validation BLEU (greedy)"].map(String::from).to_vec(),
            rows: rows.iter().map(|r| vec![format!("{}", r.0 as u64), num(r.1), num(r.2)]).collect(),
        },
        more: Vec::new(),
        figures: vec![figure(
            "ppl-bleu.svg",
            "Validation BLEU against validation perplexity, one point a checkpoint",
            "validation perplexity (log2)",
            "validation BLEU",
            vec![series("checkpoints", {
                let mut p: Vec<(f64, f64)> = rows.iter().map(|r| (r.1.log2(), r.2)).collect();
                p.sort_by(|a, b| a.0.total_cmp(&b.0));
                p
            })],
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_of_known_orders() {
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), 1.0);
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), -1.0);
        assert_eq!(ranks(&[5.0, 1.0, 5.0]), [2.5, 1.0, 2.5]);
    }
}
