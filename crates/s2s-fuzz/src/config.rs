//! Fuzz property of the TOML configurations: experiment files (`s2s experiment run FILE`,
//! [`Experiment::load`]) and run configurations (`s2s train --config FILE`: a [`RunConfig`],
//! its `[train]` checked by [`TrainSpec::validate`](s2s_train::config::TrainSpec::validate)).
//!
//! Input layout: byte 0's lowest bit picks the kind (0: an experiment file, 1: a run
//! configuration); the rest is the file's bytes (not necessarily UTF-8).
//!
//! Properties: reading never panics (nor grows without bound: a grid is capped before it is
//! expanded); an experiment file's error names the file; an experiment that loads has at least
//! one run, and every run's training settings pass validation; whatever a run configuration
//! parses to can be validated, described and written back as TOML without a panic.

use std::path::PathBuf;

use s2s_train::experiment::Experiment;
use s2s_train::run::RunConfig;

/// Runs the property on one input (see the module doc).
pub fn check(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else { return };
    if mode & 1 == 0 {
        experiment(body);
    } else {
        run_config(body);
    }
}

fn experiment(body: &[u8]) {
    let dir = Scratch::new();
    let path = dir.0.join("grid.toml");
    std::fs::write(&path, body).expect("temp file");
    match Experiment::load(&path) {
        Ok(exp) => {
            let entries = exp.entries();
            assert!(!entries.is_empty(), "an experiment that loads has runs");
            assert_eq!(entries.len(), exp.models.len() * exp.seeds.len());
            for (entry, cfg) in &entries {
                assert!(cfg.train.validate().is_ok(), "{}: its [train] passed loading", entry.name);
                let _ = exp.decode.search(&cfg.train);
                let _ = (cfg.model.kind(), cfg.model.ablations());
            }
            let _ = exp.max_devices();
        }
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.contains(&*path.to_string_lossy()),
                "the error does not name the file: {message}"
            );
        }
    }
}

fn run_config(body: &[u8]) {
    let Ok(text) = std::str::from_utf8(body) else { return };
    let Ok(cfg) = toml::from_str::<RunConfig>(text) else { return };
    let _ = cfg.train.validate();
    let _ = (cfg.model.kind(), cfg.model.ablations());
    let _ = toml::to_string(&cfg);
}

/// A per-input directory under the system temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("s2s-fuzz-config-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
