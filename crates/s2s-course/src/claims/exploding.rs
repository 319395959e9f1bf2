//! Exploding gradients: without clipping a plain RNN trained by SGD at a high rate blows up;
//! clipping the global norm tames it.

use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::Device;
use s2s_data::StreamBatcher;
use s2s_models::cell::CellKind;
use s2s_models::{LstmSpec, ModelSpec};
use s2s_train::step::DeviceBatch;

use super::{figure, series, trained};
use crate::{Claim, Context, Figure, Finding, Table, Verdict, num};

pub const CLAIM: Claim = Claim {
    name: "exploding-gradient",
    statement: "Without clipping a plain RNN at a high learning rate blows up; global-norm clipping tames it",
    lecture: "language-models-rnn-seq2seq.md § Exploding Gradient",
    criterion: "holds when, from the same start and batches, the unclipped run diverges — its last 20 losses \
                average above its first loss, or one is not finite — while the clipped run's last 20 average \
                below its first",
    method: "a plain-RNN encoder-decoder (tanh cells, embeddings 32, hidden 128) trained by SGD at rate 5 on \
             the built-in pair, once without clipping and once clipped at global norm 1: per-step loss and \
             gradient norm (before clipping)",
    run,
};

/// Per step: (loss per token, gradient norm before clipping), until a non-finite loss.
fn train(prepared: &s2s_train::run::Prepared, spec: &ModelSpec, clip: f64, steps: usize) -> Vec<(f64, f64)> {
    let d = Device::flex().autodiff();
    d.seed(1);
    let tok = &prepared.tokenizers;
    let mut model = spec.init(tok.src.vocab_size(), tok.tgt.vocab_size(), &d).expect("a valid spec");
    let mut optim = SgdConfig::new().init();
    let batcher = StreamBatcher::new(
        &prepared.data.train,
        s2s_data::BatchConfig { max_tokens: 1024, ..Default::default() },
    );
    let mut out = Vec::new();
    let mut epoch = 0;
    let mut batches = batcher.epoch(1, epoch);
    while out.len() < steps {
        let Some(ix) = batches.next() else {
            epoch += 1;
            batches = batcher.epoch(1, epoch);
            continue;
        };
        let Ok(batch) = prepared.data.train.collate(&ix) else { break };
        let b = DeviceBatch::new(&batch, &d);
        let logits = model.forward(&b.src, b.tgt_in.clone()).logits;
        let loss = s2s_train::loss::label_smoothed_loss(logits, b.tgt_out.clone(), &b.keep, 0.0)
            .smoothed
            .div_scalar(b.tokens as f64);
        let value = loss.clone().into_scalar::<f32>() as f64;
        let mut grads = GradientsParams::from_grads(loss.backward(), &model);
        let norm = s2s_kernels::ops::clip_global_norm(&model, &mut grads, clip).value();
        out.push((value, norm));
        if !value.is_finite() || !norm.is_finite() {
            break;
        }
        model = optim.step(LR, model, grads);
    }
    out
}

/// SGD's rate.
const LR: f64 = 5.0;

/// A run's summary: its gradient norms and losses.
struct Stats {
    /// The median finite gradient norm.
    median: f64,
    /// The largest finite gradient norm.
    largest: f64,
    /// Steps whose norm is NaN or over 100× the median.
    spikes: usize,
    /// Non-finite losses.
    non_finite: usize,
    /// The last 20 losses' mean, a non-finite one counting as infinite.
    last: f64,
    /// Steps taken.
    steps: usize,
    /// The first loss.
    first: f64,
}

