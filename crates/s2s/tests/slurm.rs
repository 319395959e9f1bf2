//! Grids through Slurm: `experiment run --slurm`, `experiment status`, `experiment cancel`,
//! against a real cluster (`scripts/local-slurm.sh` starts a one-node one; `.ci/run` does). The
//! tests that submit skip, saying why, where no Slurm answers, and fail under `CI=true`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;

/// True when a Slurm cluster answers with a node that takes jobs; otherwise the test skips,
/// saying why — under `CI=true`, where `.ci/run` starts one, it fails.
fn slurm_or_skip() -> bool {
    let why = match Command::new("sinfo").args(["-h", "-o", "%T"]).output() {
        Err(_) => Some(
            "no `sinfo` on the PATH (apt-get install slurm-wlm munge; scripts/local-slurm.sh)".to_string(),
        ),
        Ok(o) if !o.status.success() => Some(format!(
            "Slurm does not answer ({}): start it with scripts/local-slurm.sh",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(o) => {
            let states = String::from_utf8_lossy(&o.stdout).into_owned();
            let up = states
                .lines()
                .any(|s| ["idle", "mixed", "allocated"].contains(&s.trim().trim_end_matches('*')));
            (!up).then(|| format!("no Slurm node takes jobs (sinfo: {})", states.trim()))
        }
    };
    match why {
        None => true,
        Some(why) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI must run Slurm (scripts/local-slurm.sh): {why}"
            );
            eprintln!("skipped: {why}");
            false
        }
    }
}

