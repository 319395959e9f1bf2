//! Grids on a Slurm cluster: `--slurm` on `experiment run` and `course run` writes two batch
//! scripts — an array with one task per unfinished run (or claim), each calling this same
//! binary as a local run would train that run, and a report (or judging) job that depends on
//! the array (`afterany`) — submits them with `sbatch` and records the job ids in
//! `DIR/slurm/jobs.json`, which `experiment status` and `experiment cancel` read. Nothing
//! here trains: the tasks run `s2s experiment run-one` / `s2s course run-claim`, which call the
//! functions a local run calls.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::{Deserialize, Serialize};

use crate::out::outln;

/// `--slurm` and the resources its tasks ask for.
#[derive(Args, Debug, Clone, Default)]
pub struct SlurmArgs {
    /// Submit to Slurm instead of training here: one array task per unfinished run, then a
    /// job that depends on the array (`afterany`) and writes the report; prints the job ids.
    /// See docs/scaling.md.
    #[arg(long)]
    pub slurm: bool,
    /// With --slurm: print the batch scripts and the sbatch commands, submit nothing.
    #[arg(long, requires = "slurm")]
    pub dry_run: bool,
    /// With --slurm: the partition (sbatch --partition).
    #[arg(long, requires = "slurm")]
    pub partition: Option<String>,
    /// With --slurm: each task's time limit, as sbatch takes it (`90`, `2:00:00`, `1-0`).
    #[arg(long, requires = "slurm")]
    pub time: Option<String>,
    /// With --slurm: CPUs per task, also its training threads (RAYON_NUM_THREADS) [default: 2].
    #[arg(long, requires = "slurm", value_parser = crate::args::at_least_one)]
    pub cpus: Option<usize>,
    /// With --slurm: GPUs per task; the tasks then train on wgpu [default: the runs' `devices`
    /// with --device wgpu, none otherwise].
    #[arg(long, requires = "slurm", value_parser = crate::args::at_least_one)]
    pub gpus: Option<usize>,
    /// With --slurm: the account to charge (sbatch --account).
    #[arg(long, requires = "slurm")]
    pub account: Option<String>,
    /// With --slurm: one more sbatch option for both jobs, as sbatch spells it
    /// (`--sbatch-arg=--qos=short`); repeatable.
    #[arg(long = "sbatch-arg", requires = "slurm", value_name = "ARG", allow_hyphen_values = true)]
    pub sbatch_args: Vec<String>,
}

/// The CPUs a task gets without `--cpus`: the two halves of a CPU step (`core_split = 2`).
pub const DEFAULT_CPUS: usize = 2;

/// What a submission runs: its tasks, one per name, and its final job.
pub struct Plan {
    /// `experiment` or `course`.
    pub kind: &'static str,
    /// The experiment's (or `course`) name, for the job names.
    pub name: String,
    /// The directory the runs go to (absolute).
    pub root: PathBuf,
    /// The runs (or claims) to train, one task each.
    pub tasks: Vec<String>,
    /// The command of a task, `$name` standing for its run: arguments, already absolute.
    pub task_command: Vec<String>,
    /// Where a task's log goes: `root/NAME/slurm.log` (its run directory) when true, else
    /// `root/slurm/NAME.log`.
    pub log_in_run_dir: bool,
    /// The final job's command (report or judging).
    pub final_command: Vec<String>,
    /// What the final job does, for the messages.
    pub final_what: &'static str,
    /// GPUs per task.
    pub gpus: Option<usize>,
}

/// The jobs submitted for a directory, oldest first (`DIR/slurm/jobs.json`).
#[derive(Serialize, Deserialize, Default, Debug)]
pub struct Jobs {
    /// `experiment` or `course`.
    #[serde(default)]
    pub kind: String,
    /// Each submission.
    pub submissions: Vec<Submission>,
}

/// One `--slurm` submission.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Submission {
    /// The array's job id.
    pub array: String,
    /// The dependent job's id (absent if its submission failed).
    pub report: Option<String>,
    /// The runs (or claims) of the array, task `i` training `tasks[i]`.
    pub tasks: Vec<String>,
    /// Where each task's log is: in its run directory, or under `DIR/slurm/`.
    #[serde(default)]
    pub log_in_run_dir: bool,
}

