//! The lecture notes (`../shared/course-notes/`) as experiments: each claim a function that
//! measures it on the CPU with a budget in steps and sizes (so its figures do not depend on
//! the machine's speed, except where the claim is about time), and judges it by a criterion
//! stated beside the verdict. `s2s course list | run [NAME…] [--quick]` runs them and writes
//! one page (`course.md`, `course.html`, `plots/*.svg`).
//!
//! A claim that does not reproduce is reported as such, with its figures: a finding, not a
//! failure.

pub mod claims;
pub mod probes;
mod report;

use std::path::{Path, PathBuf};

pub use report::write_report;

/// How much each experiment measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// The full course (≤ 90 minutes on 2 CPU cores).
    Full,
    /// Fewer sizes and seeds: one claim shown in a lecture.
    Quick,
}

impl Budget {
    /// `full` or `quick`.
    pub fn pick<T>(self, full: T, quick: T) -> T {
        match self {
            Budget::Full => full,
            Budget::Quick => quick,
        }
    }
}

/// Whether the measurement supports the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The criterion is met.
    Holds,
    /// The criterion is not met: reported with its figures.
    DoesNotHold,
    /// What the course can measure here cannot decide the claim (a claim about hardware this
    /// machine does not have): the figures are shown, not judged.
    NotTestable,
}

impl Verdict {
    /// The verdict in words: `holds`, `does not hold here`, `not testable here`.
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::DoesNotHold => "does not hold here",
            Verdict::NotTestable => "not testable here",
        }
    }
}

/// A table of a finding: a header and rows of cells.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Table {
    /// Column names.
    pub header: Vec<String>,
    /// Rows, each as long as the header.
    pub rows: Vec<Vec<String>>,
}

/// A figure: a file name under `plots/` and its SVG.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Figure {
    /// `NAME.svg`.
    pub file: String,
    /// What it shows (alt text and caption).
    pub caption: String,
    /// The SVG document.
    #[serde(skip)]
    pub svg: String,
}

/// What an experiment measured and concluded.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Finding {
    /// The verdict, computed from the figures.
    pub verdict: Verdict,
    /// The figures behind it, seed by seed ("seed 1: the RNN's gradient shrinks 8× per 10 steps…").
    pub because: String,
    /// The verdict's reason in one line, for the summary table (`because` is the page's full
    /// account).
    pub reason: String,
    /// What part of the claim is not measured here, said plainly (empty when none).
    pub not_measured: String,
    /// The numbers.
    pub table: Table,
    /// Further tables, each after the first (a second measurement of the same claim).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub more: Vec<Table>,
    /// The plots.
    pub figures: Vec<Figure>,
    /// The runs it trained (or found trained), each with the steps it trained: every course
    /// run trains its stated budget (no early stopping), and the page shows that it did.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<TrainedRun>,
    /// Seed by seed, whether the criterion was met (the course's one rule, [`by_seed`]); `None`
    /// for a claim with nothing random to seed (BLEU's arithmetic) or not judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seeds: Option<Vec<(u64, bool)>>,
}

/// The course's one judging rule: a claim is measured once per seed — the same seeds for every
/// claim ([`Knobs::seeds`]) — and holds only when its criterion is met for every one of them;
/// where the criterion compares test BLEU, a seed meets it only with sacreBLEU's paired
/// bootstrap p < 0.05. Returns the verdict and the per-seed record a [`Finding`] keeps.
pub fn by_seed(met: Vec<(u64, bool)>) -> (Verdict, Option<Vec<(u64, bool)>>) {
    let holds = !met.is_empty() && met.iter().all(|m| m.1);
    (if holds { Verdict::Holds } else { Verdict::DoesNotHold }, Some(met))
}

/// The rule in a sentence, as the page states it.
pub const RULE: &str = "One rule judges every claim: each is measured once per seed, with the same seeds for \
                        every claim, and holds only when its criterion is met for every seed; where the criterion \
                        compares test BLEU, a seed meets it only with sacreBLEU's paired bootstrap p < 0.05 \
                        (1,000 resamples). Two claims are not judged seed by seed, and say why: one is not \
                        testable on this machine, the other pools every seed's models.";

/// The knobs a student turns (`s2s course run --seeds 1,2,3 --d-k 64 --rate 5 --clip 1 --heads
/// 1,2,4,8,16 --beam 5 --alpha 1`): each claim reads those it varies, and a run trained under
/// another value is named by it, so runs of different knobs never mix.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Knobs {
    /// The seeds every claim is measured with (1, 2, 3; 1 in quick mode).
    pub seeds: Vec<u64>,
    /// The key size the scaling claim trains with, unscaled against scaled (64).
    pub d_k: usize,
    /// The exploding-gradient claim's high SGD rate (5); its control runs at a tenth of it.
    pub rate: f64,
    /// The global norm it clips at (1).
    pub clip: f64,
    /// The head counts the heads claims compare (1, 2, 4, 8, 16; the course's Transformer has 4).
    pub heads: Vec<usize>,
    /// The beam the beam-search claim judges against greedy search (5).
    pub beam: usize,
    /// The length penalty α it compares with none (1).
    pub alpha: f64,
}

