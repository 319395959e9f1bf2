//! Exploding gradients: without clipping a plain RNN trained by SGD at a high rate blows up;
//! clipping the global norm tames it.

use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::Device;
use s2s_data::StreamBatcher;
use s2s_models::cell::CellKind;
use s2s_models::{LstmSpec, ModelSpec};
use s2s_train::step::DeviceBatch;

use super::{figure, series, trained};
use crate::{Claim, Context, Figure, Finding, Table, num};

pub const CLAIM: Claim = Claim {
    name: "exploding-gradient",
    why: "The same product of Jacobians that makes gradients vanish can make them explode, and one \
          huge step can wreck a trained model. Clipping the global norm bounds the step while keeping \
          its direction; a control separates an exploding gradient from a rate that is simply too \
          high.",
    statement: "Without clipping a plain RNN at a high learning rate blows up; global-norm clipping tames it",
    lecture: "language-models-rnn-seq2seq.md § Exploding Gradient",
    criterion: "holds when, for every seed, from the seed's start and batches, the unclipped run at rate 5 (`--rate`) \
                has gradient-norm spikes \
                (a step whose norm is above 10× the median of the 20 steps before it, or not finite: a \
                sudden jump, not the large gradients every run starts with) and diverges — its last 20 losses average above \
                its first, or one is not finite — while the run clipped at the same rate converges (its last 20 \
                below its first) and an unclipped control at a tenth of the rate neither spikes nor diverges (so what blows \
                up is the gradient, not the rate alone)",
    method: "a plain-RNN encoder-decoder (tanh cells, embeddings 32, hidden 128) trained by SGD on the built-in \
             pair from each seed's start and batch order three ways: rate 5 unclipped, rate 5 clipped at global \
             norm 1 (`--clip`), rate 0.5 unclipped (the control): per-step loss and gradient norm (before clipping), and the \
             largest singular value of the encoder's and decoder's recurrent weight W_hh at the start and the \
             end (a gradient through many steps can grow only if it exceeds 1: Pascanu et al., 2013)",
    run,
};

/// A run: per step (loss per token, gradient norm before clipping), until a non-finite loss;
/// and the largest singular value of W_hh (encoder, decoder) at the start and at the end.
struct Run {
    steps: Vec<(f64, f64)>,
    sigma: [(f64, f64); 2],
}

/// The largest singular value of each layer-0 recurrent weight `W_hh` (encoder, decoder) of a
/// plain-RNN encoder-decoder, by power iteration on `WᵀW` (NaN for other models).
fn recurrent_sigma(model: &s2s_models::Model) -> (f64, f64) {
    let s2s_models::Model::Lstm(m) = model else { return (f64::NAN, f64::NAN) };
    let sigma = |cells: &[s2s_models::cell::RecurrentCell]| {
        let Some(cell) = cells.first() else { return f64::NAN };
        let w = cell.w_hidden.val();
        let [rows, cols] = w.dims();
        let w: Vec<f64> = w.into_data().convert::<f64>().try_to_vec::<f64>().unwrap_or_default();
        largest_singular_value(&w, rows, cols)
    };
    (sigma(&m.encoder.forward_cells), sigma(&m.decoder.forward_cells))
}

/// `σ₁` of the row-major `rows × cols` matrix `w`: 200 power iterations on `WᵀW`.
fn largest_singular_value(w: &[f64], rows: usize, cols: usize) -> f64 {
    if w.len() != rows * cols || cols == 0 {
        return f64::NAN;
    }
    let mut v = vec![1.0 / (cols as f64).sqrt(); cols];
    let mut sigma = 0.0;
    for _ in 0..200 {
        let u: Vec<f64> = (0..rows).map(|i| (0..cols).map(|j| w[i * cols + j] * v[j]).sum()).collect();
        let mut next: Vec<f64> = (0..cols).map(|j| (0..rows).map(|i| w[i * cols + j] * u[i]).sum()).collect();
        let norm = next.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm == 0.0 || !norm.is_finite() {
            return norm;
        }
        next.iter_mut().for_each(|x| *x /= norm);
        sigma = norm.sqrt();
        v = next;
    }
    sigma
}

