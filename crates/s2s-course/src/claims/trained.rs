//! The course's trained model, shared by the claims that need one: a small Bahdanau model on
//! the built-in pair, trained once per course directory (`runs/bahdanau`; a rerun finds it
//! finished and reuses it).

use std::path::PathBuf;

use burn::tensor::Device;
use s2s_models::{AttentionRnnSpec, ModelSpec};
use s2s_train::run::{DataSpec, RunConfig};
use s2s_train::{Budget as TrainBudget, TrainSpec};

use crate::{Context, MeasureError};

/// The course's Transformer (d_model 64, 4 heads, 2 + 2 layers): the causal-mask, positions and
/// heads claims each vary one field of it and share its seed-1 run (`transformer-causal`).
pub fn transformer() -> s2s_models::TransformerSpec {
    s2s_models::TransformerSpec {
        d_model: 64,
        heads: 4,
        ffn: 128,
        enc_layers: 2,
        dec_layers: 2,
        ..Default::default()
    }
}

/// The run name of the course's Transformer ([`transformer`]) trained 1,200 steps from `seed`:
/// the causal-mask claim's masked model, the positions claim's and the heads claims' 4-head one.
pub fn transformer_name(seed: u64) -> String {
    if seed == 1 { "transformer-causal".to_string() } else { format!("transformer-seed{seed}") }
}

/// The course's shared model, trained from `seed`: its budget in steps, so the model is the same
/// on any machine.
pub fn config(ctx: &Context, seed: u64) -> RunConfig {
    let mut cfg = run_config(
        ModelSpec::Bahdanau(AttentionRnnSpec {
            emb: 32,
            hidden: 64,
            attention_dim: 64,
            ..Default::default()
        }),
        ctx.budget.pick(2000, 300),
        ctx.budget.pick(100, 50),
    );
    cfg.train.seed = seed;
    cfg
}

/// `model` trained `steps` steps on the built-in pair (4,000 pairs), validated every
/// `valid_every` steps (perplexity, and greedy BLEU on 200 sentences).
pub fn run_config(model: ModelSpec, steps: u64, valid_every: u64) -> RunConfig {
    RunConfig {
        data: DataSpec::Builtin { pairs: 4000, seed: 1, max_tokens: 24 },
        ..long_config(model, steps, valid_every)
    }
}

/// [`run_config`] on the built-in pair's long sentences (8,000 pairs, sources up to 48 tokens).
pub fn long_config(model: ModelSpec, steps: u64, valid_every: u64) -> RunConfig {
    RunConfig {
        data: DataSpec::Builtin { pairs: 8000, seed: 1, max_tokens: 48 },
        tokenizer: s2s_data::TokenizerConfig {
            level: s2s_data::Level::Word,
            vocab_size: 0,
            joint: false,
            min_freq: 1,
            ..Default::default()
        },
        model,
        train: TrainSpec {
            budget: TrainBudget { steps: Some(steps), epochs: None, minutes: None },
            valid_every,
            valid_bleu_sentences: 200,
            lr: 3e-3,
            batch: s2s_data::BatchConfig { max_tokens: 1024, ..Default::default() },
            capture: s2s_train::config::Capture::Off,
            // Every run trains its whole budget: runs compared "after N steps" trained N steps
            // each (early stopping would end them at different steps).
            patience: 0,
            ..Default::default()
        },
    }
}

/// The course's shared model of `seed`: its run's directory (trained now unless it is there,
/// finished, for this budget). It is the bidirectional claim's bidirectional model of that seed.
pub fn bahdanau(ctx: &Context, seed: u64) -> Result<PathBuf, MeasureError> {
    let name = if seed == 1 { "bahdanau".to_string() } else { format!("bahdanau-bi-seed{seed}") };
    train(ctx, &name, &config(ctx, seed))
}

/// `cfg` trained into the course's `runs/NAME-BUDGET` (or found there, finished) and tested; a
/// run the claim already trained and tested is returned as it is (claims ask for a run once for
/// its scores and again for its model).
pub fn train(ctx: &Context, name: &str, cfg: &RunConfig) -> Result<PathBuf, MeasureError> {
    let dir = ctx.work.join(format!("{name}-{}", ctx.budget.pick("full", "quick")));
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if ctx.trained.borrow().iter().any(|r| r.name == name) {
        return Ok(dir);
    }
    let search = s2s_train::testset::greedy(cfg.train.max_output);
    // Tested (and read by the claims, `load_final`) after its whole budget: the last checkpoint.
    let last = s2s_train::pipeline::Tested::Last;
    s2s_train::pipeline::run_and_test(cfg, &dir, &[Device::flex()], "cpu", false, &search, last, &|_| {})
        .map_err(|source| MeasureError::Training { dir: dir.clone(), source })?;
    let steps = metrics(&dir).last().map_or(0, |r| r.0 as u64);
    let budget = cfg.train.budget.steps.unwrap_or(0);
    ctx.trained.borrow_mut().push(crate::TrainedRun { name, steps, budget });
    Ok(dir)
}

