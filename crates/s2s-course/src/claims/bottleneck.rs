//! The fixed-vector bottleneck: an encoder-decoder that passes the source through one vector
//! loses BLEU as sources lengthen; attention does not.

use s2s_models::{AttentionRnnSpec, LstmSpec, ModelSpec};
use s2s_train::testset::TestScores;

use super::{figure, series, trained};
use crate::{Claim, Context, Finding, MeasureError, Table, num};

pub const CLAIM: Claim = Claim {
    name: "bottleneck",
    why: "An encoder-decoder without attention squeezes a whole sentence into one vector; the longer \
          the sentence, the more must fit. Attention lets the decoder read every encoder state \
          instead: the reason it was invented.",
    statement: "The fixed-vector encoder-decoder loses BLEU as sources lengthen; attention does not",
    lecture: "language-models-rnn-seq2seq.md § Architettura Encoder-Decoder; § Attention Mechanism; \
              self-attention-guide.md § Il Bottleneck Sequenziale",
    criterion: "holds when the fixed-vector model has learned the shortest sources (BLEU ≥ 20 there) and its BLEU \
                on the longest is below half of that, while the attention model keeps at least 80 % of its own — for every seed",
    method: "an LSTM encoder-decoder (fixed vector; embeddings 64, hidden 192, 2 layers) and a Bahdanau model \
             (embeddings 64, hidden 192) trained alike on the built-in pair's long sentences (8,000 pairs, \
             sources up to 48 tokens), for each seed; greedy test BLEU by source length",
    run,
};

/// A model's label and test scores.
type Curve = (&'static str, TestScores);

/// One seed's fixed-vector and attention model: (seed, curves).
type Seeded = (u64, Vec<Curve>);

/// Whether one seed meets the criterion: the fixed-vector model learned the shortest sources and
/// keeps under half of it on the longest, attention keeps 80 % of its own.
fn met(curves: &[Curve]) -> bool {
    let (fixed, attn) = (kept(&curves[0].1), kept(&curves[1].1));
    fixed.0 >= 20.0 && fixed.1 < 0.5 * fixed.0 && attn.1 >= 0.8 * attn.0
}

fn run(ctx: &Context) -> Finding {
    let measured: Vec<Seeded> =
        match ctx.seeds().iter().map(|&s| measure(ctx, s).map(|c| (s, c))).collect::<Result<Vec<_>, _>>() {
            Ok(m) => m,
            Err(e) => return Finding::not_run("the runs did not train", e),
        };
    let (verdict, seeds) = crate::by_seed(measured.iter().map(|(s, c)| (*s, met(c))).collect());
    let said: Vec<String> = measured
        .iter()
        .map(|(seed, c)| {
            let (fixed, attn) = (kept(&c[0].1), kept(&c[1].1));
            format!(
                "seed {seed}: the fixed-vector model {} → {} BLEU, attention {} → {}",
                num(fixed.0),
                num(fixed.1),
                num(attn.0),
                num(attn.1)
            )
        })
        .collect();
    let ends = |model: usize, end: fn((f64, f64)) -> f64| {
        crate::span(measured.iter().map(|(_, c)| end(kept(&c[model].1))))
    };
    let reason = format!(
        "from the shortest sources to the longest the fixed-vector model falls from {} to {} BLEU, attention from {} \
         to {}",
        ends(0, |k| k.0),
        ends(0, |k| k.1),
        ends(1, |k| k.0),
        ends(1, |k| k.1)
    );
    Finding {
        runs: Vec::new(),
        seeds,
        verdict,
        reason,
        because: format!("from the shortest sources to the longest, {}", said.join("; ")),
        not_measured: String::new(),
        table: table(&measured),
        more: Vec::new(),
        figures: vec![figure(
            "bottleneck.svg",
            "Test BLEU by source length (the buckets' index: 0-9, 10-19, … words), one line a model and seed",
            "source length bucket",
            "BLEU",
            measured
                .iter()
                .flat_map(|(seed, curves)| {
                    curves.iter().map(move |(label, s)| {
                        series(
                            &format!("{label}, seed {seed}"),
                            buckets(s).iter().enumerate().map(|(i, b)| (i as f64, b.1)).collect(),
                        )
                    })
                })
                .collect(),
        )],
    }
}

/// The fixed-vector and the attention model of `seed`, trained (or found), and their test scores.
fn measure(ctx: &Context, seed: u64) -> Result<Vec<Curve>, MeasureError> {
    let steps = ctx.budget.pick(3000, 1500);
    let every = ctx.budget.pick(500, 500);
    let models = [
        (
            "LSTM (fixed vector)",
            "lstm-long",
            ModelSpec::Lstm(LstmSpec { emb: 64, hidden: 192, layers: 2, ..Default::default() }),
        ),
        (
            "Bahdanau attention",
            "bahdanau-long",
            ModelSpec::Bahdanau(AttentionRnnSpec {
                emb: 64,
                hidden: 192,
                attention_dim: 192,
                ..Default::default()
            }),
        ),
    ];
    let mut curves = Vec::new();
    for (label, name, spec) in models {
        let mut cfg = trained::long_config(spec, steps, every);
        cfg.train.seed = seed;
        let scores = trained::train(ctx, &crate::seeded(name, seed), &cfg)
            .and_then(|dir| s2s_train::testset::read_scores(&dir).ok_or(MeasureError::NoTestScores { dir }));
        curves.push((label, scores?));
    }
    Ok(curves)
}

/// Test BLEU by source-length bucket: buckets with at least 5 sentences.
fn buckets(s: &TestScores) -> Vec<(String, f64)> {
    s.bleu_by_source_length.iter().filter(|b| b.sentences >= 5).map(|b| (b.bucket.clone(), b.bleu)).collect()
}

/// Test BLEU on the shortest and on the longest sources (the first and last [`buckets`]).
fn kept(s: &TestScores) -> (f64, f64) {
    let b = buckets(s);
    (b.first().map_or(f64::NAN, |x| x.1), b.last().map_or(f64::NAN, |x| x.1))
}

/// The table: each seed's models' BLEU by the first attention model's buckets, then over all
/// sentences.
fn table(measured: &[Seeded]) -> Table {
    let names: Vec<String> = buckets(&measured[0].1[1].1).into_iter().map(|b| b.0).collect();
    let mut table = Table { header: vec!["source words".into()], rows: vec![] };
    for (seed, curves) in measured {
        table.header.extend(curves.iter().map(|c| format!("{} BLEU, seed {seed}", c.0)));
    }
    for name in &names {
        let mut row = vec![name.clone()];
        for (_, curves) in measured {
            for (_, s) in curves {
                row.push(buckets(s).iter().find(|b| &b.0 == name).map_or("–".into(), |b| num(b.1)));
            }
        }
        table.rows.push(row);
    }
    let mut total = vec!["all".to_string()];
    total.extend(measured.iter().flat_map(|(_, curves)| curves.iter().map(|c| num(c.1.bleu))));
    table.rows.push(total);
    table
}
