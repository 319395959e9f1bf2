//! The causal mask: without it the decoder reads the future while it trains — its
//! teacher-forced loss collapses, while free-running output, which has no future to read, is
//! garbage.

use s2s_models::{ModelSpec, TransformerSpec};

use super::{figure, series, trained};
use crate::{Claim, Context, Figure, Finding, MeasureError, Table, Verdict, num};

pub const CLAIM: Claim = Claim {
    name: "causal-mask",
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
        verdict: if holds { Verdict::Holds } else { Verdict::DoesNotHold },
        because: format!(
            "after {} steps the unmasked model's perplexity is {} against the masked model's {}, its greedy BLEU {} against {}",
            num(m.0),
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

/// The table: perplexity and greedy BLEU by step, masked beside unmasked.
fn table(masked: &[trained::Row], unmasked: &[trained::Row]) -> Table {
    let mut table = Table {
        header: ["step", "perplexity, masked", "unmasked", "greedy BLEU, masked", "unmasked"]
            .map(String::from)
            .to_vec(),
        rows: vec![],
    };
    for (a, b) in masked.iter().zip(unmasked) {
        table.rows.push(vec![format!("{}", a.0 as u64), num(a.1), num(b.1), num(a.2), num(b.2)]);
    }
    table
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
