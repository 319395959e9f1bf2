//! Helpers shared by the end-to-end tests of the `s2s` binary.
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

pub fn s2s(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_s2s")).args(args).output().expect("s2s runs")
}

pub fn s2s_stdin(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_s2s"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("s2s runs");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("s2s-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

/// Trains a tiny model of `kind` on 300 built-in pairs into a fresh run directory.
pub fn tiny_run(name: &str, kind: &str, seed: &str) -> PathBuf {
    tiny_run_steps(name, kind, seed, "4")
}

/// [`tiny_run`] trained for `steps` steps, validated twice (4 steps leave a model that emits
/// specials, which the text of its output drops, and rarely stops).
pub fn tiny_run_steps(name: &str, kind: &str, seed: &str, steps: &str) -> PathBuf {
    let run = tmp(name).join("run");
    let every = (steps.parse::<usize>().unwrap() / 2).max(1).to_string();
    let mut args = vec!["train", "--model", kind, "--emb", "16", "--steps", steps, "--valid-every", &every];
    if kind == "transformer" {
        args.extend(["--heads", "2", "--ffn", "32", "--layers", "1"]);
    } else {
        args.extend(["--hidden", "16"]);
    }
    let cfg = tmp(&format!("{name}-cfg")).join("run.toml");
    std::fs::write(&cfg, "[data]\nsource = \"builtin\"\npairs = 300\n").unwrap();
    let config = cfg.to_str().unwrap().to_string();
    let run_s = run.to_str().unwrap().to_string();
    args.extend([
        "--config",
        &config,
        "--max-tokens",
        "512",
        "--level",
        "word",
        "--quiet",
        "--device",
        "cpu",
    ]);
    args.extend(["--seed", seed, "--run", &run_s]);
    args.retain(|a| *a != "--model" && *a != kind);
    std::fs::write(
        &cfg,
        format!("[data]\nsource = \"builtin\"\npairs = 300\n\n[model]\nkind = \"{kind}\"\n"),
    )
    .unwrap();
    let o = s2s(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    run
}

/// This crate's directory: cargo's run-time `CARGO_MANIFEST_DIR` (a target directory shared by
/// clones at other paths may hold a test binary built elsewhere), else the compile-time one.
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// A headless browser, if one is installed (required under CI=true: .ci/run installs chromium).
pub fn browser() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()));
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI must provide chromium (apt-get install chromium)"
        );
        eprintln!("skipped the browser check: no chromium");
    }
    found
}
