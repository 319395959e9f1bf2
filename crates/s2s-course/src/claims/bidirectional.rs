//! A bidirectional encoder helps: each source state sees the words after it as well as those
//! before.

use s2s_models::ModelSpec;

use super::trained;
use crate::{Claim, Context, Finding};

pub const CLAIM: Claim = Claim {
    name: "bidirectional",
    why: "A unidirectional encoder's state at word t has seen only the words before it; a \
          bidirectional one has seen the whole sentence. Whether that translates better at the same \
          size is measured seed by seed.",
    statement: "A bidirectional encoder translates better than a unidirectional one of the same size",
    lecture: "language-models-rnn-seq2seq.md § Estensione Bidirezionale; § Modello Seq2Seq",
    criterion: "holds when the bidirectional encoder's test BLEU is higher for every seed and sacreBLEU's paired \
                bootstrap (1,000 resamples) gives p < 0.05 for each seed",
    method: "the course's model (Bahdanau, embeddings 32, hidden 64 — a bidirectional encoder has 32 a direction — \
             on the built-in pair's 4,000 pairs) trained with a bidirectional and a unidirectional encoder, \
             alike, for each seed; greedy test BLEU on 200 sentences, each seed's pair tested \
             with the unidirectional model as the baseline",
    run,
};

fn run(ctx: &Context) -> Finding {
    let seeds = ctx.seeds();
    let rows = trained::paired(seeds, |bidirectional, seed| {
        // The bidirectional model is the course's shared one.
        if bidirectional {
            return trained::bahdanau(ctx, seed);
        }
        let mut cfg = trained::config(ctx, seed);
        if let ModelSpec::Bahdanau(s) = &mut cfg.model {
            s.bidirectional = bidirectional;
        }
        let name = format!("bahdanau-{}-seed{seed}", if bidirectional { "bi" } else { "uni" });
        trained::train(ctx, &name, &cfg)
    });
    let rows = match rows {
        Ok(r) => r,
        Err(e) => return Finding::not_run("the runs did not train", e),
    };
    let trained::Judged { verdict, seeds, because, table } =
        trained::judge_paired(&rows, "unidirectional", "bidirectional");
    Finding {
        runs: Vec::new(),
        seeds,
        verdict,
        reason: because.clone(),
        because,
        not_measured: String::new(),
        table,
        more: Vec::new(),
        figures: vec![trained::paired_figure(
            "bidirectional.svg",
            "Test BLEU by seed, unidirectional and bidirectional encoder",
            &rows,
            "unidirectional",
            "bidirectional",
        )],
    }
}