/// A validation row: (step, perplexity, BLEU).
pub type Row = (f64, f64, f64);

/// A run's validation rows.
pub fn metrics(dir: &std::path::Path) -> Vec<Row> {
    let Ok(mut r) = csv::Reader::from_path(dir.join("metrics.csv")) else { return Vec::new() };
    r.deserialize::<std::collections::HashMap<String, String>>()
        .filter_map(|row| {
            let row = row.ok()?;
            let f = |k: &str| row.get(k)?.parse::<f64>().ok();
            Some((f("step")?, f("val_ppl")?, f("val_bleu")?))
        })
        .collect()
}

/// One seed's two runs, scored on the test set: the baseline and the model the claim favours.
#[derive(Debug, Clone, Copy)]
pub struct Paired {
    /// The training seed.
    pub seed: u64,
    /// Test BLEU (greedy) of the baseline and of the favoured model.
    pub bleu: (f64, f64),
    /// sacreBLEU's paired bootstrap p-value of the difference (1,000 resamples).
    pub p: f64,
    /// Test perplexity (teacher-forced) of the baseline and of the favoured model.
    pub ppl: (f64, f64),
}

/// A run's test hypotheses, references and perplexity.
fn tested(dir: &std::path::Path) -> Result<(Vec<String>, Vec<String>, f64), MeasureError> {
    let read = |name: &str| {
        let path = dir.join("test").join(name);
        std::fs::read_to_string(&path).map_err(|source| MeasureError::io(&path, source))
    };
    let lines = |t: String| t.lines().map(str::to_string).collect::<Vec<_>>();
    let scores: serde_json::Value = serde_json::from_str(&read("scores.json")?)
        .map_err(|source| MeasureError::Json { path: dir.join("test/scores.json"), source })?;
    Ok((
        lines(read("hypotheses.txt")?),
        lines(read("references.txt")?),
        scores["ppl"].as_f64().unwrap_or(f64::NAN),
    ))
}

/// For each seed, the baseline (`run(false, seed)`) and the favoured model (`run(true, seed)`)
/// trained (or found) and compared on the test set with sacreBLEU's paired bootstrap.
pub fn paired(
    seeds: &[u64],
    run: impl Fn(bool, u64) -> Result<PathBuf, MeasureError>,
) -> Result<Vec<Paired>, MeasureError> {
    let mut rows = Vec::new();
    for &seed in seeds {
        let (base, favoured) = (tested(&run(false, seed)?)?, tested(&run(true, seed)?)?);
        let (bleu, p) = paired_bleu(&base.0, &favoured.0, &base.1)?;
        rows.push(Paired { seed, bleu, p, ppl: (base.2, favoured.2) });
    }
    Ok(rows)
}

/// The corpus BLEU of `base` and `other` against `refs`, and sacreBLEU's paired bootstrap
/// p-value of `other`'s difference (1,000 resamples, sacreBLEU's seed): the one test every BLEU
/// comparison of the course makes.
pub fn paired_bleu(
    base: &[String],
    other: &[String],
    refs: &[String],
) -> Result<((f64, f64), f64), MeasureError> {
    use s2s_eval::{BleuConfig, MetricConfig, PairedOptions, PairedTest, Seed};
    let opts = PairedOptions { test: PairedTest::Bootstrap, samples: 1000, seed: Seed::default() };
    let columns =
        s2s_eval::paired_test(&[base, other], &[refs], &[MetricConfig::Bleu(BleuConfig::default())], &opts)
            .map_err(MeasureError::PairedTest)?;
    let r = &columns[0].results;
    Ok(((r[0].score, r[1].score), r[1].p_value.unwrap_or(1.0)))
}

/// Whether a seed's favoured model is significantly better: higher BLEU with p < 0.05.
pub fn significant(r: &Paired) -> bool {
    r.bleu.1 > r.bleu.0 && r.p < 0.05
}

