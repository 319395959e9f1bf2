//! The causal mask: without it the decoder reads the future while it trains — its
//! teacher-forced loss collapses, while free-running output, which has no future to read, is
//! garbage.

use s2s_models::{ModelSpec, TransformerSpec};

use super::{figure, series, trained};
use crate::{Claim, Context, Figure, Finding, MeasureError, Table, num};

pub const CLAIM: Claim = Claim {
    name: "causal-mask",
    why: "A decoder trained with teacher forcing sees the whole target; without the causal mask it can \
          copy the next word instead of predicting it. The loss then looks excellent while the model \
          has learnt nothing it can use at translation time.",
    statement: "Without the causal mask the decoder reads the future in training: its loss collapses while \
                free-running output is garbage",
    lecture: "attention-mechanisms.md (causal masks); self-attention-notes.md (decoder attention)",
    criterion: "holds when, for every seed, the unmasked model's teacher-forced test perplexity is below the \
                masked model's while its greedy test BLEU is below half of the masked model's, the difference \
                significant (sacreBLEU's paired bootstrap p < 0.05)",
    method: "two Transformers (d_model 64, 4 heads, 2 + 2 layers) trained alike on the built-in pair, one with \
             `causal = false` (a teaching ablation), 1,200 steps each (300 in quick mode), for each seed: test \
             perplexity (teacher-forced) and greedy test BLEU on 200 sentences; the first seed's validation \
             curves every 100 steps",
    run,
};

/// Whether one seed meets the criterion: the unmasked model's test perplexity below the masked
/// model's, while the masked model's BLEU is above it significantly and above twice it.
fn met(r: &trained::Paired) -> bool {
    r.ppl.0 < r.ppl.1 && trained::significant(r) && r.bleu.0 < 0.5 * r.bleu.1
}

fn run(ctx: &Context) -> Finding {
    let rows = match trained::paired(ctx.seeds(), |causal, seed| train(ctx, causal, seed)) {
        Ok(r) => r,
        Err(e) => return Finding::not_run("the runs did not train", e),
    };
    let (verdict, seeds) = crate::by_seed(rows.iter().map(|r| (r.seed, met(r))).collect());
    let judged = trained::judge_paired(&rows, "unmasked", "masked");
    let first = ctx.seeds()[0];
    let curves = (
        train(ctx, true, first).map(|d| trained::metrics(&d)),
        train(ctx, false, first).map(|d| trained::metrics(&d)),
    );
    let (Ok(masked), Ok(unmasked)) = curves else {
        return Finding::not_run("the runs' validation rows could not be read", "metrics.csv");
    };
    let said: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "seed {}: test perplexity {} unmasked against {} masked, greedy test BLEU {} against {} (p = {:.3})",
                r.seed,
                num(r.ppl.0),
                num(r.ppl.1),
                num(r.bleu.0),
                num(r.bleu.1),
                r.p
            )
        })
        .collect();
    let steps = ctx.budget.pick(1200, 300);
    let reason = format!(
        "unmasked, test perplexity {} against {} masked, yet greedy BLEU {} against {}",
        crate::span(rows.iter().map(|r| r.ppl.0)),
        crate::span(rows.iter().map(|r| r.ppl.1)),
        crate::span(rows.iter().map(|r| r.bleu.0)),
        crate::span(rows.iter().map(|r| r.bleu.1))
    );
    Finding {
        runs: Vec::new(),
        seeds,
        verdict,
        reason,
        because: format!("after {steps} steps each, {}", said.join("; ")),
        not_measured: String::new(),
        table: judged.table,
        more: vec![table(&masked, &unmasked)],
        figures: figures(&masked, &unmasked, first).into(),
    }
}

/// The masked (`causal`) or unmasked model of `seed`, trained (or found). The masked one is the
/// course's Transformer, the runs the positions and heads claims share.
fn train(ctx: &Context, causal: bool, seed: u64) -> Result<std::path::PathBuf, MeasureError> {
    let steps = ctx.budget.pick(1200, 300);
    let every = ctx.budget.pick(100, 50);
    let model = ModelSpec::Transformer(TransformerSpec { causal, ..trained::transformer() });
    let mut cfg = trained::run_config(model, steps, every);
    cfg.train.seed = seed;
    let name =
        if causal { trained::transformer_name(seed) } else { crate::seeded("transformer-unmasked", seed) };
    trained::train(ctx, &name, &cfg)
}

/// The table: perplexity and greedy BLEU by step, masked beside unmasked — every step either
/// run validated at, `–` where the other did not.
fn table(masked: &[trained::Row], unmasked: &[trained::Row]) -> Table {
    let mut table = Table {
        header: ["step", "perplexity, masked", "unmasked", "greedy BLEU, masked", "unmasked"]
            .map(String::from)
            .to_vec(),
        rows: vec![],
    };
    let mut steps: Vec<u64> = masked.iter().chain(unmasked).map(|r| r.0 as u64).collect();
    steps.sort_unstable();
    steps.dedup();
    let at = |rows: &[trained::Row], step: u64| rows.iter().find(|r| r.0 as u64 == step).copied();
    let cell = |r: Option<trained::Row>, f: fn(&trained::Row) -> f64| r.map_or("–".into(), |r| num(f(&r)));
    for step in steps {
        let (a, b) = (at(masked, step), at(unmasked, step));
        table.rows.push(vec![
            step.to_string(),
            cell(a, |r| r.1),
            cell(b, |r| r.1),
            cell(a, |r| r.2),
            cell(b, |r| r.2),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that validated at fewer steps keeps the other's later rows, dashed.
    #[test]
    fn the_table_keeps_every_step_of_either_run() {
        let masked = [(100.0, 9.0, 1.0), (200.0, 8.0, 2.0), (300.0, 7.0, 3.0)];
        let unmasked = [(100.0, 2.0, 0.5), (200.0, 1.5, 0.4)];
        let t = table(&masked, &unmasked);
        let steps: Vec<&str> = t.rows.iter().map(|r| r[0].as_str()).collect();
        assert_eq!(steps, ["100", "200", "300"]);
        assert_eq!(t.rows[2][1..], [num(7.0), "–".into(), num(3.0), "–".into()]);
    }
}

/// The figures of validation BLEU and perplexity by step, masked and unmasked, of seed `seed`.
fn figures(masked: &[trained::Row], unmasked: &[trained::Row], seed: u64) -> [Figure; 2] {
    let pts =
        |rows: &[(f64, f64, f64)], f: fn(&(f64, f64, f64)) -> f64| rows.iter().map(|r| (r.0, f(r))).collect();
    [
        figure(
            "causal-mask-bleu.svg",
            &format!("Greedy validation BLEU, with and without the causal mask (seed {seed})"),
            "step",
            "BLEU",
            vec![series("masked", pts(masked, |r| r.2)), series("unmasked", pts(unmasked, |r| r.2))],
        ),
        figure(
            "causal-mask-ppl.svg",
            &format!(
                "Teacher-forced validation perplexity (log2), with and without the causal mask (seed {seed})"
            ),
            "step",
            "log2 perplexity",
            vec![
                series("masked", pts(masked, |r| r.1.log2())),
                series("unmasked", pts(unmasked, |r| r.1.log2())),
            ],
        ),
    ]
}