/// Trains `spec` `steps` steps by SGD at `lr`, clipped at `clip` (0: not), from `seed`'s start
/// and batch order.
fn train(
    prepared: &s2s_train::run::Prepared,
    spec: &ModelSpec,
    lr: f64,
    clip: f64,
    steps: usize,
    seed: u64,
) -> Run {
    let d = Device::flex().autodiff();
    d.seed(seed);
    let tok = &prepared.tokenizers;
    let mut model = spec.init(tok.src.vocab_size(), tok.tgt.vocab_size(), &d).expect("a valid spec");
    let start = recurrent_sigma(&model);
    let mut optim = SgdConfig::new().init();
    let batcher = StreamBatcher::new(
        &prepared.data.train,
        s2s_data::BatchConfig { max_tokens: 1024, ..Default::default() },
    );
    let mut out = Vec::new();
    let mut epoch = 0;
    let mut batches = batcher.epoch(seed, epoch);
    // Ctrl-C ends the run early; the course then judges nothing.
    while out.len() < steps && !s2s_train::interrupt::stop_requested() {
        let Some(ix) = batches.next() else {
            epoch += 1;
            batches = batcher.epoch(seed, epoch);
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
        model = optim.step(lr, model, grads);
    }
    let end = recurrent_sigma(&model);
    Run { steps: out, sigma: [start, end] }
}

/// A step's gradient norm is a spike above this many times the median of the [`WINDOW`] steps
/// before it.
const SPIKE: f64 = 10.0;

/// The steps before a step that its spike test reads.
const WINDOW: usize = 20;

/// A run's summary: its gradient norms and losses.
struct Stats {
    /// The median finite gradient norm.
    median: f64,
    /// The largest finite gradient norm.
    largest: f64,
    /// Steps whose norm is not finite or over [`SPIKE`]× the median of the [`WINDOW`] before.
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

/// One seed's three runs: the high rate unclipped, clipped, and the control.
type Seeded = (u64, [(String, Run); 3]);

/// Whether one seed's runs meet the criterion.
fn met(runs: &[(String, Run); 3]) -> bool {
    let [u, c, m] = [stats(&runs[0].1.steps), stats(&runs[1].1.steps), stats(&runs[2].1.steps)];
    let diverges = |s: &Stats| s.non_finite > 0 || s.last > s.first;
    u.spikes > 0 && diverges(&u) && c.non_finite == 0 && c.last < c.first && m.spikes == 0 && !diverges(&m)
}

/// One seed's runs in a sentence.
fn said(seed: u64, runs: &[(String, Run); 3], rate: f64, clip: f64) -> String {
    let [u, c, m] = [stats(&runs[0].1.steps), stats(&runs[1].1.steps), stats(&runs[2].1.steps)];
    let sigma = |r: &Run| num(r.sigma[1].0.max(r.sigma[1].1));
    format!(
        "seed {seed}: at rate {rate} unclipped the loss goes {} → {} ({} non-finite) with {} gradient-norm spike(s) \
         above {SPIKE}× the median of the {WINDOW} steps before (run median {}, largest {}); clipped at the same rate {} → {}, through {} spike(s) up to {} \
         that the clip cut to norm {clip}; the control at rate {}, unclipped, {} → {} with {} spike(s); W_hh's \
         largest singular value starts at {} and ends at {} (rate {rate} unclipped), {} (clipped), {} (control)",
        num(u.first),
        num(u.last),
        u.non_finite,
        u.spikes,
        num(u.median),
        num(u.largest),
        num(c.first),
        num(c.last),
        c.spikes,
        num(c.largest),
        rate / 10.0,
        num(m.first),
        num(m.last),
        m.spikes,
        num(runs[0].1.sigma[0].0.max(runs[0].1.sigma[0].1)),
        sigma(&runs[0].1),
        sigma(&runs[1].1),
        sigma(&runs[2].1),
    )
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
    let (rate, clip) = (ctx.knobs.rate, ctx.knobs.clip);
    let measured: Vec<Seeded> = ctx
        .seeds()
        .iter()
        .map(|&seed| {
            let runs = [
                (format!("rate {rate}, unclipped"), rate, 0.0),
                (format!("rate {rate}, clipped at {clip}"), rate, clip),
                (format!("rate {}, unclipped (control)", rate / 10.0), rate / 10.0, 0.0),
            ]
            .map(|(name, lr, clip)| (name, train(&prepared, &spec, lr, clip, steps, seed)));
            (seed, runs)
        })
        .collect();
    let (verdict, seeds) = crate::by_seed(measured.iter().map(|(s, r)| (*s, met(r))).collect());
    let because = format!(
        "{}. A gradient can only explode through a W_hh whose largest singular value exceeds 1",
        measured.iter().map(|(s, r)| said(*s, r, rate, clip)).collect::<Vec<_>>().join("; ")
    );
    let count = |run: usize, f: &dyn Fn(&Stats) -> bool| {
        measured.iter().filter(|(_, r)| f(&stats(&r[run].1.steps))).count()
    };
    let n = measured.len();
    let reason = format!(
        "at rate {rate} unclipped the loss ends above its start in {} of {n} seeds, with a gradient-norm spike in {}; \
         clipped, it converges in {} of {n}; the control at rate {} diverges in {}",
        count(0, &|s| s.non_finite > 0 || s.last > s.first),
        count(0, &|s| s.spikes > 0),
        count(1, &|s| s.non_finite == 0 && s.last < s.first),
        rate / 10.0,
        count(2, &|s| s.non_finite > 0 || s.last > s.first),
    );
    Finding {
        runs: Vec::new(),
        seeds,
        verdict,
        because,
        reason,
        not_measured:
            "Adam, which divides each update by its gradients' running scale (the course's other runs use it)"
                .into(),
        table: table(&measured),
        more: Vec::new(),
        figures: figures(&measured[0].1, measured[0].0).into(),
    }
}

/// The median finite gradient norm of the [`WINDOW`] steps before step `i` (∞ when none is
/// finite: nothing to jump from).
fn before(r: &[(f64, f64)], i: usize) -> f64 {
    let mut w: Vec<f64> =
        r[i.saturating_sub(WINDOW)..i].iter().map(|x| x.1).filter(|n| n.is_finite()).collect();
    w.sort_by(f64::total_cmp);
    w.get(w.len() / 2).copied().unwrap_or(f64::INFINITY)
}

/// The [`Stats`] of a run's steps.
fn stats(r: &[(f64, f64)]) -> Stats {
    let mut norms: Vec<f64> = r.iter().map(|x| x.1).filter(|n| n.is_finite()).collect();
    norms.sort_by(f64::total_cmp);
    let median = norms.get(norms.len() / 2).copied().unwrap_or(f64::NAN);
    let spikes = (0..r.len())
        .filter(|&i| !r[i].1.is_finite() || (i >= WINDOW && r[i].1 > SPIKE * before(r, i)))
        .count();
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

/// The table: each seed's runs' steps, gradient norms and losses.
fn table(measured: &[Seeded]) -> Table {
    Table {
        header: [
            "seed",
            "run",
            "steps taken",
            "median gradient norm",
            "largest",
            "spikes (over 10× the 20 steps before)",
            "non-finite losses",
            "mean loss of the last 20 steps",
            "σ₁(W_hh) encoder / decoder, start → end",
        ]
        .map(String::from)
        .to_vec(),
        rows: measured
            .iter()
            .flat_map(|(seed, runs)| runs.iter().map(move |(name, r)| (seed, name, r, stats(&r.steps))))
            .map(|(seed, name, r, s)| {
                vec![
                    seed.to_string(),
                    name.to_string(),
                    s.steps.to_string(),
                    num(s.median),
                    num(s.largest),
                    s.spikes.to_string(),
                    s.non_finite.to_string(),
                    num(s.last),
                    format!(
                        "{} / {} → {} / {}",
                        num(r.sigma[0].0),
                        num(r.sigma[0].1),
                        num(r.sigma[1].0),
                        num(r.sigma[1].1)
                    ),
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

/// The figures of the gradient norm and the loss by step, each of `seed`'s runs a line.
fn figures(runs: &[(String, Run); 3], seed: u64) -> [Figure; 2] {
    [
        figure(
            "exploding-gradient-norm.svg",
            &format!("Gradient norm before clipping, by step (log10), seed {seed}"),
            "step",
            "log10 ‖g‖",
            runs.iter().map(|(n, r)| series(n, log10(&r.steps, |x| x.1))).collect(),
        ),
        figure(
            "exploding-gradient-loss.svg",
            &format!("Training loss by step (log10), seed {seed}"),
            "step",
            "log10 loss per token",
            runs.iter().map(|(n, r)| series(n, log10(&r.steps, |x| x.0))).collect(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Power iteration finds σ₁ of a matrix whose singular values are known: diag(3, 1) rotated.
    /// A spike is a jump over the steps before it: the large norms of a run's first steps are
    /// not, a norm 10× its recent median is, and a non-finite one always is.
    #[test]
    fn spikes_are_jumps_over_the_steps_before() {
        let mut r: Vec<(f64, f64)> = (0..60).map(|i| (1.0, if i < 5 { 50.0 } else { 1.0 })).collect();
        assert_eq!(stats(&r).spikes, 0, "the first steps' large norms are no spike");
        r[40].1 = 11.0;
        r[50].1 = f64::INFINITY;
        assert_eq!(stats(&r).spikes, 2);
        r[30].1 = 9.0;
        assert_eq!(stats(&r).spikes, 2, "under 10× is no spike");
    }

    #[test]
    fn the_largest_singular_value_of_a_known_matrix() {
        let (c, s) = (0.6f64, 0.8f64);
        // [[c, −s], [s, c]] · diag(3, 1) = [[3c, −s], [3s, c]].
        let w = [3.0 * c, -s, 3.0 * s, c];
        assert!((largest_singular_value(&w, 2, 2) - 3.0).abs() < 1e-9);
        assert!((largest_singular_value(&[0.5, 0.0, 0.0, 0.0, 0.25, 0.0], 2, 3) - 0.5).abs() < 1e-9);
    }
}