fn run_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_s2s"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// The quickstart experiment at a budget of `steps` steps, validated every 10, written to `dir`.
fn small_quickstart(dir: &Path, steps: u32) -> PathBuf {
    let text = std::fs::read_to_string(manifest_dir().join("../../experiments/quickstart.toml")).unwrap();
    assert!(text.contains("budget = { steps = 1000 }") && text.contains("valid_every = 100"));
    let text = text
        .replace("budget = { steps = 1000 }", &format!("budget = {{ steps = {steps} }}"))
        .replace("valid_every = 100", "valid_every = 10");
    let file = dir.join("quickstart.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// The job ids `DIR/slurm/jobs.json` records.
fn job_ids(root: &Path) -> Vec<String> {
    let Ok(t) = std::fs::read_to_string(root.join("slurm/jobs.json")) else { return Vec::new() };
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    let mut ids = Vec::new();
    for s in v["submissions"].as_array().unwrap() {
        ids.push(s["array"].as_str().unwrap().to_string());
        if let Some(r) = s["report"].as_str() {
            ids.push(r.to_string());
        }
    }
    ids
}

/// The queue's jobs (array tasks folded into their array's id) among `ids`.
fn queued(ids: &[String]) -> Vec<String> {
    let o = Command::new("squeue").args(["-h", "-r", "-o", "%i %T"]).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| ids.iter().any(|id| l.split(['_', ' ']).next() == Some(id.as_str())))
        .map(str::to_string)
        .collect()
}

/// Waits until none of `root`'s jobs is in the queue, or `until` says stop; panics after 20 min
/// with `status`'s answer.
fn wait(root: &Path, until: &dyn Fn() -> bool) {
    let t0 = Instant::now();
    loop {
        if queued(&job_ids(root)).is_empty() || until() {
            return;
        }
        if t0.elapsed() > Duration::from_secs(1200) {
            let o = s2s(&["experiment", "status", root.to_str().unwrap()]);
            panic!("Slurm jobs still queued after 20 min:\n{}", text(&o.stdout));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Metrics without the wall-time and speed columns, as the resume tests compare them.
fn metrics(run: &Path) -> Vec<String> {
    let m = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    m.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            [f[0], f[1], f[3], f[4], f[5], f[6]].join(",")
        })
        .collect()
}

/// `--dry-run` prints both scripts and the commands, needs no Slurm and writes nothing; the
/// scripts call this binary's `experiment run-one` with the device and thread count, and the
/// report job waits on the array (`afterany`). Without `sbatch` on the PATH `--slurm` is refused;
/// a directory under /tmp is warned about.
#[test]
fn slurm_dry_run_prints_the_scripts_and_needs_no_slurm() {
    let dir = tmp("slurm-dry");
    let file = small_quickstart(&dir, 20);
    let out = dir.join("runs");
    let args = [
        "experiment",
        "run",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--slurm",
        "--dry-run",
        "--cpus",
        "1",
        "--partition",
        "short",
        "--time",
        "30",
        "--sbatch-arg=--qos=low",
    ];
    let o = run_env(&args, &[("PATH", "/nonexistent")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    for want in [
        "#SBATCH --array=0-3\n",
        "#SBATCH --cpus-per-task=1\n",
        "#SBATCH --partition=short\n",
        "#SBATCH --time=30\n",
        "runs=(lstm bahdanau luong transformer)\n",
        "export RAYON_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\"\n",
        "experiment run-one",
        "--run \"$name\" --device cpu --quiet\n",
        "/slurm.log 2>&1\n",
        "report",
        "--dependency=afterany:ARRAY_JOB_ID --kill-on-invalid-dep=no --qos=low",
    ] {
        assert!(s.contains(want), "`{want}` missing from:\n{s}");
    }
    assert!(s.contains(env!("CARGO_BIN_EXE_s2s")), "{s}");
    assert!(!s.contains("--gpus"), "{s}");
    assert!(!out.exists(), "a dry run writes nothing");
    assert!(text(&o.stderr).contains("is under /tmp"), "{}", text(&o.stderr));
    // A GPU for wgpu.
    let mut gpu = args.to_vec();
    gpu.extend(["--device", "wgpu"]);
    let o = run_env(&gpu, &[("PATH", "/nonexistent")]);
    assert!(text(&o.stdout).contains("#SBATCH --gpus=1\n") && text(&o.stdout).contains("--device wgpu"));
    // Without --dry-run: no sbatch, a clear error, nothing written.
    let real: Vec<&str> = args.iter().copied().filter(|a| *a != "--dry-run").collect();
    let o = run_env(&real, &[("PATH", "/nonexistent")]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("no `sbatch` on the PATH"), "{}", text(&o.stderr));
    assert!(!out.exists());
    // The course the same way: a task per claim, the judging after them.
    let course = dir.join("course");
    let o = run_env(
        &[
            "course",
            "run",
            "beam-search",
            "bottleneck",
            "--quick",
            "--out",
            course.to_str().unwrap(),
            "--slurm",
            "--dry-run",
        ],
        &[("PATH", "/nonexistent")],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    for want in [
        "runs=(bottleneck beam-search)\n",
        "course run-claim \"$name\" --out",
        "course run beam-search bottleneck --out",
        "--quick",
    ] {
        assert!(s.contains(want), "`{want}` missing from:\n{s}");
    }
}

/// The quickstart grid at 40 steps through Slurm, one task per run on one CPU each; cancelled
/// (`s2s experiment cancel`) once a run has validated, then resubmitted: every run's metrics and
/// test hypotheses equal those of the same grid trained here (`experiment run`, two threads:
/// the thread count changes no byte), to the byte. A third submission finds nothing to do.
#[test]
fn slurm_grid_equals_the_local_grid_after_a_cancel() {
    if !slurm_or_skip() {
        return;
    }
    let dir = tmp("slurm-grid");
    let file = small_quickstart(&dir, 40);
    let local = dir.join("local");
    let o = run_env(
        &[
            "experiment",
            "run",
            file.to_str().unwrap(),
            "--out",
            local.to_str().unwrap(),
            "--device",
            "cpu",
            "--quiet",
        ],
        &[("RAYON_NUM_THREADS", "2")],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let cluster = dir.join("cluster");
    let submit = [
        "experiment",
        "run",
        file.to_str().unwrap(),
        "--out",
        cluster.to_str().unwrap(),
        "--device",
        "cpu",
        "--slurm",
        "--cpus",
        "1",
    ];
    let o = s2s(&submit);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("submitted job") && text(&o.stdout).contains("4 tasks"),
        "{}",
        text(&o.stdout)
    );
    let runs = ["lstm", "bahdanau", "luong", "transformer"];
    // Cancelled as soon as one run has a validation row and no test scores yet.
    let validated = || {
        runs.iter().any(|r| {
            let d = cluster.join(r);
            std::fs::read_to_string(d.join("metrics.csv")).is_ok_and(|m| m.lines().count() >= 2)
                && !d.join("test/scores.json").exists()
        })
    };
    wait(&cluster, &validated);
    assert!(validated(), "no run was caught mid-training");
    let o = s2s(&["experiment", "cancel", cluster.to_str().unwrap()]);
    assert!(
        o.status.success() && text(&o.stdout).contains("cancelled job"),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    wait(&cluster, &|| false);
    let cut: Vec<&str> =
        runs.iter().copied().filter(|r| !cluster.join(r).join("test/scores.json").exists()).collect();
    assert!(!cut.is_empty());
    let o = s2s(&["experiment", "status", cluster.to_str().unwrap()]);
    assert!(text(&o.stdout).contains("interrupted"), "{}", text(&o.stdout));
    // Resubmitted: only the unfinished runs.
    let o = s2s(&submit);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains(&format!(": {} task", cut.len())), "{}", text(&o.stdout));
    wait(&cluster, &|| false);
    for r in runs {
        assert_eq!(metrics(&cluster.join(r)), metrics(&local.join(r)), "{r}: metrics differ");
        let hyp = |root: &Path| std::fs::read(root.join(r).join("test/hypotheses.txt")).unwrap();
        assert!(hyp(&local).len() > 100 && hyp(&cluster) == hyp(&local), "{r}: test hypotheses differ");
    }
    assert!(cluster.join("report.html").is_file() && cluster.join("results.csv").is_file());
    let o = s2s(&["experiment", "status", cluster.to_str().unwrap()]);
    assert!(text(&o.stdout).contains("4 runs: 4 finished"), "{}", text(&o.stdout));
    let o = s2s(&submit);
    assert!(o.status.success() && text(&o.stderr).contains("every run is finished"), "{}", text(&o.stderr));
}

/// A task that fails is reported by `status` with its log's last line; a partition Slurm does
/// not know is refused with Slurm's own words. The run directory's name holds a space and
/// quotes, which the script must quote for the task to find it.
#[test]
fn slurm_status_reports_a_failed_task_with_its_log() {
    if !slurm_or_skip() {
        return;
    }
    let dir = tmp("slurm-fail");
    let file = dir.join("tiny.toml");
    std::fs::write(
        &file,
        "[data]\nsource = \"builtin\"\npairs = 300\n[tokenizer]\nlevel = \"word\"\n\
         [train]\nbudget = { steps = 4 }\nvalid_every = 2\nbatch = { max_tokens = 512 }\n[decode]\nbeam = 1\n\
         [[model]]\nkind = \"lstm\"\nemb = 8\nhidden = 8\n",
    )
    .unwrap();
    // A space and a quote in the path: the script quotes what it names.
    let root = dir.join("runs of 'tiny'");
    let mut submit = vec![
        "experiment",
        "run",
        file.to_str().unwrap(),
        "--out",
        root.to_str().unwrap(),
        "--device",
        "cpu",
        "--slurm",
        "--cpus",
        "1",
    ];
    let o = s2s(&[&submit[..], &["--partition", "no-such-partition"]].concat());
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("invalid partition specified: no-such-partition"),
        "{}",
        text(&o.stderr)
    );
    // sbatch passes the environment on: the task aborts inside its first checkpoint.
    submit.push("--quiet");
    let o = run_env(&submit, &[("S2S_FAULT_ABORT_IN_CHECKPOINT", "2")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    wait(&root, &|| false);
    let log = std::fs::read_to_string(root.join("lstm/slurm.log")).unwrap();
    let last = log.lines().filter(|l| !l.trim().is_empty()).next_back().unwrap().to_string();
    assert!(log.contains("fault injection"), "{log}");
    let o = s2s(&["experiment", "status", root.to_str().unwrap()]);
    let s = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(s.contains("1 run: 1 failed") && s.contains(&last), "`{last}` missing from:\n{s}");
}

/// The course through Slurm: a claim as a task, then the judging job writes the page; the
/// claim is finished for `status`, and a second submission finds nothing to do.
#[test]
fn slurm_course_measures_a_claim_in_a_task_and_judges_after() {
    if !slurm_or_skip() {
        return;
    }
    let dir = tmp("slurm-course");
    let out = dir.join("course");
    let submit = [
        "course",
        "run",
        "bleu-word-order",
        "--quick",
        "--out",
        out.to_str().unwrap(),
        "--slurm",
        "--cpus",
        "1",
    ];
    let o = s2s(&submit);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("1 task (bleu-word-order)"), "{}", text(&o.stdout));
    wait(&out, &|| false);
    let page = std::fs::read_to_string(out.join("course.md")).unwrap();
    assert!(page.contains("bleu-word-order") || page.contains("BLEU"), "{page}");
    let o = s2s(&["experiment", "status", out.to_str().unwrap()]);
    assert!(text(&o.stdout).contains("1 claim: 1 finished"), "{}", text(&o.stdout));
    let o = s2s(&submit);
    assert!(o.status.success() && text(&o.stderr).contains("nothing to submit"), "{}", text(&o.stderr));
}
