//! Decoding strategies: beam search finds outputs the model scores higher than greedy search's,
//! and what the length penalty α does.

use burn::tensor::Device;
use s2s_decode::BeamConfig;
use s2s_train::evaluate::{Search, detokenize, translate};

use super::{figure, series};
use crate::{Claim, Context, Finding, Table, Verdict, num};

pub const CLAIM: Claim = Claim {
    name: "beam-search",
    statement: "Beam search finds translations the model scores higher than greedy search's, and better ones",
    lecture: "language-models-rnn-seq2seq.md § Strategie di Decoding; § Beam Search",
    criterion: "holds when, at every beam size above 1, the mean log-probability of the outputs is at least \
                greedy search's, and beam 5's test BLEU is at least greedy's",
    method: "the course's trained model (see ppl-bleu) translates the built-in pair's test split with beam \
             sizes 1 (greedy) to 10, no length penalty: test BLEU, the outputs' mean log-probability under the \
             model, and the share of sentences where the beam's output scores higher than greedy's; then beam 5 \
             with GNMT's length penalty α ∈ {0, 0.6, 1}",
    run,
};

struct Decoded {
    bleu: f64,
    mean_score: f64,
    mean_len: f64,
    scores: Vec<f64>,
}

fn run(ctx: &Context) -> Finding {
    let failed = |e: String| Finding::not_run("no trained model to decode with", e);
    let dir = match super::trained::bahdanau(ctx) {
        Ok(d) => d,
        Err(e) => return failed(e),
    };
    let cfg = super::trained::config(ctx);
    let device = Device::flex();
    let loaded = (|| -> Result<_, String> {
        let tok = s2s_data::Tokenizers::load(&dir.join("tokenizer")).map_err(|e| e.to_string())?;
        let best = s2s_train::checkpoint::Checkpoints::new(&dir)
            .pointed("best")
            .map_err(|e| e.to_string())?
            .ok_or("no best checkpoint")?;
        let model = s2s_train::load_model(&cfg.model, &tok, &best, &device).map_err(|e| e.to_string())?;
        let read =
            |f: &str| std::fs::read_to_string(dir.join("data").join(f)).map_err(|e| format!("{f}: {e}"));
        let (src, refs) = (read("test.src")?, read("test.tgt")?);
        Ok((
            tok,
            model,
            src.lines().map(String::from).collect::<Vec<_>>(),
            refs.lines().map(String::from).collect::<Vec<_>>(),
        ))
    })();
    let (tok, model, src, refs) = match loaded {
        Ok(l) => l,
        Err(e) => return failed(e),
    };
    let sources: Vec<Vec<u32>> = src.iter().map(|s| tok.src.encode(s)).collect();
    let decode = |beam: usize, alpha: f64| {
        let search =
            Search::Beam(BeamConfig { beam, alpha, max_length: cfg.train.max_output, ..Default::default() });
        let hyps = translate(&model, &sources, s2s_data::BatchConfig::default(), &search, &device, false);
        let text = detokenize(&tok.tgt, &hyps);
        let scores: Vec<f64> =
            hyps.iter().map(|h| h.first().map_or(f64::NEG_INFINITY, |h| h.score)).collect();
        let lens: Vec<usize> = hyps.iter().map(|h| h.first().map_or(0, |h| h.tokens.len())).collect();
        Decoded {
            bleu: s2s_eval::corpus_bleu(&text, &[&refs]).map(|b| b.score).unwrap_or(f64::NAN),
            mean_score: scores.iter().sum::<f64>() / scores.len().max(1) as f64,
            mean_len: lens.iter().sum::<usize>() as f64 / lens.len().max(1) as f64,
            scores,
        }
    };
    let beams: Vec<usize> = ctx.budget.pick(vec![1, 2, 3, 5, 10], vec![1, 3, 5]);
    let by_beam: Vec<(usize, Decoded)> = beams.iter().map(|&k| (k, decode(k, 0.0))).collect();
    let greedy = &by_beam[0].1;
    let better = |d: &Decoded| {
        d.scores.iter().zip(&greedy.scores).filter(|(b, g)| **b > **g + 1e-6).count() as f64
            / d.scores.len().max(1) as f64
    };
    let alphas: Vec<(f64, Decoded)> = [0.0, 0.6, 1.0].iter().map(|&a| (a, decode(5, a))).collect();
    let mut table = Table {
        header: [
            "search",
            "test BLEU",
            "mean log-probability",
            "scores above greedy's",
            "mean length (tokens)",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for (k, d) in &by_beam {
        let name = if *k == 1 { "greedy (beam 1)".to_string() } else { format!("beam {k}, α = 0") };
        table.rows.push(vec![
            name,
            num(d.bleu),
            num(d.mean_score),
            format!("{:.1} %", 100.0 * better(d)),
            num(d.mean_len),
        ]);
    }
    for (a, d) in alphas.iter().skip(1) {
        table.rows.push(vec![
            format!("beam 5, α = {a}"),
            num(d.bleu),
            num(d.mean_score),
            format!("{:.1} %", 100.0 * better(d)),
            num(d.mean_len),
        ]);
    }
    let five = &by_beam.iter().find(|(k, _)| *k == 5).expect("beam 5 is measured").1;
    let scores_hold = by_beam.iter().skip(1).all(|(_, d)| d.mean_score >= greedy.mean_score - 1e-9);
    let holds = scores_hold && five.bleu >= greedy.bleu;
    Finding {
        verdict: if holds { Verdict::Holds } else { Verdict::DoesNotHold },
        because: format!(
            "beam 5 raises the mean log-probability {} → {} ({:.0} % of sentences score higher) and BLEU {} → {}; \
             with α = 1 the outputs are {} tokens long against {} at α = 0",
            num(greedy.mean_score),
            num(five.mean_score),
            100.0 * better(five),
            num(greedy.bleu),
            num(five.bleu),
            num(alphas[2].1.mean_len),
            num(alphas[0].1.mean_len)
        ),
        not_measured: "search errors against model errors (the reference's own score under the model)".into(),
        table,
        figures: vec![figure(
            "beam-search.svg",
            "Test BLEU by beam size (no length penalty)",
            "beam size",
            "test BLEU",
            vec![series("BLEU", by_beam.iter().map(|(k, d)| (*k as f64, d.bleu)).collect())],
        )],
    }
}
