//! Attention as alignment: a trained attention model's cross-attention links each target word
//! to the source word it translates, as a word aligner would. The built-in pair knows its
//! gold alignment, so the links can be scored (AER, Och and Ney, 2003).

use std::collections::HashMap;

use burn::tensor::Device;
use s2s_data::synth::{SynthConfig, generate_aligned};
use s2s_data::{Batch, Example, normalize};
use s2s_eval::alignment::AlignCounts;
use s2s_models::Model;

use super::trained;
use crate::{Claim, Context, Finding, MeasureError, NotRun, Table, num};

pub const CLAIM: Claim = Claim {
    name: "alignment",
    why: "Attention was introduced as a soft alignment: at each target word the decoder should look at the \
          source word it translates. If it does, the weights are an alignment for free; if not, they are \
          only a means to a good prediction, and reading them as an explanation misleads.",
    statement: "A trained attention model's weights align each target word with the source word it translates",
    lecture: "language-models-rnn-seq2seq.md § Attention Mechanism",
    criterion: "holds when the trained model's alignment error rate against the gold alignment is below 0.3, \
                and below its own at initialisation, for every seed",
    method: "the course's Bahdanau model of each seed (see bidirectional) teacher-forced on each test reference of the built-in \
             pair, whose generator knows which source word each target word translates; each target word is \
             linked to the source position it attends to most (no link when that is </s>); AER = 1 − 2|A∩G| / \
             (|A| + |G|) over the test split, beside the same model at initialisation",
    run,
};

/// The gold alignment of every generated pair, by normalised source: (target, `alignment[j]` =
/// the source word that target word `j` translates).
fn gold(cfg: &SynthConfig) -> HashMap<String, (String, Vec<usize>)> {
    generate_aligned(cfg)
        .into_iter()
        .map(|p| (normalize(&p.src).trim().to_string(), (normalize(&p.tgt).trim().to_string(), p.alignment)))
        .collect()
}

/// The model's cross-attention on `src` → `tgt` teacher-forced: `[target positions][source
/// positions]`, `</s>` last on both sides.
fn attention(model: &Model, src: &[u32], tgt: &[u32], device: &Device) -> Option<Vec<Vec<f32>>> {
    let batch = Batch::collate(&[Example { src: src.to_vec(), tgt: tgt.to_vec() }], &[0]);
    let b = s2s_train::step::DeviceBatch::new(&batch, device);
    let att = model.forward(&b.src, b.tgt_in).attention?; // [1, t, s]
    let [_, rows, cols] = att.dims();
    let w = att.into_data().convert::<f32>().try_to_vec::<f32>().ok()?;
    Some(w.chunks(cols).take(rows).map(<[f32]>::to_vec).collect())
}

/// Alignment links of the trained model and of the same model at initialisation, over one
/// seed's test split: (trained, at initialisation, sentences scored).
fn measure(ctx: &Context, seed: u64) -> Result<(AlignCounts, AlignCounts, usize), NotRun> {
    let dir = trained::bahdanau(ctx, seed).map_err(|e| NotRun::new("the course's model did not train", e))?;
    let cfg = trained::config(ctx, seed);
    let device = Device::flex();
    let (tok, model, sources, refs) = trained::load_final(&dir, &cfg.model, &device)
        .map_err(|e| NotRun::new("the course's model could not be loaded", e))?;
    let s2s_train::run::DataSpec::Builtin { pairs, seed: data_seed, max_tokens } = cfg.data else {
        return Err(NotRun::new("no gold alignment", MeasureError::NoGoldAlignment { dir }));
    };
    let gold = gold(&SynthConfig { pairs, seed: data_seed, max_tokens, ..SynthConfig::default() });
    device.seed(seed);
    let untrained = cfg.model.init(tok.src.vocab_size(), tok.tgt.vocab_size(), &device).map_err(|e| {
        NotRun::new(
            "the model could not be initialised",
            MeasureError::Init { dir: dir.clone(), reason: e.to_string() },
        )
    })?;
    let (mut trained_counts, mut init_counts, mut scored) =
        (AlignCounts::default(), AlignCounts::default(), 0);
    for (s, r) in sources.iter().zip(&refs) {
        let Some((tgt, alignment)) = gold.get(normalize(s).trim()) else { continue };
        if tgt != normalize(r).trim() {
            continue;
        }
        let (src_ids, tgt_ids) = (tok.src.encode(&normalize(s)), tok.tgt.encode(&normalize(r)));
        // Word tokens only: a link is a pair of word positions.
        if src_ids.len() != s.split_whitespace().count() || tgt_ids.len() != alignment.len() {
            continue;
        }
        let links: Vec<[usize; 2]> = alignment.iter().enumerate().map(|(j, &i)| [j, i]).collect();
        let (Some(a), Some(b)) = (
            attention(&model, &src_ids, &tgt_ids, &device),
            attention(&untrained, &src_ids, &tgt_ids, &device),
        ) else {
            return Err(NotRun::new(
                "no attention weights",
                MeasureError::ModelKind { dir, expected: "an attention model" },
            ));
        };
        trained_counts.add(AlignCounts::of(&a, &links));
        init_counts.add(AlignCounts::of(&b, &links));
        scored += 1;
    }
    if scored == 0 {
        return Err(NotRun::new(
            "no test pair has a gold alignment",
            MeasureError::NoLongSource { dir, len: 0 },
        ));
    }
    Ok((trained_counts, init_counts, scored))
}

fn run(ctx: &Context) -> Finding {
    let measured =
        match ctx.seeds().iter().map(|&s| measure(ctx, s).map(|m| (s, m))).collect::<Result<Vec<_>, _>>() {
            Ok(m) => m,
            Err(e) => return e.into(),
        };
    let (verdict, seeds) = crate::by_seed(
        measured.iter().map(|(s, (t, i, _))| (*s, t.aer() < 0.3 && t.aer() < i.aer())).collect(),
    );
    let row = |seed: u64, name: &str, c: &AlignCounts| {
        vec![
            seed.to_string(),
            name.to_string(),
            num(c.aer()),
            c.hits.to_string(),
            c.predicted.to_string(),
            c.gold.to_string(),
        ]
    };
    let said: Vec<String> = measured
        .iter()
        .map(|(seed, (t, i, n))| {
            format!(
                "seed {seed}: {} ({} of its {} links gold, of {} gold links; {n} sentences), at initialisation {}",
                num(t.aer()),
                t.hits,
                t.predicted,
                t.gold,
                num(i.aer())
            )
        })
        .collect();
    let reason = format!(
        "AER {} trained against {} at initialisation",
        crate::span(measured.iter().map(|m| m.1.0.aer())),
        crate::span(measured.iter().map(|m| m.1.1.aer()))
    );
    Finding {
        runs: Vec::new(),
        seeds,
        verdict,
        reason,
        because: format!("the trained model's AER over the test sentences, {}", said.join("; ")),
        not_measured:
            "the Transformer's heads, whose alignment the studio scores head by head (`s2s studio`)".into(),
        table: Table {
            header: ["seed", "model", "AER", "links that are gold", "links", "gold links"]
                .map(String::from)
                .to_vec(),
            rows: measured
                .iter()
                .flat_map(|(seed, (t, i, _))| {
                    [row(*seed, "Bahdanau, trained", t), row(*seed, "Bahdanau, at initialisation", i)]
                })
                .collect(),
        },
        more: Vec::new(),
        figures: Vec::new(),
    }
}
