//! Decoding strategies: beam search finds outputs the model scores higher than greedy search's,
//! and what the length penalty α does.

use burn::tensor::Device;
use s2s_decode::{BeamConfig, Hypothesis, MaxLength};
use s2s_train::evaluate::{Search, detokenize, translate};

use super::{figure, series};
use crate::{Claim, Context, Finding, MeasureError, Table, num};

pub const CLAIM: Claim = Claim {
    name: "beam-search",
    why: "Greedy decoding commits to the best word at each step and can miss a better sentence; beam \
          search keeps several candidates. Whether finding higher-scoring outputs gives better \
          translations depends on the model, and is measured here.",
    statement: "Beam search finds translations the model scores higher than greedy search's, and better ones",
    lecture: "language-models-rnn-seq2seq.md § Strategie di Decoding; § Beam Search",
    criterion: "holds when, for every seed's model, at every beam size above 1 the mean log-probability of the \
                outputs is at least greedy search's, the judged beam's (`--beam`, 5) test BLEU is higher than \
                greedy's with sacreBLEU's paired bootstrap p < 0.05, and it makes fewer search errors than greedy \
                search",
    method: "the course's model of each seed (see bidirectional) translates the built-in pair's test split with \
             beam sizes 1 (greedy) to 10, no length penalty: test BLEU, the outputs' mean log-probability under \
             the model, and the share of sentences where the beam's output scores higher than greedy's; then the \
             judged beam with GNMT's length penalty α ∈ {0, 0.6, `--alpha` (1)}, its outputs scored by their log-probability, not by \
             the length-normalised score the search ranked them by. Each output that is not the reference is a search \
             error when the model scores the reference higher than the output (the search missed it), and a \
             model error otherwise (the model prefers its wrong output)",
    run,
};

struct Decoded {
    /// Sentences whose output is the reference, search errors, model errors.
    errors: (usize, usize, usize),
    bleu: f64,
    mean_score: f64,
    mean_len: f64,
    /// Each output's log-probability under the model.
    scores: Vec<f64>,
    /// The detokenised outputs.
    text: Vec<String>,
}

/// The course's trained model and its test split: sources and references encoded, the
/// references' text, and each reference's log-probability under the model.
struct Test {
    tok: s2s_data::Tokenizers,
    model: s2s_models::Model,
    device: Device,
    max_output: MaxLength,
    refs: Vec<String>,
    sources: Vec<Vec<u32>>,
    references: Vec<Vec<u32>>,
    reference_scores: Vec<f64>,
}

/// One seed's model decoded: by beam size (no length penalty), by α at the judged beam, and the
/// paired bootstrap p of the judged beam's BLEU against greedy search's.
struct Seed {
    seed: u64,
    by_beam: Vec<(usize, Decoded)>,
    alphas: Vec<(f64, Decoded)>,
    p: f64,
    sentences: usize,
}

impl Seed {
    /// The judged beam's outputs.
    fn judged(&self, beam: usize) -> &Decoded {
        &self.by_beam.iter().find(|(k, _)| *k == beam).expect("the judged beam is measured").1
    }

    /// Whether the criterion is met: every beam's mean log-probability at least greedy's, the
    /// judged beam's BLEU significantly higher and its search errors fewer.
    fn met(&self, beam: usize) -> bool {
        let greedy = &self.by_beam[0].1;
        let k = self.judged(beam);
        self.by_beam.iter().skip(1).all(|(_, d)| d.mean_score >= greedy.mean_score - 1e-9)
            && k.bleu > greedy.bleu
            && self.p < 0.05
            && k.errors.1 < greedy.errors.1
    }
}

/// The beam sizes measured: 1 (greedy) to 10 and the judged one.
fn beams(ctx: &Context) -> Vec<usize> {
    let mut beams: Vec<usize> = ctx.budget.pick(vec![1, 2, 3, 5, 10], vec![1, 3, 5]);
    beams.push(ctx.knobs.beam);
    beams.sort_unstable();
    beams.dedup();
    beams
}

/// The length penalties measured at the judged beam: 0, 0.6 (GNMT's) and the knob's.
fn alphas(ctx: &Context) -> Vec<f64> {
    let mut alphas = vec![0.0, 0.6, ctx.knobs.alpha];
    alphas.sort_by(f64::total_cmp);
    alphas.dedup();
    alphas
}