impl Jobs {
    fn path(root: &Path) -> PathBuf {
        root.join("slurm").join("jobs.json")
    }

    /// The jobs recorded for `root` (none when it has no record).
    pub fn read(root: &Path) -> Result<Jobs> {
        let p = Self::path(root);
        match std::fs::read_to_string(&p) {
            Ok(t) => serde_json::from_str(&t).with_context(|| format!("{}: not a jobs record", p.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Jobs::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
        }
    }

    fn write(&self, root: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(self).expect("jobs serialise");
        s2s_data::write_atomic(&Self::path(root), &json)?;
        Ok(())
    }

    /// The latest task of `name`: its job id (`ARRAY_INDEX`) and its submission.
    pub fn latest(&self, name: &str) -> Option<(String, &Submission)> {
        self.submissions.iter().rev().find_map(|s| {
            let i = s.tasks.iter().position(|t| t == name)?;
            Some((format!("{}_{i}", s.array), s))
        })
    }
}

/// The marker a course task leaves when its claim is measured (`DIR/slurm/claims/NAME.done`).
pub fn claim_done(root: &Path, name: &str) -> PathBuf {
    root.join("slurm").join("claims").join(format!("{name}.done"))
}

/// `--slurm` without `sbatch` on the PATH, and `--gpus` with `--device cpu`, are refused here.
pub fn check_sbatch() -> Result<()> {
    if find_on_path("sbatch").is_none() {
        bail!(
            "--slurm: no `sbatch` on the PATH: submit from a Slurm login node (or start a one-node \
             cluster here: scripts/local-slurm.sh), or drop --slurm to train on this machine"
        );
    }
    Ok(())
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(program)).find(|p| p.is_file())
}

/// `dir` made absolute (the nodes run the scripts from elsewhere), created first.
pub fn absolute_dir(dir: &Path) -> Result<PathBuf> {
    s2s_data::create_dir_all(dir)?;
    std::fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))
}

/// `file` made absolute.
pub fn absolute_file(file: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(file).with_context(|| format!("resolving {}", file.display()))
}

/// Warns when `root` is where a cluster's nodes each have their own copy.
pub fn warn_if_local(root: &Path) {
    if root.starts_with("/tmp") || root.starts_with("/var/tmp") {
        eprintln!(
            "warning: {} is under {}, which each node of a cluster usually has its own of: the \
             tasks' runs and the report would land on different machines; use a directory on a \
             shared file system (--out) unless this is a one-node cluster",
            root.display(),
            if root.starts_with("/tmp") { "/tmp" } else { "/var/tmp" }
        );
    }
}

/// A word for a POSIX shell, quoted when it needs to be.
fn sh(word: &str) -> String {
    let plain =
        !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_=./:,+@%".contains(&b));
    if plain { word.to_string() } else { format!("'{}'", word.replace('\'', r"'\''")) }
}

/// An `#SBATCH` option: sbatch splits these lines at white space but keeps a double-quoted
/// value whole (a path with a space); [`submit`] refuses a directory whose name holds a `"`.
fn directive(option: &str) -> String {
    match option.split_once('=') {
        Some((k, v)) if v.contains(char::is_whitespace) || v.contains('\'') => format!("{k}=\"{v}\""),
        _ => option.to_string(),
    }
}

/// The lines of `#SBATCH` options both jobs share.
fn common_options(a: &SlurmArgs) -> Vec<String> {
    let mut o = Vec::new();
    if let Some(p) = &a.partition {
        o.push(format!("--partition={p}"));
    }
    if let Some(t) = &a.account {
        o.push(format!("--account={t}"));
    }
    o
}

