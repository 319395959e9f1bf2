//! The causal mask: without it the decoder reads the future while it trains — its
//! teacher-forced loss collapses, while free-running output, which has no future to read, is
//! garbage.

use s2s_models::{ModelSpec, TransformerSpec};

use super::{figure, series, trained};
use crate::{Claim, Context, Figure, Finding, MeasureError, Table, Verdict, num};

pub const CLAIM: Claim = Claim {
    name: "causal-mask",
    why: "A decoder trained with teacher forcing sees the whole target; without the causal mask it can \
          copy the next word instead of predicting it. The loss then looks excellent while the model \
          has learnt nothing it can use at translation time.",
    statement: "Without the causal mask the decoder reads the future in training: its loss collapses while \
                free-running output is garbage",
    lecture: "attention-mechanisms.md (causal masks); self-attention-notes.md (decoder attention)",
    criterion: "holds when the unmasked model's teacher-forced validation perplexity ends below the masked \
                model's while its greedy validation BLEU ends below half of the masked model's",
    method: "two Transformers (d_model 64, 4 heads, 2 + 2 layers) trained alike on the built-in pair, one with \
             `causal = false` (a teaching ablation); validation perplexity (teacher-forced) and greedy BLEU \
             every 100 steps",
    run,
};

fn run(ctx: &Context) -> Finding {
    let runs = measure(ctx);
    let (masked, unmasked) = match (&runs[0].1, &runs[1].1) {
        (Ok(m), Ok(u)) if !m.is_empty() && !u.is_empty() => (m, u),
        _ => {
            let e = runs
                .iter()
                .filter_map(|r| r.1.as_ref().err().map(ToString::to_string))
                .collect::<Vec<_>>()
                .join("; ");
            return Finding::not_run("the runs did not train", e);
        }
    };
    let (m, u) = (masked.last().expect("rows"), unmasked.last().expect("rows"));
    let holds = u.1 < m.1 && u.2 < 0.5 * m.2;
    Finding {
        runs: Vec::new(),
        verdict: if holds { Verdict::Holds } else { Verdict::DoesNotHold },
        because: format!(
            "after {} steps (the masked model {}) the unmasked model's perplexity is {} against the masked model's {}, \
             its greedy BLEU {} against {}",
            u.0 as u64,
            m.0 as u64,
            num(u.1),
            num(m.1),
            num(u.2),
            num(m.2)
        ),
        not_measured: String::new(),
        table: table(masked, unmasked),
        more: Vec::new(),
        figures: figures(masked, unmasked).into(),
    }
}

/// The masked and the unmasked model's validation rows, each trained (or found), or why not.
fn measure(ctx: &Context) -> Vec<(bool, Result<Vec<trained::Row>, MeasureError>)> {
    let steps = ctx.budget.pick(1200, 300);
    let every = ctx.budget.pick(100, 50);
    let model = |causal: bool| ModelSpec::Transformer(TransformerSpec { causal, ..trained::transformer() });
    [true, false]
        .into_iter()
        .map(|causal| {
            let name = if causal { "transformer-causal" } else { "transformer-unmasked" };
            (
                causal,
                trained::train(ctx, name, &trained::run_config(model(causal), steps, every))
                    .map(|d| trained::metrics(&d)),
            )
        })
        .collect()
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

/// The figures of validation BLEU and perplexity by step, masked and unmasked.
fn figures(masked: &[trained::Row], unmasked: &[trained::Row]) -> [Figure; 2] {
    let pts =
        |rows: &[(f64, f64, f64)], f: fn(&(f64, f64, f64)) -> f64| rows.iter().map(|r| (r.0, f(r))).collect();
    [
        figure(
            "causal-mask-bleu.svg",
            "Greedy validation BLEU, with and without the causal mask",
            "step",
            "BLEU",
            vec![series("masked", pts(masked, |r| r.2)), series("unmasked", pts(unmasked, |r| r.2))],
        ),
        figure(
            "causal-mask-ppl.svg",
            "Teacher-forced validation perplexity (log2), with and without the causal mask",
            "step",
            "log2 perplexity",
            vec![
                series("masked", pts(masked, |r| r.1.log2())),
                series("unmasked", pts(unmasked, |r| r.1.log2())),
            ],
        ),
    ]
}
