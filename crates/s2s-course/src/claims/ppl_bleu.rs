//! Evaluation: lower perplexity goes with higher BLEU — judged across the course's trained
//! models, where it could fail, not across one run's checkpoints, where training progress alone
//! makes it hold.

use std::path::{Path, PathBuf};

use super::{figure, series};
use crate::{Claim, Context, Finding, Table, Verdict, num};

pub const CLAIM: Claim = Claim {
    name: "ppl-bleu",
    why: "Perplexity is cheap and differentiable, BLEU is what we report: training on one in the hope \
          of the other assumes they agree. Within a run they do by construction; across models is \
          where the assumption can fail.",
    statement: "Lower perplexity goes with higher BLEU: across models, the one with the lower perplexity translates better",
    lecture: "language-models-rnn-seq2seq.md § Valutazione del Modello; § BLEU (Bilingual Evaluation Understudy)",
    criterion: "holds when, over at least 5 of the course's trained models scored on the same test sentences, \
                the rank correlation (Spearman's ρ) between test perplexity and greedy test BLEU is −0.8 or lower",
    method: "every model the other claims trained on the built-in pair's 4,000 pairs, every seed (Bahdanau, Luong \
             with four scores, the LSTM without attention, Transformers with and without scaling and positions, 1 \
             to 16 heads; runs last so that they exist) — but not the decoders trained without the causal mask, \
             whose teacher-forced perplexity reads the word it predicts and so is not a prediction: each final \
             model's test perplexity (teacher-forced) and greedy test BLEU \
             on the same 200 sentences; the pairs of models where the lower perplexity has the lower BLEU by more \
             than a point listed as counterexamples. Beside it, one run's checkpoints (the course's Bahdanau \
             model, every 100 steps), where progress alone ties the two",
    run,
};

/// A trained model's test figures: (run name, perplexity, BLEU).
type Scored = (String, f64, f64);

/// Whether a run's teacher-forced perplexity is a prediction: not for a Transformer decoder
/// trained without the causal mask, which reads the word it is scored on.
fn predicts(dir: &Path) -> bool {
    match s2s_train::run::read_manifest(dir) {
        Ok(m) => !matches!(m.config.model, s2s_models::ModelSpec::Transformer(t) if !t.causal),
        Err(_) => false,
    }
}

/// The final test scores of every run in `work` scored on the same test references as `like`,
/// whose perplexity is a prediction ([`predicts`]).
fn pooled(work: &Path, like: &Path) -> Vec<Scored> {
    let refs = |dir: &Path| std::fs::read_to_string(dir.join("test/references.txt")).ok();
    let Some(want) = refs(like) else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir(work) else { return Vec::new() };
    let mut dirs: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    dirs.sort();
    dirs.iter()
        .filter(|d| refs(d).as_ref() == Some(&want) && predicts(d))
        .filter_map(|d| {
            let text = std::fs::read_to_string(d.join("test/scores.json")).ok()?;
            let v: serde_json::Value = serde_json::from_str(&text).ok()?;
            let name = d.file_name()?.to_string_lossy().into_owned();
            Some((name, v["ppl"].as_f64()?, v["bleu"].as_f64()?))
        })
        .filter(|s| s.1.is_finite() && s.2.is_finite())
        .collect()
}

