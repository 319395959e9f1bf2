//! Removing one head of a trained Transformer: the notes say it has a limited impact (as Michel
//! et al., 2019, found for most heads of large models).

use burn::module::Param;
use burn::tensor::Device;
use s2s_models::transformer::mha::MultiHeadAttention;
use s2s_models::{Model, ModelSpec, TransformerSpec};
use s2s_train::evaluate::{Search, detokenize, translate};

use super::trained;
use crate::{Claim, Context, Finding, Table, num};

pub const CLAIM: Claim = Claim {
    name: "head-removal",
    why: "If heads specialise, some should matter more than others; if they are partly redundant, losing any \
          one should cost little. Removing heads one at a time from a trained model tells which, and is how \
          heads are pruned to make models smaller.",
    statement: "Removing a single head from a trained Transformer has a limited impact",
    lecture: "multi-head-attention.md § Pattern di Specializzazione (Robustezza)",
    criterion: "holds when, for every seed's model, removing any single attention head costs less than 2 points \
                of greedy test BLEU",
    method: "the course's Transformer of each seed (d_model 64, 4 heads, 2 + 2 layers, trained 1,200 steps; see \
             causal-mask): each of its 24 heads (encoder self-attention, decoder self-attention, cross-attention, every \
             layer) removed in turn by zeroing its rows of W^O, which is exactly dropping its output; greedy \
             BLEU on the built-in pair's 200 test sentences against the whole model's",
    run,
};

/// `mha` without head `h`: its `d_k` rows of `W^O` (the head's slice of the concatenated heads)
/// set to zero.
fn without_head(mha: &MultiHeadAttention, h: usize) -> MultiHeadAttention {
    let mut out = mha.clone();
    let w = out.output.weight.val();
    let [d_in, d_out] = w.dims();
    let dk = d_in / mha.heads;
    let zeros = burn::tensor::Tensor::<2>::zeros([dk, d_out], &w.device());
    out.output.weight = Param::from_tensor(w.slice_assign([h * dk..(h + 1) * dk, 0..d_out], zeros));
    out
}

