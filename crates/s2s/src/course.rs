//! `s2s course`: the lecture notes' claims as experiments, each with its verdict.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand};
use s2s_course::{Budget, Knobs, Verdict};

use crate::out::outln;
use crate::slurm::{self, Plan, SlurmArgs};

/// The course's experiments.
#[derive(Subcommand, Debug)]
pub enum CourseCommand {
    /// List the claims that have an experiment: name, lecture section, claim.
    List,
    /// Run claims (all, or those named) and write the page: course.md, course.html, plots/.
    Run(RunArgs),
    /// One claim's training and measuring, its page left unwritten: what each Slurm task runs.
    #[command(hide = true)]
    RunClaim(RunArgs),
}

/// `s2s course run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Claims to run (`s2s course list`); none: every one.
    #[arg(value_name = "NAME")]
    names: Vec<String>,
    /// Fewer sizes and seeds: a claim shown in a lecture, in seconds.
    #[arg(long)]
    quick: bool,
    /// Where the page goes.
    #[arg(long, default_value = "course")]
    out: PathBuf,
    /// The seeds every claim is measured with, comma-separated [default: 1,2,3; 1 with --quick].
    /// A claim holds only when its criterion is met for each.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    seeds: Option<Vec<u64>>,
    /// Key size of the scaling claim's trained models, unscaled against scaled [default: 64].
    #[arg(long = "d-k")]
    d_k: Option<usize>,
    /// The exploding-gradient claim's high SGD rate; its control runs at a tenth [default: 5].
    #[arg(long, allow_negative_numbers = true)]
    rate: Option<f64>,
    /// The global norm the exploding-gradient claim clips at [default: 1].
    #[arg(long, allow_negative_numbers = true)]
    clip: Option<f64>,
    /// Head counts the heads claims compare, comma-separated, 4 among them [default: 1,2,4,8,16].
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    heads: Option<Vec<usize>>,
    /// The beam the beam-search claim judges against greedy search [default: 5].
    #[arg(long)]
    beam: Option<usize>,
    /// The length penalty α the beam-search claim compares with none [default: 1].
    #[arg(long, allow_negative_numbers = true)]
    alpha: Option<f64>,
    #[command(flatten)]
    slurm: SlurmArgs,
}

impl RunArgs {
    /// The flags this run was given apart from the claims, `--out` and `--slurm`'s: what every
    /// task and the judging job are given.
    fn flags(&self) -> Vec<String> {
        let list = |v: &[String]| v.join(",");
        let mut f = Vec::new();
        if self.quick {
            f.push("--quick".to_string());
        }
        let mut pair = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                f.push(format!("--{k}={v}"));
            }
        };
        pair("seeds", self.seeds.as_ref().map(|s| list(&s.iter().map(u64::to_string).collect::<Vec<_>>())));
        pair("d-k", self.d_k.map(|x| x.to_string()));
        pair("rate", self.rate.map(|x| x.to_string()));
        pair("clip", self.clip.map(|x| x.to_string()));
        pair("heads", self.heads.as_ref().map(|s| list(&s.iter().map(usize::to_string).collect::<Vec<_>>())));
        pair("beam", self.beam.map(|x| x.to_string()));
        pair("alpha", self.alpha.map(|x| x.to_string()));
        f
    }

    /// The knobs: those given, the budget's defaults for the others.
    fn knobs(&self, budget: Budget) -> Knobs {
        let d = Knobs::defaults(budget);
        Knobs {
            seeds: self.seeds.clone().unwrap_or(d.seeds),
            d_k: self.d_k.unwrap_or(d.d_k),
            rate: self.rate.unwrap_or(d.rate),
            clip: self.clip.unwrap_or(d.clip),
            heads: self.heads.clone().unwrap_or(d.heads),
            beam: self.beam.unwrap_or(d.beam),
            alpha: self.alpha.unwrap_or(d.alpha),
        }
    }
}

