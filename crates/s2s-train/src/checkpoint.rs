//! Checkpoints written atomically: each is a directory `checkpoints/step-NNNNNNNN/` holding
//! the model (`model.bpk`), the optimizer state (`optimizer.bpk`) and the trainer state
//! (`state.json`: step, epoch, data position, schedule, early-stopping counters). The
//! directory is filled under a temporary name, every file fsynced, then renamed; only then
//! are the pointers `last.json` / `best.json` replaced (write-to-temp, fsync, rename). A
//! crash at any moment leaves the previous pointers naming a complete checkpoint.
//!
//! Beside them `files.json` records each file's length and CRC-32, so that a file damaged or
//! truncated later is told apart from one written for another model configuration
//! ([`Checkpoints::verify`]); each gets its own remedy in the message.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::TrainError;
use crate::schedule::ScheduleState;

/// Where the loop is; with the seed this determines everything that follows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// Optimizer steps taken.
    pub step: u64,
    /// Current epoch (0-based).
    pub epoch: u64,
    /// Batches of the current epoch already consumed.
    pub batch_in_epoch: usize,
    /// Training seconds so far.
    pub wall: f64,
    /// Best validation metric so far (higher is better: BLEU, or −perplexity).
    pub best: Option<f64>,
    /// Step of the best checkpoint.
    pub best_step: u64,
    /// Validations since the best one.
    pub bad_validations: u32,
    /// Learning-rate schedule state.
    pub schedule: ScheduleState,
    /// Training loss sum and token count since the last metrics row.
    pub loss_window: (f64, u64),
    /// Whether training has finished (budget or early stopping).
    pub finished: bool,
    /// Batches skipped because their loss was not finite (`skip_nonfinite`).
    #[serde(default)]
    pub skipped_batches: u64,
    /// Mixed precision's loss scaler (its scale, its window, the steps it skipped); absent in
    /// f32 runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scaler: Option<crate::precision::LossScaler>,
}

impl TrainerState {
    /// The state before the first step, with the schedule's starting state.
    pub fn start(schedule: ScheduleState) -> Self {
        Self {
            step: 0,
            epoch: 0,
            batch_in_epoch: 0,
            wall: 0.0,
            best: None,
            best_step: 0,
            bad_validations: 0,
            schedule,
            loss_window: (0.0, 0),
            finished: false,
            skipped_batches: 0,
            loss_scaler: None,
        }
    }
}

/// A file's length and CRC-32, as written (`files.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct FileCheck {
    len: u64,
    crc32: u32,
}

/// The length and CRC-32 of the file at `path`.
fn check_of(path: &Path) -> Result<FileCheck, TrainError> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| TrainError::io(path, e))?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| TrainError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    Ok(FileCheck { len, crc32: hasher.finalize() })
}

/// A pointer file's content.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pointer {
    dir: String,
    step: u64,
}

/// The checkpoint directory of a run.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    root: PathBuf,
    keep_last: usize,
    /// Fault injection: the step whose checkpoint aborts the process mid-write
    /// ([`crate::interrupt::Faults`]).
    abort_at: Option<u64>,
}

impl Checkpoints {
    /// Checkpoints under `run_dir/checkpoints`, keeping the last one (and the best).
    pub fn new(run_dir: &Path) -> Self {
        Self { root: run_dir.join("checkpoints"), keep_last: 1, abort_at: None }
    }

    /// Aborts the process in the middle of writing the checkpoint of step `at` (fault
    /// injection for the crash tests: [`crate::interrupt::Faults::abort_in_checkpoint`]).
    pub fn aborting_at(mut self, at: Option<u64>) -> Self {
        self.abort_at = at;
        self
    }

    /// Keeps the `n` most recent step checkpoints (at least 1) besides the best, for
    /// averaging ([`crate::average`]).
    pub fn keeping(mut self, n: usize) -> Self {
        self.keep_last = n.max(1);
        self
    }

