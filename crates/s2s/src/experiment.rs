//! `s2s experiment run FILE` and `s2s report DIR`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use s2s_train::device::{DeviceChoice, select_many};
use s2s_train::experiment::{Experiment, finished, run_experiment, train_one, write_index_locked};
use s2s_train::lock::DirLock;

use crate::out::outln;
use crate::slurm::{self, Plan, SlurmArgs};

/// Experiments: train and compare a list (or grid) of models.
#[derive(Subcommand, Debug)]
pub enum ExperimentCommand {
    /// Train every model of an experiment file in turn, evaluate each on the test split and
    /// write runs/NAME/{results.csv, results.json, report.md, report.html, plots/}. Finished
    /// models are skipped on a rerun; an interrupted one resumes from its last checkpoint.
    Run(RunArgs),
    /// What a Slurm submission's runs are doing: finished, queued, running, failed (with the
    /// last lines of each failure's log), from the run directories and the queue.
    Status(DirArgs),
    /// Cancel a Slurm submission's jobs (`scancel`): a running task checkpoints and stops, and
    /// the next `--slurm` submission resumes it.
    Cancel(DirArgs),
    /// One run of an experiment file, as `run` trains it: what each Slurm task runs.
    #[command(hide = true)]
    RunOne(RunOneArgs),
}

/// `s2s experiment status|cancel`.
#[derive(Args, Debug)]
pub struct DirArgs {
    /// The experiment's run directory (runs/NAME, or --out).
    dir: PathBuf,
}

/// `s2s experiment run-one`.
#[derive(Args, Debug)]
pub struct RunOneArgs {
    /// The experiment file.
    file: PathBuf,
    /// The experiment's run directory.
    #[arg(long)]
    out: PathBuf,
    /// The run (its directory's name).
    #[arg(long)]
    run: String,
    /// Device: auto, cpu or wgpu.
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    tokenizer_files: crate::args::TokenizerFileArgs,
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
    slurm: SlurmArgs,
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
        ExperimentCommand::Run(a) if a.slurm.slurm => submit(a),
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
        ExperimentCommand::RunOne(a) => {
            let mut exp = Experiment::load(&a.file)?;
            a.tokenizer_files.apply(&mut exp.tokenizer, |_, e| e.to_string())?;
            let (devices, name) = select_many(a.device, exp.max_devices())?;
            let out = train_one(&exp, &a.out, &a.run, &devices, &name, !a.quiet)?;
            if out.is_some_and(|o| o.train.interrupted) {
                bail!(
                    "{}: interrupted after a checkpoint; the next submission resumes it",
                    a.out.join(&a.run).display()
                );
            }
            Ok(())
        }
        ExperimentCommand::Status(a) => {
            let names = run_names(&a.dir)?;
            let course = slurm::Jobs::read(&a.dir)?.kind == "course";
            let dir = a.dir.clone();
            slurm::status(&a.dir, names, &|n| {
                if course { slurm::claim_done(&dir, n).exists() } else { finished(&dir.join(n)) }
            })
        }
        ExperimentCommand::Cancel(a) => slurm::cancel(&a.dir),
    }
}

/// The runs (or, for a course's folder, the claims) a directory's submissions name: from its
/// `experiment.json`, else from its jobs record.
fn run_names(dir: &std::path::Path) -> Result<Vec<String>> {
    let index = dir.join("experiment.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).with_context(|| format!("reading {}", index.display()))?;
        let index: s2s_report::ExperimentIndex = serde_json::from_str(&text)
            .with_context(|| format!("{}: not an experiment index", index.display()))?;
        return Ok(index.entries.into_iter().map(|e| e.dir).collect());
    }
    let jobs = slurm::Jobs::read(dir)?;
    if jobs.submissions.is_empty() {
        bail!(
            "{}: neither an experiment's run directory (no experiment.json) nor a Slurm submission's \
             folder (no slurm/jobs.json)",
            dir.display()
        );
    }
    let mut names: Vec<String> = Vec::new();
    for s in &jobs.submissions {
        for t in &s.tasks {
            if !names.contains(t) {
                names.push(t.clone());
            }
        }
    }
    Ok(names)
}

