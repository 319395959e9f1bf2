//! Self-attention is permutation-equivariant: without positions a Transformer encoder cannot
//! tell word order.

use burn::tensor::{Device, Int, Tensor, TensorData};
use s2s_models::{Model, ModelSpec, Source, TransformerSpec};

use super::trained;
use crate::probes::permutation_gap;
use crate::{Claim, Context, Finding, Table, Verdict, num};

pub const CLAIM: Claim = Claim {
    name: "permutation",
    why: "Self-attention treats its input as a set: permute the words and the outputs permute with \
          them. Positional encodings are the only thing that tells a Transformer word order.",
    statement: "Without positional encodings self-attention is permutation-equivariant: it cannot see word order",
    lecture: "self-attention-guide.md § Invarianze e Simmetrie",
    criterion: "holds when, without positions, the encoder's output for a permuted sentence is the permuted \
                output to within 1e-5, and with positions differs by at least 0.01; and trained alike, the \
                Transformer with positions has the higher test BLEU for every seed, with sacreBLEU's paired \
                bootstrap p < 0.05 for each",
    method: "a Transformer encoder (d_model 32, 4 heads, 2 layers, no dropout) reads random sentences and the \
             same sentences with their words permuted; the largest |f(P·x) − P·f(x)|, with and without the \
             sinusoidal positions. Then the course's Transformer (d_model 64, 4 heads, 2 + 2 layers) trained \
             1,200 steps on the built-in pair with and without positions, 3 seeds (300 steps, 1 seed in quick \
             mode): greedy test BLEU, each seed's pair under the paired bootstrap",
    run,
};

/// The permutation gap (largest, mean) of a Transformer encoder with or without positions.
pub fn gap(positions: bool, sentences: usize) -> (f64, f64) {
    let d = Device::flex();
    d.seed(9);
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
    let (off, off_mean) = gap(false, sentences);
    let (on, on_mean) = gap(true, sentences);
    let model =
        |positions: bool| ModelSpec::Transformer(TransformerSpec { positions, ..trained::transformer() });
    let seeds: &[u64] = budget.pick(&[1, 2, 3], &[1]);
    let runs = trained::paired(seeds, |positions, seed| {
        let mut cfg = trained::run_config(model(positions), budget.pick(1200, 300), budget.pick(100, 50));
        cfg.train.seed = seed;
        // Seed 1 with positions is the causal-mask claim's masked model: the same run.
        let name = match (positions, seed) {
            (true, 1) => "transformer-causal".to_string(),
            (true, _) => format!("transformer-seed{seed}"),
            (false, _) => format!("transformer-unordered-seed{seed}"),
        };
        trained::train(ctx, &name, &cfg)
    });
    let runs = match runs {
        Ok(r) => r,
        Err(e) => return Finding::not_run("the runs did not train", e),
    };
    let (trained_verdict, trained_because, trained_table) =
        trained::judge_paired(&runs, "no positions", "positions");
    let holds = off <= 1e-5 && on >= 0.01 && trained_verdict == Verdict::Holds;
    Finding {
        runs: Vec::new(),
        verdict: if holds { Verdict::Holds } else { Verdict::DoesNotHold },
        because: format!(
            "without positions the permuted output matches to {} (largest difference), with positions it differs by up to {}. \
             Trained: {trained_because}",
            num(off),
            num(on)
        ),
        not_measured: if seeds.len() < 3 {
            "one seed in quick mode: run the full course for three".into()
        } else {
            String::new()
        },
        table: Table {
            header: ["positions", "largest |f(P·x) − P·f(x)|", "mean"].map(String::from).to_vec(),
            rows: vec![
                vec!["off".into(), num(off), num(off_mean)],
                vec!["on (sinusoids)".into(), num(on), num(on_mean)],
            ],
        },
        more: vec![trained_table],
        figures: vec![trained::paired_figure(
            "permutation-bleu.svg",
            "Test BLEU by seed, Transformer without and with positions",
            &runs,
            "no positions",
            "positions",
        )],
    }
}