impl Knobs {
    /// The defaults of `budget`.
    pub fn defaults(budget: Budget) -> Self {
        Self {
            seeds: budget.pick(vec![1, 2, 3], vec![1]),
            d_k: 64,
            rate: 5.0,
            clip: 1.0,
            heads: vec![1, 2, 4, 8, 16],
            beam: 5,
            alpha: 1.0,
        }
    }

    /// Why these knobs cannot run, in a sentence naming the knob and its remedy (`None`: they can).
    pub fn invalid(&self) -> Option<String> {
        let finite = |x: f64| x.is_finite() && x > 0.0;
        if self.seeds.is_empty() {
            Some("--seeds: give at least one seed (e.g. --seeds 1,2,3)".into())
        } else if self.seeds.iter().enumerate().any(|(i, s)| self.seeds[..i].contains(s)) {
            Some("--seeds: a seed is named twice".into())
        } else if !(1..=512).contains(&self.d_k) {
            Some(format!("--d-k {}: give a key size from 1 to 512", self.d_k))
        } else if !finite(self.rate) {
            Some(format!("--rate {}: give a positive learning rate", self.rate))
        } else if !finite(self.clip) {
            Some(format!("--clip {}: give a positive norm", self.clip))
        } else if self.heads.is_empty() || self.heads.iter().any(|&h| h == 0 || 64 % h != 0) {
            Some("--heads: give head counts that divide d_model 64 (1, 2, 4, 8, 16, 32 or 64)".into())
        } else if !self.heads.contains(&4) {
            Some("--heads: include 4, the course's Transformer, which the others are compared with".into())
        } else if !(2..=64).contains(&self.beam) {
            Some(format!("--beam {}: give a beam from 2 to 64", self.beam))
        } else if !(self.alpha.is_finite() && self.alpha >= 0.0) {
            Some(format!("--alpha {}: give a length penalty of 0 or more", self.alpha))
        } else {
            None
        }
    }

    /// The options that set these knobs where they differ from `budget`'s defaults (` --seeds
    /// 4,7 --beam 10`), for the page's "regenerate with" command.
    pub fn flags(&self, budget: Budget) -> String {
        let d = Self::defaults(budget);
        let list = |v: &[u64]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        let mut f = String::new();
        if self.seeds != d.seeds {
            f += &format!(" --seeds {}", list(&self.seeds));
        }
        if self.d_k != d.d_k {
            f += &format!(" --d-k {}", self.d_k);
        }
        if self.rate != d.rate {
            f += &format!(" --rate {}", self.rate);
        }
        if self.clip != d.clip {
            f += &format!(" --clip {}", self.clip);
        }
        if self.heads != d.heads {
            f += &format!(" --heads {}", list(&self.heads.iter().map(|&h| h as u64).collect::<Vec<_>>()));
        }
        if self.beam != d.beam {
            f += &format!(" --beam {}", self.beam);
        }
        if self.alpha != d.alpha {
            f += &format!(" --alpha {}", self.alpha);
        }
        f
    }

    /// The knobs in a sentence, as the page says them.
    pub fn said(&self) -> String {
        let list = |v: &[u64]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        format!(
            "seeds {}; d_k {}; rate {}, clipped at {}; heads {}; beam {}, α {}",
            list(&self.seeds),
            self.d_k,
            self.rate,
            self.clip,
            list(&self.heads.iter().map(|&h| h as u64).collect::<Vec<_>>()),
            self.beam,
            self.alpha
        )
    }
}

/// `name` for seed `seed`: the first seed's run keeps the plain name (the course's runs of
/// seed 1 were named before seeds were), the others get `-seed{seed}`.
pub fn seeded(name: &str, seed: u64) -> String {
    if seed == 1 { name.to_string() } else { format!("{name}-seed{seed}") }
}

/// A run a claim trained, or found trained by an earlier claim or course run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TrainedRun {
    /// Its directory's name under the course's `runs/`.
    pub name: String,
    /// Optimizer steps it trained (its last validation's step).
    pub steps: u64,
    /// The steps its configuration asked for.
    pub budget: u64,
}

