//! `s2s course`: the lecture notes' claims as experiments, each with its verdict.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use s2s_course::{Budget, Verdict};

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
}

/// Runs `s2s course`.
pub fn run(c: CourseCommand) -> Result<()> {
    match c {
        CourseCommand::List => {
            for claim in s2s_course::claims() {
                println!("{:<20} {}\n{:<20} ({})", claim.name, claim.statement, "", claim.lecture);
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
            let (done, page) = s2s_course::run(&a.names, budget, &a.out, &|line| eprintln!("{line}"))?;
            let held = done.iter().filter(|(_, f)| f.verdict == Verdict::Holds).count();
            eprintln!("{held} of {} claims hold; the page: {}", done.len(), page.display());
            Ok(())
        }
    }
}