/// The array's script.
pub fn task_script(plan: &Plan, a: &SlurmArgs) -> String {
    let root = plan.root.display().to_string();
    let cpus = a.cpus.unwrap_or(DEFAULT_CPUS);
    let mut s = format!(
        "#!/bin/bash\n# {} {}: one task per run, each trained as a local `s2s {} run` trains it.\n\
         # Written by `s2s {} run --slurm`; the runs go to {root}.\n",
        plan.kind, plan.name, plan.kind, plan.kind
    );
    let mut opts = vec![
        format!("--job-name=s2s-{}", plan.name),
        format!("--array=0-{}", plan.tasks.len().saturating_sub(1)),
        "--ntasks=1".into(),
        format!("--cpus-per-task={cpus}"),
    ];
    if let Some(g) = plan.gpus {
        opts.push(format!("--gpus={g}"));
    }
    if let Some(t) = &a.time {
        opts.push(format!("--time={t}"));
    }
    opts.extend(common_options(a));
    // What Slurm itself says before the task's own log opens (a node that cannot reach the
    // run directory, say).
    opts.push(format!("--output={root}/slurm/%A_%a.out"));
    for o in opts {
        s += &format!("#SBATCH {}\n", directive(&o));
    }
    s += "set -eu\n";
    s += &format!("runs=({})\n", plan.tasks.iter().map(|t| sh(t)).collect::<Vec<_>>().join(" "));
    s += "name=${runs[$SLURM_ARRAY_TASK_ID]}\n";
    if plan.log_in_run_dir {
        s += &format!("mkdir -p {}/\"$name\"\nexec >>{}/\"$name\"/slurm.log 2>&1\n", sh(&root), sh(&root));
    } else {
        s += &format!("exec >>{}/slurm/\"$name\".log 2>&1\n", sh(&root));
    }
    s += "echo \"== slurm job ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID} on $(hostname) at $(date -u +%FT%TZ)\"\n";
    s += "# As many threads as CPUs granted (the results do not depend on the count: a local run\n\
          # with any RAYON_NUM_THREADS writes the same bytes).\n";
    s += "export RAYON_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\"\n";
    let cmd: Vec<String> =
        plan.task_command.iter().map(|w| if w == "$name" { "\"$name\"".into() } else { sh(w) }).collect();
    s += &format!("exec {}\n", cmd.join(" "));
    s
}

/// The dependent job's script (the array's id comes on sbatch's command line).
pub fn final_script(plan: &Plan, a: &SlurmArgs) -> String {
    let root = plan.root.display().to_string();
    let mut s = format!(
        "#!/bin/bash\n# {} {}: {} from whatever runs finished, after every task ended.\n\
         # Written by `s2s {} run --slurm`.\n",
        plan.kind, plan.name, plan.final_what, plan.kind
    );
    let mut opts = vec![
        format!("--job-name=s2s-{}-{}", plan.name, if plan.kind == "course" { "judge" } else { "report" }),
        "--ntasks=1".into(),
        format!("--cpus-per-task={}", if plan.kind == "course" { a.cpus.unwrap_or(DEFAULT_CPUS) } else { 1 }),
    ];
    if let Some(t) = &a.time {
        opts.push(format!("--time={t}"));
    }
    opts.extend(common_options(a));
    opts.push(format!(
        "--output={root}/slurm/{}-%j.log",
        if plan.kind == "course" { "judge" } else { "report" }
    ));
    for o in opts {
        s += &format!("#SBATCH {}\n", directive(&o));
    }
    s += "export RAYON_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\"\n";
    s += &format!("exec {}\n", plan.final_command.iter().map(|w| sh(w)).collect::<Vec<_>>().join(" "));
    s
}

/// The runs of `names` that a task of an earlier submission still holds (queued or running).
fn in_flight(jobs: &Jobs, names: &[String]) -> Result<Vec<String>> {
    if jobs.submissions.is_empty() {
        return Ok(Vec::new());
    }
    let queue = squeue()?;
    Ok(names
        .iter()
        .filter(|n| jobs.latest(n).is_some_and(|(id, _)| queue.iter().any(|q| q.id == id)))
        .cloned()
        .collect())
}