/// One seed's model decoded every way, or why not.
fn measure(ctx: &Context, seed: u64) -> Result<Seed, crate::NotRun> {
    let test = Test::load(ctx, seed).map_err(|e| crate::NotRun::new("no trained model to decode with", e))?;
    let by_beam: Vec<(usize, Decoded)> = beams(ctx).iter().map(|&k| (k, test.decode(k, 0.0))).collect();
    let alphas = alphas(ctx).iter().map(|&a| (a, test.decode(ctx.knobs.beam, a))).collect();
    let judged = &by_beam.iter().find(|(k, _)| *k == ctx.knobs.beam).expect("the judged beam is measured").1;
    let (_, p) = super::trained::paired_bleu(&by_beam[0].1.text, &judged.text, &test.refs)
        .map_err(|e| crate::NotRun::new("no paired test of the beam against greedy search", e))?;
    Ok(Seed { seed, by_beam, alphas, p, sentences: test.sources.len() })
}

fn run(ctx: &Context) -> Finding {
    let measured = match ctx.seeds().iter().map(|&seed| measure(ctx, seed)).collect::<Result<Vec<_>, _>>() {
        Ok(m) => m,
        Err(e) => return e.into(),
    };
    let beam = ctx.knobs.beam;
    let (verdict, seeds) = crate::by_seed(measured.iter().map(|m| (m.seed, m.met(beam))).collect());
    let mean = |f: &dyn Fn(&Seed) -> f64| measured.iter().map(f).sum::<f64>() / measured.len() as f64;
    let reason = format!(
        "beam {beam} raises the mean log-probability {} → {} and BLEU {} → {} (means), significantly in {} of {} seeds",
        num(mean(&|m| m.by_beam[0].1.mean_score)),
        num(mean(&|m| m.judged(beam).mean_score)),
        num(mean(&|m| m.by_beam[0].1.bleu)),
        num(mean(&|m| m.judged(beam).bleu)),
        measured.iter().filter(|m| m.judged(beam).bleu > m.by_beam[0].1.bleu && m.p < 0.05).count(),
        measured.len()
    );
    Finding {
        runs: Vec::new(),
        seeds,
        verdict,
        reason,
        because: measured.iter().map(|m| because(m, beam, ctx.knobs.alpha)).collect::<Vec<_>>().join("; "),
        not_measured: String::new(),
        table: table(&measured, beam),
        more: Vec::new(),
        figures: vec![figure(
            "beam-search.svg",
            "Test BLEU by beam size (no length penalty), one line a seed",
            "beam size",
            "test BLEU",
            measured
                .iter()
                .map(|m| {
                    series(
                        &format!("seed {}", m.seed),
                        m.by_beam.iter().map(|(k, d)| (*k as f64, d.bleu)).collect(),
                    )
                })
                .collect(),
        )],
    }
}

impl Test {
    /// The course's trained model of `seed` and its test split, or why there is none.
    fn load(ctx: &Context, seed: u64) -> Result<Self, MeasureError> {
        let dir = super::trained::bahdanau(ctx, seed)?;
        let cfg = super::trained::config(ctx, seed);
        let device = Device::flex();
        let (tok, model, src, refs) = super::trained::load_final(&dir, &cfg.model, &device)?;
        let sources: Vec<Vec<u32>> = src.iter().map(|s| tok.src.encode(s)).collect();
        let references: Vec<Vec<u32>> = refs.iter().map(|r| tok.tgt.encode(r)).collect();
        let mut test = Test {
            tok,
            model,
            device,
            max_output: cfg.train.max_output,
            refs,
            sources,
            references,
            reference_scores: Vec::new(),
        };
        let reference_scores: Vec<f64> =
            test.sources.iter().zip(&test.references).map(|(s, r)| test.log_prob(s, r)).collect();
        test.reference_scores = reference_scores;
        Ok(test)
    }

    /// log P(y | x) of a given output, teacher-forced (`</s>` included), as search sums it.
    fn log_prob(&self, src: &[u32], tgt: &[u32]) -> f64 {
        let example = s2s_data::Example { src: src.to_vec(), tgt: tgt.to_vec() };
        -s2s_train::evaluate::nll(&self.model, &[example], s2s_data::BatchConfig::default(), &self.device).0
    }

