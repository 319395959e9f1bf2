//! Self-attention is permutation-equivariant: without positions a Transformer encoder cannot
//! tell word order.

use burn::tensor::{Device, Int, Tensor, TensorData};
use s2s_models::{Model, ModelSpec, Source, TransformerSpec};

use super::trained;
use crate::probes::permutation_gap;
use crate::{Claim, Context, Finding, Table, num};

pub const CLAIM: Claim = Claim {
    name: "permutation",
    why: "Self-attention treats its input as a set: permute the words and the outputs permute with \
          them. Positional encodings are the only thing that tells a Transformer word order.",
    statement: "Without positional encodings self-attention is permutation-equivariant: it cannot see word order",
    lecture: "self-attention-guide.md § Invarianze e Simmetrie",
    criterion: "holds when, without positions, the encoder's output for a permuted sentence is the permuted \
                output to within 1e-5, and with positions differs by at least 0.01; and trained alike, the \
                Transformer with positions has the higher test BLEU with sacreBLEU's paired bootstrap \
                p < 0.05 — for every seed (of the encoder's initialisation and of training)",
    method: "a Transformer encoder (d_model 32, 4 heads, 2 layers, no dropout) reads random sentences and the \
             same sentences with their words permuted; the largest |f(P·x) − P·f(x)|, with and without the \
             sinusoidal positions. Then the course's Transformer (d_model 64, 4 heads, 2 + 2 layers) trained \
             1,200 steps on the built-in pair with and without positions (300 in quick mode), for each seed: greedy test BLEU, each seed's pair under the paired bootstrap",
    run,
};

/// The permutation gap (largest, mean) of a Transformer encoder with or without positions,
/// initialised from `seed`.
pub fn gap(positions: bool, sentences: usize, seed: u64) -> (f64, f64) {
    let d = Device::flex();
    d.seed(8 + seed);
    let spec = ModelSpec::Transformer(TransformerSpec {
        d_model: 32,
        heads: 4,
        ffn: 64,
        enc_layers: 2,
        dec_layers: 1,
        dropout: 0.0,
        attention_dropout: 0.0,
        positions,
        ..Default::default()
    });
    let Model::Transformer(t) = spec.init(100, 100, &d).expect("a valid spec") else { unreachable!() };
    let len = 11;
    let ids: Vec<i64> = (0..sentences * len).map(|i| (i * 37 % 96 + 4) as i64).collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [sentences, len]), &d);
    permutation_gap(&ids, |ids| {
        let v: Vec<u32> =
            ids.to_data().convert::<i64>().try_to_vec::<i64>().unwrap().iter().map(|&i| i as u32).collect();
        t.memory(&Source::new(&v, &vec![len; sentences], len, &d)).0
    })
}

fn run(ctx: &Context) -> Finding {
    let budget = ctx.budget;
    let sentences = budget.pick(32, 8);
    let gaps: Vec<(u64, (f64, f64), (f64, f64))> =
        ctx.seeds().iter().map(|&s| (s, gap(false, sentences, s), gap(true, sentences, s))).collect();
    let model =
        |positions: bool| ModelSpec::Transformer(TransformerSpec { positions, ..trained::transformer() });
    let runs = trained::paired(ctx.seeds(), |positions, seed| {
        let mut cfg = trained::run_config(model(positions), budget.pick(1200, 300), budget.pick(100, 50));
        cfg.train.seed = seed;
        // With positions it is the course's Transformer: the causal-mask claim's masked model.
        let name = if positions {
            trained::transformer_name(seed)
        } else {
            format!("transformer-unordered-seed{seed}")
        };
        trained::train(ctx, &name, &cfg)
    });
    let runs = match runs {
        Ok(r) => r,
        Err(e) => return Finding::not_run("the runs did not train", e),
    };
    let trained = trained::judge_paired(&runs, "no positions", "positions");
    let (verdict, seeds) = crate::by_seed(
        gaps.iter()
            .zip(&runs)
            .map(|((seed, off, on), r)| (*seed, off.0 <= 1e-5 && on.0 >= 0.01 && trained::significant(r)))
            .collect(),
    );
    let largest = |f: fn(&(u64, (f64, f64), (f64, f64))) -> f64| gaps.iter().map(f).fold(0.0, f64::max);
    let smallest_on = gaps.iter().map(|g| g.2.0).fold(f64::INFINITY, f64::min);
    let reason = format!(
        "without positions the output permutes with the input to {}; trained, BLEU {} without positions against {} \
         with",
        num(largest(|g| g.1.0)),
        crate::span(runs.iter().map(|r| r.bleu.0)),
        crate::span(runs.iter().map(|r| r.bleu.1))
    );
    Finding {
        runs: Vec::new(),
        seeds,
        verdict,
        reason,
        because: format!(
            "without positions the permuted output matches to {} (largest difference over the seeds), with positions \
             it differs by {} or more. Trained: {}",
            num(largest(|g| g.1.0)),
            num(smallest_on),
            trained.because
        ),
        not_measured: String::new(),
        table: Table {
            header: ["seed", "positions", "largest |f(P·x) − P·f(x)|", "mean"].map(String::from).to_vec(),
            rows: gaps
                .iter()
                .flat_map(|(seed, off, on)| {
                    [
                        vec![seed.to_string(), "off".into(), num(off.0), num(off.1)],
                        vec![seed.to_string(), "on (sinusoids)".into(), num(on.0), num(on.1)],
                    ]
                })
                .collect(),
        },
        more: vec![trained.table],
        figures: vec![trained::paired_figure(
            "permutation-bleu.svg",
            "Test BLEU by seed, Transformer without and with positions",
            &runs,
            "no positions",
            "positions",
        )],
    }
}
