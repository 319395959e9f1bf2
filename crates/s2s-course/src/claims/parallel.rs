//! Parallelisation: an RNN's steps are sequential, a Transformer's positions are computed at
//! once, so at equal size the Transformer trains more tokens a second.

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use s2s_models::{LstmSpec, ModelSpec, Source, TransformerSpec};

use super::{figure, median_ms, series};
use crate::{Budget, Claim, Context, Figure, Finding, Table, Verdict, num};

pub const CLAIM: Claim = Claim {
    name: "parallel-training",
    why: "An RNN must finish step t before step t+1; a Transformer computes all positions at once. \
          That advantage needs hardware that runs many operations at once: a GPU, not two CPU cores.",
    statement: "An RNN's steps are sequential, a Transformer's parallel: at equal size the Transformer trains faster",
    lecture: "self-attention-guide.md § L'Impossibilità di Parallelizzazione; multi-head-attention.md § 4. Parallelizzazione",
    criterion: "on parallel hardware (a GPU), holds when, at every sentence length, the Transformer trains more \
                target tokens a second than an LSTM encoder-decoder of about the same number of parameters, and \
                its lead grows with length; on a CPU, not testable: the figures are shown, not judged",
    method: "an LSTM encoder-decoder (embeddings 128, hidden 256, 2 layers) and a Transformer (d_model 192, 4 \
             heads, feed-forward 640, 2 + 2 layers), vocabulary 1,000; the median time of a forward and backward \
             pass on 32 sentences of n tokens each side (CPU)",
    run,
};

/// The vocabulary's size, each side.
const VOCAB: usize = 1000;

/// Sentences a pass.
const ROWS: usize = 32;

/// One sentence length's training rates, target tokens a second.
struct Rate {
    n: usize,
    lstm: f64,
    transformer: f64,
}

fn run(ctx: &Context) -> Finding {
    let d = Device::flex().autodiff();
    d.seed(1);
    let models = models(&d);
    let params: Vec<usize> = models.iter().map(|m| m.1.num_params()).collect();
    let results = measure(ctx.budget, &models, &d);
    let lead: Vec<f64> = results.iter().map(|r| r.transformer / r.lstm).collect();
    let holds = lead.iter().all(|&l| l > 1.0) && lead.windows(2).all(|w| w[1] >= w[0]);
    Finding {
        runs: Vec::new(),
        // Not judged seed by seed: see `because`.
        seeds: None,
        // The claim is about hardware that runs a sequence's positions at once; two CPU cores
        // do not, so the rates below are shown, not judged (`because` says what the criterion
        // reads on them).
        verdict: Verdict::NotTestable,
        reason: format!(
            "a GPU's claim; on this CPU the Transformer trains {}× the LSTM's tokens a second at n = {}",
            num(lead[lead.len() - 1]),
            results[results.len() - 1].n
        ),
        because: format!(
            "a claim about parallel hardware, which this CPU is not; measured here anyway: with {} and {} parameters, \
             the Transformer trains {}× the LSTM's tokens a second at n = {} and {}× at n = {} (the criterion {} \
             on these CPU figures)",
            params[0],
            params[1],
            num(lead[0]),
            results[0].n,
            num(lead[lead.len() - 1]),
            results[results.len() - 1].n,
            if holds { "holds" } else { "does not hold" }
        ),
        not_measured: "the same on a GPU, where the gap is the claim's point (`s2s bench` measures both)"
            .into(),
        table: Table {
            header: ["n", "LSTM tokens/s", "Transformer tokens/s", "Transformer ÷ LSTM"]
                .map(String::from)
                .to_vec(),
            rows: results
                .iter()
                .zip(&lead)
                .map(|(r, l)| vec![r.n.to_string(), num(r.lstm), num(r.transformer), num(*l)])
                .collect(),
        },
        more: Vec::new(),
        figures: vec![rate_figure(&results)],
    }
}

/// The LSTM encoder-decoder and the Transformer, named, initialised on `d`.
fn models(d: &Device) -> Vec<(&'static str, s2s_models::Model)> {
    let lstm =
        ModelSpec::Lstm(LstmSpec { emb: 128, hidden: 256, layers: 2, dropout: 0.0, ..Default::default() });
    let transformer = ModelSpec::Transformer(TransformerSpec {
        d_model: 192,
        heads: 4,
        ffn: 640,
        enc_layers: 2,
        dec_layers: 2,
        dropout: 0.0,
        attention_dropout: 0.0,
        ..Default::default()
    });
    [("LSTM", lstm), ("Transformer", transformer)]
        .into_iter()
        .map(|(n, s)| (n, s.init(VOCAB, VOCAB, d).expect("a valid spec")))
        .collect()
}

/// Each model's training rate at each sentence length, from the median forward and backward pass.
fn measure(budget: Budget, models: &[(&str, s2s_models::Model)], d: &Device) -> Vec<Rate> {
    let runs = budget.pick(5, 3);
    let lengths: Vec<usize> = budget.pick(vec![8, 16, 32, 64], vec![8, 32]);
    let mut results = Vec::new();
    for &n in &lengths {
        let ids: Vec<u32> = (0..ROWS * n).map(|i| (i * 31 % (VOCAB - 4) + 4) as u32).collect();
        let src = Source::new(&ids, &vec![n; ROWS], n, d);
        let tgt = Tensor::<2, Int>::from_data(
            TensorData::new(ids.iter().map(|&i| i as i64).collect(), [ROWS, n]),
            d,
        );
        let rate: Vec<f64> = models
            .iter()
            .map(|(_, m)| {
                let ms = median_ms(runs, || {
                    let _ = m.forward(&src, tgt.clone()).logits.sum().backward();
                });
                (ROWS * n) as f64 / (ms / 1e3)
            })
            .collect();
        results.push(Rate { n, lstm: rate[0], transformer: rate[1] });
    }
    results
}

/// The figure of each model's training rate by sentence length.
fn rate_figure(results: &[Rate]) -> Figure {
    figure(
        "parallel-training.svg",
        "Training tokens a second by sentence length (CPU)",
        "tokens per sentence",
        "target tokens / s",
        vec![
            series("LSTM", results.iter().map(|r| (r.n as f64, r.lstm)).collect()),
            series("Transformer", results.iter().map(|r| (r.n as f64, r.transformer)).collect()),
        ],
    )
}
