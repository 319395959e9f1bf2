//! Complexity: self-attention's time grows with n², a recurrent encoder's with n.

use burn::tensor::{Device, Distribution, Tensor};
use s2s_models::cell::CellKind;
use s2s_models::rnn::StackedRnnConfig;
use s2s_models::{Model, ModelSpec, Source, TransformerSpec};

use super::{figure, median_ms, series};
use crate::probes::{peak_bytes, slope};
use crate::{Budget, Claim, Context, Figure, Finding, Table, num};

pub const CLAIM: Claim = Claim {
    name: "complexity",
    why: "Self-attention compares every position with every other, n² work and memory, where an RNN \
          does n steps. That is the price of its parallelism, and it decides the longest input you can \
          afford.",
    statement: "Self-attention's cost grows with n², a recurrent encoder's with n",
    lecture: "self-attention-guide.md § Analisi della Complessità; § Confronto con le RNN",
    criterion: "holds when, for every seed (the layers' initialisation, timed anew), over the longest lengths measured, the encode time grows as nᵏ with k ≥ 1.5 for \
                self-attention and k ≤ 1.3 for the LSTM (log-log slope of the last three lengths), and so does \
                the peak memory an encode allocates (slope over every length from 128: from 1,024 to 2,048 the \
                self-attention encode holds one n² map at a time where shorter ones hold two, so its last step \
                doubles where the others quadruple)",
    method: "one encoder layer of width 64 of each kind (self-attention with 4 heads and its feed-forward \
             layer; an LSTM) encodes one sentence of n tokens, n = 16 … 2,048; median CPU time, and the most \
             bytes an encode holds allocated at once (counted by the allocator), beside the attention map's \
             size n² × heads × 4 bytes",
    run,
};

/// One sentence length's median encode times (ms) and peak bytes allocated, self-attention and
/// LSTM (None without an allocation counter).
struct Length {
    n: usize,
    attn: f64,
    rnn: f64,
    mem: Option<(f64, f64)>,
}

/// The log-log growth exponents: of time over the last three lengths, and of peak memory.
struct Exponents {
    attn: f64,
    rnn: f64,
    /// Self-attention's and the LSTM's (None without an allocation counter).
    mem: Option<(f64, f64)>,
}

/// Whether exponents meet the criterion: time and memory at least n^1.5 for self-attention, at
/// most n^1.3 for the LSTM.
fn met(k: &Exponents) -> bool {
    k.attn >= 1.5 && k.rnn <= 1.3 && k.mem.is_none_or(|(a, r)| a >= 1.5 && r <= 1.3)
}

fn run(ctx: &Context) -> Finding {
    let measured: Vec<(u64, Vec<Length>, Exponents)> = ctx
        .seeds()
        .iter()
        .map(|&seed| {
            let rows = measure(ctx.budget, seed);
            let k = exponents(&rows);
            (seed, rows, k)
        })
        .collect();
    let (verdict, seeds) = crate::by_seed(measured.iter().map(|(s, _, k)| (*s, met(k))).collect());
    let (seed, rows, k) = &measured[0];
    let last: Vec<&Length> = rows.iter().rev().take(3).collect();
    let crossover = rows.iter().find(|r| r.attn > r.rnn).map(|r| r.n);
    let by_seed = Table {
        header: [
            "seed",
            "time exponent, self-attention / LSTM",
            "peak memory exponent, self-attention / LSTM",
        ]
        .map(String::from)
        .to_vec(),
        rows: measured
            .iter()
            .map(|(s, _, k)| {
                vec![
                    s.to_string(),
                    format!("{} / {}", num(k.attn), num(k.rnn)),
                    k.mem.map_or("—".into(), |(a, r)| format!("{} / {}", num(a), num(r))),
                ]
            })
            .collect(),
    };
    let reason = format!(
        "time grows as n^{} for self-attention and n^{} for the LSTM",
        crate::span(measured.iter().map(|m| m.2.attn)),
        crate::span(measured.iter().map(|m| m.2.rnn))
    );
    Finding {
        runs: Vec::new(),
        seeds,
        verdict,
        reason,
        because: format!(
            "seed {seed}: over n = {}…{} the time grows as n^{} for self-attention and n^{} for the LSTM{}; {}",
            last[2].n,
            last[0].n,
            num(k.attn),
            num(k.rnn),
            match k.mem {
                Some((a, r)) => format!(", peak memory as n^{} and n^{} (n ≥ 128)", num(a), num(r)),
                None => String::new(),
            },
            match crossover {
                Some(n) => format!("self-attention is the slower from n = {n} on (on this machine)"),
                None => "self-attention stays the faster at every length measured (on this machine)".into(),
            }
        ),
        not_measured: if k.mem.is_some() {
            "the crossover length depends on the machine".into()
        } else {
            "peak memory: this binary's allocator does not count (run through `s2s course`); the crossover \
             length depends on the machine"
                .into()
        },
        table: table(rows),
        more: vec![by_seed],
        figures: [time_figure(rows)].into_iter().chain(memory_figure(rows)).collect(),
    }
}

