//! Vanishing gradients: in a plain RNN the gradient reaching earlier inputs shrinks
//! exponentially with their distance from the output; gated cells (LSTM, GRU) keep it flatter.

use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use s2s_models::cell::CellKind;
use s2s_models::rnn::StackedRnnConfig;
use s2s_models::{LstmSpec, Model, ModelSpec};

use super::{figure, series, trained};
use crate::probes::{gradient_by_distance, slope};
use crate::{Claim, Context, Figure, Finding, MeasureError, Table, num};

pub const CLAIM: Claim = Claim {
    name: "vanishing-gradient",
    why: "A recurrent network learns long-range dependencies only if the training signal reaches early \
          inputs; each step multiplies the gradient by the step's Jacobian, so it can fade \
          geometrically. Gates are the remedy the lectures teach: this measures whether they keep the \
          signal alive.",
    statement: "A plain RNN's gradient vanishes with distance; LSTM and GRU keep it far flatter",
    lecture: "language-models-rnn-seq2seq.md § Vanishing Gradient Problem; § Long Short-Term Memory (LSTM)",
    criterion: "holds when, for every seed, in the trained encoders the plain RNN's gradient shrinks by at least 10× over 30 \
                steps and the GRU's and the LSTM's decay at most half as fast (least-squares slope of \
                ln ‖∂L/∂xₜ‖ by distance: 'far flatter'); the same figures at initialisation are shown beside",
    method: "one-layer encoders (input 32, hidden 64) of each cell, for each seed: at PyTorch's initialisation \
             reading 16 random sequences of 60 steps (40 in quick mode), its logarithm averaged over 3 \
             initialisations drawn from the seed (1 in quick mode); and trained — the encoder of an \
             encoder-decoder without attention (`lstm` kind, cell rnn, gru or lstm, 2,000 steps on the built-in \
             pair's long sentences) reading the embedded test sources of at least 32 tokens, cut to 32. L is the \
             sum of the last output; ‖∂L/∂xₜ‖ is the gradient reaching input t, which passes through every state \
             from t to the end: one norm over all the batch's sequences at position t (not a mean of \
             per-sentence norms)",
    run,
};

/// ln ‖∂L/∂xₜ‖ by distance for `cell` at initialisation from `seed`, averaged over `draws`
/// initialisations (seeds 100·seed, 100·seed + 1, …).
fn log_norms(cell: CellKind, len: usize, seed: u64, draws: u64) -> Vec<f64> {
    let d = Device::flex().autodiff();
    let mut sum = vec![0.0; len];
    for draw in 0..draws {
        d.seed(100 * seed + draw);
        let rnn = StackedRnnConfig::encoder(cell, 32, 64, 1, false, 0.0).expect("a valid size").init(&d);
        let x: Tensor<3> = Tensor::random([16, len, 32], Distribution::Normal(0.0, 1.0), &d);
        let keep = Tensor::ones([16, len], &d);
        let norms = gradient_by_distance(x, |x| {
            let (out, _) = rnn.forward(x, &keep, len, None);
            out.narrow(1, len - 1, 1).sum()
        });
        for (s, n) in sum.iter_mut().zip(norms) {
            *s += n.max(1e-300).ln() / draws as f64;
        }
    }
    sum
}