/// Pairs of models where the one with the lower perplexity has BLEU lower by more than a point:
/// (lower-perplexity model, the other), the largest BLEU gaps first.
fn counterexamples(models: &[Scored]) -> Vec<(&Scored, &Scored)> {
    let mut out = Vec::new();
    for a in models {
        for b in models {
            if a.1 < b.1 && a.2 + 1.0 < b.2 {
                out.push((a, b));
            }
        }
    }
    out.sort_by(|x, y| (y.1.2 - y.0.2).total_cmp(&(x.1.2 - x.0.2)));
    out
}

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
    let course_model = match super::trained::bahdanau(ctx, ctx.seeds()[0]) {
        Ok(dir) => dir,
        Err(e) => return Finding::not_run("the course's model did not train", e),
    };
    let rows = super::trained::metrics(&course_model);
    let models = pooled(&ctx.work, &course_model);
    if models.len() < 5 {
        return Finding::not_run(
            "too few trained models to pool",
            format!(
                "{} model(s) scored on the course's test sentences in {}: the claim pools the models the other \
                 claims train, so run the whole course (`s2s course run`)",
                models.len(),
                ctx.work.display()
            ),
        );
    }
    let (ppl, bleu): (Vec<f64>, Vec<f64>) = models.iter().map(|m| (m.1, m.2)).unzip();
    let rho = spearman(&ppl, &bleu);
    let checkpoint_rho = if rows.len() >= 3 {
        let (p, b): (Vec<f64>, Vec<f64>) = rows.iter().map(|r| (r.1, r.2)).unzip();
        spearman(&p, &b)
    } else {
        f64::NAN
    };
    let against = counterexamples(&models);
    let holds = rho <= -0.8;
    let mut table = Table {
        header: ["model (run)", "test perplexity", "test BLEU (greedy)"].map(String::from).to_vec(),
        rows: vec![],
    };
    let mut sorted: Vec<&Scored> = models.iter().collect();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1));
    for m in &sorted {
        table.rows.push(vec![m.0.clone(), num(m.1), num(m.2)]);
    }
    let counter = Table {
        header: ["lower perplexity", "its perplexity / BLEU", "higher perplexity", "its perplexity / BLEU"]
            .map(String::from)
            .to_vec(),
        rows: against
            .iter()
            .take(5)
            .map(|(a, b)| {
                vec![
                    a.0.clone(),
                    format!("{} / {}", num(a.1), num(a.2)),
                    b.0.clone(),
                    format!("{} / {}", num(b.1), num(b.2)),
                ]
            })
            .collect(),
    };
    let checkpoints = Table {
        header: ["step (the course's model)", "validation perplexity", "validation BLEU (greedy)"]
            .map(String::from)
            .to_vec(),
        rows: rows.iter().map(|r| vec![format!("{}", r.0 as u64), num(r.1), num(r.2)]).collect(),
    };
    let pairs = models.len() * (models.len() - 1) / 2;
    Finding {
        runs: Vec::new(),
        // One pool of every seed's models: the claim is about models, which the seeds multiply.
        seeds: None,
        verdict: if holds { Verdict::Holds } else { Verdict::DoesNotHold },
        reason: format!(
            "over {} models of every seed ρ = {}; in {} of {} pairs the lower perplexity has BLEU lower by more than a \
             point",
            models.len(),
            num(rho),
            against.len(),
            pairs
        ),
        because: format!(
            "over {} models ρ = {} (perplexity {} to {}, BLEU {} to {}); in {} of {} pairs the model with the lower \
             perplexity has BLEU lower by more than a point{}; over one run's {} checkpoints ρ = {}, which training \
             progress alone makes strong",
            models.len(),
            num(rho),
            num(sorted[0].1),
            num(sorted[sorted.len() - 1].1),
            num(bleu.iter().copied().fold(f64::INFINITY, f64::min)),
            num(bleu.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            against.len(),
            pairs,
            against.first().map_or(String::new(), |(a, b)| format!(
                " (the widest: {} at perplexity {} scores {} BLEU, {} at {} scores {})",
                a.0,
                num(a.1),
                num(a.2),
                b.0,
                num(b.1),
                num(b.2)
            )),
            rows.len(),
            num(checkpoint_rho)
        ),
        not_measured: String::new(),
        table,
        more: if counter.rows.is_empty() { vec![checkpoints] } else { vec![counter, checkpoints] },
        figures: vec![figure(
            "ppl-bleu.svg",
            "Test BLEU against test perplexity, one point a trained model",
            "test perplexity (log2)",
            "test BLEU",
            vec![series("models", sorted.iter().map(|m| (m.1.log2(), m.2)).collect())],
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pair is a counterexample when the lower perplexity has BLEU lower by more than a point.
    #[test]
    fn counterexamples_are_pairs_ordered_against_the_claim() {
        let m = |n: &str, p: f64, b: f64| (n.to_string(), p, b);
        let models = [m("a", 1.1, 90.0), m("b", 1.2, 95.0), m("c", 1.3, 95.5), m("d", 2.0, 40.0)];
        let found: Vec<(&str, &str)> =
            counterexamples(&models).iter().map(|(x, y)| (x.0.as_str(), y.0.as_str())).collect();
        assert_eq!(found, [("a", "c"), ("a", "b")]);
    }

    #[test]
    fn spearman_of_known_orders() {
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), 1.0);
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), -1.0);
        assert_eq!(ranks(&[5.0, 1.0, 5.0]), [2.5, 1.0, 2.5]);
    }
}
