//! `s2s course`: the lecture notes' claims as experiments, each with its verdict.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use s2s_course::{Budget, Knobs, Verdict};

use crate::out::outln;

/// The course's experiments.
#[derive(Subcommand, Debug)]
pub enum CourseCommand {
    /// List the claims that have an experiment: name, lecture section, claim.
    List,
    /// Run claims (all, or those named) and write the page: course.md, course.html, plots/.
    Run(RunArgs),
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
}

impl RunArgs {
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
        CourseCommand::Run(a) => {
            let budget = if a.quick { Budget::Quick } else { Budget::Full };
            // The complexity claim's peak memory, from the global allocator's count.
            #[cfg(not(any(feature = "jemalloc", feature = "mimalloc")))]
            s2s_course::probes::count_allocations_with(s2s_course::probes::AllocationCounter {
                count_from_now: || crate::GLOBAL.count_from_now(),
                peak_bytes: || crate::GLOBAL.peak_bytes(),
            });
            let knobs = a.knobs(budget);
            let (done, page) =
                s2s_course::run(&a.names, budget, &knobs, &a.out, &|line| eprintln!("{line}"))?;
            let held = done.iter().filter(|(_, f)| f.verdict == Verdict::Holds).count();
            eprintln!("{held} of {} claims hold; the page: {}", done.len(), page.display());
            Ok(())
        }
    }
}
