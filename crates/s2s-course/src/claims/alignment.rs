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
use crate::{Claim, Context, Finding, Table, Verdict, num};

pub const CLAIM: Claim = Claim {
    name: "alignment",
    why: "Attention was introduced as a soft alignment: at each target word the decoder should look at the \
          source word it translates. If it does, the weights are an alignment for free; if not, they are \
          only a means to a good prediction, and reading them as an explanation misleads.",
    statement: "A trained attention model's weights align each target word with the source word it translates",
    lecture: "language-models-rnn-seq2seq.md § Attention Mechanism",
    criterion: "holds when the trained model's alignment error rate against the gold alignment is below 0.3, \
                and below its own at initialisation",
    method: "the course's Bahdanau model (see ppl-bleu) teacher-forced on each test reference of the built-in \
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

fn run(ctx: &Context) -> Finding {
    let dir = match trained::bahdanau(ctx) {
        Ok(d) => d,
        Err(e) => return Finding::not_run("the course's model did not train", e),
    };
    let cfg = trained::config(ctx);
    let device = Device::flex();
    let (tok, model, sources, refs) = match trained::load_best(&dir, &cfg.model, &device) {
        Ok(x) => x,
        Err(e) => return Finding::not_run("the course's model could not be loaded", e),
    };
    let s2s_train::run::DataSpec::Builtin { pairs, seed, max_tokens } = cfg.data else {
        return Finding::not_run("no gold alignment", "the course's model is not trained on the built-in pair");
    };
    let gold = gold(&SynthConfig { pairs, seed, max_tokens, ..SynthConfig::default() });
    device.seed(1);
    let untrained = match cfg.model.init(tok.src.vocab_size(), tok.tgt.vocab_size(), &device) {
        Ok(m) => m,
        Err(e) => return Finding::not_run("the model could not be initialised", e),
    };
    let (mut trained_counts, mut init_counts, mut scored) = (AlignCounts::default(), AlignCounts::default(), 0);
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
        let (Some(a), Some(b)) =
            (attention(&model, &src_ids, &tgt_ids, &device), attention(&untrained, &src_ids, &tgt_ids, &device))
        else {
            return Finding::not_run("no attention weights", "the course's model does not attend");
        };
        trained_counts.add(AlignCounts::of(&a, &links));
        init_counts.add(AlignCounts::of(&b, &links));
        scored += 1;
    }
    if scored == 0 {
        return Finding::not_run("no test pair has a gold alignment", format!("{} test pairs", sources.len()));
    }
    let (aer, aer0) = (trained_counts.aer(), init_counts.aer());
    let holds = aer < 0.3 && aer < aer0;
    let row = |name: &str, c: &AlignCounts| {
        vec![
            name.to_string(),
            num(c.aer()),
            c.hits.to_string(),
            c.predicted.to_string(),
            c.gold.to_string(),
        ]
    };
    Finding {
        runs: Vec::new(),
        verdict: if holds { Verdict::Holds } else { Verdict::DoesNotHold },
        because: format!(
            "over {scored} test sentences the trained model's AER is {} ({} of its {} links gold, of {} gold links), \
             at initialisation {}",
            num(aer),
            trained_counts.hits,
            trained_counts.predicted,
            trained_counts.gold,
            num(aer0)
        ),
        not_measured: "the Transformer's heads, whose alignment the studio scores head by head (`s2s studio`)"
            .into(),
        table: Table {
            header: ["model", "AER", "links that are gold", "links", "gold links"].map(String::from).to_vec(),
            rows: vec![row("Bahdanau, trained", &trained_counts), row("Bahdanau, at initialisation", &init_counts)],
        },
        more: Vec::new(),
        figures: Vec::new(),
    }
}