/// The trained encoder of `cell`'s run: mean ln ‖∂L/∂xₜ‖ by distance over the embedded test
/// sources of at least `len` tokens, cut to `len`.
fn trained_log_norms(
    ctx: &Context,
    name: &str,
    cell: CellKind,
    len: usize,
    seed: u64,
) -> Result<Vec<f64>, MeasureError> {
    let spec = ModelSpec::Lstm(LstmSpec {
        emb: 32,
        hidden: 64,
        layers: 1,
        cell,
        bidirectional: false,
        reverse_source: false,
        ..Default::default()
    });
    let mut cfg = trained::long_config(spec.clone(), ctx.budget.pick(2000, 300), ctx.budget.pick(200, 100));
    cfg.train.seed = seed;
    let dir = trained::train(ctx, &crate::seeded(&format!("encdec-{name}"), seed), &cfg)?;
    let d = Device::flex().autodiff();
    let (tok, model, sources, _) = trained::load_final(&dir, &spec, &d)?;
    let Model::Lstm(m) = model else {
        return Err(MeasureError::ModelKind { dir, expected: "an encoder-decoder without attention" });
    };
    let ids: Vec<i64> = sources
        .iter()
        .map(|s| tok.src.encode(s))
        .filter(|ids| ids.len() >= len)
        .flat_map(|ids| ids[..len].iter().map(|&i| i as i64).collect::<Vec<_>>())
        .collect();
    let rows = ids.len() / len;
    if rows == 0 {
        return Err(MeasureError::NoLongSource { dir, len });
    }
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [rows, len]), &d);
    let x = m.src_embed.forward(ids).detach();
    let keep = Tensor::ones([rows, len], &d);
    let norms = gradient_by_distance(x, |x| {
        let (out, _) = m.encoder.forward(x, &keep, len, None);
        out.narrow(1, len - 1, 1).sum()
    });
    Ok(norms.iter().map(|n| n.max(1e-300).ln()).collect())
}

