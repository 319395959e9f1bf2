//! Vanishing gradients: in a plain RNN the gradient reaching earlier inputs shrinks
//! exponentially with their distance from the output; gated cells (LSTM, GRU) keep it flatter.

use burn::tensor::{Device, Distribution, Tensor};
use s2s_models::cell::CellKind;
use s2s_models::rnn::StackedRnnConfig;

use super::{figure, series};
use crate::probes::{gradient_by_distance, slope};
use crate::{Claim, Context, Finding, Table, Verdict, num};

pub const CLAIM: Claim = Claim {
    name: "vanishing-gradient",
    statement: "A plain RNN's gradient vanishes with distance; LSTM and GRU keep it far flatter",
    lecture: "language-models-rnn-seq2seq.md § Vanishing Gradient Problem; § Long Short-Term Memory (LSTM)",
    criterion: "holds when the plain RNN's gradient shrinks by at least 10× over 30 steps and the GRU's and \
                the LSTM's decay at most half as fast (least-squares slope of ln ‖∂L/∂xₜ‖ by distance: \
                'far flatter')",
    method: "one-layer encoders (input 32, hidden 64, PyTorch's initialisation) of each cell read 16 \
             random sequences; L is the sum of the last output; ‖∂L/∂xₜ‖ is the gradient reaching input t, \
             which passes through every state from t to the end; averaged in log over seeds",
    run,
};

/// Mean over `seeds` of ln ‖∂L/∂xₜ‖ by distance, for `cell`.
fn log_norms(cell: CellKind, len: usize, seeds: u64) -> Vec<f64> {
    let d = Device::flex().autodiff();
    let mut sum = vec![0.0; len];
    for seed in 0..seeds {
        d.seed(100 + seed);
        let rnn = StackedRnnConfig::encoder(cell, 32, 64, 1, false, 0.0).expect("a valid size").init(&d);
        let x: Tensor<3> = Tensor::random([16, len, 32], Distribution::Normal(0.0, 1.0), &d);
        let keep = Tensor::ones([16, len], &d);
        let norms = gradient_by_distance(x, |x| {
            let (out, _) = rnn.forward(x, &keep, len, None);
            out.narrow(1, len - 1, 1).sum()
        });
        for (s, n) in sum.iter_mut().zip(norms) {
            *s += n.max(1e-300).ln() / seeds as f64;
        }
    }
    sum
}

fn run(ctx: &Context) -> Finding {
    let budget = ctx.budget;
    let (len, seeds) = budget.pick((60, 3), (40, 1));
    let cells = [("rnn", CellKind::Rnn), ("gru", CellKind::Gru), ("lstm", CellKind::Lstm)];
    let curves: Vec<(&str, Vec<f64>)> = cells.iter().map(|&(n, c)| (n, log_norms(c, len, seeds))).collect();
    // Decay per 10 steps from the slope of ln-norm over distances 1..len (distance 0 reads
    // the output directly).
    let dist: Vec<f64> = (1..len).map(|d| d as f64).collect();
    let per10 = |ln: &[f64]| (-10.0 * slope(&dist, &ln[1..])).exp();
    let over30 = |ln: &[f64]| (ln[1] - ln[31]).exp();
    let mut table = Table {
        header: ["cell", "‖∂L/∂x‖ at distance 1", "at 10", "at 30", "shrinks per 10 steps", "over 30 steps"]
            .map(String::from)
            .to_vec(),
        rows: vec![],
    };
    for (name, ln) in &curves {
        table.rows.push(vec![
            name.to_string(),
            num(ln[1].exp()),
            num(ln[10].exp()),
            num(ln[30].exp()),
            format!("{}×", num(per10(ln))),
            format!("{}×", num(over30(ln))),
        ]);
    }
    let [rnn, gru, lstm] = [&curves[0].1, &curves[1].1, &curves[2].1];
    // Decay rates in log: ln(shrink per 10 steps).
    let rate = |ln: &[f64]| per10(ln).ln();
    let holds = over30(rnn) >= 10.0 && rate(gru) <= 0.5 * rate(rnn) && rate(lstm) <= 0.5 * rate(rnn);
    let because = format!(
        "per 10 steps the gradient shrinks {}× in the RNN, {}× in the GRU, {}× in the LSTM (over 30 steps: {}×, {}×, {}×)",
        num(per10(rnn)),
        num(per10(gru)),
        num(per10(lstm)),
        num(over30(rnn)),
        num(over30(gru)),
        num(over30(lstm))
    );
    let log10 =
        |ln: &Vec<f64>| ln.iter().enumerate().map(|(d, v)| (d as f64, v / std::f64::consts::LN_10)).collect();
    Finding {
        verdict: if holds { Verdict::Holds } else { Verdict::DoesNotHold },
        because,
        not_measured: "the same after training (the trained encoders of the course's translation runs); at \
                       initialisation the gates sit near σ(0) = 0.5, so a gated cell's memory halves each step \
                       until training opens its forget gate"
            .into(),
        table,
        figures: vec![figure(
            "vanishing-gradient.svg",
            "Gradient reaching each input, by distance from the output (at initialisation)",
            "distance from the output (steps)",
            "log10 ‖∂L/∂xₜ‖",
            curves.iter().map(|(n, ln)| series(n, log10(ln))).collect(),
        )],
    }
}