/// A job of the queue.
#[derive(Debug, Clone)]
pub struct Queued {
    /// `12` or, an array's task, `12_3`.
    pub id: String,
    /// squeue's state: PENDING, RUNNING, …
    pub state: String,
    /// Why it waits, or the node it runs on.
    pub reason: String,
}

/// Every job of the queue, array tasks one by one.
pub fn squeue() -> Result<Vec<Queued>> {
    let o = Command::new("squeue")
        .args(["-h", "-r", "-o", "%i|%T|%R"])
        .output()
        .context("running squeue (is Slurm installed here? it is not on the PATH)")?;
    if !o.status.success() {
        bail!("squeue: {}", String::from_utf8_lossy(&o.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '|');
            Some(Queued {
                id: f.next()?.trim().into(),
                state: f.next()?.into(),
                // `(Resources)`, `(Dependency)`: Slurm's parentheses dropped; a node's name stays.
                reason: f.next().unwrap_or("").trim_start_matches('(').trim_end_matches(')').into(),
            })
        })
        .collect())
}

/// Submits `script` with `extra` options; returns the job id. Slurm's own message is passed on.
fn sbatch(script: &Path, extra: &[String]) -> Result<String> {
    let o = Command::new("sbatch")
        .arg("--parsable")
        .args(extra)
        .arg(script)
        .output()
        .with_context(|| format!("running sbatch {}", script.display()))?;
    if !o.status.success() {
        bail!("sbatch refused {}: {}", script.display(), String::from_utf8_lossy(&o.stderr).trim());
    }
    let out = String::from_utf8_lossy(&o.stdout);
    let id = out.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        bail!("sbatch {}: no job id in its answer `{}`", script.display(), out.trim());
    }
    Ok(id)
}

/// Writes `plan`'s scripts under `root/slurm/`, submits the array and the final job, records
/// both, and prints their ids; with `--dry-run` prints the scripts and the commands instead.
/// The tasks still held by an earlier submission's queued or running jobs are left out.
pub fn submit(mut plan: Plan, a: &SlurmArgs) -> Result<()> {
    let root_s = plan.root.display().to_string();
    if root_s.contains(['"', '\n', '\r']) {
        bail!(
            "{root_s:?}: a double quote or a line break in the directory's path cannot be named in a batch script's #SBATCH line: use another --out"
        );
    }
    let jobs = Jobs::read(&plan.root)?;
    let busy = if a.dry_run && find_on_path("squeue").is_none() {
        Vec::new()
    } else {
        in_flight(&jobs, &plan.tasks)?
    };
    if !busy.is_empty() {
        eprintln!(
            "still queued or running from an earlier submission, not submitted again: {}",
            busy.join(", ")
        );
        plan.tasks.retain(|t| !busy.contains(t));
    }
    let extra_final = |array: &str| {
        let mut v = vec![format!("--dependency=afterany:{array}"), "--kill-on-invalid-dep=no".to_string()];
        v.extend(a.sbatch_args.iter().cloned());
        v
    };
    let dir = plan.root.join("slurm");
    let (task_path, final_path) = (
        dir.join(format!("{}-tasks.sh", plan.kind)),
        dir.join(format!("{}-{}.sh", plan.kind, if plan.kind == "course" { "judge" } else { "report" })),
    );
    if plan.tasks.is_empty() {
        if busy.is_empty() {
            eprintln!(
                "nothing to submit: every {} is finished",
                if plan.kind == "course" { "claim" } else { "run" }
            );
        } else {
            eprintln!("nothing new to submit; `s2s experiment status {}` follows them", plan.root.display());
        }
        return Ok(());
    }
    let (task, fin) = (task_script(&plan, a), final_script(&plan, a));
    if a.dry_run {
        let args = |v: &[String]| v.iter().map(|w| sh(w)).collect::<Vec<_>>().join(" ");
        outln!("# {}\n{task}", task_path.display())?;
        outln!("# {}\n{fin}", final_path.display())?;
        outln!("# submitted with:")?;
        let mut first = a.sbatch_args.clone();
        first.push(task_path.display().to_string());
        let mut second = extra_final("ARRAY_JOB_ID");
        second.push(final_path.display().to_string());
        outln!("sbatch --parsable {}", args(&first))?;
        outln!("sbatch --parsable {}", args(&second))?;
        return Ok(());
    }
    s2s_data::create_dir_all(&dir)?;
    s2s_data::write_atomic(&task_path, task.as_bytes())?;
    s2s_data::write_atomic(&final_path, fin.as_bytes())?;
    let array = sbatch(&task_path, &a.sbatch_args)?;
    let mut jobs = jobs;
    jobs.kind = plan.kind.into();
    jobs.submissions.push(Submission {
        array: array.clone(),
        report: None,
        tasks: plan.tasks.clone(),
        log_in_run_dir: plan.log_in_run_dir,
    });
    jobs.write(&plan.root)?;
    let report = sbatch(&final_path, &extra_final(&array));
    if let Ok(id) = &report {
        jobs.submissions.last_mut().expect("just pushed").report = Some(id.clone());
        jobs.write(&plan.root)?;
    }
    let n = plan.tasks.len();
    outln!("submitted job {array}: {n} task{} ({})", if n == 1 { "" } else { "s" }, plan.tasks.join(", "))?;
    match report {
        Ok(id) => outln!("submitted job {id}: {} after job {array} ends", plan.final_what)?,
        Err(e) => {
            eprintln!(
                "warning: the tasks are submitted but the {} job is not ({e:#}): run `{}` after they end",
                plan.final_what,
                plan.final_command.join(" ")
            );
        }
    }
    eprintln!(
        "follow them with `s2s experiment status {}`; stop them with `s2s experiment cancel {}`",
        plan.root.display(),
        plan.root.display()
    );
    Ok(())
}