/// What [`judge_paired`] concludes.
pub struct Judged {
    /// The verdict by [`crate::by_seed`].
    pub verdict: crate::Verdict,
    /// Seed by seed, whether the criterion was met.
    pub seeds: Option<Vec<(u64, bool)>>,
    /// The figures in a sentence.
    pub because: String,
    /// Seed by seed, then the means.
    pub table: crate::Table,
}

/// The verdict, sentence and table of [`paired`] runs: the claim holds when the favoured model's
/// BLEU is higher for every seed, significantly (p < 0.05) for each.
pub fn judge_paired(rows: &[Paired], base: &str, favoured: &str) -> Judged {
    use crate::num;
    let n = rows.len() as f64;
    let mean = |f: &dyn Fn(&Paired) -> f64| rows.iter().map(f).sum::<f64>() / n;
    let (b, f) = (mean(&|r| r.bleu.0), mean(&|r| r.bleu.1));
    let higher = rows.iter().filter(|r| r.bleu.1 > r.bleu.0).count();
    let (verdict, seeds) = crate::by_seed(rows.iter().map(|r| (r.seed, significant(r))).collect());
    let significant = rows.iter().filter(|r| significant(r)).count();
    let because = format!(
        "mean test BLEU {} {base}, {} {favoured}; higher for {higher} of {} seeds, significantly (p < 0.05) for \
         {significant}",
        num(b),
        num(f),
        rows.len()
    );
    let mut table = crate::Table {
        header: vec![
            "seed".into(),
            format!("BLEU, {base}"),
            format!("BLEU, {favoured}"),
            "difference".into(),
            "paired bootstrap p".into(),
            format!("test perplexity, {base} / {favoured}"),
        ],
        rows: rows
            .iter()
            .map(|r| {
                vec![
                    r.seed.to_string(),
                    num(r.bleu.0),
                    num(r.bleu.1),
                    num(r.bleu.1 - r.bleu.0),
                    format!("{:.3}", r.p),
                    format!("{} / {}", num(r.ppl.0), num(r.ppl.1)),
                ]
            })
            .collect(),
    };
    table.rows.push(vec![
        "mean".into(),
        num(b),
        num(f),
        num(f - b),
        String::new(),
        format!("{} / {}", num(mean(&|r| r.ppl.0)), num(mean(&|r| r.ppl.1))),
    ]);
    Judged { verdict, seeds, because, table }
}

/// A finished run's tokenizers, its last checkpoint's model (the one its test scores: after its whole
/// budget) on `device`, and its test split (sources and references, one sentence a line).
pub fn load_final(
    dir: &std::path::Path,
    model: &ModelSpec,
    device: &Device,
) -> Result<(s2s_data::Tokenizers, s2s_models::Model, Vec<String>, Vec<String>), MeasureError> {
    let dir_buf = || dir.to_path_buf();
    let tok = s2s_data::Tokenizers::load(&dir.join("tokenizer"))
        .map_err(|source| MeasureError::Tokenizers { dir: dir_buf(), source })?;
    let last = s2s_train::checkpoint::Checkpoints::new(dir)
        .pointed("last")
        .map_err(|source| MeasureError::Checkpoint { dir: dir_buf(), source })?
        .ok_or_else(|| MeasureError::NoLastCheckpoint { dir: dir_buf() })?;
    let model = s2s_train::load_model(model, &tok, &last, device)
        .map_err(|source| MeasureError::Checkpoint { dir: dir_buf(), source })?;
    let read = |f: &str| {
        let path = dir.join("data").join(f);
        std::fs::read_to_string(&path)
            .map(|t| t.lines().map(String::from).collect::<Vec<_>>())
            .map_err(|source| MeasureError::io(&path, source))
    };
    Ok((tok, model, read("test.src")?, read("test.tgt")?))
}

/// Test BLEU by seed of [`paired`] runs, the baseline and the favoured model as two lines.
pub fn paired_figure(
    file: &str,
    caption: &str,
    rows: &[Paired],
    base: &str,
    favoured: &str,
) -> crate::Figure {
    super::points_figure(
        file,
        caption,
        "seed",
        "test BLEU (greedy)",
        vec![
            super::series(base, rows.iter().map(|r| (r.seed as f64, r.bleu.0)).collect()),
            super::series(favoured, rows.iter().map(|r| (r.seed as f64, r.bleu.1)).collect()),
        ],
    )
}