/// Each length's encode times and peak memory, n = 16 … 2,048 (512 in quick mode), the layers
/// initialised from `seed`.
fn measure(budget: Budget, seed: u64) -> Vec<Length> {
    let (max, runs) = budget.pick((2048, 5), (512, 3));
    let lengths: Vec<usize> = (4..=11).map(|k| 1usize << k).filter(|&n| n <= max).collect();
    let d = Device::flex();
    d.seed(1 + seed);
    let spec = ModelSpec::Transformer(TransformerSpec {
        d_model: 64,
        heads: 4,
        ffn: 128,
        enc_layers: 1,
        dec_layers: 1,
        dropout: 0.0,
        attention_dropout: 0.0,
        ..Default::default()
    });
    let Model::Transformer(t) = spec.init(100, 100, &d).expect("a valid spec") else { unreachable!() };
    let lstm =
        StackedRnnConfig::encoder(CellKind::Lstm, 64, 64, 1, false, 0.0).expect("a valid size").init(&d);
    let mut rows = Vec::new();
    for &n in &lengths {
        let ids: Vec<u32> = (0..n).map(|i| (i * 13 % 96 + 4) as u32).collect();
        let src = Source::new(&ids, &[n], n, &d);
        let attn = median_ms(runs, || {
            let _ = t.memory(&src).0.into_data();
        });
        let x: Tensor<3> = Tensor::random([1, n, 64], Distribution::Normal(0.0, 1.0), &d);
        let keep = Tensor::ones([1, n], &d);
        let rnn = median_ms(runs, || {
            let _ = lstm.forward(x.clone(), &keep, n, None).0.into_data();
        });
        let mem_attn = peak_bytes(|| {
            let _ = t.memory(&src).0.into_data();
        });
        let mem_rnn = peak_bytes(|| {
            let _ = lstm.forward(x.clone(), &keep, n, None).0.into_data();
        });
        rows.push(Length { n, attn, rnn, mem: mem_attn.zip(mem_rnn).map(|(a, r)| (a as f64, r as f64)) });
    }
    rows
}

/// `v`'s natural logarithms.
fn ln(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| x.ln()).collect()
}

/// The growth exponents of time (last three lengths) and of peak memory (every length from 128).
fn exponents(rows: &[Length]) -> Exponents {
    let last: Vec<&Length> = rows.iter().rev().take(3).collect();
    let xs = ln(&last.iter().map(|r| r.n as f64).collect::<Vec<_>>());
    let k_attn = slope(&xs, &ln(&last.iter().map(|r| r.attn).collect::<Vec<_>>()));
    let k_rnn = slope(&xs, &ln(&last.iter().map(|r| r.rnn).collect::<Vec<_>>()));
    // Peak memory's exponents over every length from 128 (None without an allocation counter).
    let from = rows.iter().position(|r| r.n >= 128).unwrap_or(0);
    let mem_xs = ln(&rows[from..].iter().map(|r| r.n as f64).collect::<Vec<_>>());
    let mem_from: Option<Vec<(f64, f64)>> = rows[from..].iter().map(|r| r.mem).collect();
    let mem_k = mem_from.map(|m| {
        let k = |f: fn(&(f64, f64)) -> f64| slope(&mem_xs, &ln(&m.iter().map(f).collect::<Vec<_>>()));
        (k(|r| r.0), k(|r| r.1))
    });
    Exponents { attn: k_attn, rnn: k_rnn, mem: mem_k }
}

/// The table: each length's times, peak memory and attention map's size.
fn table(rows: &[Length]) -> Table {
    Table {
        header: [
            "n",
            "self-attention ms",
            "LSTM ms",
            "peak KiB allocated, self-attention / LSTM",
            "attention map (4 heads, f32)",
        ]
        .map(String::from)
        .to_vec(),
        rows: rows
            .iter()
            .map(|Length { n, attn: a, rnn: r, mem: m }| {
                vec![
                    n.to_string(),
                    num(*a),
                    num(*r),
                    m.map_or("—".into(), |(a, r)| format!("{} / {}", num(a / 1024.0), num(r / 1024.0))),
                    format!("{} KiB", num((n * n * 4 * 4) as f64 / 1024.0)),
                ]
            })
            .collect(),
    }
}

/// The figure of encode time by length (log-log).
fn time_figure(rows: &[Length]) -> Figure {
    figure(
        "complexity.svg",
        "Encode time by sentence length (log2 n; CPU)",
        "log2 n",
        "log2 ms",
        vec![
            series("self-attention", rows.iter().map(|r| ((r.n as f64).log2(), r.attn.log2())).collect()),
            series("LSTM", rows.iter().map(|r| ((r.n as f64).log2(), r.rnn.log2())).collect()),
        ],
    )
}

/// The figure of peak memory by length (log-log), when every length's was counted.
fn memory_figure(rows: &[Length]) -> Option<Figure> {
    rows.iter().all(|r| r.mem.is_some()).then(|| {
        let pts = |f: fn(&(f64, f64)) -> f64| {
            rows.iter().map(|r| ((r.n as f64).log2(), f(&r.mem.expect("measured")).max(1.0).log2())).collect()
        };
        figure(
            "complexity-memory.svg",
            "Peak bytes allocated by one encode, by sentence length (log2 n)",
            "log2 n",
            "log2 bytes",
            vec![series("self-attention", pts(|m| m.0)), series("LSTM", pts(|m| m.1))],
        )
    })
}