/// The last `n` non-empty lines of `path` (none if it cannot be read).
fn last_lines(path: &Path, n: usize) -> Vec<String> {
    let Ok(bytes) = std::fs::read(path) else { return Vec::new() };
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|l| l.to_string()).collect()
}

/// A task's log: in its run directory or under `root/slurm/`; Slurm's own output file when the
/// task's log was never opened.
fn task_log(root: &Path, name: &str, id: &str, s: &Submission) -> PathBuf {
    let own = if s.log_in_run_dir {
        root.join(name).join("slurm.log")
    } else {
        root.join("slurm").join(format!("{name}.log"))
    };
    if own.is_file() { own } else { root.join("slurm").join(format!("{id}.out")) }
}

/// Final states from `sacct` for `ids`, where accounting is kept (empty otherwise).
fn sacct(ids: &[String]) -> Vec<(String, String)> {
    if ids.is_empty() || find_on_path("sacct").is_none() {
        return Vec::new();
    }
    let Ok(o) =
        Command::new("sacct").args(["-n", "-P", "-X", "-o", "JobID,State", "-j", &ids.join(",")]).output()
    else {
        return Vec::new();
    };
    if !o.status.success() {
        return Vec::new();
    }
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            l.split_once('|')
                .map(|(a, b)| (a.to_string(), b.split_whitespace().next().unwrap_or("").to_string()))
        })
        .collect()
}