    /// The checkpoint directory called `name`: `best` and `last` follow their pointers; any
    /// other name is a directory under `checkpoints/` (`step-00001000`, `average-last-5`).
    pub fn named(&self, name: &str) -> Result<PathBuf, TrainError> {
        let run = self.root.parent().unwrap_or(&self.root).display().to_string();
        if name == "best" || name == "last" {
            return self.pointed(name)?.ok_or_else(|| TrainError::Checkpoint {
                path: self.root.clone(),
                message: format!(
                    "{run} has no {name} checkpoint yet: train it first (s2s train --run {run})"
                ),
            });
        }
        let dir = self.root.join(name);
        let plain = !name.is_empty() && !name.contains(['/', '\\']) && name != "." && name != "..";
        let has_model = |d: &Path| d.join("model.bpk").is_file() || d.join(crate::quantized::FILE).is_file();
        if plain && has_model(&dir) {
            return Ok(dir);
        }
        let mut have = vec!["best".to_string(), "last".to_string()];
        if let Ok(entries) = std::fs::read_dir(&self.root) {
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .filter(|e| has_model(&e.path()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect();
            names.sort();
            have.extend(names);
        }
        Err(TrainError::Checkpoint {
            path: dir,
            message: format!("no such checkpoint in {run}; use one of: {}", have.join(", ")),
        })
    }

    /// The `n` most recent complete step checkpoints, newest first, one per step (a step
    /// saved twice — validated, then saved again as the run ended — counts once, by its
    /// newest copy).
    pub fn recent(&self, n: usize) -> Result<Vec<PathBuf>, TrainError> {
        let mut steps = self.step_dirs()?;
        // `step-N-k` sorts after `step-N` and is the newer copy (a numeric k, compared as such).
        let copy = |p: &Path| -> u64 {
            let name = p.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            name.splitn(3, '-').nth(2).and_then(|k| k.parse().ok()).unwrap_or(1)
        };
        steps.sort_by(|a, b| b.0.cmp(&a.0).then(copy(&b.1).cmp(&copy(&a.1))));
        steps.dedup_by_key(|s| s.0);
        Ok(steps.into_iter().take(n).map(|(_, d)| d).collect())
    }

    /// Every complete step checkpoint with its step (from its `state.json`).
    fn step_dirs(&self) -> Result<Vec<(u64, PathBuf)>, TrainError> {
        let mut out = Vec::new();
        let entries = match std::fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(TrainError::io(&self.root, e)),
        };
        for entry in entries {
            let path = entry.map_err(|e| TrainError::io(&self.root, e))?.path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if !name.starts_with("step-") || !path.join("state.json").is_file() {
                continue;
            }
            // A checkpoint whose state cannot be read is not one to keep or average.
            if let Ok(state) = Self::read_state(&path) {
                out.push((state.step, path));
            }
        }
        Ok(out)
    }

    /// Records the length and CRC-32 of every file in `dir` in its `files.json` (what
    /// [`Checkpoints::verify`] checks).
    pub fn write_checks(dir: &Path) -> Result<(), TrainError> {
        let mut checks = std::collections::BTreeMap::new();
        for entry in std::fs::read_dir(dir).map_err(|e| TrainError::io(dir, e))? {
            let path = entry.map_err(|e| TrainError::io(dir, e))?.path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name != "files.json" {
                checks.insert(name, check_of(&path)?);
            }
        }
        let json = serde_json::to_vec_pretty(&checks).expect("file checks serialise");
        std::fs::write(dir.join("files.json"), json).map_err(|e| TrainError::io(dir, e))
    }

    /// The directory a pointer (`"last"` or `"best"`) names, if any.
    pub fn pointed(&self, which: &str) -> Result<Option<PathBuf>, TrainError> {
        let p = self.root.join(format!("{which}.json"));
        if !p.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&p).map_err(|e| TrainError::io(&p, e))?;
        let ptr: Pointer = serde_json::from_str(&text).map_err(|e| TrainError::Checkpoint {
            path: p.clone(),
            message: format!("unreadable pointer: {e}"),
        })?;
        let dir = self.root.join(&ptr.dir);
        if !dir.join("state.json").exists() {
            return Err(TrainError::Checkpoint {
                path: dir,
                message: "the checkpoint it names is missing".into(),
            });
        }
        Ok(Some(dir))
    }