/// Where a head sits: (kind, layer, head).
type Site = (&'static str, usize, usize);

/// The model with the head at `site` removed.
fn remove(model: &Model, site: Site) -> Model {
    let Model::Transformer(t) = model else { return model.clone() };
    let mut t = t.clone();
    let (kind, layer, head) = site;
    match kind {
        "encoder self" => {
            t.encoder[layer].self_attention = without_head(&t.encoder[layer].self_attention, head)
        }
        "decoder self" => {
            t.decoder[layer].self_attention = without_head(&t.decoder[layer].self_attention, head)
        }
        _ => t.decoder[layer].cross_attention = without_head(&t.decoder[layer].cross_attention, head),
    }
    Model::Transformer(t)
}

/// One seed's model: its whole BLEU and each head's cost.
struct Seed {
    seed: u64,
    whole: f64,
    drops: Vec<(Site, f64)>,
}

/// The course's Transformer of `seed`, each head removed in turn, or why not.
fn measure(ctx: &Context, seed: u64) -> Result<Seed, crate::NotRun> {
    let spec = ModelSpec::Transformer(TransformerSpec { causal: true, ..trained::transformer() });
    let mut cfg = trained::run_config(spec.clone(), ctx.budget.pick(1200, 300), ctx.budget.pick(100, 50));
    cfg.train.seed = seed;
    let dir = trained::train(ctx, &trained::transformer_name(seed), &cfg)
        .map_err(|e| crate::NotRun::new("the course's Transformer did not train", e))?;
    let device = Device::flex();
    let (tok, model, sources, refs) = trained::load_final(&dir, &spec, &device)
        .map_err(|e| crate::NotRun::new("the course's Transformer could not be loaded", e))?;
    let sources: Vec<Vec<u32>> = sources.iter().map(|s| tok.src.encode(s)).collect();
    let search = Search::Greedy { limit: cfg.train.max_output, attention: false };
    let bleu = |m: &Model| {
        let hyps = translate(m, &sources, s2s_data::BatchConfig::default(), &search, &device, false);
        s2s_eval::corpus_bleu(&detokenize(&tok.tgt, &hyps), &[&refs]).map_or(f64::NAN, |b| b.score)
    };
    let whole = bleu(&model);
    let t = trained::transformer();
    let mut sites: Vec<Site> = Vec::new();
    for (kind, layers) in
        [("encoder self", t.enc_layers), ("decoder self", t.dec_layers), ("cross", t.dec_layers)]
    {
        for layer in 0..layers {
            sites.extend((0..t.heads).map(|h| (kind, layer, h)));
        }
    }
    let drops = sites.iter().map(|&s| (s, whole - bleu(&remove(&model, s)))).collect();
    Ok(Seed { seed, whole, drops })
}

/// A seed's costliest head.
fn worst(m: &Seed) -> (Site, f64) {
    m.drops.iter().max_by(|a, b| a.1.total_cmp(&b.1)).copied().expect("heads")
}

fn run(ctx: &Context) -> Finding {
    let measured = match ctx.seeds().iter().map(|&seed| measure(ctx, seed)).collect::<Result<Vec<_>, _>>() {
        Ok(m) => m,
        Err(e) => return e.into(),
    };
    let (verdict, seeds) =
        crate::by_seed(measured.iter().map(|m| (m.seed, m.drops.iter().all(|d| d.1 < 2.0))).collect());
    let said: Vec<String> = measured
        .iter()
        .map(|m| {
            let (site, cost) = worst(m);
            format!(
                "seed {}: the whole model scores {} BLEU; removing one head costs less than half a point for {} of {} \
                 heads, and at most {} ({} attention, layer {}, head {})",
                m.seed,
                num(m.whole),
                m.drops.iter().filter(|d| d.1 < 0.5).count(),
                m.drops.len(),
                num(cost),
                site.0,
                site.1 + 1,
                site.2 + 1
            )
        })
        .collect();
    let reason = format!(
        "the costliest single head costs {} BLEU (by seed: {})",
        num(measured.iter().map(|m| worst(m).1).fold(f64::NEG_INFINITY, f64::max)),
        measured.iter().map(|m| num(worst(m).1)).collect::<Vec<_>>().join(", ")
    );
    Finding {
        runs: Vec::new(),
        seeds,
        verdict,
        reason,
        because: said.join("; "),
        not_measured: "removing several heads at once, where redundancy runs out".into(),
        table: Table {
            header: ["seed", "attention", "layer", "head removed", "test BLEU", "cost (points)"]
                .map(String::from)
                .to_vec(),
            rows: measured
                .iter()
                .flat_map(|m| {
                    m.drops.iter().map(|((kind, layer, head), d)| {
                        vec![
                            m.seed.to_string(),
                            kind.to_string(),
                            (layer + 1).to_string(),
                            (head + 1).to_string(),
                            num(m.whole - d),
                            num(*d),
                        ]
                    })
                })
                .collect(),
        },
        more: Vec::new(),
        figures: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use s2s_models::transformer::mha::MultiHeadAttentionConfig;

    /// Removing head 1 of 4 zeroes exactly its 2 rows of W^O (d_model 8) and nothing else.
    #[test]
    fn removing_a_head_zeroes_its_rows_of_the_output_projection() {
        let d = Device::flex();
        let mha =
            MultiHeadAttentionConfig { d_model: 8, heads: 4, dropout: 0.0, scaled: true }.init(&d).unwrap();
        let before: Vec<f32> = mha.output.weight.val().into_data().try_to_vec().unwrap();
        let after: Vec<f32> = without_head(&mha, 1).output.weight.val().into_data().try_to_vec().unwrap();
        for (i, (a, b)) in before.iter().zip(&after).enumerate() {
            let row = i / 8;
            if (2..4).contains(&row) {
                assert_eq!(*b, 0.0, "row {row}");
            } else {
                assert_eq!(a, b, "row {row}");
            }
        }
    }
}