/// `s2s experiment status DIR`: each run's (or claim's) state, from its directory and the
/// queue, with each failure's last log lines.
pub fn status(root: &Path, names: Vec<String>, finished: &dyn Fn(&str) -> bool) -> Result<()> {
    let jobs = Jobs::read(root)?;
    let queue =
        if jobs.submissions.is_empty() || find_on_path("squeue").is_none() { Vec::new() } else { squeue()? };
    let arrays: Vec<String> = jobs.submissions.iter().map(|s| s.array.clone()).collect();
    let accounted = sacct(&arrays);
    let mut counts: std::collections::BTreeMap<&'static str, usize> = Default::default();
    let mut lines = Vec::new();
    for name in &names {
        let latest = jobs.latest(name);
        let queued = latest.as_ref().and_then(|(id, _)| queue.iter().find(|q| &q.id == id));
        let (state, detail): (&'static str, String) = if finished(name) {
            ("finished", String::new())
        } else if let Some(q) = queued {
            let (id, _) = latest.as_ref().expect("queued implies a task");
            match q.state.as_str() {
                "PENDING" => ("queued", format!("job {id} ({})", q.reason)),
                "RUNNING" | "COMPLETING" | "CONFIGURING" => ("running", format!("job {id} on {}", q.reason)),
                other => ("held", format!("job {id}: {}", other.to_lowercase())),
            }
        } else if let Some((id, s)) = &latest {
            let how = accounted.iter().find(|(j, _)| j == id).map(|(_, st)| st.to_lowercase());
            let log = task_log(root, name, id, s);
            let tail = last_lines(&log, 5);
            let manifest = root.join(name).join("run.json");
            let interrupted = std::fs::read_to_string(&manifest).is_ok_and(|t| t.contains("\"interrupted\""));
            let cancelled = how.as_deref().is_some_and(|h| h.starts_with("cancelled"));
            let state = if interrupted {
                "interrupted"
            } else if cancelled {
                "cancelled"
            } else if tail.is_empty() {
                "not run"
            } else {
                "failed"
            };
            let mut d = format!("job {id}{}", how.map(|h| format!(" ({h})")).unwrap_or_default());
            if tail.is_empty() {
                d +=
                    &format!(": it ended without a log (cancelled before it started?); no {}", log.display());
            } else {
                d += &format!(": the last lines of {}:", log.display());
                for l in tail {
                    d += &format!("\n      | {l}");
                }
            }
            (state, d)
        } else {
            ("not submitted", String::new())
        };
        *counts.entry(state).or_default() += 1;
        lines.push(format!("  {name:<24} {state:<13} {detail}"));
    }
    let summary: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let what = if jobs.kind == "course" { "claim" } else { "run" };
    let plural = if names.len() == 1 { "" } else { "s" };
    outln!("{}: {} {what}{plural}: {}", root.display(), names.len(), summary.join(", "))?;
    for l in lines {
        outln!("{}", l.trim_end())?;
    }
    if let Some(s) = jobs.submissions.last() {
        if let Some(r) = &s.report {
            let what = if jobs.kind == "course" { "judging" } else { "report" };
            let state = match queue.iter().find(|q| &q.id == r) {
                Some(q) if q.state == "PENDING" => format!("queued ({})", q.reason),
                Some(q) => q.state.to_lowercase(),
                None => "ended".into(),
            };
            outln!("  {what:<24} {state:<13} job {r}")?;
        }
    }
    Ok(())
}

/// `s2s experiment cancel DIR`: `scancel` of every job of `root` still in the queue. A running
/// task gets SIGTERM, checkpoints and stops (Slurm's KillWait later, SIGKILL): its run resumes
/// from there on the next submission.
pub fn cancel(root: &Path) -> Result<()> {
    let jobs = Jobs::read(root)?;
    if jobs.submissions.is_empty() {
        bail!(
            "{}: no Slurm jobs recorded (no {}): nothing to cancel",
            root.display(),
            Jobs::path(root).display()
        );
    }
    let queue = squeue()?;
    let mut ids: Vec<String> = Vec::new();
    for s in &jobs.submissions {
        for id in std::iter::once(&s.array).chain(s.report.as_ref()) {
            let live = queue.iter().any(|q| &q.id == id || q.id.split('_').next() == Some(id.as_str()));
            if live && !ids.contains(id) {
                ids.push(id.clone());
            }
        }
    }
    if ids.is_empty() {
        outln!("{}: none of its jobs is queued or running", root.display())?;
        return Ok(());
    }
    let o = Command::new("scancel").args(&ids).output().context("running scancel")?;
    if !o.status.success() {
        bail!("scancel {}: {}", ids.join(" "), String::from_utf8_lossy(&o.stderr).trim());
    }
    outln!("cancelled job{} {}", if ids.len() == 1 { "" } else { "s" }, ids.join(", "))?;
    eprintln!(
        "a running task checkpoints and stops (SIGTERM); what is written stays, and the next \
         `--slurm` submission resumes its run"
    );
    Ok(())
}