    /// Writes a checkpoint for `state.step`: `write_files` fills the temporary directory
    /// with the model and optimizer files; then the state, the rename and the pointers.
    pub fn save(
        &self,
        state: &TrainerState,
        is_best: bool,
        write_files: impl FnOnce(&Path) -> Result<(), TrainError>,
    ) -> Result<PathBuf, TrainError> {
        // A fresh name, never an existing directory: a pointer may name that one, and
        // replacing it in place would leave a moment where the pointer dangles.
        let base = format!("step-{:08}", state.step);
        let name = (1..)
            .map(|k| if k == 1 { base.clone() } else { format!("{base}-{k}") })
            .find(|n| !self.root.join(n).exists())
            .expect("a free checkpoint name");
        let tmp = self.root.join(format!(".{name}.tmp"));
        let dir = self.root.join(&name);
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
        }
        std::fs::create_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
        write_files(&tmp)?;
        Self::write_checks(&tmp)?;
        crate::interrupt::abort_in_checkpoint(self.abort_at, state.step);
        let json = serde_json::to_vec_pretty(state).expect("trainer state serialises");
        std::fs::write(tmp.join("state.json"), json).map_err(|e| TrainError::io(&tmp, e))?;
        for entry in std::fs::read_dir(&tmp).map_err(|e| TrainError::io(&tmp, e))? {
            let path = entry.map_err(|e| TrainError::io(&tmp, e))?.path();
            std::fs::File::open(&path).and_then(|f| f.sync_all()).map_err(|e| TrainError::io(&path, e))?;
        }
        std::fs::rename(&tmp, &dir).map_err(|e| TrainError::io(&dir, e))?;
        let ptr = serde_json::to_vec(&Pointer { dir: name, step: state.step }).expect("pointer serialises");
        s2s_data::write_atomic(&self.root.join("last.json"), &ptr)?;
        if is_best {
            s2s_data::write_atomic(&self.root.join("best.json"), &ptr)?;
        }
        self.prune()?;
        Ok(dir)
    }

    /// Removes step checkpoint directories that no pointer names and that are not among the
    /// `keep_last` most recent (other directories, e.g. averaged ones, are left alone).
    fn prune(&self) -> Result<(), TrainError> {
        let mut keep: Vec<PathBuf> =
            ["last", "best"].iter().filter_map(|w| self.pointed(w).ok().flatten()).collect();
        keep.extend(self.recent(self.keep_last)?);
        for entry in std::fs::read_dir(&self.root).map_err(|e| TrainError::io(&self.root, e))? {
            let path = entry.map_err(|e| TrainError::io(&self.root, e))?.path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let stale_tmp = name.starts_with(".step-") && name.ends_with(".tmp");
            if path.is_dir() && (name.starts_with("step-") || stale_tmp) && !keep.contains(&path) {
                std::fs::remove_dir_all(&path).map_err(|e| TrainError::io(&path, e))?;
            }
        }
        Ok(())
    }

    /// Checks `file` of the checkpoint directory `dir` against the length and CRC-32 recorded
    /// when it was written (checkpoints without `files.json`, from older versions, pass):
    /// a damaged or truncated file is refused with what to do instead.
    pub fn verify(dir: &Path, file: &str) -> Result<(), TrainError> {
        let record = dir.join("files.json");
        let Ok(text) = std::fs::read_to_string(&record) else { return Ok(()) };
        let checks: std::collections::BTreeMap<String, FileCheck> =
            serde_json::from_str(&text).map_err(|e| TrainError::Checkpoint {
                path: record.clone(),
                message: format!("unreadable: {e}"),
            })?;
        let Some(want) = checks.get(file) else { return Ok(()) };
        let path = dir.join(file);
        let got = check_of(&path)?;
        let detail = if got.len != want.len {
            format!("{} bytes where {} were written: truncated or damaged", got.len, want.len)
        } else if got.crc32 != want.crc32 {
            format!("CRC-32 {:08x} where {:08x} was written: damaged", got.crc32, want.crc32)
        } else {
            return Ok(());
        };
        Err(TrainError::Checkpoint { path, message: format!("{detail}; {}", Self::remedy_for_damage(dir)) })
    }

    /// What to do when the checkpoint in `dir` is damaged: point the pointer that names it at
    /// the other checkpoint a pointer keeps, where there is one, else start anew.
    pub fn remedy_for_damage(dir: &Path) -> String {
        let root = dir.parent().unwrap_or(Path::new("."));
        let ckpts = Checkpoints { root: root.to_path_buf(), keep_last: 1, abort_at: None };
        let named: Vec<(&str, Option<PathBuf>)> =
            ["last", "best"].iter().map(|w| (*w, ckpts.pointed(w).ok().flatten())).collect();
        let this = named.iter().find(|(_, d)| d.as_deref() == Some(dir)).map(|(w, _)| *w);
        let other = named.iter().find(|(_, d)| d.as_ref().is_some_and(|d| d != dir));
        match (this, other) {
            (Some(w), Some((o, Some(d)))) => format!(
                "the {o} checkpoint ({}) is another one: to use it instead, `cp {} {}` and rerun",
                d.display(),
                root.join(format!("{o}.json")).display(),
                root.join(format!("{w}.json")).display()
            ),
            _ => "no other checkpoint is kept: restore the file from a copy, or train anew into another run directory".into(),
        }
    }

    /// Reads the trainer state of a checkpoint directory.
    pub fn read_state(dir: &Path) -> Result<TrainerState, TrainError> {
        let p = dir.join("state.json");
        let text = std::fs::read_to_string(&p).map_err(|e| TrainError::io(&p, e))?;
        serde_json::from_str(&text).map_err(|e| TrainError::Checkpoint { path: p, message: e.to_string() })
    }
}