/// What stopped an experiment from measuring. A claim reports it as its finding
/// ([`Finding::not_run`]): the course goes on with the other claims.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// Training one of the course's runs (or finishing or testing it).
    #[error("training the course's model in {dir}: {source}")]
    Training {
        /// The run directory.
        dir: PathBuf,
        /// What stopped training.
        source: s2s_train::TrainError,
    },
    /// A trained run's tokenizers.
    #[error("loading the tokenizers of {dir}: {source}")]
    Tokenizers {
        /// The run directory.
        dir: PathBuf,
        /// What the data layer said.
        source: s2s_data::DataError,
    },
    /// A trained run that points at no last checkpoint.
    #[error("{dir}: no last checkpoint")]
    NoLastCheckpoint {
        /// The run directory.
        dir: PathBuf,
    },
    /// A run whose data has no gold alignment (not the built-in pair).
    #[error("{dir}: no gold alignment (the alignment claim reads the built-in pair's)")]
    NoGoldAlignment {
        /// The run directory.
        dir: PathBuf,
    },
    /// A model that could not be initialised from its specification.
    #[error("initialising the model of {dir}: {reason}")]
    Init {
        /// The run directory.
        dir: PathBuf,
        /// What the model said.
        reason: String,
    },
    /// Finding or loading a run's last checkpoint.
    #[error("loading the last checkpoint of {dir}: {source}")]
    Checkpoint {
        /// The run directory.
        dir: PathBuf,
        /// Why it did not load.
        source: s2s_train::TrainError,
    },
    /// A run whose model is of another kind than the claim reads.
    #[error("{dir}: the model is not {expected}")]
    ModelKind {
        /// The run directory.
        dir: PathBuf,
        /// The kind the claim reads.
        expected: &'static str,
    },
    /// A finished run without test scores (`test/scores.json`).
    #[error("{dir}: no test scores")]
    NoTestScores {
        /// The run directory.
        dir: PathBuf,
    },
    /// A run's test split holds no source as long as the claim reads.
    #[error("{dir}: no test source of {len} tokens")]
    NoLongSource {
        /// The run directory.
        dir: PathBuf,
        /// The length asked for, in tokens.
        len: usize,
    },
    /// A run's file that could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A run's JSON file that does not parse.
    #[error("{path}: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The error.
        source: serde_json::Error,
    },
    /// sacreBLEU's paired test of the runs' hypotheses.
    #[error("the paired test: {0}")]
    PairedTest(#[source] s2s_eval::EvalError),
}

impl MeasureError {
    /// Wraps an I/O error with its path.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        MeasureError::Io { path: path.to_path_buf(), source }
    }
}

/// Why an experiment could not measure, as the error its helpers return: what failed (said in
/// the finding) and its cause, which become [`Finding::not_run`]'s finding.
#[derive(Debug)]
pub struct NotRun {
    /// What failed, in the finding's words ("the runs did not train").
    pub because: &'static str,
    /// The cause.
    pub why: MeasureError,
}

impl NotRun {
    /// `because` with its cause.
    pub fn new(because: &'static str, why: MeasureError) -> Self {
        Self { because, why }
    }
}

impl From<NotRun> for Finding {
    fn from(n: NotRun) -> Self {
        Finding::not_run(n.because, n.why)
    }
}

impl Finding {
    /// The finding of an experiment that could not measure (`because`, the cause in `why`).
    pub fn not_run(because: &str, why: impl std::fmt::Display) -> Self {
        Self {
            verdict: Verdict::DoesNotHold,
            because: because.into(),
            reason: because.into(),
            not_measured: why.to_string(),
            table: Table::default(),
            more: Vec::new(),
            figures: vec![],
            runs: Vec::new(),
            seeds: None,
        }
    }
}

/// One claim of the lecture notes and the experiment that tests it.
#[derive(Debug, Clone, Copy)]
pub struct Claim {
    /// Short name (`s2s course run NAME`).
    pub name: &'static str,
    /// The claim in a sentence, in our words.
    pub statement: &'static str,
    /// Why it matters, in two sentences a student reads before the figures.
    pub why: &'static str,
    /// Where the notes make it: `file § section`.
    pub lecture: &'static str,
    /// The rule the verdict follows.
    pub criterion: &'static str,
    /// What the experiment does, in a sentence.
    pub method: &'static str,
    /// Runs it.
    pub run: fn(&Context) -> Finding,
}

/// What an experiment gets: its budget, and a directory for what claims share (the course's
/// trained model, `runs/`).
#[derive(Debug, Clone)]
pub struct Context {
    /// How much to measure.
    pub budget: Budget,
    /// Where shared runs go (kept: a user can translate with them).
    pub work: PathBuf,
    /// The runs trained (or found) for the claim being measured, in order
    /// (`claims::trained::train` notes each; [`run`] moves them into the finding).
    pub trained: std::cell::RefCell<Vec<TrainedRun>>,
    /// The knobs the student set (or their defaults).
    pub knobs: Knobs,
}

impl Context {
    /// A claim's context: `budget`, shared runs under `work`, no run trained yet, default knobs.
    pub fn new(budget: Budget, work: PathBuf) -> Self {
        Self { knobs: Knobs::defaults(budget), budget, work, trained: Default::default() }
    }

