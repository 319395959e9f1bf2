//! Multi-head attention's dimension trade-off: h heads of d_model/h cost about what one head of
//! d_model costs.

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use s2s_models::{ModelSpec, Source, TransformerSpec};

use super::{figure, median_ms, series};
use crate::{Claim, Context, Finding, Table, num};

pub const CLAIM: Claim = Claim {
    name: "heads-cost",
    why: "Multi-head attention splits d_model into h heads so that h views cost what one costs. In \
          parameters that is exact; in time it depends on how the hardware runs many small products.",
    statement: "h heads of size d_model/h cost about what one head of size d_model costs",
    lecture: "multi-head-attention.md § La Scelta delle Dimensioni: Un Compromesso Cruciale",
    criterion: "holds when, for every seed (the models' initialisation, timed anew), every h has exactly the \
                parameters of h = 1 and a training step takes at most 1.5× the time of h = 1",
    method: "Transformers (d_model 64, 2 + 2 layers, vocabulary 500) with h ∈ {1, 2, 4, 8, 16} (`--heads`): parameters, and \
             the median time of a forward and backward pass on 16 sentences of 24 tokens (CPU)",
    run,
};

/// Whether one seed's costs meet the criterion: the same parameters for every h, no step over
/// 1.5× one head's. Returns it with the slowest step's ratio.
fn met(results: &[(usize, usize, f64)]) -> (bool, f64) {
    let (p1, t1) = (results[0].1, results[0].2);
    let worst = results.iter().map(|r| r.2 / t1).fold(0.0, f64::max);
    (results.iter().all(|r| r.1 == p1) && worst <= 1.5, worst)
}

fn run(ctx: &Context) -> Finding {
    let mut heads = ctx.knobs.heads.clone();
    heads.sort_unstable();
    if heads[0] != 1 {
        heads.insert(0, 1);
    }
    let measured: Vec<(u64, Vec<(usize, usize, f64)>)> =
        ctx.seeds().iter().map(|&s| (s, measure(ctx.budget.pick(7, 3), &heads, s))).collect();
    let (verdict, seeds) = crate::by_seed(measured.iter().map(|(s, r)| (*s, met(r).0)).collect());
    let results = &measured[0].1;
    let p1 = results[0].1;
    let same_params = measured.iter().all(|(_, r)| r.iter().all(|x| x.1 == p1));
    let table = cost_table(&measured);
    let reason = format!(
        "{} for every h, but the slowest step takes {}× one head's time",
        if same_params { "the same parameters" } else { "parameters differ" },
        crate::span(measured.iter().map(|(_, r)| met(r).1))
    );
    Finding {
        runs: Vec::new(),
        seeds,
        verdict,
        reason,
        because: format!(
            "{} for every h; the slowest step takes {} the time of one head",
            if same_params { format!("{p1} parameters") } else { "parameters differ".into() },
            measured
                .iter()
                .map(|(s, r)| format!("{}× (seed {s})", num(met(r).1)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        not_measured: "BLEU by h and what the heads learn: the next claim (heads-specialise)".into(),
        table,
        more: Vec::new(),
        figures: vec![figure(
            "heads-cost.svg",
            "Training step time by number of heads (d_model 64)",
            "heads h",
            "ms per forward + backward",
            measured
                .iter()
                .map(|(s, r)| series(&format!("seed {s}"), r.iter().map(|r| (r.0 as f64, r.2)).collect()))
                .collect(),
        )],
    }
}

/// The Transformer with `h` heads (d_model 64, 2 + 2 layers, no dropout).
fn spec(h: usize) -> ModelSpec {
    ModelSpec::Transformer(TransformerSpec {
        d_model: 64,
        heads: h,
        ffn: 128,
        enc_layers: 2,
        dec_layers: 2,
        dropout: 0.0,
        attention_dropout: 0.0,
        ..Default::default()
    })
}

/// `(h, parameters, median ms of a forward and backward pass over `runs` runs)` for each h of
/// `heads`, initialised from `seed`, on 16 sentences of 24 tokens (vocabulary 500) on the CPU.
fn measure(runs: usize, heads: &[usize], seed: u64) -> Vec<(usize, usize, f64)> {
    let d = Device::flex().autodiff();
    let (rows, len, vocab) = (16, 24, 500);
    let ids: Vec<u32> = (0..rows * len).map(|i| (i * 7 % (vocab - 4) + 4) as u32).collect();
    let src = Source::new(&ids, &vec![len; rows], len, &d);
    let tgt = Tensor::<2, Int>::from_data(
        TensorData::new(ids.iter().map(|&i| i as i64).collect(), [rows, len]),
        &d,
    );
    let mut results = Vec::new();
    for &h in heads {
        d.seed(seed);
        let model = spec(h).init(vocab, vocab, &d).expect("a valid spec");
        let params = model.num_params();
        let ms = median_ms(runs, || {
            let out = model.forward(&src, tgt.clone());
            let _ = out.logits.sum().backward();
        });
        results.push((h, params, ms));
    }
    results
}

/// One row per seed and h: head size, parameters, step time and its ratio to the seed's h = 1.
fn cost_table(measured: &[(u64, Vec<(usize, usize, f64)>)]) -> Table {
    Table {
        header: ["seed", "heads h", "head size d_model/h", "parameters", "step ms", "÷ h = 1"]
            .map(String::from)
            .to_vec(),
        rows: measured
            .iter()
            .flat_map(|(seed, results)| {
                let t1 = results[0].2;
                results.iter().map(move |(h, p, ms)| {
                    vec![
                        seed.to_string(),
                        h.to_string(),
                        (64 / h).to_string(),
                        p.to_string(),
                        num(*ms),
                        num(ms / t1),
                    ]
                })
            })
            .collect(),
    }
}