    /// The test split decoded by beam search of size `beam` and length penalty `alpha`.
    fn decode(&self, beam: usize, alpha: f64) -> Decoded {
        let search =
            Search::Beam(BeamConfig { beam, alpha, max_length: self.max_output, ..Default::default() });
        let hyps = translate(
            &self.model,
            &self.sources,
            s2s_data::BatchConfig::default(),
            &search,
            &self.device,
            false,
        );
        let text = detokenize(&self.tok.tgt, &hyps);
        // Without a length penalty the search's score is the log-probability; with one it is
        // that divided by the penalty, which is not comparable with greedy search's: score the
        // output itself.
        let scores: Vec<f64> = hyps
            .iter()
            .zip(&self.sources)
            .map(|(h, src)| match h.first() {
                None => f64::NEG_INFINITY,
                Some(h) if alpha == 0.0 => h.score,
                Some(h) => self.log_prob(src, &h.tokens),
            })
            .collect();
        let lens: Vec<usize> = hyps.iter().map(|h| h.first().map_or(0, |h| h.tokens.len())).collect();
        Decoded {
            errors: self.errors(&hyps),
            bleu: s2s_eval::corpus_bleu(&text, &[&self.refs]).map(|b| b.score).unwrap_or(f64::NAN),
            mean_score: scores.iter().sum::<f64>() / scores.len().max(1) as f64,
            mean_len: lens.iter().sum::<usize>() as f64 / lens.len().max(1) as f64,
            scores,
            text,
        }
    }

    /// How many outputs are the reference, search errors and model errors.
    fn errors(&self, hyps: &[Vec<Hypothesis>]) -> (usize, usize, usize) {
        let mut errors = (0, 0, 0);
        for (i, h) in hyps.iter().enumerate() {
            let out = h.first().map_or(&[][..], |h| h.tokens.as_slice());
            if out == self.references[i].as_slice() {
                errors.0 += 1;
            } else if self.reference_scores[i] > self.log_prob(&self.sources[i], out) + 1e-6 {
                errors.1 += 1;
            } else {
                errors.2 += 1;
            }
        }
        errors
    }
}

/// The share of sentences whose output `d` scores higher than greedy search's.
fn better(d: &Decoded, greedy: &Decoded) -> f64 {
    d.scores.iter().zip(&greedy.scores).filter(|(b, g)| **b > **g + 1e-6).count() as f64
        / d.scores.len().max(1) as f64
}

/// A table row: `name`'s BLEU, mean log-probability, share above greedy's, length and errors.
fn row(name: String, d: &Decoded, greedy: &Decoded) -> Vec<String> {
    vec![
        name,
        num(d.bleu),
        num(d.mean_score),
        format!("{:.1} %", 100.0 * better(d, greedy)),
        num(d.mean_len),
        format!("{} / {} / {}", d.errors.0, d.errors.1, d.errors.2),
    ]
}

/// The table: for each seed, each beam size without length penalty, then the judged beam with
/// each α above 0.
fn table(measured: &[Seed], beam: usize) -> Table {
    let mut table = Table {
        header: [
            "seed",
            "search",
            "test BLEU",
            "mean log-probability",
            "scores above greedy's",
            "mean length (tokens)",
            "reference found / search errors / model errors",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for m in measured {
        let greedy = &m.by_beam[0].1;
        let mut push = |name: String, d: &Decoded| {
            let mut r = vec![m.seed.to_string()];
            r.extend(row(name, d, greedy));
            table.rows.push(r);
        };
        for (k, d) in &m.by_beam {
            push(if *k == 1 { "greedy (beam 1)".to_string() } else { format!("beam {k}, α = 0") }, d);
        }
        for (a, d) in m.alphas.iter().filter(|(a, _)| *a > 0.0) {
            push(format!("beam {beam}, α = {a}"), d);
        }
    }
    table
}

/// One seed's sentence: greedy search against the judged beam, and α's lengths against none.
fn because(m: &Seed, beam: usize, alpha: f64) -> String {
    let (greedy, k) = (&m.by_beam[0].1, m.judged(beam));
    let len = |a: f64| m.alphas.iter().find(|x| x.0 == a).map_or(f64::NAN, |x| x.1.mean_len);
    format!(
        "seed {}: beam {beam} raises the mean log-probability {} → {} ({:.0} % of sentences score higher) and BLEU \
         {} → {} (paired bootstrap p = {:.3}); search errors {} → {}, model errors {} → {} (of {} sentences); \
         with α = {alpha} the outputs are {} tokens long against {} at α = 0",
        m.seed,
        num(greedy.mean_score),
        num(k.mean_score),
        100.0 * better(k, greedy),
        num(greedy.bleu),
        num(k.bleu),
        m.p,
        greedy.errors.1,
        k.errors.1,
        greedy.errors.2,
        k.errors.2,
        m.sentences,
        num(len(alpha)),
        num(len(0.0))
    )
}