/// `s2s experiment run FILE --slurm`: the unfinished runs as an array of tasks, each running
/// `s2s experiment run-one` with this run's flags, then `s2s report` after them.
fn submit(a: RunArgs) -> Result<()> {
    if !a.slurm.dry_run {
        slurm::check_sbatch()?;
    }
    let mut exp = Experiment::load(&a.file)?;
    // Checked here, before anything is submitted; each task is given the same files.
    a.tokenizer_files.apply(&mut exp.tokenizer, |_, e| e.to_string())?;
    let root = a.out.clone().unwrap_or_else(|| PathBuf::from("runs").join(&exp.name));
    let device = match (a.device, a.slurm.gpus) {
        (DeviceChoice::Cpu, Some(_)) => bail!("--gpus with --device cpu: drop one of them"),
        (DeviceChoice::Cpu, None) | (DeviceChoice::Auto, None) => "cpu",
        (DeviceChoice::Wgpu, _) | (DeviceChoice::Auto, Some(_)) => "wgpu",
    };
    let gpus = (device == "wgpu").then(|| a.slurm.gpus.unwrap_or(exp.max_devices() as usize));
    if device == "cpu" && exp.max_devices() > 1 {
        bail!(
            "{}: a run trains on {} devices: give the tasks GPUs (--gpus N or --device wgpu)",
            a.file.display(),
            exp.max_devices()
        );
    }
    let entries = exp.entries();
    if let Some(o) = a.only.as_deref() {
        if !entries.iter().any(|(e, _)| e.model == o || e.name == o) {
            let names: Vec<&str> = exp.models.iter().map(|(n, _, _)| n.as_str()).collect();
            bail!("--only {o}: no such model (models: {})", names.join(", "));
        }
    }
    // Dry: nothing written, the paths as they would be.
    let root = if a.slurm.dry_run {
        std::path::absolute(&root).with_context(|| format!("resolving {}", root.display()))?
    } else {
        write_index_locked(&exp, &root)?;
        slurm::absolute_dir(&root)?
    };
    slurm::warn_if_local(&root);
    let file = slurm::absolute_file(&a.file)?;
    let tasks: Vec<String> = entries
        .iter()
        .filter(|(e, _)| a.only.as_deref().is_none_or(|o| e.model == o || e.name == o))
        .filter(|(e, _)| !finished(&root.join(&e.dir)))
        .map(|(e, _)| e.dir.clone())
        .collect();
    let exe = std::env::current_exe().context("finding this program's path for the batch scripts")?;
    let exe = exe.display().to_string();
    let root_s = root.display().to_string();
    let kernels = s2s_kernels::mode::get().to_string();
    let mut task_command: Vec<String> = [
        exe.as_str(),
        "--kernels",
        &kernels,
        "experiment",
        "run-one",
        &file.display().to_string(),
        "--out",
        &root_s,
        "--run",
        "$name",
        "--device",
        device,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // A log file is no terminal: no progress bars, as with --quiet.
    task_command.push("--quiet".into());
    // Tokenizer files given as flags travel to each task, as absolute paths.
    let t = &a.tokenizer_files;
    for (flag, path) in [
        ("--tokenizer", &t.tokenizer),
        ("--src-tokenizer", &t.src_tokenizer),
        ("--tgt-tokenizer", &t.tgt_tokenizer),
    ] {
        if let Some(p) = path {
            task_command.push(flag.into());
            task_command.push(slurm::absolute_file(p)?.display().to_string());
        }
    }
    eprintln!(
        "experiment {}: {} of {} runs to submit into {} · device: {device}",
        exp.name,
        tasks.len(),
        entries.len(),
        root.display()
    );
    let plan = Plan {
        kind: "experiment",
        name: exp.name.clone(),
        root: root.clone(),
        tasks,
        task_command,
        log_in_run_dir: true,
        final_command: vec![exe, "report".into(), root_s],
        final_what: "the report",
        gpus,
    };
    if plan.tasks.is_empty() && !a.slurm.dry_run {
        eprintln!("every run is finished: writing the report here");
        let _lock = DirLock::acquire(&root)?;
        let written =
            s2s_report::write_report(&root).with_context(|| format!("reporting {}", root.display()))?;
        for p in written.iter().filter(|p| p.extension().is_some_and(|e| e == "md" || e == "html")) {
            outln!("{}", p.display())?;
        }
        return Ok(());
    }
    slurm::submit(plan, &a.slurm)
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
