//! `s2s experiment run FILE` and `s2s report DIR`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use s2s_train::device::{DeviceChoice, select_many};
use s2s_train::experiment::{Experiment, run_experiment};
use s2s_train::lock::DirLock;

use crate::out::outln;

/// Experiments: train and compare a list (or grid) of models.
#[derive(Subcommand, Debug)]
pub enum ExperimentCommand {
    /// Train every model of an experiment file in turn, evaluate each on the test split and
    /// write runs/NAME/{results.csv, results.json, report.md, report.html, plots/}. Finished
    /// models are skipped on a rerun; an interrupted one resumes from its last checkpoint.
    Run(RunArgs),
}

/// `s2s experiment run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The experiment file (TOML), e.g. experiments/quickstart.toml.
    file: PathBuf,
    /// Only this model (its name in the report).
    #[arg(long)]
    only: Option<String>,
    /// Where the runs go (default: runs/NAME).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Device: auto, cpu or wgpu.
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    tokenizer_files: crate::args::TokenizerFileArgs,
}

/// `s2s report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// An experiment's run directory (runs/NAME).
    dir: PathBuf,
}

/// Runs `s2s experiment ...`.
pub fn run(c: ExperimentCommand) -> Result<()> {
    match c {
        ExperimentCommand::Run(a) => {
            let mut exp = Experiment::load(&a.file)?;
            // The file's [tokenizer] keys were read by `load`; flags given replace them.
            a.tokenizer_files.apply(&mut exp.tokenizer, |_, e| e.to_string())?;
            let root = a.out.clone().unwrap_or_else(|| PathBuf::from("runs").join(&exp.name));
            let (devices, name) = select_many(a.device, exp.max_devices())?;
            eprintln!(
                "experiment {}: {} runs into {} · device: {name}",
                exp.name,
                exp.entries().len(),
                root.display()
            );
            let started = std::time::Instant::now();
            let written = run_experiment(&exp, &root, &devices, &name, a.only.as_deref(), !a.quiet)?;
            eprintln!("done in {:.1} min", started.elapsed().as_secs_f64() / 60.0);
            for p in written.iter().filter(|p| p.extension().is_some_and(|e| e == "md" || e == "html")) {
                outln!("{}", p.display())?;
            }
            Ok(())
        }
    }
}

/// Runs `s2s report DIR`.
pub fn report(a: ReportArgs) -> Result<()> {
    // It rewrites the experiment's report files: not while `experiment run` writes them. A
    // directory without an index is refused by the report itself, with nothing written.
    let _lock = a.dir.join("experiment.json").is_file().then(|| DirLock::acquire(&a.dir)).transpose()?;
    let written =
        s2s_report::write_report(&a.dir).with_context(|| format!("reporting {}", a.dir.display()))?;
    for p in written.iter().filter(|p| p.extension().is_some_and(|e| e == "md" || e == "html")) {
        outln!("{}", p.display())?;
    }
    Ok(())
}