/// Runs `s2s course`.
pub fn run(c: CourseCommand) -> Result<()> {
    match c {
        CourseCommand::List => {
            for claim in s2s_course::claims() {
                outln!("{:<20} {}\n{:<20} ({})", claim.name, claim.statement, "", claim.lecture)?;
            }
            Ok(())
        }
        CourseCommand::Run(a) if a.slurm.slurm => submit(a),
        CourseCommand::RunClaim(a) => {
            let budget = if a.quick { Budget::Quick } else { Budget::Full };
            count_allocations();
            let knobs = a.knobs(budget);
            if let Some(why) = knobs.invalid() {
                bail!("{why}");
            }
            let [name] = a.names.as_slice() else { bail!("run-claim takes one claim") };
            let claim = s2s_course::claims()
                .into_iter()
                .find(|c| c.name == name.as_str())
                .with_context(|| format!("no claim named `{name}` (`s2s course list`)"))?;
            let ctx = s2s_course::Context { knobs, ..s2s_course::Context::new(budget, a.out.join("runs")) };
            let finding = (claim.run)(&ctx);
            if s2s_train::interrupt::stop_requested() {
                bail!("{name}: interrupted; the next submission resumes its runs");
            }
            // A claim that could not measure (a run that did not train, one another task holds)
            // leaves no marker: the judging job and the next submission try it again.
            if finding.table.header.is_empty() && finding.table.rows.is_empty() {
                bail!("{name}: not measured: {}: {}", finding.because, finding.not_measured);
            }
            eprintln!("{name}: {}: {}", finding.verdict.words(), finding.because);
            let done = slurm::claim_done(&a.out, name);
            s2s_data::create_dir_all(done.parent().expect("under slurm/claims"))?;
            s2s_data::write_atomic(&done, b"")?;
            Ok(())
        }
        CourseCommand::Run(a) => {
            let budget = if a.quick { Budget::Quick } else { Budget::Full };
            count_allocations();
            let knobs = a.knobs(budget);
            let (done, page) =
                s2s_course::run(&a.names, budget, &knobs, &a.out, &|line| eprintln!("{line}"))?;
            let held = done.iter().filter(|(_, f)| f.verdict == Verdict::Holds).count();
            eprintln!("{held} of {} claims hold; the page: {}", done.len(), page.display());
            Ok(())
        }
    }
}

/// The complexity claim's peak memory, from the global allocator's count.
fn count_allocations() {
    #[cfg(not(any(feature = "jemalloc", feature = "mimalloc")))]
    s2s_course::probes::count_allocations_with(s2s_course::probes::AllocationCounter {
        count_from_now: || crate::GLOBAL.count_from_now(),
        peak_bytes: || crate::GLOBAL.peak_bytes(),
    });
}

/// `s2s course run --slurm`: one task per claim not yet measured (`course run-claim`, its runs
/// into the page's `runs/`), then the judging job — `course run` with the same claims and
/// flags, which finds the tasks' runs finished and writes the page.
fn submit(a: RunArgs) -> Result<()> {
    if !a.slurm.dry_run {
        slurm::check_sbatch()?;
    }
    if a.slurm.gpus.is_some() {
        bail!("--gpus: the course trains on the CPU");
    }
    let budget = if a.quick { Budget::Quick } else { Budget::Full };
    if let Some(why) = a.knobs(budget).invalid() {
        bail!("{why}");
    }
    let all = s2s_course::claims();
    for n in &a.names {
        if !all.iter().any(|c| c.name == n.as_str()) {
            bail!("no claim named `{n}` (`s2s course list`)");
        }
    }
    let picked: Vec<String> = all
        .iter()
        .filter(|c| a.names.is_empty() || a.names.iter().any(|n| n.as_str() == c.name))
        .map(|c| c.name.to_string())
        .collect();
    let root = if a.slurm.dry_run {
        std::path::absolute(&a.out).with_context(|| format!("resolving {}", a.out.display()))?
    } else {
        slurm::absolute_dir(&a.out)?
    };
    slurm::warn_if_local(&root);
    let tasks: Vec<String> =
        picked.iter().filter(|n| !slurm::claim_done(&root, n).exists()).cloned().collect();
    let exe = std::env::current_exe()
        .context("finding this program's path for the batch scripts")?
        .display()
        .to_string();
    let root_s = root.display().to_string();
    let head = vec![exe.clone(), "--kernels".into(), s2s_kernels::mode::get().to_string(), "course".into()];
    let mut task_command = head.clone();
    task_command.extend(["run-claim".into(), "$name".into(), "--out".into(), root_s.clone()]);
    task_command.extend(a.flags());
    let mut final_command = head;
    final_command.push("run".into());
    final_command.extend(a.names.iter().cloned());
    final_command.extend(["--out".into(), root_s]);
    final_command.extend(a.flags());
    eprintln!("course: {} of {} claims to submit into {}", tasks.len(), picked.len(), root.display());
    let plan = Plan {
        kind: "course",
        name: "course".into(),
        root,
        tasks,
        task_command,
        log_in_run_dir: false,
        final_command,
        final_what: "the judging and the page",
        gpus: None,
    };
    slurm::submit(plan, &a.slurm)
}