/// Each cell's name and mean ln ‖∂L/∂xₜ‖ by distance: the RNN's, the GRU's, the LSTM's.
type Curves = [(&'static str, Vec<f64>)];

/// The cells compared, by name.
const CELLS: [(&str, CellKind); 3] =
    [("rnn", CellKind::Rnn), ("gru", CellKind::Gru), ("lstm", CellKind::Lstm)];

/// One seed's curves: trained, and at initialisation.
struct Seeded {
    seed: u64,
    trained: Vec<(&'static str, Vec<f64>)>,
    init: Vec<(&'static str, Vec<f64>)>,
}

fn run(ctx: &Context) -> Finding {
    let (len, draws) = ctx.budget.pick((60, 3), (40, 1));
    let mut measured = Vec::new();
    for &seed in ctx.seeds() {
        let init = CELLS.iter().map(|&(n, c)| (n, log_norms(c, len, seed, draws))).collect();
        match trained_curves(ctx, seed) {
            Ok(trained) => measured.push(Seeded { seed, trained, init }),
            Err(e) => return Finding::not_run("the encoders did not train", e),
        }
    }
    let (verdict, seeds) = crate::by_seed(measured.iter().map(|m| (m.seed, judge(&m.trained))).collect());
    let first = &measured[0];
    let because = format!(
        "trained, {}; at initialisation, seed {}: {} (the criterion {} there)",
        measured
            .iter()
            .map(|m| format!("seed {}: {}", m.seed, said(&m.trained)))
            .collect::<Vec<_>>()
            .join("; "),
        first.seed,
        said(&first.init),
        if judge(&first.init) { "holds" } else { "does not hold" },
    ) + why_it_grows(&measured);
    let over = |i: usize| crate::span(measured.iter().map(|m| over30(&m.trained[i].1)));
    let at_init = |i: usize| crate::span(measured.iter().map(|m| over30(&m.init[i].1)));
    let reason = format!(
        "trained, over 30 steps the gradient shrinks {}× in the RNN, {}× in the GRU and {}× in the LSTM (below 1: it \
         grows); at initialisation {}×, {}× and {}×",
        over(0),
        over(1),
        over(2),
        at_init(0),
        at_init(1),
        at_init(2)
    );
    Finding {
        runs: Vec::new(),
        seeds,
        verdict,
        because,
        reason,
        not_measured: String::new(),
        table: table(&measured),
        more: Vec::new(),
        figures: figures(&first.trained, &first.init, first.seed).into(),
    }
}

/// Each cell's trained encoder's curve for `seed`, or why one did not train.
fn trained_curves(ctx: &Context, seed: u64) -> Result<Vec<(&'static str, Vec<f64>)>, MeasureError> {
    // Trained: sources of at least 32 tokens (distance 31 is the last the table reads).
    let trained_len = 32;
    CELLS.iter().map(|&(n, c)| trained_log_norms(ctx, n, c, trained_len, seed).map(|ln| (n, ln))).collect()
}

/// How many times the gradient shrinks per 10 steps.
fn per10(ln: &[f64]) -> f64 {
    // Decay per 10 steps from the slope of ln-norm over distances 1.. (distance 0 reads the
    // output directly).
    let dist: Vec<f64> = (1..ln.len()).map(|d| d as f64).collect();
    (-10.0 * slope(&dist, &ln[1..])).exp()
}

/// How many times the gradient shrinks from distance 1 to 31.
fn over30(ln: &[f64]) -> f64 {
    (ln[1] - ln[31]).exp()
}

/// The table: for each seed, each cell's gradient at distances 1, 10 and 30 and its decay,
/// trained and at initialisation.
fn table(measured: &[Seeded]) -> Table {
    let mut table = Table {
        header: [
            "seed",
            "cell",
            "encoder",
            "‖∂L/∂x‖ at distance 1",
            "at 10",
            "at 30",
            "shrinks per 10 steps",
            "over 30 steps",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for m in measured {
        for (stage, curves) in [("trained", &m.trained), ("at initialisation", &m.init)] {
            for (name, ln) in curves.iter() {
                table.rows.push(vec![
                    m.seed.to_string(),
                    name.to_string(),
                    stage.to_string(),
                    num(ln[1].exp()),
                    num(ln[10].exp()),
                    num(ln[30].exp()),
                    format!("{}×", num(per10(ln))),
                    format!("{}×", num(over30(ln))),
                ]);
            }
        }
    }
    table
}

/// Decay rates in log: ln(shrink per 10 steps).
fn rate(ln: &[f64]) -> f64 {
    per10(ln).ln()
}

/// Whether the RNN's gradient shrinks ≥ 10× over 30 steps and the GRU's and LSTM's decay at most
/// half as fast.
fn judge(c: &Curves) -> bool {
    let [rnn, gru, lstm] = [&c[0].1, &c[1].1, &c[2].1];
    over30(rnn) >= 10.0 && rate(gru) <= 0.5 * rate(rnn) && rate(lstm) <= 0.5 * rate(rnn)
}

/// The cells' decay per 10 and over 30 steps, in words.
fn said(c: &Curves) -> String {
    format!(
        "per 10 steps the gradient shrinks {}× in the RNN, {}× in the GRU, {}× in the LSTM (over 30 steps: {}×, \
         {}×, {}×)",
        num(per10(&c[0].1)),
        num(per10(&c[1].1)),
        num(per10(&c[2].1)),
        num(over30(&c[0].1)),
        num(over30(&c[1].1)),
        num(over30(&c[2].1)),
    )
}

/// Why a factor below 1 is possible, said once when any curve of `measured` grows with distance.
fn why_it_grows(measured: &[Seeded]) -> &'static str {
    let grows = measured.iter().flat_map(|m| m.trained.iter().chain(&m.init)).any(|(_, c)| per10(c) < 1.0);
    if grows {
        ". A factor below 1 is a gradient that grows with distance: a gated cell's step Jacobian is not \
         bounded by 1 — a forget gate near 1 passes the memory on whole, and the input and output weights \
         can amplify it — so nothing forces it to shrink, and the earliest inputs of a trained encoder \
         can weigh more on its last state than the latest"
    } else {
        ""
    }
}

/// A curve as points (distance, log10 ‖∂L/∂xₜ‖).
fn log10(ln: &[f64]) -> Vec<(f64, f64)> {
    ln.iter().enumerate().map(|(d, v)| (d as f64, v / std::f64::consts::LN_10)).collect()
}

/// The figures of the gradient by distance, trained and at initialisation, of seed `seed`.
fn figures(trained_curves: &Curves, init: &Curves, seed: u64) -> [Figure; 2] {
    [
        figure(
            "vanishing-gradient-trained.svg",
            &format!(
                "Gradient reaching each input, by distance from the output (trained encoders, seed {seed})"
            ),
            "distance from the output (steps)",
            "log10 ‖∂L/∂xₜ‖",
            trained_curves.iter().map(|(n, ln)| series(n, log10(ln))).collect(),
        ),
        figure(
            "vanishing-gradient.svg",
            &format!(
                "Gradient reaching each input, by distance from the output (at initialisation, seed {seed})"
            ),
            "distance from the output (steps)",
            "log10 ‖∂L/∂xₜ‖",
            init.iter().map(|(n, ln)| series(n, log10(ln))).collect(),
        ),
    ]
}