fn run(ctx: &Context) -> Finding {
    let steps = ctx.budget.pick(600, 200);
    let spec = ModelSpec::Lstm(LstmSpec {
        emb: 32,
        hidden: 128,
        layers: 1,
        cell: CellKind::Rnn,
        dropout: 0.0,
        ..Default::default()
    });
    let cfg = trained::run_config(spec.clone(), steps as u64, steps as u64);
    let dir = ctx.work.join("exploding-gradient-data");
    let prepared = match s2s_train::run::prepare(&cfg, &dir) {
        Ok(p) => p,
        Err(e) => return Finding::not_run("the data could not be prepared", e.to_string()),
    };
    let runs = [
        ("unclipped", train(&prepared, &spec, 0.0, steps)),
        ("clipped at 1", train(&prepared, &spec, 1.0, steps)),
    ];
    let (u, c) = (stats(&runs[0].1), stats(&runs[1].1));
    let holds = (u.non_finite > 0 || u.last > u.first) && c.non_finite == 0 && c.last < c.first;
    let because = format!(
        "unclipped the loss goes {} → {} ({} non-finite, largest gradient norm {}), clipped {} → {} ({} non-finite)",
        num(u.first),
        num(u.last),
        u.non_finite,
        num(u.largest),
        num(c.first),
        num(c.last),
        c.non_finite
    );
    Finding {
        runs: Vec::new(),
        verdict: if holds { Verdict::Holds } else { Verdict::DoesNotHold },
        because,
        not_measured:
            "Adam, which divides each update by its gradients' running scale (the course's other runs use it)"
                .into(),
        table: table(&runs, [u, c]),
        more: Vec::new(),
        figures: figures(&runs).into(),
    }
}

/// The [`Stats`] of a run's steps.
fn stats(r: &[(f64, f64)]) -> Stats {
    let mut norms: Vec<f64> = r.iter().map(|x| x.1).filter(|n| n.is_finite()).collect();
    norms.sort_by(f64::total_cmp);
    let median = norms.get(norms.len() / 2).copied().unwrap_or(f64::NAN);
    let spikes = r.iter().filter(|x| x.1.is_nan() || x.1 > 100.0 * median).count();
    let non_finite = r.iter().filter(|x| !x.0.is_finite()).count();
    // The last 20 losses' mean, a non-finite one counting as infinite.
    let tail: Vec<f64> =
        r.iter().rev().take(20).map(|x| if x.0.is_finite() { x.0 } else { f64::INFINITY }).collect();
    let last = tail.iter().sum::<f64>() / tail.len().max(1) as f64;
    let first = r.first().map_or(f64::NAN, |x| x.0);
    Stats {
        median,
        largest: norms.last().copied().unwrap_or(f64::NAN),
        spikes,
        non_finite,
        last,
        steps: r.len(),
        first,
    }
}

/// The table: each run's steps, gradient norms and losses.
fn table(runs: &[(&str, Vec<(f64, f64)>); 2], stats: [Stats; 2]) -> Table {
    Table {
        header: [
            "run",
            "steps taken",
            "median gradient norm",
            "largest",
            "steps over 100× the median",
            "non-finite losses",
            "mean loss of the last 20 steps",
        ]
        .map(String::from)
        .to_vec(),
        rows: runs
            .iter()
            .zip(stats)
            .map(|((name, _), s)| {
                vec![
                    name.to_string(),
                    s.steps.to_string(),
                    num(s.median),
                    num(s.largest),
                    s.spikes.to_string(),
                    s.non_finite.to_string(),
                    num(s.last),
                ]
            })
            .collect(),
    }
}

/// The finite, positive values of `f` by step, in log10.
fn log10(r: &[(f64, f64)], f: fn(&(f64, f64)) -> f64) -> Vec<(f64, f64)> {
    r.iter()
        .enumerate()
        .filter(|(_, x)| f(x).is_finite() && f(x) > 0.0)
        .map(|(i, x)| (i as f64, f(x).log10()))
        .collect()
}

/// The figures of the gradient norm and the loss by step, each run a line.
fn figures(runs: &[(&str, Vec<(f64, f64)>); 2]) -> [Figure; 2] {
    [
        figure(
            "exploding-gradient-norm.svg",
            "Gradient norm before clipping, by step (log10)",
            "step",
            "log10 ‖g‖",
            runs.iter().map(|(n, r)| series(n, log10(r, |x| x.1))).collect(),
        ),
        figure(
            "exploding-gradient-loss.svg",
            "Training loss by step (log10)",
            "step",
            "log10 loss per token",
            runs.iter().map(|(n, r)| series(n, log10(r, |x| x.0))).collect(),
        ),
    ]
}