    /// The seeds every claim is measured with.
    pub fn seeds(&self) -> &[u64] {
        &self.knobs.seeds
    }
}

/// Every claim with an experiment, in lecture order.
pub fn claims() -> Vec<Claim> {
    vec![
        claims::vanishing::CLAIM,
        claims::memory::CLAIM,
        claims::bottleneck::CLAIM,
        claims::exploding::CLAIM,
        claims::word_order::CLAIM,
        claims::scores::CLAIM,
        claims::alignment::CLAIM,
        claims::beam::CLAIM,
        claims::causal::CLAIM,
        claims::scaling::CLAIM,
        claims::scale_invariance::CLAIM,
        claims::heads::CLAIM,
        claims::specialise::CLAIM,
        claims::head_removal::CLAIM,
        claims::permutation::CLAIM,
        claims::complexity::CLAIM,
        claims::parallel::CLAIM,
        claims::bidirectional::CLAIM,
        // Last: it pools the models the claims above trained.
        claims::ppl_bleu::CLAIM,
    ]
}

/// What went wrong running the course.
#[derive(Debug, thiserror::Error)]
pub enum CourseError {
    /// A name that is no claim's.
    #[error("no claim named `{0}`; `s2s course list` shows them")]
    Unknown(String),
    /// Writing the report.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Knobs that cannot run (`--heads 3`): the sentence names the knob and its remedy.
    #[error("{0}")]
    Knobs(String),
    /// The output folder is being written by another process, or cannot be locked.
    #[error(transparent)]
    Lock(#[from] s2s_train::lock::LockError),
    /// A stop was asked for (Ctrl-C, SIGTERM) while a claim ran: its figures are not judged.
    #[error(
        "interrupted during `{claim}`: the step under way was finished and the models trained so far are kept in {}; run the same command again to resume (the page was not rewritten)",
        runs.display()
    )]
    Interrupted {
        /// The claim that was running.
        claim: &'static str,
        /// Where the trained models are.
        runs: PathBuf,
    },
}

/// Runs the claims named (all when `names` is empty) and writes the page into `out`, locked
/// throughout; `progress` hears each claim as it starts and ends. Returns the findings and the
/// page's path.
pub fn run(
    names: &[String],
    budget: Budget,
    knobs: &Knobs,
    out: &Path,
    progress: &dyn Fn(&str),
) -> Result<(Vec<(Claim, Finding)>, PathBuf), CourseError> {
    if let Some(why) = knobs.invalid() {
        return Err(CourseError::Knobs(why));
    }
    let all = claims();
    let picked: Vec<Claim> = if names.is_empty() {
        all
    } else {
        names
            .iter()
            .map(|n| all.iter().find(|c| c.name == n).copied().ok_or_else(|| CourseError::Unknown(n.clone())))
            .collect::<Result<_, _>>()?
    };
    // One course at a time writes `out` (its runs are locked one by one as they train).
    let _lock = s2s_train::lock::DirLock::create(out)?;
    let mut done = Vec::new();
    for (i, claim) in picked.iter().enumerate() {
        progress(&format!("[{}/{}] {}: {}", i + 1, picked.len(), claim.name, claim.statement));
        let t0 = std::time::Instant::now();
        let ctx = Context { knobs: knobs.clone(), ..Context::new(budget, out.join("runs")) };
        let mut finding = (claim.run)(&ctx);
        finding.runs = ctx.trained.take();
        // A training stopped by Ctrl-C returns early: a finding from it would judge a model
        // that did not train to its budget.
        if s2s_train::interrupt::stop_requested() {
            return Err(CourseError::Interrupted { claim: claim.name, runs: out.join("runs") });
        }
        progress(&format!(
            "  {} in {:.0} s: {}",
            finding.verdict.words(),
            t0.elapsed().as_secs_f64(),
            finding.because
        ));
        done.push((*claim, finding));
    }
    let page = write_report(out, &done, budget, knobs)?;
    Ok((done, page))
}

/// The range of `v` in [`num`]s: `a–b`, or one number when they are equal (or there is one).
pub fn span(v: impl IntoIterator<Item = f64>) -> String {
    let (lo, hi) =
        v.into_iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)));
    if !lo.is_finite() && !hi.is_finite() {
        "–".into()
    } else if num(lo) == num(hi) {
        num(lo)
    } else {
        format!("{}–{}", num(lo), num(hi))
    }
}

/// `x` with 3 significant digits, for tables.
pub fn num(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let mag = x.abs().log10().floor() as i32;
    if (-3..5).contains(&mag) {
        let decimals = (2 - mag).max(0) as usize;
        format!("{x:.decimals$}")
    } else {
        format!("{x:.2e}")
    }
}
