//! End-to-end tests of the `s2s` binary: real behaviour, bad input, exit codes.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::*;

/// `$S2S_SHARED/<rel>` (by default `../shared` beside the project root), or `None` when it is
/// missing: the test skips, saying what is missing (fails under `CI=true`).
fn shared(rel: &str) -> Option<PathBuf> {
    s2s_data::shared::require(&manifest_dir(), rel)
}

#[test]
fn every_help_describes_a_real_command() {
    let top = s2s(&["--help"]);
    assert!(top.status.success());
    for sub in
        [&["train"][..], &["translate"], &["score"], &["export"], &["data", "synth"], &["data", "stats"]]
    {
        let mut args = sub.to_vec();
        args.push("--help");
        let o = s2s(&args);
        assert!(o.status.success(), "{sub:?}");
        assert!(text(&o.stdout).len() > 200, "{sub:?} help is too thin");
    }
}

#[test]
fn synth_is_deterministic_in_the_seed() {
    let (a, b, c) = (tmp("synth-a"), tmp("synth-b"), tmp("synth-c"));
    for (dir, seed) in [(&a, "3"), (&b, "3"), (&c, "4")] {
        let o = s2s(&["data", "synth", "--pairs", "200", "--seed", seed, "--out", dir.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let read = |d: &PathBuf| std::fs::read_to_string(d.join("train.src")).unwrap();
    assert_eq!(read(&a), read(&b));
    assert_ne!(read(&a), read(&c));
    assert_eq!(std::fs::read_to_string(a.join("test.tgt")).unwrap().lines().count(), 10);
}

#[test]
fn stats_reports_histograms_coverage_and_padding() {
    let Some(d) = shared("datasets/multi30k") else { return };
    let o = s2s(&[
        "data",
        "stats",
        "--src",
        d.join("train.de").to_str().unwrap(),
        "--tgt",
        d.join("train.en").to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["pairs"], 29_000);
    assert!(v["padding_ratio"].as_f64().unwrap() < 0.10);
    assert!(v["src"]["lengths"]["counts"].as_array().unwrap().len() >= 5);
    assert!(v["tgt"]["coverage"].as_f64().unwrap() > 0.99);
}

#[test]
fn mismatched_corpus_is_a_clear_error_not_a_panic() {
    let d = tmp("mismatch");
    std::fs::write(d.join("a.de"), "eins\nzwei\ndrei\n").unwrap();
    std::fs::write(d.join("a.en"), "one\ntwo\n").unwrap();
    let o = s2s(&[
        "data",
        "stats",
        "--src",
        d.join("a.de").to_str().unwrap(),
        "--tgt",
        d.join("a.en").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("a.de has 3 lines") && err.contains("a.en has 2"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // The same through `train`: nothing is trained, the message names the files.
    let run = d.join("run");
    let o = s2s(&[
        "train",
        "--model",
        "lstm",
        "--steps",
        "1",
        "--quiet",
        "--device",
        "cpu",
        "--src",
        d.join("a.de").to_str().unwrap(),
        "--tgt",
        d.join("a.en").to_str().unwrap(),
        "--valid-src",
        d.join("a.de").to_str().unwrap(),
        "--valid-tgt",
        d.join("a.en").to_str().unwrap(),
        "--run",
        run.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("a.en has 2"), "{}", text(&o.stderr));
}

#[test]
fn score_matches_sacrebleu_and_reads_stdin() {
    let Some(f) = shared("fixtures/bleu") else { return };
    let hyp = std::fs::read_to_string(f.join("wmt22.en-de.Online-B.de")).unwrap();
    let o = s2s_stdin(
        &[
            "score",
            "--ref",
            f.join("wmt22.en-de.ref.de").to_str().unwrap(),
            "--format",
            "json",
            "--width",
            "4",
        ],
        &hyp,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let bleu = v.as_array().unwrap().iter().find(|m| m["name"] == "BLEU").unwrap();
    // sacreBLEU 2.6.0: 38.36852355513645
    assert!((bleu["score"].as_f64().unwrap() - 38.3685).abs() < 1e-4, "{bleu}");
}

#[test]
fn score_line_count_mismatch_names_the_counts() {
    let d = tmp("score");
    std::fs::write(d.join("h.txt"), "a\nb\n").unwrap();
    std::fs::write(d.join("r.txt"), "a\nb\nc\n").unwrap();
    let o = s2s(&[
        "score",
        "--hyp",
        d.join("h.txt").to_str().unwrap(),
        "--ref",
        d.join("r.txt").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains('2') && err.contains('3') && !err.contains("panicked"), "{err}");
}

#[test]
fn a_file_given_as_run_or_cache_directory_is_named_with_the_remedy() {
    let d = tmp("dir-is-file");
    let file = d.join("taken");
    std::fs::write(&file, "keep me\n").unwrap();
    std::fs::write(d.join("c.src"), "a b\nc d\n").unwrap();
    std::fs::write(d.join("c.tgt"), "e f\ng h\n").unwrap();
    let (src, tgt) = (d.join("c.src"), d.join("c.tgt"));
    let cfg = d.join("run.toml");
    std::fs::write(&cfg, "[data]\nsource = \"builtin\"\npairs = 60\n\n[model]\nkind = \"lstm\"\n").unwrap();
    let train = |run: &std::path::Path| {
        s2s(&[
            "train",
            "--config",
            cfg.to_str().unwrap(),
            "--steps",
            "1",
            "--quiet",
            "--device",
            "cpu",
            "--run",
            run.to_str().unwrap(),
        ])
    };
    let prepare = |cache: &std::path::Path| {
        s2s(&[
            "data",
            "prepare",
            "--src",
            src.to_str().unwrap(),
            "--tgt",
            tgt.to_str().unwrap(),
            "--level",
            "word",
            "--cache",
            cache.to_str().unwrap(),
        ])
    };
    let outputs = [
        ("--run FILE", train(&file)),
        ("--run FILE/sub", train(&file.join("sub"))),
        ("--cache FILE", prepare(&file)),
        ("--cache FILE/sub", prepare(&file.join("sub"))),
    ];
    for (what, o) in outputs {
        assert!(!o.status.success(), "{what}");
        let err = text(&o.stderr);
        assert!(
            err.contains(&format!("{} is a file, where a directory is needed", file.display())),
            "{what}: {err}"
        );
        assert!(err.contains("name a directory") && err.contains("move the file away"), "{what}: {err}");
        assert!(!err.contains("os error") && !err.contains("panicked"), "{what}: {err}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me\n");
}

/// A full disk behind stdout (`> /dev/full`) is an error that says standard output, from
/// every kind of writer (a stream, a report, `println!`-style lines, which panicked); a closed
/// pipe (`| head`) stays a quiet exit 0.
#[test]
fn a_write_error_on_stdout_names_standard_output_and_a_closed_pipe_is_quiet() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("skipped: no /dev/full here");
        return;
    }
    let d = tmp("stdout-full");
    std::fs::write(d.join("h.txt"), "a b c\n").unwrap();
    let h = d.join("h.txt");
    let run = tiny_run("stdout-full-run", "lstm", "1");
    let score = ["score", "--hyp", h.to_str().unwrap(), "--ref", h.to_str().unwrap()];
    let translate = ["translate", "--model", run.to_str().unwrap(), "--device", "cpu"];
    let stats =
        ["data", "stats", "--src", h.to_str().unwrap(), "--tgt", h.to_str().unwrap(), "--level", "word"];
    let commands: [(&[&str], &str); 4] =
        [(&score, ""), (&["course", "list"], ""), (&stats, ""), (&translate, "the dog sleeps .\n")];
    for (args, input) in commands {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let (reader, pipe) = std::io::pipe().unwrap();
        drop(reader);
        for (what, stdout) in [("/dev/full", Stdio::from(full)), ("a closed pipe", Stdio::from(pipe))] {
            let mut child = Command::new(env!("CARGO_BIN_EXE_s2s"))
                .args(args)
                .stdin(Stdio::piped())
                .stdout(stdout)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            // The child may be gone already (it failed): that is what is checked below.
            let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
            let o = child.wait_with_output().unwrap();
            let err = text(&o.stderr);
            assert!(!err.contains("panicked"), "{args:?} > {what}: {err}");
            if what == "/dev/full" {
                assert!(!o.status.success(), "{args:?} > {what}");
                assert!(err.contains("error: writing to standard output: "), "{args:?} > {what}: {err}");
                assert!(err.contains("free space where it goes"), "{args:?} > {what}: {err}");
            } else {
                assert!(o.status.success(), "{args:?} > {what}: {err}");
                assert!(!err.contains("error:"), "{args:?} > {what}: {err}");
            }
        }
    }
}

#[test]
fn a_paired_test_of_one_file_given_twice_says_so() {
    let d = tmp("score-twice");
    std::fs::write(d.join("a.txt"), "a b c\n").unwrap();
    std::fs::write(d.join("r.txt"), "a b c\n").unwrap();
    let (a, r) = (d.join("a.txt"), d.join("r.txt"));
    for test in ["--paired-bs", "--paired-ar"] {
        let o = s2s(&[
            "score",
            "--hyp",
            a.to_str().unwrap(),
            "--hyp",
            a.to_str().unwrap(),
            "--ref",
            r.to_str().unwrap(),
            test,
        ]);
        assert!(!o.status.success());
        let err = text(&o.stderr);
        assert!(err.contains(&format!("{} is given twice", a.display())), "{test}: {err}");
        assert!(err.contains("add a different hypothesis file"), "{test}: {err}");
    }
}

/// The whole path on a tiny budget: built-in pair → tokenizer → LSTM → checkpoints →
/// metrics → test scores; rerunning resumes and finds the run finished.
#[test]
fn train_tiny_model_end_to_end_and_resume() {
    let run = tmp("train").join("run");
    let args = [
        "train",
        "--model",
        "luong",
        "--emb",
        "16",
        "--hidden",
        "16",
        "--steps",
        "4",
        "--valid-every",
        "2",
        "--max-tokens",
        "512",
        "--level",
        "word",
        "--quiet",
        "--device",
        "cpu",
        "--run",
        run.to_str().unwrap(),
    ];
    let cfg = tmp("train-cfg").join("run.toml");
    std::fs::write(&cfg, "[data]\nsource = \"builtin\"\npairs = 300\n\n[model]\nkind = \"luong\"\n").unwrap();
    let mut with_cfg = args.to_vec();
    with_cfg.retain(|a| *a != "--model" && *a != "luong");
    with_cfg.extend(["--config", cfg.to_str().unwrap()]);
    let o = s2s(&with_cfg);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("test: BLEU"), "{}", text(&o.stdout));
    for f in [
        "run.json",
        "metrics.csv",
        "tokenizer/joint.json",
        "checkpoints/last.json",
        "checkpoints/best.json",
        "test/scores.json",
    ] {
        assert!(run.join(f).exists(), "{f} missing");
    }
    let metrics = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    assert_eq!(metrics.lines().count(), 3, "{metrics}"); // header + steps 2 and 4
    let again = s2s(&with_cfg);
    assert!(again.status.success());
    assert!(text(&again.stderr).contains("resuming from"), "{}", text(&again.stderr));
    assert_eq!(std::fs::read_to_string(run.join("metrics.csv")).unwrap(), metrics);
}

#[test]
fn unknown_config_key_is_named() {
    let cfg = tmp("badcfg").join("run.toml");
    std::fs::write(&cfg, "[model]\nkind = \"lstm\"\nhiden = 3\n").unwrap();
    let o = s2s(&["train", "--config", cfg.to_str().unwrap(), "--run", "/nonexistent/never"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("hiden") && err.contains("run.toml"), "{err}");
}

/// Same seed and config on CPU: bit-identical metrics (wall time and speed aside) and weights.
#[test]
fn training_is_bit_identical_for_a_seed() {
    let a = tiny_run("det-a", "bahdanau", "5");
    let b = tiny_run("det-b", "bahdanau", "5");
    let c = tiny_run("det-c", "bahdanau", "6");
    let cols = |run: &PathBuf| -> Vec<String> {
        let m = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
        // step, epoch, wall, train_loss, val_ppl, val_bleu, lr, tokens_per_s: drop wall and speed.
        m.lines()
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                [f[0], f[1], f[3], f[4], f[5], f[6]].join(",")
            })
            .collect()
    };
    assert_eq!(cols(&a), cols(&b));
    assert_ne!(cols(&a), cols(&c), "a different seed must change the run");
    // The tensor bytes after burnpack's header (`NRUB`, version, u32 header length, header): the
    // header holds random parameter ids, the data must be equal to the bit.
    let weights = |run: &PathBuf| outcome(run).1;
    let (wa, wb) = (weights(&a), weights(&b));
    assert!(wa.len() > 1000 && wa == wb, "same seed, different weights");
    assert!(wa != weights(&c));
}

#[test]
fn translate_keeps_one_line_per_input_line() {
    let run = tiny_run("translate", "transformer", "1");
    let run_s = run.to_str().unwrap();
    let base = ["translate", "--model", run_s, "--device", "cpu"];
    // Empty lines stay empty; output order is input order; beam and greedy both work.
    for beam in ["1", "3"] {
        let mut args = base.to_vec();
        args.extend(["--beam", beam]);
        let o = s2s_stdin(&args, "the dog sleeps .\n\nthe cat sees the dog .\n");
        assert!(o.status.success(), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        let lines: Vec<&str> = out.split('\n').collect();
        assert_eq!(lines.len(), 4, "{out:?}"); // three lines and the final newline
        assert_eq!(lines[1], "");
    }
    // n-best in fairseq/Moses format.
    let mut args = base.to_vec();
    args.extend(["--beam", "3", "--nbest", "2"]);
    let o = s2s_stdin(&args, "the dog sleeps .\n");
    let out = text(&o.stdout);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.lines().all(|l| l.starts_with("0 ||| ") && l.split(" ||| ").count() == 3), "{out}");
    // Truncation is a warning, not an error.
    let mut args = base.to_vec();
    args.extend(["--max-src-tokens", "2"]);
    let o = s2s_stdin(&args, "the dog sees the cat .\n");
    assert!(o.status.success() && text(&o.stderr).contains("truncated"), "{}", text(&o.stderr));
    // Attention heatmaps.
    let att = tmp("translate-att");
    let mut args = base.to_vec();
    args.extend(["--attention", att.to_str().unwrap()]);
    let o = s2s_stdin(&args, "the dog sleeps .\nthe cat sleeps .\n");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(std::fs::read_to_string(att.join("2.svg")).unwrap().contains("<rect"));
}

#[test]
fn translate_stops_at_invalid_utf8_or_an_overlong_line_after_writing_the_lines_before() {
    let run = tiny_run("translate-utf8", "lstm", "1");
    let run_s = run.to_str().unwrap();
    let utf8: &[u8] = b"the dog sleeps .\nthe cat sleeps .\nbad \xff line\nthe dog sees the cat .\n";
    // Line 3: one byte over the 1 MiB limit, as if a binary file were piped in.
    let mut overlong = b"the dog sleeps .\nthe cat sleeps .\n".to_vec();
    overlong.extend(std::iter::repeat_n(b'x', s2s_data::line::MAX_LINE_BYTES + 1));
    overlong.extend_from_slice(b"\nthe dog sees the cat .\n");
    for (input, says) in [(utf8, "line 3"), (&overlong[..], "stdin:3")] {
        translate_stops_at_line_3(run_s, input, says);
    }
}

/// `s2s translate` on `input`, whose line 3 is bad: it writes lines 1 and 2 and stops with a message
/// that says `says` and names --skip-invalid; with --skip-invalid, line 3's output is empty.
fn translate_stops_at_line_3(run_s: &str, input: &[u8], says: &str) {
    let go = |extra: &[&str]| {
        let mut args = vec!["translate", "--model", run_s, "--device", "cpu", "--beam", "2"];
        args.extend(extra);
        let mut child = Command::new(env!("CARGO_BIN_EXE_s2s"))
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The child may stop reading at line 3 and exit before the last bytes are written.
        let _ = child.stdin.take().unwrap().write_all(input);
        child.wait_with_output().unwrap()
    };
    let o = go(&[]);
    assert!(!o.status.success());
    assert_eq!(text(&o.stdout).lines().count(), 2, "the two lines before are written");
    assert!(
        text(&o.stderr).contains(says) && text(&o.stderr).contains("--skip-invalid"),
        "{}",
        text(&o.stderr)
    );
    let o = go(&["--skip-invalid"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert_eq!(out.lines().count(), 4);
    assert_eq!(out.lines().nth(2), Some(""));
    assert!(text(&o.stderr).contains("line 3"));
}

#[test]
fn translate_without_a_run_is_a_clear_error() {
    let o = s2s_stdin(&["translate", "--model", "/nonexistent/run", "--device", "cpu"], "x\n");
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("/nonexistent/run"), "{}", text(&o.stderr));
}

/// A two-model experiment on 300 built-in pairs: trains, reports, skips on rerun.
#[test]
fn experiment_trains_reports_and_skips_finished_models() {
    let dir = tmp("experiment");
    let file = dir.join("tiny.toml");
    std::fs::write(
        &file,
        "[data]\nsource = \"builtin\"\npairs = 300\n[tokenizer]\nlevel = \"word\"\n\
         [train]\nbudget = { steps = 3 }\nvalid_every = 3\nbatch = { max_tokens = 512 }\n[decode]\nbeam = 2\n\
         [[model]]\nkind = \"lstm\"\nemb = 8\nhidden = 8\n\
         [[model]]\nkind = \"luong\"\nemb = 8\nhidden = 8\nscore = [\"dot\", \"general\"]\n",
    )
    .unwrap();
    let out = dir.join("runs");
    let args = [
        "experiment",
        "run",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--device",
        "cpu",
        "--quiet",
    ];
    let o = s2s(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    for f in [
        "results.csv",
        "results.json",
        "report.md",
        "report.html",
        "plots/bleu_length.svg",
        "luong-dot/test/scores.json",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    assert!(csv.contains("luong-general") && csv.contains("beam-2"), "{csv}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| lstm | lstm |"), "{md}");
    let again = s2s(&args);
    assert!(again.status.success());
    assert_eq!(
        text(&again.stderr).matches("finished earlier, skipped").count(),
        3,
        "{}",
        text(&again.stderr)
    );
    // `s2s report` regenerates from the run directories alone.
    std::fs::remove_file(out.join("report.html")).unwrap();
    let o = s2s(&["report", out.to_str().unwrap()]);
    assert!(o.status.success() && out.join("report.html").exists(), "{}", text(&o.stderr));
    chromium_renders(&out.join("report.html"));
    // A typo in the file is named with the file.
    std::fs::write(&file, "[[model]]\nkind = \"lstm\"\nhiden = 3\n[train]\nbudget = { steps = 1 }\n")
        .unwrap();
    let o = s2s(&args);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("tiny.toml") && text(&o.stderr).contains("hiden"),
        "{}",
        text(&o.stderr)
    );
}

/// Opens the report in headless Chromium and checks the rendered DOM has the results table
/// and drawn plots. Chromium is required under CI=true (.ci/run installs it).
fn chromium_renders(html: &std::path::Path) {
    let Some(browser) = browser() else { return };
    let profile = tmp("chromium-profile");
    let o = Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", html.canonicalize().unwrap().display()))
        .output()
        .expect("chromium runs");
    let dom = text(&o.stdout);
    assert!(dom.contains("<table id=\"results\">") && dom.contains("luong-general"), "{dom:.2000}");
    assert!(dom.matches("<svg").count() >= 5, "the plots render as inline SVG");
    assert!(dom.contains("<polyline") || dom.contains("<path"), "the curves are drawn");
}

/// Arguments of a tiny Bahdanau run on 300 built-in pairs (config file written beside it).
fn crash_args(run: &std::path::Path, steps: &str) -> Vec<String> {
    let cfg = run.with_extension("toml");
    std::fs::create_dir_all(run.parent().unwrap()).unwrap();
    std::fs::write(
        &cfg,
        "[data]\nsource = \"builtin\"\npairs = 300\n[model]\nkind = \"bahdanau\"\nemb = 16\nhidden = 16\n",
    )
    .unwrap();
    [
        "train",
        "--config",
        cfg.to_str().unwrap(),
        "--steps",
        steps,
        "--valid-every",
        "2",
        "--max-tokens",
        "512",
        "--level",
        "word",
        "--quiet",
        "--device",
        "cpu",
        "--seed",
        "3",
        "--run",
        run.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn run_env(args: &[String], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_s2s"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// [`crash_args`] on wgpu (lavapipe where there is no GPU) with batches of 128 tokens, and `extra`.
fn gpu_crash_args(run: &std::path::Path, extra: &[&str]) -> Vec<String> {
    let mut a = crash_args(run, "12");
    let d = a.iter().position(|x| x == "cpu").unwrap();
    a[d] = "wgpu".into();
    let m = a.iter().position(|x| x == "--max-tokens").unwrap();
    a[m + 1] = "128".into();
    a.extend(extra.iter().map(|x| x.to_string()));
    a
}

/// The same metrics header, and every number of `rows` within `tol` (relative, at least
/// absolute) of `ref_rows`'s.
fn assert_metrics_close(rows: &[String], ref_rows: &[String], tol: f64) {
    let numbers = |rows: &[String]| -> Vec<f64> {
        rows.iter()
            .skip(1)
            .flat_map(|r| r.split(',').map(|f| f.parse::<f64>().unwrap()).collect::<Vec<_>>())
            .collect()
    };
    assert_eq!(rows[0], ref_rows[0]);
    assert_eq!(numbers(rows).len(), numbers(ref_rows).len(), "{rows:?}\n{ref_rows:?}");
    assert!(
        numbers(rows).iter().zip(numbers(ref_rows)).all(|(a, b)| (a - b).abs() <= tol * b.abs().max(1.0)),
        "{rows:?}\n{ref_rows:?}"
    );
}

/// Metrics without the wall-time and speed columns, and the last checkpoint's tensor bytes.
fn outcome(run: &std::path::Path) -> (Vec<String>, Vec<u8>) {
    let m = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    let rows = m
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            [f[0], f[1], f[3], f[4], f[5], f[6]].join(",")
        })
        .collect();
    let ptr: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("checkpoints/last.json")).unwrap()).unwrap();
    let w =
        std::fs::read(run.join("checkpoints").join(ptr["dir"].as_str().unwrap()).join("model.bpk")).unwrap();
    let header = u32::from_le_bytes(w[6..10].try_into().unwrap()) as usize;
    (rows, w[10 + header..].to_vec())
}

/// Crashes at seven points — twice inside a checkpoint write, five SIGKILLs at staggered
/// moments — then resumes: the result equals an uninterrupted run to the bit.
#[test]
fn killed_runs_resume_to_the_uninterrupted_result() {
    let base = tmp("crash");
    let reference = base.join("reference");
    let o = run_env(&crash_args(&reference, "12"), &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let run = base.join("crashed");
    let args = crash_args(&run, "12");
    for step in ["4", "8"] {
        let o = run_env(&args, &[("S2S_FAULT_ABORT_IN_CHECKPOINT", step)]);
        assert!(!o.status.success(), "the fault must kill the run at step {step}");
        assert!(text(&o.stderr).contains("fault injection"), "{}", text(&o.stderr));
    }
    for delay_ms in [150u64, 300, 450, 600, 750] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_s2s"))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
    }
    let o = run_env(&args, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(outcome(&run), outcome(&reference));
    let leftovers: Vec<String> = std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "half-written checkpoints are cleaned up: {leftovers:?}");
}

/// `s2s translate --capture on` (wgpu; lavapipe where there is no GPU) writes what eager
/// decoding writes, greedy and beam, across chunks that replay the graphs the first recorded.
#[test]
fn captured_translation_equals_eager_translation() {
    let Some(_) = s2s_kernels::testing::wgpu_or_skip() else { return };
    let run = tmp("translate-captured").join("run");
    let o = run_env(&crash_args(&run, "12"), &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let input =
        "the dog sleeps .\na man runs .\nthe cat eats the fish .\ntwo women sing a song .\nthe dog runs .\n";
    for beam in ["1", "3"] {
        let out = |capture: &str| {
            let args = ["translate", "--model", run.to_str().unwrap(), "--device", "wgpu", "--beam", beam];
            let mut args: Vec<&str> = args.to_vec();
            args.extend(["--chunk", "2", "--capture", capture]);
            let o = s2s_stdin(&args, input);
            assert!(o.status.success(), "{}", text(&o.stderr));
            let err = text(&o.stderr);
            assert!(!err.contains("warning: captured decoding failed"), "{err}");
            // Chunks of 2, 2 and 1 lines: two shapes recorded, the second chunk replays.
            assert_eq!(err.contains("captured decoding:"), capture == "on", "{err}");
            if capture == "on" {
                assert!(err.contains("(2 batch shapes)"), "{err}");
            }
            text(&o.stdout)
        };
        let eager = out("off");
        assert_eq!(eager.lines().count(), 5);
        assert_eq!(out("on"), eager, "beam {beam}");
    }
}

/// Captured GPU steps (wgpu; lavapipe where there is no GPU) through a crash: killed inside
/// the checkpoint of step 8, resumed — the graphs are recorded afresh and Adam's step count
/// is the trainer's, so the run ends as an uninterrupted one does: the same metrics and
/// weights, to the rounding of burn's timing-tuned kernel choice (a few ulps; see the weights'
/// comparison below).
#[test]
fn killed_captured_gpu_runs_resume_to_the_uninterrupted_result() {
    let Some(_) = s2s_kernels::testing::wgpu_or_skip() else { return };
    let base = tmp("crash-captured");
    let gpu = |run: &std::path::Path| gpu_crash_args(run, &["--capture", "on"]);
    let reference = base.join("reference");
    let o = run_env(&gpu(&reference), &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("replayed"), "the run says what capture did: {}", text(&o.stderr));
    let run = base.join("crashed");
    let o = run_env(&gpu(&run), &[("S2S_FAULT_ABORT_IN_CHECKPOINT", "8")]);
    assert!(!o.status.success() && text(&o.stderr).contains("fault injection"), "{}", text(&o.stderr));
    let o = run_env(&gpu(&run), &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("resuming from"), "{}", text(&o.stderr));
    let ((rows, w), (ref_rows, ref_w)) = (outcome(&run), outcome(&reference));
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-5 * b.abs().max(1.0);
    assert_metrics_close(&rows, &ref_rows, 1e-5);
    assert_eq!(w.len(), ref_w.len());
    let f32s =
        |w: &[u8]| w.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<_>>();
    // The bytes after the header are read as f32 words, metadata among them (NaN equals NaN).
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || close(a as f64, b as f64);
    // As a whole (relative L2 distance ≤ 1e-2), not weight by weight: Adam turns rounding in a
    // (nearly) zero gradient into full-size steps, so a few weights the loss hardly depends on
    // can drift (s2s-train's tests/captured.rs); the metrics above are the sharp check.
    let (w, ref_w) = (f32s(&w), f32s(&ref_w));
    let finite = |(a, b): (&f32, &f32)| a.is_finite() && b.is_finite() && a.abs() < 1e6 && b.abs() < 1e6;
    let pairs: Vec<(f64, f64)> =
        w.iter().zip(&ref_w).filter(|p| finite(*p)).map(|(a, b)| (*a as f64, *b as f64)).collect();
    let diff: f64 = pairs.iter().map(|(a, b)| (a - b).powi(2)).sum::<f64>().sqrt();
    let norm: f64 = pairs.iter().map(|(_, b)| b * b).sum::<f64>().sqrt();
    let differ = w.iter().zip(&ref_w).filter(|(a, b)| !same(**a, **b)).count();
    assert!(diff <= 1e-2 * norm, "{differ} of {} weights differ; relative distance {}", w.len(), diff / norm);
}

/// SIGINT: the step finishes, a checkpoint is written, exit 0 with how to resume.
#[test]
fn sigint_checkpoints_and_exits_cleanly() {
    let run = tmp("sigint").join("run");
    let args = crash_args(&run, "100000");
    let child = Command::new(env!("CARGO_BIN_EXE_s2s"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first checkpoint, so the run is past start-up, then interrupt.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !run.join("checkpoints/last.json").exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "exit 0 after SIGINT: {}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("interrupted at step") && err.contains("resume"), "{err}");
    let manifest = std::fs::read_to_string(run.join("run.json")).unwrap();
    assert!(manifest.contains("\"interrupted\""));
    let step: u64 =
        err.split("interrupted at step ").nth(1).unwrap().split(':').next().unwrap().parse().unwrap();
    // Resuming with a budget two steps further finishes the run.
    let more = crash_args(&run, &(step + 2).to_string());
    let o = run_env(&more, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains(&format!("step {step}")), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("test: BLEU"));
}

/// Resuming a CPU run loads its optimizer state without starting a GPU backend: no Vulkan
/// loader warnings (lavapipe prints one per probe when XDG_RUNTIME_DIR is unset), and the same
/// result. `TMPDIR` names a file, so that s2s cannot give itself a private XDG_RUNTIME_DIR
/// (which silences those warnings) and a GPU backend started would still show.
#[test]
fn resuming_on_the_cpu_starts_no_gpu_backend() {
    let run = tmp("resume-cpu").join("run");
    let first = run_env(&crash_args(&run, "2"), &[]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let not_a_dir = tmp("resume-cpu-tmpdir").join("file");
    std::fs::write(&not_a_dir, "").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_s2s"))
        .args(crash_args(&run, "4"))
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", &not_a_dir)
        .env_remove("BURN_DEVICE")
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("resuming from"), "{err}");
    assert!(!err.contains("XDG_RUNTIME_DIR"), "a GPU backend was started: {err}");
}

/// A non-finite loss stops training naming the step, keeping the last good checkpoint; with
/// `skip_nonfinite` the batch is skipped and counted.
#[test]
fn nonfinite_loss_stops_or_is_skipped() {
    let run = tmp("nan").join("run");
    let args = crash_args(&run, "4");
    let o = run_env(&args, &[("S2S_FAULT_NAN_AT_STEP", "3")]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("step 3") && err.contains("NaN"), "{err}");
    let ptr = std::fs::read_to_string(run.join("checkpoints/last.json")).unwrap();
    assert!(ptr.contains("\"step\":2"), "{ptr}");
    let mut skip = args.clone();
    skip.push("--skip-nonfinite".into());
    let o = run_env(&skip, &[("S2S_FAULT_NAN_AT_STEP", "3")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("skipped 1 batches"), "{}", text(&o.stderr));
}

/// Resuming with another model configuration is refused, naming the key, and leaves the run
/// usable; a truncated or damaged checkpoint, one of another configuration, and a truncated
/// tokenizer are each reported with their own remedy, not half-loaded.
#[test]
fn bad_resumes_and_corrupt_files_are_reported() {
    let run = tmp("corrupt").join("run");
    let args = crash_args(&run, "2");
    let o = run_env(&args, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let manifest = std::fs::read_to_string(run.join("run.json")).unwrap();
    let mut other = crash_args(&run, "4");
    other.extend(["--hidden".to_string(), "24".to_string()]);
    let o = run_env(&other, &[]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("model.hidden: 16 in run.json, 24 now"), "{err}");
    assert_eq!(std::fs::read_to_string(run.join("run.json")).unwrap(), manifest, "run.json untouched");
    let translate =
        |input: &str| s2s_stdin(&["translate", "--model", run.to_str().unwrap(), "--device", "cpu"], input);
    assert!(translate("the dog sleeps .\n").status.success());
    // A truncated model file.
    let ptr: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("checkpoints/best.json")).unwrap()).unwrap();
    let model = run.join("checkpoints").join(ptr["dir"].as_str().unwrap()).join("model.bpk");
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..bytes.len() / 2]).unwrap();
    let o = translate("the dog sleeps .\n");
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("model.bpk") && err.contains("truncated"), "{err}");
    // One byte changed, the length kept: the CRC-32 tells.
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x55;
    std::fs::write(&model, &flipped).unwrap();
    let err = text(&translate("the dog sleeps .\n").stderr);
    assert!(err.contains("model.bpk") && err.contains("damaged"), "{err}");
    // Weights of another configuration (written without a record of their own): named so,
    // with the remedy for that.
    let other = tmp("corrupt-other").join("run");
    let mut wide = crash_args(&other, "2");
    wide.extend(["--hidden".to_string(), "24".to_string()]);
    assert!(run_env(&wide, &[]).status.success());
    let optr: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(other.join("checkpoints/best.json")).unwrap()).unwrap();
    let theirs = other.join("checkpoints").join(optr["dir"].as_str().unwrap()).join("model.bpk");
    let record = model.with_file_name("files.json");
    let files = std::fs::read(&record).unwrap();
    std::fs::remove_file(&record).unwrap();
    std::fs::copy(&theirs, &model).unwrap();
    let err = text(&translate("the dog sleeps .\n").stderr);
    assert!(err.contains("another model configuration") && err.contains("run.json"), "{err}");
    std::fs::write(&record, files).unwrap();
    std::fs::write(&model, &bytes).unwrap();
    assert!(translate("the dog sleeps .\n").status.success(), "restored");
    // A truncated tokenizer.
    let tok = run.join("tokenizer/joint.json");
    let t = std::fs::read(&tok).unwrap();
    std::fs::write(&tok, &t[..t.len() / 3]).unwrap();
    let o = translate("the dog sleeps .\n");
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("joint.json") && err.contains("corrupt"), "{err}");
}

/// Random bytes and very long lines: no panic, one output line per input line.
#[test]
fn translate_survives_random_bytes_and_very_long_lines() {
    let run = tiny_run("translate-fuzz", "transformer", "1");
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut input = Vec::new();
    let mut lines = 0;
    for i in 0..40 {
        if i % 10 == 0 {
            input.extend(std::iter::repeat_n(b"the dog sees the cat ".as_slice(), 2000).flatten());
            input.push(b'\n');
            lines += 1;
            continue;
        }
        let len = (rng % 200) as usize;
        for _ in 0..len {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let b = (rng % 256) as u8;
            input.push(if b == b'\n' { b' ' } else { b });
        }
        input.push(b'\n');
        lines += 1;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_s2s"))
        .args([
            "translate",
            "--model",
            run.to_str().unwrap(),
            "--device",
            "cpu",
            "--beam",
            "2",
            "--skip-invalid",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("panicked"));
    assert_eq!(o.stdout.iter().filter(|&&b| b == b'\n').count(), lines);
    assert!(text(&o.stderr).contains("truncated"));
}

/// A missing file is named with the operating system's reason, once.
#[test]
fn a_missing_file_is_named_with_its_reason_once() {
    let d = tmp("missing");
    let missing = d.join("missing.txt");
    let o = s2s(&["score", "--hyp", missing.to_str().unwrap(), "--ref", missing.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains(missing.to_str().unwrap()), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

/// `s2s bench --lstm-step --json` measures the bench's `lstm` shape (hidden 512, 64 sentences,
/// 24 steps) and reports ratios that are its own figures divided by the best product's.
#[test]
fn bench_lstm_step_reports_the_step_beside_the_best_product_rate() {
    let o = s2s(&["bench", "--lstm-step", "--steps", "1", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["batch"].as_u64(), v["hidden"].as_u64(), v["time"].as_u64()),
        (Some(64), Some(512), Some(24))
    );
    let products = v["products"].as_array().unwrap();
    assert_eq!(products.len(), 4);
    let best = products.iter().map(|p| p["gflops"].as_f64().unwrap()).fold(0.0, f64::max);
    assert!(best > 0.0 && best == v["best_product_gflops"].as_f64().unwrap());
    for (rate, ratio) in [
        ("decode_layer_gflops", "decode_ratio"),
        ("train_forward_gflops", "train_forward_ratio"),
        ("train_backward_gflops", "train_backward_ratio"),
        ("train_step_gflops", "train_step_ratio"),
    ] {
        let (rate, ratio) = (v[rate].as_f64().unwrap(), v[ratio].as_f64().unwrap());
        assert!(rate > 0.0 && (ratio - rate / best).abs() < 1e-9, "{rate} / {best} vs {ratio}");
    }
}

/// `--lstm-step` measures CPU kernels: asking for it on wgpu is refused, with the remedy.
#[test]
fn bench_lstm_step_refuses_wgpu() {
    let o = s2s(&["bench", "--lstm-step", "--device", "wgpu"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("drop --device wgpu"), "{}", text(&o.stderr));
}

/// `s2s bench --capture on --no-decode` trains the launch-bound LSTM replayed from a captured
/// graph on wgpu (lavapipe where there is no GPU) and reports the host time a step, split by
/// thread, and no decoding; the launch probe reports both paths; the CPU refuses both, saying why.
#[test]
fn bench_captures_the_gpu_step_and_probes_launches() {
    let Some(_) = s2s_kernels::testing::wgpu_or_skip() else { return };
    let shapes = concat!(env!("CARGO_MANIFEST_DIR"), "/../../experiments/bench/launch-bound.json");
    let args = ["bench", "--device", "wgpu", "--shapes", shapes, "--models", "lstm", "--steps", "2"];
    let o = s2s(&[&args[..], &["--capture", "on", "--no-decode", "--json"]].concat());
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["train_tokens_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(v["decode_sentences_per_s"].as_f64(), Some(0.0), "{v}");
    let split = &v["train_host_split_ms"];
    let host = v["train_host_ms"].as_f64().unwrap();
    let sum = split["caller"].as_f64().unwrap() + split["device_service"].as_f64().unwrap();
    assert!(host > 0.0 && (host - sum).abs() < 1e-9, "{v}");

    let o = s2s(&[
        "bench",
        "--device",
        "wgpu",
        "--launch-probe",
        "--probe-kernels",
        "20",
        "--steps",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["kernels"].as_u64(), Some(20));
    assert!(
        v["eager"]["host_us"].as_f64().unwrap() > 0.0 && v["replay"]["wall_us"].as_f64().unwrap() > 0.0,
        "{v}"
    );

    let o = s2s(&["bench", "--device", "cpu", "--launch-probe"]);
    assert!(!o.status.success() && text(&o.stderr).contains("needs a GPU device"), "{}", text(&o.stderr));
    let o = s2s(&[
        &["bench", "--device", "cpu", "--shapes", shapes, "--models", "lstm"][..],
        &["--capture", "on"],
    ]
    .concat());
    assert!(
        !o.status.success() && text(&o.stderr).contains("capture needs a GPU device"),
        "{}",
        text(&o.stderr)
    );
}

/// `s2s bench --product-probe` times every product of a training step on the CPU (f32, and the
/// weight gradients whole and split), one JSON line each; a shapes file without a Transformer
/// or an LSTM shape is refused, naming what is missing.
#[test]
fn bench_probes_the_step_products_and_names_missing_shapes() {
    let shapes = concat!(env!("CARGO_MANIFEST_DIR"), "/../../experiments/bench/launch-bound.json");
    let o =
        s2s(&["bench", "--device", "cpu", "--product-probe", "--shapes", shapes, "--steps", "1", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<serde_json::Value> =
        text(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let named = |dtype: &str| lines.iter().filter(|v| v["dtype"] == dtype).count();
    assert_eq!(named("f32"), 9, "{lines:?}");
    assert_eq!((named("f32 aᵀb"), named("f32 aᵀb split")), (2, 2), "{lines:?}");
    assert!(lines.iter().all(|v| v["tflops"].as_f64().unwrap() > 0.0), "{lines:?}");

    let dir = tmp("product-probe");
    let lstm_only = dir.join("lstm-only.json");
    std::fs::write(
        &lstm_only,
        r#"{"batch": {"sentences": 2, "src_len": 3, "tgt_len": 3, "src_vocab": 8, "tgt_vocab": 8},
            "models": {"lstm": {"family": "lstm", "emb": 4, "hidden": 4, "layers": 1, "dropout": 0.0}}}"#,
    )
    .unwrap();
    let o = s2s(&["bench", "--device", "cpu", "--product-probe", "--shapes", lstm_only.to_str().unwrap()]);
    assert!(!o.status.success() && text(&o.stderr).contains("`transformer` shape"), "{}", text(&o.stderr));
}

/// `s2s data prepare` prepares once, reuses on the second call, and a training run on the same
/// files and settings finds the same prepared dataset; `data stats --prepared` reads it.
#[test]
fn data_prepare_is_shared_with_training_and_filters_are_counted() {
    let base = tmp("prepare");
    let data = base.join("data");
    let o = s2s(&["data", "synth", "--pairs", "400", "--out", data.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // A duplicated pair and a copy, for the filters to find.
    let (src, tgt) = (data.join("train.src"), data.join("train.tgt"));
    let mut s = std::fs::read_to_string(&src).unwrap();
    let mut t = std::fs::read_to_string(&tgt).unwrap();
    let first = (s.lines().next().unwrap().to_string(), t.lines().next().unwrap().to_string());
    s.push_str(&format!("{}\nsame words\n", first.0));
    t.push_str(&format!("{}\nsame words\n", first.1));
    std::fs::write(&src, s).unwrap();
    std::fs::write(&tgt, t).unwrap();
    let cache = base.join("cache");
    let prep = |extra: &[&str]| {
        let mut args = vec![
            "data",
            "prepare",
            "--src",
            src.to_str().unwrap(),
            "--tgt",
            tgt.to_str().unwrap(),
            "--level",
            "word",
            "--cache",
            cache.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        s2s(&args)
    };
    let o = prep(&["--dedup", "--drop-copies"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("prepared in") && out.contains("duplicate") && out.contains("cop"), "{out}");
    let dir = out.lines().next().unwrap().to_string();
    assert!(std::path::Path::new(&dir).join("COMPLETE").exists(), "{dir}");
    let again = prep(&["--dedup", "--drop-copies"]);
    assert!(text(&again.stdout).contains("already prepared"), "{}", text(&again.stdout));
    assert_eq!(text(&again.stdout).lines().next().unwrap(), dir);
    let stats = s2s(&["data", "stats", "--prepared", &dir]);
    assert!(stats.status.success() && text(&stats.stdout).contains("padding"), "{}", text(&stats.stdout));

    // Training on the same files and settings reuses that dataset (S2S_DATA_CACHE).
    let run = base.join("run");
    let cfg = base.join("run.toml");
    let p = |f: &str| data.join(f).to_str().unwrap().to_string();
    std::fs::write(
        &cfg,
        format!(
            "[data]\nsource = \"files\"\ntrain = {{ src = \"{}\", tgt = \"{}\" }}\n\
             valid = {{ src = \"{}\", tgt = \"{}\" }}\nfilter = {{ dedup = true, drop_copies = true }}\n\
             [tokenizer]\nlevel = \"word\"\n[model]\nkind = \"lstm\"\nemb = 8\nhidden = 8\n",
            p("train.src"),
            p("train.tgt"),
            p("valid.src"),
            p("valid.tgt")
        ),
    )
    .unwrap();
    let args: Vec<String> =
        ["train", "--config", cfg.to_str().unwrap(), "--steps", "2", "--valid-every", "2"]
            .iter()
            .chain(&["--quiet", "--device", "cpu", "--run", run.to_str().unwrap()])
            .map(|s| s.to_string())
            .collect();
    let o = run_env(&args, &[("S2S_DATA_CACHE", cache.to_str().unwrap())]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(manifest["prepared"].as_str().unwrap(), dir);
    assert_eq!(manifest["filter_report"]["duplicates"], 1);
    assert_eq!(manifest["filter_report"]["copies"], 1);
    assert!(text(&o.stderr).contains("train filters"), "{}", text(&o.stderr));
}

/// keep_last keeps the last N checkpoints; `s2s average` writes their mean as a new
/// checkpoint that translate can use, leaving the originals as they were.
#[test]
fn checkpoints_are_kept_averaged_and_translated_with() {
    let base = tmp("average");
    let run = base.join("run");
    let cfg = base.join("run.toml");
    std::fs::write(
        &cfg,
        "[data]\nsource = \"builtin\"\npairs = 300\n[model]\nkind = \"luong\"\nemb = 8\nhidden = 8\n\
         [train]\nkeep_last = 3\n",
    )
    .unwrap();
    let args: Vec<String> =
        ["train", "--config", cfg.to_str().unwrap(), "--steps", "5", "--valid-every", "1"]
            .iter()
            .chain(&["--level", "word", "--quiet", "--device", "cpu", "--run", run.to_str().unwrap()])
            .map(|s| s.to_string())
            .collect();
    let o = run_env(&args, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let steps = |dir: &std::path::Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("step-"))
            .collect();
        v.sort();
        v
    };
    let ckpts = run.join("checkpoints");
    let kept = steps(&ckpts);
    // The last three steps (step 5 saved twice: validated, then as the run ended), and the best.
    for k in ["step-00000003", "step-00000004", "step-00000005-2"] {
        assert!(kept.contains(&k.to_string()), "{kept:?}");
    }
    let best: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ckpts.join("best.json")).unwrap()).unwrap();
    let best = best["dir"].as_str().unwrap();
    for k in &kept {
        assert!(
            ["step-00000003", "step-00000004", "step-00000005-2", best].contains(&k.as_str()),
            "{kept:?}"
        );
    }
    let before: Vec<Vec<u8>> =
        kept.iter().map(|k| std::fs::read(ckpts.join(k).join("model.bpk")).unwrap()).collect();
    let o = s2s(&["average", run.to_str().unwrap(), "--last", "3"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).trim().ends_with("average-last-3"), "{}", text(&o.stdout));
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ckpts.join("average-last-3/averaged.json")).unwrap())
            .unwrap();
    assert_eq!(rec["steps"], serde_json::json!([5, 4, 3]));
    let after: Vec<Vec<u8>> =
        kept.iter().map(|k| std::fs::read(ckpts.join(k).join("model.bpk")).unwrap()).collect();
    assert_eq!(before, after, "the originals are untouched");
    let o = s2s_stdin(
        &[
            "translate",
            "--model",
            run.to_str().unwrap(),
            "--checkpoint",
            "average-last-3",
            "--device",
            "cpu",
            "--beam",
            "2",
        ],
        "eins zwei\n",
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).lines().count(), 1);
    // More than were kept: refused, naming keep_last.
    let o = s2s(&["average", run.to_str().unwrap(), "--last", "9"]);
    assert!(!o.status.success() && text(&o.stderr).contains("keep_last"), "{}", text(&o.stderr));
    // An unknown checkpoint name lists the ones there are.
    let o = s2s_stdin(&["translate", "--model", run.to_str().unwrap(), "--checkpoint", "nope"], "a\n");
    assert!(!o.status.success() && text(&o.stderr).contains("average-last-3"), "{}", text(&o.stderr));
}

/// Several --model decode as an ensemble (any mix of kinds sharing a vocabulary); a run with
/// another vocabulary is refused; --sample is reproducible for a seed.
#[test]
fn translate_ensembles_and_samples() {
    let a = tiny_run("ens-a", "lstm", "1");
    let b = tiny_run("ens-b", "transformer", "2");
    let input = "eins zwei drei\n\nvier\n";
    let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());
    let o =
        s2s_stdin(&["translate", "--model", a_s, "--model", b_s, "--device", "cpu", "--beam", "3"], input);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).lines().count(), 3);
    // Another vocabulary: a BPE run.
    let c = tmp("ens-c").join("run");
    let cfg = tmp("ens-c-cfg").join("run.toml");
    std::fs::write(
        &cfg,
        "[data]\nsource = \"builtin\"\npairs = 300\n[model]\nkind = \"lstm\"\nemb = 8\nhidden = 8\n",
    )
    .unwrap();
    let o = s2s(&[
        "train",
        "--config",
        cfg.to_str().unwrap(),
        "--steps",
        "1",
        "--valid-every",
        "1",
        "--vocab-size",
        "300",
        "--quiet",
        "--device",
        "cpu",
        "--run",
        c.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o =
        s2s_stdin(&["translate", "--model", a_s, "--model", c.to_str().unwrap(), "--device", "cpu"], input);
    assert!(!o.status.success() && text(&o.stderr).contains("vocabularies"), "{}", text(&o.stderr));
    // Sampling: the same seed, the same output, whatever the batch size; nbest shows scores.
    let sample = |seed: &str, batch: &str| {
        let o = s2s_stdin(
            &[
                "translate",
                "--model",
                b_s,
                "--device",
                "cpu",
                "--sample",
                "--top-k",
                "5",
                "--seed",
                seed,
                "--batch-size",
                batch,
            ],
            &"eins zwei drei vier\nfünf sechs\nsieben\n".repeat(4),
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout)
    };
    let s1 = sample("4", "64");
    assert_eq!(s1, sample("4", "1"));
    assert_eq!(s1.lines().count(), 12);
    assert_ne!(s1, sample("5", "64"));
    let o = s2s_stdin(&["translate", "--model", b_s, "--sample", "--temperature", "0"], "a\n");
    assert!(!o.status.success() && text(&o.stderr).contains("temperature"), "{}", text(&o.stderr));
}

/// `[decode] average_last = N`: each model keeps its last N checkpoints and is tested on their
/// average (one model here; the scores come from the averaged checkpoint).
#[test]
fn experiment_tests_the_average_of_the_last_checkpoints() {
    let dir = tmp("experiment-average");
    let file = dir.join("avg.toml");
    std::fs::write(
        &file,
        "[data]\nsource = \"builtin\"\npairs = 300\n[tokenizer]\nlevel = \"word\"\n\
         [train]\nbudget = { steps = 4 }\nvalid_every = 1\nbatch = { max_tokens = 512 }\n\
         [decode]\nbeam = 1\naverage_last = 3\n\
         [[model]]\nkind = \"lstm\"\nemb = 8\nhidden = 8\n",
    )
    .unwrap();
    let out = dir.join("runs");
    let o = s2s(&[
        "experiment",
        "run",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--device",
        "cpu",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("testing the average of the checkpoints of steps 4, 3, 2"), "{err}");
    let rec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("lstm/checkpoints/average-last-3/averaged.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(rec["steps"], serde_json::json!([4, 3, 2]));
    assert!(out.join("lstm/test/scores.json").exists());
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(&file).unwrap().replace("average_last = 3", "average_last = 0"),
    )
    .unwrap();
    let o =
        s2s(&["experiment", "run", bad.to_str().unwrap(), "--out", out.to_str().unwrap(), "--device", "cpu"]);
    assert!(!o.status.success() && text(&o.stderr).contains("average_last"), "{}", text(&o.stderr));
}

/// `s2s course list` names the claims; `run NAME --quick` writes the page with the verdict;
/// an unknown name is refused with the remedy.
#[test]
fn course_lists_runs_and_judges_a_claim() {
    let o = s2s(&["course", "list"]);
    assert!(o.status.success());
    let list = text(&o.stdout);
    assert!(list.contains("permutation") && list.contains("vanishing-gradient"), "{list}");
    let out = tmp("course");
    let o = s2s(&["course", "run", "permutation", "--quick", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("1 of 1 claims hold"), "{}", text(&o.stderr));
    let page = std::fs::read_to_string(out.join("course.md")).unwrap();
    assert!(page.contains("§ Invarianze e Simmetrie") && page.contains("**holds**"), "{page}");
    let o = s2s(&["course", "run", "nothing-of-the-sort", "--out", out.to_str().unwrap()]);
    assert!(!o.status.success() && text(&o.stderr).contains("s2s course list"), "{}", text(&o.stderr));
    // The knobs are options: the seeds given are the seeds judged, and the page says so.
    let o = s2s(&["course", "run", "bleu-word-order", "--seeds", "2,5", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let page = std::fs::read_to_string(out.join("course.md")).unwrap();
    assert!(page.contains("seeds 2, 5; d_k 64") && page.contains("(met for 0 of 2 seeds)"), "{page}");
    let o = s2s(&["course", "run", "heads-cost", "--heads", "1,3", "--out", out.to_str().unwrap()]);
    assert!(!o.status.success() && text(&o.stderr).contains("--heads"), "{}", text(&o.stderr));
}

/// Mixed precision (wgpu; lavapipe where there is no GPU) through an overflow and a crash: the
/// gradients of step 3 overflow (injected), so the step is skipped and the loss scale halved;
/// killed inside the checkpoint of step 8 and resumed, the run ends as an uninterrupted one
/// with the same overflow does (the scaler is in the checkpoint): the same metrics, to the
/// rounding of burn's timing-tuned kernel choice. On the CPU `--precision mixed` is refused.
#[test]
fn mixed_precision_skips_overflows_and_resumes_to_the_uninterrupted_result() {
    let o = run_env(
        &[crash_args(&tmp("mixed-cpu").join("run"), "4"), vec!["--precision".into(), "mixed".into()]]
            .concat(),
        &[],
    );
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("precision = \"f32\""), "{}", text(&o.stderr));
    let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() else { return };
    if !s2s_kernels::ops::has_f16_products(&gpu) {
        // An adapter without f16 (wgpu's GL fallback): refused, naming it, before any step.
        let run = tmp("mixed-no-f16").join("run");
        let o = run_env(&gpu_crash_args(&run, &["--capture", "off", "--precision", "mixed"]), &[]);
        let said = text(&o.stderr);
        assert!(
            !o.status.success() && said.contains("--precision f32") && said.contains("adapter"),
            "{said}"
        );
        assert!(!said.contains("panicked"), "{said}");
        let Some(_) = s2s_kernels::testing::wgpu_f16_or_skip() else { return };
    }
    let base = tmp("mixed");
    let gpu = |run: &std::path::Path| gpu_crash_args(run, &["--capture", "off", "--precision", "mixed"]);
    let overflow = ("S2S_FAULT_OVERFLOW_AT_STEP", "3");
    let reference = base.join("reference");
    let o = run_env(&gpu(&reference), &[overflow]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let said = text(&o.stderr);
    assert!(said.contains("loss scale 64 at the end, 1 overflow steps skipped"), "{said}");
    // TensorBoard has the scale at every validation, and the (read back) gradient norm.
    let tb = s2s_train::tensorboard::scalars(&reference).unwrap();
    let tagged = |tag: &str| -> Vec<(i64, f32)> {
        tb.iter().filter(|(_, t, _)| t == tag).map(|(s, _, v)| (*s, *v)).collect()
    };
    let scale = tagged("train/loss_scale");
    assert_eq!(scale.iter().map(|p| p.0).collect::<Vec<_>>(), [2, 4, 6, 8, 10, 12], "{tb:?}");
    assert_eq!(scale.last().map(|p| p.1), Some(64.0), "{scale:?}");
    assert!(tagged("train/grad_norm").iter().all(|p| p.1.is_finite() && p.1 > 0.0));
    assert_eq!(tagged("train/grad_norm").len(), 6);
    let run = base.join("crashed");
    let o = run_env(&gpu(&run), &[overflow, ("S2S_FAULT_ABORT_IN_CHECKPOINT", "8")]);
    assert!(!o.status.success() && text(&o.stderr).contains("fault injection"), "{}", text(&o.stderr));
    let o = run_env(&gpu(&run), &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("resuming from"), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("1 overflow steps skipped"), "{}", text(&o.stderr));
    let ((rows, _), (ref_rows, _)) = (outcome(&run), outcome(&reference));
    assert_metrics_close(&rows, &ref_rows, 1e-4);
}

/// SIGINT during `course run`: the training under way finishes its step and checkpoints, the
/// claim is not judged, the page is not written, and the exit says how to resume.
#[test]
fn sigint_stops_a_course_run_without_judging_the_claim() {
    let out = tmp("course-sigint");
    let child = Command::new(env!("CARGO_BIN_EXE_s2s"))
        .args(["course", "run", "bottleneck", "--quick", "--out", out.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for a first checkpoint in any of the claim's runs, then interrupt.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let checkpointed = || {
        std::fs::read_dir(out.join("runs"))
            .map(|d| d.flatten().any(|e| e.path().join("checkpoints/last.json").exists()))
            .unwrap_or(false)
    };
    while !checkpointed() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let o = child.wait_with_output().unwrap();
    let err = text(&o.stderr);
    assert!(!o.status.success(), "an interrupted course run is not a finished one: {err}");
    assert!(err.contains("interrupted during `bottleneck`") && err.contains("resume"), "{err}");
    assert!(!out.join("course.md").exists(), "no page from a claim that did not finish");
}

/// The names of the entries of `dir/checkpoints`, sorted.
fn checkpoint_names(run: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Waits (at most a minute) until `run`'s lock file holds `pid`: the process holds the lock.
fn wait_for_lock(run: &std::path::Path, pid: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let holds = || std::fs::read_to_string(run.join(".lock")).is_ok_and(|t| t.trim() == pid.to_string());
    while !holds() {
        assert!(std::time::Instant::now() < deadline, "PID {pid} never locked {}", run.display());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Two trainings started together into one run directory: one is refused at once, naming the
/// directory and the other's PID, before it reads or writes anything; the other's metrics and
/// checkpoints are those of a lone run. A training killed while it holds the lock leaves its
/// lock file behind, and no lock: the next one resumes.
#[test]
fn a_run_directory_takes_one_writer_at_a_time() {
    let base = tmp("lock");
    let lone = base.join("lone");
    let o = run_env(&crash_args(&lone, "40"), &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let run = base.join("shared");
    let args = crash_args(&run, "40");
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_s2s"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (pa, pb) = (a.id(), b.id());
    let (oa, ob) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let (lost, winner) = match (oa.status.success(), ob.status.success()) {
        (true, false) => (ob, pa),
        (false, true) => (oa, pb),
        _ => panic!(
            "exactly one of two trainings into one directory must be refused:\n{}\n---\n{}",
            text(&oa.stderr),
            text(&ob.stderr)
        ),
    };
    let err = text(&lost.stderr);
    let says = format!("{} is being written by another s2s process (PID {winner})", run.display());
    assert!(err.contains(&says), "{err}");
    assert!(!err.contains("model: "), "refused before it prepared anything: {err}");
    assert_eq!(outcome(&run), outcome(&lone));
    assert_eq!(checkpoint_names(&run), checkpoint_names(&lone));

    let killed = base.join("killed");
    let args = crash_args(&killed, "40");
    let mut child =
        Command::new(env!("CARGO_BIN_EXE_s2s")).args(&args).stderr(Stdio::null()).spawn().unwrap();
    wait_for_lock(&killed, child.id());
    let _ = child.kill(); // SIGKILL: the lock file stays, naming a process that is gone.
    let _ = child.wait();
    assert!(killed.join(".lock").exists());
    let o = run_env(&args, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(outcome(&killed), outcome(&lone));
}

/// While another process holds a directory's lock (this test), every command that writes it is
/// refused with its name and the holder's PID — train, average, experiment, report, course —
/// and writes nothing; translate, a reader, takes no lock.
#[test]
fn every_writer_is_refused_while_a_directory_is_locked() {
    let base = tmp("locked");
    let lock = |dir: &std::path::Path| {
        std::fs::create_dir_all(dir).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(".lock"))
            .unwrap();
        f.try_lock().unwrap();
        writeln!(f, "{}", std::process::id()).unwrap();
        f
    };
    let refused = |o: &Output, dir: &std::path::Path| {
        let says =
            format!("{} is being written by another s2s process (PID {})", dir.display(), std::process::id());
        assert!(!o.status.success() && text(&o.stderr).contains(&says), "{}", text(&o.stderr));
    };
    let run = base.join("run");
    let args = crash_args(&run, "2");
    let o = run_env(&args, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let before = checkpoint_names(&run);
    let held = lock(&run);
    refused(&run_env(&crash_args(&run, "4"), &[]), &run);
    refused(&s2s(&["average", run.to_str().unwrap(), "--last", "1"]), &run);
    assert_eq!(checkpoint_names(&run), before, "nothing written");
    let o = s2s_stdin(&["translate", "--model", run.to_str().unwrap(), "--device", "cpu"], "a b\n");
    assert!(o.status.success(), "{}", text(&o.stderr));
    drop(held);

    let file = base.join("tiny.toml");
    std::fs::write(&file, "[train]\nbudget = { steps = 1 }\n[[model]]\nkind = \"lstm\"\n").unwrap();
    let out = base.join("exp");
    let _held = lock(&out);
    let o = s2s(&[
        "experiment",
        "run",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--device",
        "cpu",
    ]);
    refused(&o, &out);
    assert!(!out.join("experiment.json").exists());
    std::fs::write(out.join("experiment.json"), r#"{"name": "tiny", "source": "tiny.toml", "entries": []}"#)
        .unwrap();
    refused(&s2s(&["report", out.to_str().unwrap()]), &out);
    assert!(!out.join("report.md").exists());
    let course = base.join("course");
    let _held = lock(&course);
    refused(&s2s(&["course", "run", "permutation", "--quick", "--out", course.to_str().unwrap()]), &course);
    assert!(!course.join("runs").exists() && !course.join("course.md").exists());
}

/// Experiment and model names that are no file names — that would leave `--out` (`../../x`),
/// be `--out` itself (``, `.`) or a nested path (`a/b`) — are refused at their line of the
/// file, and nothing is written anywhere.
#[test]
fn names_that_are_no_file_names_are_refused_at_their_line() {
    let base = tmp("names");
    let file = base.join("exp.toml");
    let out = base.join("a").join("b").join("out");
    let model = |name: &str| {
        format!(
            "[train]\nbudget = {{ steps = 1 }}\n[[model]]\nkind = \"lstm\"\nname = \"{name}\"\nhidden = 8\n"
        )
    };
    let experiment = |name: &str| format!("# an experiment\nname = \"{name}\"\n[[model]]\nkind = \"lstm\"\n");
    let mut cases = Vec::new();
    for name in ["../../escaped", "", "a/b", ".", ".."] {
        cases.push((model(name), format!("exp.toml:5: [[model]] #1 `name`: `{name}` is not a name")));
    }
    for name in ["../../e", "", "a/b", "."] {
        cases.push((experiment(name), format!("exp.toml:2: `name`: `{name}` is not a name")));
    }
    for (toml, says) in cases {
        std::fs::write(&file, &toml).unwrap();
        for with_out in [true, false] {
            let mut args = vec!["experiment", "run", file.to_str().unwrap(), "--device", "cpu"];
            if with_out {
                args.extend(["--out", out.to_str().unwrap()]);
            }
            let o = Command::new(env!("CARGO_BIN_EXE_s2s")).args(&args).current_dir(&base).output().unwrap();
            let err = text(&o.stderr);
            assert!(!o.status.success() && err.contains(&says), "{toml}\n{err}");
            assert!(err.contains("ASCII letters, digits"), "the message states the rule: {err}");
            let left: Vec<_> = std::fs::read_dir(&base).unwrap().map(|e| e.unwrap().file_name()).collect();
            assert_eq!(left, ["exp.toml"], "nothing written: {toml}");
        }
    }
}

/// Bad numbers are refused naming their flag, by clap's parser (exit 2) or by a check (exit 1),
/// never by a panic (101) or an abort (134), and never replaced by a value of the program's
/// choosing. Each is refused before anything is read, so no run directory is needed.
#[test]
fn bad_numbers_are_refused_naming_their_flag() {
    let dir = tmp("bad-numbers");
    let hyp = dir.join("hyp.txt");
    std::fs::write(&hyp, "a b c\n").unwrap();
    let h = hyp.to_str().unwrap();
    let run = dir.join("no-run");
    let r = run.to_str().unwrap();
    let experiment = dir.join("hidden0.toml");
    std::fs::write(&experiment, "[train]\nbudget = { steps = 1 }\n[[model]]\nkind = \"lstm\"\nhidden = 0\n")
        .unwrap();
    let config = dir.join("run.toml");
    std::fs::write(&config, "[model]\nkind = \"transformer\"\nffn = 0\n").unwrap();
    let translate = |extra: &[&'static str]| [&["translate", "--model", r][..], extra].concat();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (translate(&["--alpha", "NaN"]), "--alpha"),
        (translate(&["--alpha", "inf"]), "--alpha"),
        (translate(&["--alpha", "-1"]), "--alpha"),
        (translate(&["--alpha=-1"]), "--alpha"),
        (translate(&["--beam", "0"]), "--beam"),
        (translate(&["--max-src-tokens", "0"]), "--max-src-tokens"),
        (translate(&["--batch-size", "0"]), "--batch-size"),
        (translate(&["--chunk", "0"]), "--chunk"),
        (translate(&["--sample", "--temperature", "-1"]), "--temperature"),
        (translate(&["--sample", "--top-p", "nan"]), "--top-p"),
        (
            vec!["score", "--hyp", h, "--hyp", h, "--ref", h, "--paired-bs", "--paired-bs-n", "0"],
            "--paired-bs-n",
        ),
        (
            vec!["score", "--hyp", h, "--hyp", h, "--ref", h, "--paired-ar", "--paired-ar-n", "0"],
            "--paired-ar-n",
        ),
        (vec!["studio", r, "--workers", "0"], "--workers"),
        (vec!["studio", r, "--max-beam", "0"], "--max-beam"),
        (vec!["studio", r, "--max-src-tokens", "0"], "--max-src-tokens"),
        (vec!["studio", r, "--max-connections", "0"], "--max-connections"),
        (vec!["bench", "--steps", "0"], "--steps"),
        (vec!["train", "--model", "lstm", "--emb", "0"], "--emb"),
        (vec!["train", "--model", "lstm", "--hidden", "0"], "--hidden"),
        (vec!["train", "--model", "lstm", "--layers", "0"], "--layers"),
        (vec!["train", "--model", "transformer", "--ffn", "0"], "--ffn"),
        (vec!["train", "--model", "transformer", "--heads", "0"], "--heads"),
        (vec!["train", "--model", "transformer", "--emb", "100"], "--emb"),
        (vec!["train", "--model", "lstm", "--dropout", "1"], "--dropout"),
        (vec!["train", "--model", "lstm", "--lr", "-1"], "--lr"),
        (vec!["train", "--model", "lstm", "--minutes", "nan"], "--minutes"),
        (vec!["data", "prepare", "--src", h, "--tgt", h, "--max-ratio", "-1"], "--max-ratio"),
        (vec!["course", "run", "--alpha", "-1"], "--alpha"),
        (vec!["course", "run", "--rate", "-5"], "--rate"),
    ];
    for (args, flag) in &cases {
        let o = s2s(args);
        let err = text(&o.stderr);
        assert!(matches!(o.status.code(), Some(1 | 2)), "{args:?}: {:?}\n{err}", o.status.code());
        assert!(err.contains(flag) && !err.contains("panicked"), "{args:?} does not name {flag}:\n{err}");
    }
    // A size read from a file names the file and its line.
    let o = s2s(&["experiment", "run", experiment.to_str().unwrap(), "--device", "cpu"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("hidden0.toml:5: [[model]] #1 (lstm): hidden must be at least 1, got 0"), "{err}");
    let o = s2s(&["train", "--config", config.to_str().unwrap(), "--run", dir.join("r").to_str().unwrap()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("run.toml:3: [model]: ffn must be at least 1, got 0"), "{err}");
    assert!(!dir.join("r").exists(), "nothing was written");
}

/// A search too large for the memory limit is refused before it allocates anything, with the
/// estimate, the limit and the largest beam that fits (`--beam 100000` aborted asking for
/// 249,523,200,000 bytes); the studio refuses such a --max-beam at start; an experiment whose
/// test decoding cannot fit is refused before it trains. The limit is set (S2S_SEARCH_MEMORY)
/// so that the test does not depend on the machine's memory.
#[test]
fn searches_too_large_for_memory_are_refused_before_they_start() {
    let run = tiny_run("huge-beam", "lstm", "1");
    let r = run.to_str().unwrap();
    let with_limit = |args: &[&str], limit: &str, input: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_s2s"))
            .args(args)
            .env("S2S_SEARCH_MEMORY", limit)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let o = with_limit(
        &["translate", "--model", r, "--device", "cpu", "--beam", "100000"],
        "1G",
        "the dog sleeps .\n",
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("beam search of beam 100000 over 64 sentences at once would hold about"), "{err}");
    assert!(err.contains("the limit is 1.0 GiB (S2S_SEARCH_MEMORY)"), "{err}");
    assert!(o.stdout.is_empty(), "nothing decoded");
    // The largest beam it names fits, one more does not.
    let at_most: usize = err
        .split("lower --beam to at most ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no largest beam in: {err}"));
    assert!((2..100_000).contains(&at_most), "{err}");
    let probe = |beam: usize| {
        let o = with_limit(
            &["translate", "--model", r, "--device", "cpu", "--beam", &beam.to_string()],
            "1G",
            "",
        );
        text(&o.stderr)
    };
    assert!(!probe(at_most).contains("would hold"), "beam {at_most} fits");
    assert!(probe(at_most + 1).contains("would hold"), "beam {} does not", at_most + 1);
    // Fewer sentences at once let a larger beam through.
    let o = with_limit(
        &[
            "translate",
            "--model",
            r,
            "--device",
            "cpu",
            "--beam",
            &(at_most + 1).to_string(),
            "--batch-size",
            "1",
        ],
        "1G",
        "",
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    // A limit that is not a size.
    let o = with_limit(&["translate", "--model", r, "--device", "cpu"], "lots", "");
    assert!(text(&o.stderr).contains("S2S_SEARCH_MEMORY=`lots` is not a size"), "{}", text(&o.stderr));

    // The studio: refused at start, before it prints its address.
    let o = with_limit(&["studio", r, "--port", "0", "--max-beam", "100000"], "1G", "");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--max-beam 100000: model `run`: beam search of beam 100000 over 1 sentence"),
        "{err}"
    );
    assert!(err.contains("lower --max-beam to at most") && err.contains("--workers"), "{err}");
    assert!(!text(&o.stdout).contains("studio: http"), "it did not serve");

    // An experiment's test decoding that cannot fit: refused after preparing the data, before
    // its first step.
    let dir = tmp("huge-beam-experiment");
    let file = dir.join("huge.toml");
    std::fs::write(
        &file,
        "[data]\nsource = \"builtin\"\npairs = 300\n[tokenizer]\nlevel = \"word\"\n\
         [train]\nbudget = { steps = 1 }\nbatch = { max_tokens = 512 }\n[decode]\nbeam = 100000\n\
         [[model]]\nkind = \"lstm\"\nemb = 8\nhidden = 8\n",
    )
    .unwrap();
    let out = dir.join("runs");
    let o = with_limit(
        &[
            "experiment",
            "run",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--device",
            "cpu",
            "--quiet",
        ],
        "256M",
        "",
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("test decoding: beam search of beam 100000 over 1 sentence"), "{err}");
    assert!(err.contains("lower the beam ([decode] beam) to at most"), "{err}");
    assert!(!out.join("lstm/checkpoints").exists(), "it did not train");
}

/// `(source, reference)` pairs of a run's test split (the studio's, built-in pair), `n` at most.
fn test_pairs(run: &std::path::Path, n: usize) -> Vec<(String, String)> {
    let (examples, _) = s2s_studio::load::test_sentences(run).unwrap();
    examples.into_iter().take(n).map(|e| (e.source, e.reference)).collect()
}

/// Writes `lines` (one per line) into a fresh file `name`.
fn lines_file(name: &str, lines: &[String]) -> PathBuf {
    let p = tmp(name).join("lines.txt");
    std::fs::write(&p, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    p
}

/// The number before ` ||| ` (or the whole line) of each line.
fn scores(out: &str) -> Vec<f64> {
    out.lines().map(|l| l.split(" ||| ").next().unwrap().parse::<f64>().unwrap()).collect()
}

fn assert_close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol, "{x} vs {y} ({a:?} vs {b:?})");
    }
}

/// `--score-target`: greedy search's own output scores as greedy search scored it (one model
/// and an ensemble), whatever the batch size; `--per-token` sums to the sentence; `--rescore`
/// adds that score to each n-best line; bad files are named with their line.
#[test]
fn translate_scores_given_targets_as_greedy_search_scored_them() {
    let a = tiny_run_steps("score-a", "transformer", "1", "100");
    let b = tiny_run_steps("score-b", "bahdanau", "2", "100");
    let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());
    let pairs = test_pairs(&a, 24);
    let input: String = pairs.iter().map(|(s, _)| format!("{s}\n")).collect();
    let limit = s2s_train::run::read_manifest(&a).unwrap().config.train.max_output;
    let mut ended = 0; // outputs that end with `</s>`, not at the length limit
    for models in [vec![a_s], vec![a_s, b_s]] {
        let mut base = vec!["translate", "--device", "cpu"];
        for m in &models {
            base.extend(["--model", m]);
        }
        let greedy = s2s_stdin(&[&base[..], &["--beam", "1", "--nbest", "1"]].concat(), &input);
        assert!(greedy.status.success(), "{}", text(&greedy.stderr));
        let rows: Vec<(String, f64)> = text(&greedy.stdout)
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split(" ||| ").collect();
                (f[1].to_string(), f[2].parse().unwrap())
            })
            .collect();
        assert_eq!(rows.len(), pairs.len());
        let hyps = lines_file("score-hyps", &rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>());
        let score = |extra: &[&str]| {
            let args = [&base[..], &["--score-target", hyps.to_str().unwrap()], extra].concat();
            let o = s2s_stdin(&args, &input);
            assert!(o.status.success(), "{}", text(&o.stderr));
            text(&o.stdout)
        };
        let got = scores(&score(&[]));
        assert_close(&got, &scores(&score(&["--batch-size", "1"])), 2e-4);
        assert_close(&got, &scores(&score(&["--batch-size", "5"])), 2e-4);
        // Per token: one log-probability per word and `</s>`, summing to the sentence's; the
        // sentence's is greedy search's, less `</s>`'s where the output was cut at the length
        // limit (greedy search scored no `</s>` there).
        for (i, line) in score(&["--per-token"]).lines().enumerate() {
            let (total, each) = line.split_once(" ||| ").unwrap();
            let total: f64 = total.parse().unwrap();
            let each: Vec<f64> = each.split(' ').map(|x| x.parse().unwrap()).collect();
            let words = if rows[i].0.is_empty() { 0 } else { rows[i].0.split(' ').count() };
            assert_eq!(each.len(), words + 1, "{line}");
            assert!((each.iter().sum::<f64>() - total).abs() < 1e-3, "{line}");
            assert!((total - got[i]).abs() < 1e-4, "{line}");
            let greedy_scored = if words >= limit.for_source(pairs[i].0.split(' ').count() + 1) {
                total - each[words]
            } else {
                ended += 1;
                total
            };
            assert!((greedy_scored - rows[i].1).abs() < 2e-3, "line {i}: {greedy_scored} vs {}", rows[i].1);
        }
        // Rescoring an n-best list (ours, and Moses's with features) adds that score.
        let nbest: Vec<String> = text(&greedy.stdout).lines().map(str::to_string).collect();
        let mut moses = nbest.clone();
        moses[0] = format!("0 ||| {} ||| LM0= -3 TM0= -1 -2 ||| -1.5", rows[0].0);
        for list in [nbest, moses.clone()] {
            let file = lines_file("score-nbest", &list);
            let o = s2s_stdin(&[&base[..], &["--rescore", file.to_str().unwrap()]].concat(), &input);
            assert!(o.status.success(), "{}", text(&o.stderr));
            let out = text(&o.stdout);
            assert_eq!(out.lines().count(), list.len());
            let feature: Vec<f64> = out
                .lines()
                .map(|l| l.split("Score= ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap())
                .collect();
            assert_close(&feature, &got, 2e-4);
        }
        let o = s2s_stdin(
            &[&base[..], &["--rescore", lines_file("score-moses", &moses).to_str().unwrap()]].concat(),
            &input,
        );
        let first = text(&o.stdout).lines().next().unwrap().to_string();
        assert!(first.starts_with(&format!("0 ||| {} ||| LM0= -3 TM0= -1 -2 Score= ", rows[0].0)), "{first}");
        assert!(first.ends_with(" ||| -1.5"), "{first}");
    }
    assert!(ended > 0, "every output was cut at the length limit");
    // Bad input: named with the flag, the file and the line.
    let base = ["translate", "--model", a_s, "--device", "cpu"];
    let fails = |extra: &[&str], input: &str, says: &[&str]| {
        let o = s2s_stdin(&[&base[..], extra].concat(), input);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{extra:?}");
        assert!(says.iter().all(|s| err.contains(s)) && !err.contains("panicked"), "{extra:?}: {err}");
    };
    for flag in ["--score-target", "--rescore", "--prefix"] {
        fails(&[flag, "/nonexistent/lines"], "a\n", &[flag, "/nonexistent/lines", "No such file"]);
    }
    let two = lines_file("score-two", &["a".into(), "b".into()]);
    let two_s = two.to_str().unwrap();
    fails(&["--score-target", two_s], "a\nb\nc\n", &["--score-target", two_s, "line 3"]);
    fails(&["--score-target", two_s], "a\n", &["--score-target", two_s, "line 2"]);
    let bad = lines_file("score-bad", &["0 ||| a ||| -1".into(), "1 a b".into()]);
    let bad_s = bad.to_str().unwrap();
    fails(&["--rescore", bad_s], "a\nb\n", &[&format!("--rescore {bad_s}:2"), "|||"]);
    fails(&["--rescore", bad_s], "a\n", &[&format!("--rescore {bad_s}:2")]);
    let long = lines_file("score-long", &["a".into(), vec!["b"; 1100].join(" ")]);
    fails(&["--score-target", long.to_str().unwrap()], "a\nb\n", &["--score-target", ":2", "1024"]);
}

/// `--prefix`: greedy search given its own output's first words gives that output; an
/// improbable prefix is kept, by greedy and beam search, and scored as forced decoding scores
/// it; a prefix past the length limit is refused naming its line.
#[test]
fn translate_starts_each_output_with_its_prefix() {
    let run = tiny_run_steps("prefix", "transformer", "3", "100");
    let r = run.to_str().unwrap();
    let pairs = test_pairs(&run, 16);
    let input: String = pairs.iter().map(|(s, _)| format!("{s}\n")).collect();
    let base = ["translate", "--model", r, "--device", "cpu"];
    let go = |extra: &[&str]| {
        let o = s2s_stdin(&[&base[..], extra].concat(), &input);
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout)
    };
    let greedy = go(&["--beam", "1"]);
    for k in [1, 2, 3] {
        let firsts: Vec<String> =
            greedy.lines().map(|l| l.split(' ').take(k).collect::<Vec<_>>().join(" ")).collect();
        let file = lines_file("prefix-k", &firsts);
        assert_eq!(go(&["--beam", "1", "--prefix", file.to_str().unwrap()]), greedy, "k = {k}");
    }
    // An improbable prefix: another sentence's last words, twice.
    let odd: Vec<String> = (0..pairs.len())
        .map(|i| {
            let w: Vec<&str> = pairs[(i + 7) % pairs.len()].1.split(' ').collect();
            let tail = w[w.len().saturating_sub(2)..].join(" ");
            format!("{tail} {tail}")
        })
        .collect();
    let file = lines_file("prefix-odd", &odd);
    let f = file.to_str().unwrap();
    for beam in ["1", "3"] {
        let out = go(&["--beam", beam, "--prefix", f]);
        for (line, p) in out.lines().zip(&odd) {
            assert!(line == p || line.starts_with(&format!("{p} ")), "beam {beam}: {line:?} vs {p:?}");
        }
        assert_eq!(out.lines().count(), pairs.len());
    }
    // Greedy's score of a prefixed output is its forced-decoding score (the prefix counted).
    let nbest = go(&["--beam", "1", "--nbest", "1", "--prefix", f]);
    let outputs: Vec<String> = nbest.lines().map(|l| l.split(" ||| ").nth(1).unwrap().to_string()).collect();
    let reported: Vec<f64> =
        nbest.lines().map(|l| l.split(" ||| ").nth(2).unwrap().parse().unwrap()).collect();
    let hyps = lines_file("prefix-hyps", &outputs);
    let limit = s2s_train::run::read_manifest(&run).unwrap().config.train.max_output;
    let forced = scores(&go(&["--score-target", hyps.to_str().unwrap()]));
    for i in 0..pairs.len() {
        if outputs[i].split(' ').count() < limit.for_source(pairs[i].0.split(' ').count() + 1) {
            assert!((forced[i] - reported[i]).abs() < 2e-3, "{i}: {} vs {}", forced[i], reported[i]);
        }
    }
    // Too long for the length limit: refused, naming the flag, the file and the line.
    let mut long = odd.clone();
    long[2] = vec!["the"; 500].join(" ");
    let file = lines_file("prefix-long", &long);
    let f = file.to_str().unwrap();
    let o = s2s_stdin(&[&base[..], &["--prefix", f]].concat(), &input);
    let err = text(&o.stderr);
    assert!(
        !o.status.success() && err.contains(&format!("--prefix {f}:3")) && !err.contains("panicked"),
        "{err}"
    );
    let o = s2s_stdin(&[&base[..], &["--prefix", f, "--sample"]].concat(), &input);
    assert!(!o.status.success() && text(&o.stderr).contains("--sample"), "{}", text(&o.stderr));
}

/// `--alignment`: on the built-in pair, the AER of the hard alignments of the references
/// (forced decoding) against the gold ones is the studio's, for the Transformer's last layer
/// and an attention RNN; soft alignments are one row per target word; the LSTM and a layer
/// the model lacks are refused.
#[test]
fn translate_aligns_as_the_studio_scores_alignments() {
    let transformer = tiny_run("align-t", "transformer", "4");
    let bahdanau = tiny_run("align-b", "bahdanau", "5");
    for run in [&transformer, &bahdanau] {
        let studio =
            s2s_studio::open(&[run.clone()], "best", burn::tensor::Device::flex(), "cpu".into(), |_| {})
                .unwrap();
        let m = &studio.models[0];
        let want = m.aer.expect("the studio scores this model's alignments");
        // The sentences the studio scored: its examples, spread as `corpus_aer` spreads them.
        let step = studio.examples.len().div_ceil(s2s_studio::AER_SENTENCES).max(1);
        let mut picked = Vec::new();
        for e in studio.examples.iter().step_by(step) {
            if let Some(gold) = s2s_studio::analyse::gold_alignment(&studio, m, &e.source, &e.reference) {
                picked.push((e.source.clone(), e.reference.clone(), gold));
            }
        }
        assert!(picked.len() >= 10, "{}", picked.len());
        let input: String = picked.iter().map(|p| format!("{}\n", p.0)).collect();
        let refs = lines_file("align-refs", &picked.iter().map(|p| p.1.clone()).collect::<Vec<_>>());
        let r = run.to_str().unwrap();
        let base = ["translate", "--model", r, "--device", "cpu", "--score-target", refs.to_str().unwrap()];
        for batch in ["64", "1"] {
            let o = s2s_stdin(&[&base[..], &["--alignment", "hard", "--batch-size", batch]].concat(), &input);
            assert!(o.status.success(), "{}", text(&o.stderr));
            let mut total = s2s_eval::alignment::AlignCounts::default();
            for (line, p) in text(&o.stdout).lines().zip(&picked) {
                let links: Vec<[usize; 2]> = line
                    .split(" ||| ")
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .map(|l| {
                        let (i, j) = l.split_once('-').unwrap();
                        [j.parse().unwrap(), i.parse().unwrap()]
                    })
                    .collect();
                total.add(s2s_eval::alignment::AlignCounts::of_links(&links, &p.2));
            }
            assert_eq!(total.aer(), want, "{r}, batch {batch}");
        }
        // Soft: per target word, one weight per source word.
        let o = s2s_stdin(&[&base[..], &["--alignment", "soft"]].concat(), &input);
        assert!(o.status.success(), "{}", text(&o.stderr));
        for (line, p) in text(&o.stdout).lines().zip(&picked) {
            let rows: Vec<&str> = line.split(" ||| ").nth(1).unwrap().split(' ').collect();
            assert_eq!(rows.len(), p.1.split(' ').count(), "{line}");
            assert!(rows.iter().all(|row| row.split(',').count() == p.0.split(' ').count()), "{line}");
        }
    }
    // Translations carry their alignment too; every link names words of the two sentences.
    let r = transformer.to_str().unwrap();
    let o = s2s_stdin(
        &["translate", "--model", r, "--device", "cpu", "--alignment", "hard"],
        "the dog sleeps .\n",
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let (hyp, links) = out.strip_suffix('\n').unwrap().split_once(" ||| ").unwrap();
    for l in links.split_whitespace() {
        let (i, j) = l.split_once('-').unwrap();
        assert!(
            i.parse::<usize>().unwrap() < 4 && j.parse::<usize>().unwrap() < hyp.split(' ').count(),
            "{out}"
        );
    }
    let o = s2s_stdin(
        &["translate", "--model", r, "--device", "cpu", "--alignment", "hard", "--alignment-layer", "1"],
        "a\n",
    );
    assert!(!o.status.success() && text(&o.stderr).contains("--alignment-layer 1"), "{}", text(&o.stderr));
    // A two-layer Transformer aligns with its last layer unless told another.
    let two = tmp("align-2").join("run");
    let cfg = tmp("align-2-cfg").join("run.toml");
    std::fs::write(&cfg, "[data]\nsource = \"builtin\"\npairs = 300\n\n[model]\nkind = \"transformer\"\n")
        .unwrap();
    let o = s2s(&[
        "train",
        "--config",
        cfg.to_str().unwrap(),
        "--emb",
        "16",
        "--heads",
        "2",
        "--ffn",
        "32",
        "--layers",
        "2",
        "--steps",
        "2",
        "--valid-every",
        "2",
        "--max-tokens",
        "512",
        "--level",
        "word",
        "--quiet",
        "--device",
        "cpu",
        "--run",
        two.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let soft = |layer: &[&str]| {
        let args = [
            &["translate", "--model", two.to_str().unwrap(), "--device", "cpu", "--alignment", "soft"],
            layer,
        ]
        .concat();
        let o = s2s_stdin(&args, "the dog sleeps .\nthe cat sees the dog .\n");
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout)
    };
    let last = soft(&[]);
    assert_eq!(last, soft(&["--alignment-layer", "1"]));
    assert_ne!(last, soft(&["--alignment-layer", "0"]));
    let lstm = tiny_run("align-l", "lstm", "6");
    let o = s2s_stdin(&["translate", "--model", lstm.to_str().unwrap(), "--alignment", "soft"], "a\n");
    assert!(!o.status.success() && text(&o.stderr).contains("without attention"), "{}", text(&o.stderr));
}

/// `python3` able to import `modules`, or why not (the test then skips, saying so).
fn python_with(modules: &[&str]) -> Result<(), String> {
    let code: Vec<String> = modules.iter().map(|m| format!("import {m}")).collect();
    match Command::new("python3").args(["-c", &code.join("; ")]).output() {
        Err(e) => Err(format!("no python3 ({e})")),
        Ok(o) if !o.status.success() => Err(format!(
            "python3 cannot import {}: {}",
            modules.join(", "),
            text(&o.stderr).lines().last().unwrap_or("")
        )),
        Ok(_) => Ok(()),
    }
}

/// Runs a Python script with arguments; its stdout.
fn python(script: &str, args: &[&str]) -> String {
    let o = Command::new("python3").arg("-c").arg(script).args(args).output().unwrap();
    assert!(o.status.success(), "python: {}", text(&o.stderr));
    text(&o.stdout)
}

/// The Python block after `<!-- NAME -->` in docs/usage.md.
fn docs_python(name: &str) -> String {
    let docs = std::fs::read_to_string(manifest_dir().join("../../docs/usage.md")).unwrap();
    let at =
        docs.find(&format!("<!-- {name} -->")).unwrap_or_else(|| panic!("docs/usage.md has no {name} block"));
    let rest = &docs[at..];
    let start = rest.find("```python\n").unwrap() + "```python\n".len();
    let end = rest[start..].find("```").unwrap();
    rest[start..start + end].to_string()
}

/// A safetensors file's tensors: name → shape (its JSON header, read as the format says:
/// a little-endian u64 length, then the JSON).
fn safetensors_shapes(path: &std::path::Path) -> (Vec<(String, Vec<usize>)>, serde_json::Value) {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut out = Vec::new();
    for (name, t) in header.as_object().unwrap() {
        if name == "__metadata__" {
            continue;
        }
        assert_eq!(t["dtype"], "F32", "{name}");
        out.push((
            name.clone(),
            t["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect(),
        ));
    }
    (out, header["__metadata__"].clone())
}

/// `s2s export --format safetensors` of every kind: each tensor named as docs/usage.md lists it,
/// in PyTorch's layouts; the docs' Python snippet loads each file into PyTorch modules of the
/// same shapes (where torch is installed). CTranslate2 is refused for the recurrent kinds, by
/// name, and a non-empty --out is refused.
#[test]
fn export_writes_safetensors_of_every_kind() {
    let docs = std::fs::read_to_string(manifest_dir().join("../../docs/usage.md")).unwrap();
    let torch = python_with(&["torch"]);
    if let Err(why) = &torch {
        eprintln!("skipped loading the safetensors into PyTorch: {why}");
    }
    let snippet = docs_python("safetensors-to-pytorch");
    for kind in ["lstm", "bahdanau", "luong", "transformer"] {
        let run = tiny_run(&format!("export-{kind}"), kind, "1");
        let out = run.parent().unwrap().join("safetensors");
        let o = s2s(&[
            "export",
            run.to_str().unwrap(),
            "--format",
            "safetensors",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{kind}: {}", text(&o.stderr));
        let (shapes, meta) = safetensors_shapes(&out.join("model.safetensors"));
        assert_eq!(meta["s2s_kind"], kind);
        assert!(out.join("tokenizer/joint.json").exists() && out.join("config.json").exists());
        for (name, _) in &shapes {
            let parts: Vec<&str> =
                name.split('.').map(|p| if p.parse::<usize>().is_ok() { "{i}" } else { p }).collect();
            let (param, owner) = parts.split_last().unwrap();
            let owner = owner.join(".");
            assert!(
                docs.lines().any(|l| l.contains(&format!("`{owner}`")) && l.contains(&format!("`{param}`"))),
                "{kind}: `{owner}` with `{param}` is not in docs/usage.md"
            );
        }
        let shape = |n: &str| shapes.iter().find(|(m, _)| m == n).map(|(_, s)| s.clone());
        let vocab = shape("tgt_embed.weight").unwrap()[0];
        if kind == "transformer" {
            // d_model 16, ffn 32: PyTorch's [out, in].
            assert_eq!(shape("encoder.0.ffn.inner.weight"), Some(vec![32, 16]));
            assert_eq!(shape("encoder.0.attention_residual.norm.weight"), Some(vec![16]));
            assert_eq!(shape("tgt_embed.weight"), Some(vec![vocab, 16]));
            assert_eq!(shape("output.weight"), None, "tied to the target embedding");
        } else {
            assert_eq!(shape("output.weight").map(|s| s[0]), Some(vocab), "[out, in]");
        }
        if torch.is_ok() {
            let check = format!(
                "{snippet}\nimport sys\nm = load_s2s_safetensors(sys.argv[1])\n\
                 print(sum(p.numel() for p in m.parameters()))\n\
                 print(type(m.get_submodule('tgt_embed')).__name__, type(m.get_submodule('output')).__name__ if hasattr(m, 'output') else '-')\n"
            );
            let got = python(&check, &[out.join("model.safetensors").to_str().unwrap()]);
            let total: usize = shapes.iter().map(|(_, s)| s.iter().product::<usize>()).sum();
            let mut lines = got.lines();
            assert_eq!(lines.next(), Some(total.to_string().as_str()), "{kind}: {got}");
            let want = if kind == "transformer" { "Embedding -" } else { "Embedding Linear" };
            assert_eq!(lines.next(), Some(want), "{kind}: {got}");
        }
        if kind != "transformer" {
            let ct2 = run.parent().unwrap().join("ct2");
            let o = s2s(&[
                "export",
                run.to_str().unwrap(),
                "--format",
                "ctranslate2",
                "--out",
                ct2.to_str().unwrap(),
            ]);
            assert!(!o.status.success());
            let err = text(&o.stderr);
            assert!(err.contains("CTranslate2 holds Transformers only") && err.contains(kind), "{err}");
            assert!(err.contains("--format safetensors"), "{err}");
            assert!(!ct2.exists(), "nothing is written");
        }
        let again = s2s(&[
            "export",
            run.to_str().unwrap(),
            "--format",
            "safetensors",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(!again.status.success());
        assert!(text(&again.stderr).contains("is not empty"), "{}", text(&again.stderr));
        let file = out.join("config.json");
        let o = s2s(&[
            "export",
            run.to_str().unwrap(),
            "--format",
            "safetensors",
            "--out",
            file.to_str().unwrap(),
        ]);
        assert!(!o.status.success());
        assert!(text(&o.stderr).contains("a file, not a directory"), "{}", text(&o.stderr));
    }
}

/// Trains a small Transformer (word level, so that a line's tokens are its words) a few
/// hundred steps on the built-in pair with `model` and `tokenizer` settings.
fn small_transformer(name: &str, model: &str, tokenizer: &str, steps: &str) -> PathBuf {
    let dir = tmp(name);
    let cfg = dir.join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            "[data]\nsource = \"builtin\"\npairs = 1500\n\n[tokenizer]\nlevel = \"word\"\n{tokenizer}\n\n\
             [model]\nkind = \"transformer\"\nd_model = 32\nheads = 4\nffn = 64\nenc_layers = 2\ndec_layers = 2\n{model}\n"
        ),
    )
    .unwrap();
    let run = dir.join("run");
    let o = s2s(&[
        "train",
        "--config",
        cfg.to_str().unwrap(),
        "--steps",
        steps,
        "--valid-every",
        "100",
        "--max-tokens",
        "1024",
        "--quiet",
        "--device",
        "cpu",
        "--run",
        run.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    run
}

/// CTranslate2 decodes the exported Transformer greedily to our greedy output, token for
/// token, on the run's test split: pre-norm with shared and tied embeddings, and post-norm
/// with its own source embedding, an output projection and two vocabularies. The quantized
/// exports load and translate every line. Where the `ctranslate2` package is installed.
#[test]
fn ctranslate2_decodes_the_exported_transformer_as_we_do() {
    if let Err(why) = python_with(&["ctranslate2"]) {
        eprintln!("skipped: {why}");
        return;
    }
    // One line in, the output's tokens (CTranslate2's specials left out, as our decoding drops
    // ours) out; each line's length limit ours, 1.5 · (tokens + </s>) + 10.
    let script = r#"
import sys, ctranslate2
model, src, compute_type = sys.argv[1:4]
tr = ctranslate2.Translator(model, device="cpu", compute_type=compute_type, intra_threads=2)
specials = {"<pad>", "<unk>", "<s>", "</s>"}
for line in open(src, encoding="utf-8").read().splitlines():
    tokens = line.split()
    limit = int(1.5 * (len(tokens) + 1)) + 10
    r = tr.translate_batch([tokens], beam_size=1, max_decoding_length=limit)
    print(" ".join(t for t in r[0].hypotheses[0] if t not in specials))
"#;
    let variants = [
        ("ct2-pre", "pre_norm = true", "joint = true", "400"),
        (
            "ct2-post",
            "pre_norm = false\ntie_output = false\nshare_embeddings = false",
            "joint = false",
            "200",
        ),
    ];
    for (name, model, tokenizer, steps) in variants {
        let run = small_transformer(name, model, tokenizer, steps);
        let test = run.join("data/test.src");
        let input = std::fs::read_to_string(&test).unwrap();
        let ours = s2s_stdin(
            &["translate", "--model", run.to_str().unwrap(), "--beam", "1", "--device", "cpu"],
            &input,
        );
        assert!(ours.status.success(), "{}", text(&ours.stderr));
        let ours = text(&ours.stdout);
        let out = run.parent().unwrap().join("ct2");
        let o = s2s(&[
            "export",
            run.to_str().unwrap(),
            "--format",
            "ctranslate2",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let vocabularies = if tokenizer == "joint = true" {
            vec!["shared_vocabulary.json"]
        } else {
            vec!["source_vocabulary.json", "target_vocabulary.json"]
        };
        for f in vocabularies.iter().chain(&["model.bin", "config.json"]) {
            assert!(out.join(f).exists(), "{name}: {f}");
        }
        let theirs = python(script, &[out.to_str().unwrap(), test.to_str().unwrap(), "float32"]);
        let (a, b): (Vec<&str>, Vec<&str>) = (ours.lines().collect(), theirs.lines().collect());
        assert_eq!(a.len(), input.lines().count());
        let differ: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
        assert!(
            differ.is_empty(),
            "{name}: {} of {} lines differ; first: line {}\n ours: {}\n ct2:  {}",
            differ.len(),
            a.len(),
            differ[0] + 1,
            a[differ[0]],
            b[differ[0]]
        );
        for (q, compute) in
            [("int8", "int8"), ("int8_float16", "int8_float32"), ("float16", "float32"), ("int16", "float32")]
        {
            let qdir = run.parent().unwrap().join(format!("ct2-{q}"));
            let o = s2s(&[
                "export",
                run.to_str().unwrap(),
                "--format",
                "ctranslate2",
                "--quantization",
                q,
                "--out",
                qdir.to_str().unwrap(),
            ]);
            assert!(o.status.success(), "{q}: {}", text(&o.stderr));
            let got = python(script, &[qdir.to_str().unwrap(), test.to_str().unwrap(), compute]);
            let same = got.lines().zip(&a).filter(|(x, y)| x == *y).count();
            assert_eq!(got.lines().count(), a.len(), "{name} {q}");
            eprintln!("{name} {q}: {same} of {} lines as ours", a.len());
            // Wrong scales or a misread layout give nothing like ours.
            assert!(same * 5 > a.len(), "{name} {q}: only {same} of {} lines as ours", a.len());
        }
    }
    let out = tmp("ct2-int4").join("q");
    let o = s2s(&[
        "export",
        "no-run",
        "--format",
        "ctranslate2",
        "--quantization",
        "int4",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("--quantization") && text(&o.stderr).contains("int8_float16"),
        "{}",
        text(&o.stderr)
    );
}

/// The quickstart's Transformer (pre-norm, its own source embedding, the target embedding tied
/// to the output projection), trained as `s2s experiment run experiments/quickstart.toml --only
/// transformer` trains it but for a few hundred steps instead of 1,000, then exported:
/// CTranslate2's greedy search gives our greedy output (`translate --beam 1`) on every line of
/// the quickstart's test split. With the file's word vocabularies (300 steps: test BLEU 46, one
/// output at the length limit) and with its `[tokenizer]` set to BPE, 200 subwords a side (the
/// word vocabularies are 143 and 229 words; 1.6 pieces a word; 500 steps: BLEU 38, 21 outputs
/// at the limit). The sources are segmented by the run's saved tokenizer (its pieces are what
/// CTranslate2 reads); CTranslate2's output pieces are read back as ids through the exported
/// target vocabulary and detokenized by the run's target tokenizer (its ids, not our text
/// re-encoded: a model may emit a segmentation that encoding its text would not give). Where
/// the `ctranslate2` package is installed.
#[test]
fn ctranslate2_decodes_the_quickstart_transformer_as_we_do() {
    if let Err(why) = python_with(&["ctranslate2"]) {
        eprintln!("skipped: {why}");
        return;
    }
    // One line of space-separated pieces in, the output's ids out (the end token left out, as
    // CTranslate2 does by default); each line's length limit ours, ⌊1.5 · (pieces + </s>)⌋ + 10.
    let script = r#"
import sys, os, json, ctranslate2
model, pieces = sys.argv[1:3]
tr = ctranslate2.Translator(model, device="cpu", compute_type="float32", intra_threads=2)
vocab = json.load(open(os.path.join(model, "target_vocabulary.json"), encoding="utf-8"))
ids = {t: i for i, t in enumerate(vocab)}
for line in open(pieces, encoding="utf-8").read().splitlines():
    tokens = line.split(" ")
    limit = int(1.5 * (len(tokens) + 1)) + 10
    r = tr.translate_batch([tokens], beam_size=1, max_decoding_length=limit)
    print(" ".join(str(ids[t]) for t in r[0].hypotheses[0]))
"#;
    let quickstart =
        std::fs::read_to_string(manifest_dir().join("../../experiments/quickstart.toml")).unwrap();
    let edits: [(&str, &str, &[(&str, &str)]); 2] = [
        ("word", "300", &[]),
        ("bpe", "500", &[("level = \"word\"", "level = \"bpe\""), ("vocab_size = 0", "vocab_size = 200")]),
    ];
    for (level, steps, tokenizer) in edits {
        let dir = tmp(&format!("ct2-quickstart-{level}"));
        // The training as the file sets it, but for the step budget; the experiment's own test
        // decoding greedy, which is cheaper than its beam of 5.
        let mut file = quickstart.clone();
        let budget = format!("budget = {{ steps = {steps} }}");
        for &(from, to) in [("budget = { steps = 1000 }", budget.as_str()), ("\nbeam = 5\n", "\nbeam = 1\n")]
            .iter()
            .chain(tokenizer.iter())
        {
            assert!(file.contains(from), "experiments/quickstart.toml has no `{}`", from.trim());
            file = file.replacen(from, to, 1);
        }
        let cfg = dir.join("quickstart.toml");
        std::fs::write(&cfg, file).unwrap();
        let root = dir.join("runs");
        let o = s2s(&[
            "experiment",
            "run",
            cfg.to_str().unwrap(),
            "--only",
            "transformer",
            "--out",
            root.to_str().unwrap(),
            "--device",
            "cpu",
            "--quiet",
        ]);
        assert!(o.status.success(), "{level}: {}", text(&o.stderr));
        let run = root.join("transformer");
        let input = std::fs::read_to_string(run.join("data/test.src")).unwrap();
        let args = ["translate", "--model", run.to_str().unwrap(), "--beam", "1", "--device", "cpu"];
        let ours = s2s_stdin(&args, &input);
        assert!(ours.status.success(), "{level}: {}", text(&ours.stderr));
        let ours = text(&ours.stdout);
        let out = dir.join("ct2");
        let (run_s, out_s) = (run.to_str().unwrap(), out.to_str().unwrap());
        let o = s2s(&["export", run_s, "--format", "ctranslate2", "--out", out_s]);
        assert!(o.status.success(), "{level}: {}", text(&o.stderr));
        assert!(out.join("source_vocabulary.json").exists() && out.join("target_vocabulary.json").exists());

        let tok = s2s_data::Tokenizers::load(&run.join("tokenizer")).unwrap();
        let sources: Vec<Vec<String>> = input
            .lines()
            .map(|l| tok.src.encode(&s2s_data::normalize(l)).into_iter().map(|i| tok.src.token(i)).collect())
            .collect();
        let readable = sources.iter().flatten().all(|p| !p.is_empty() && !p.contains(' '));
        assert!(readable, "{level}: a piece CTranslate2 cannot read");
        assert!(sources.iter().all(|s| !s.is_empty()), "{level}: an empty source");
        let words: usize = input.split_whitespace().count();
        let pieces: usize = sources.iter().map(Vec::len).sum();
        if level == "bpe" {
            assert!(pieces > words, "{level}: {pieces} pieces for {words} words: the words are not split");
        } else {
            assert_eq!(pieces, words, "{level}");
        }
        let file = dir.join("test.pieces");
        std::fs::write(&file, sources.iter().map(|s| s.join(" ") + "\n").collect::<String>()).unwrap();
        let theirs = python(script, &[out.to_str().unwrap(), file.to_str().unwrap()]);
        let theirs: Vec<Vec<u32>> =
            theirs.lines().map(|l| l.split_whitespace().map(|i| i.parse().unwrap()).collect()).collect();
        let ours: Vec<&str> = ours.lines().collect();
        assert_eq!((ours.len(), theirs.len()), (sources.len(), sources.len()), "{level}");
        let limit = |n: usize| (1.5 * (n + 1) as f64).floor() as usize + 10;
        let at_limit = (0..ours.len()).filter(|&i| theirs[i].len() == limit(sources[i].len())).count();
        eprintln!("{level}: {pieces} source pieces for {words} words; {at_limit} outputs at the limit");
        let differ: Vec<usize> = (0..ours.len()).filter(|&i| tok.tgt.decode(&theirs[i]) != ours[i]).collect();
        if let Some(&i) = differ.first() {
            let pieces: Vec<String> = theirs[i].iter().map(|&t| tok.tgt.token(t)).collect();
            panic!(
                "{level}: {} of {} lines differ; first: line {}\n source: {}\n ours: {}\n ct2:  {}\n \
                 ct2 pieces: {}",
                differ.len(),
                ours.len(),
                i + 1,
                sources[i].join(" "),
                ours[i],
                tok.tgt.decode(&theirs[i]),
                pieces.join(" ")
            );
        }
    }
}

/// Every validation's scalars are TensorBoard events in RUN/tensorboard/, equal to
/// metrics.csv's rows; a run killed inside a checkpoint (its row and events written, its
/// checkpoint not) and resumed has each step once, read back by our reader and by
/// tensorboard's own (where installed: the raw records and its accumulator).
#[test]
fn tensorboard_events_follow_the_metrics_through_a_resume() {
    let run = tmp("tensorboard").join("run");
    let args = crash_args(&run, "8");
    let o = run_env(&args, &[("S2S_FAULT_ABORT_IN_CHECKPOINT", "6")]);
    assert!(!o.status.success(), "the fault kills the run at step 6");
    let before = s2s_train::tensorboard::scalars(&run).unwrap();
    let steps = |s: &[(i64, String, f32)], tag: &str| -> Vec<i64> {
        s.iter().filter(|(_, t, _)| t == tag).map(|(step, _, _)| *step).collect()
    };
    assert_eq!(steps(&before, "valid/bleu"), [2, 4, 6], "step 6 was validated before the kill");
    let o = run_env(&args, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let after = s2s_train::tensorboard::scalars(&run).unwrap();
    let metrics = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    let rows: Vec<Vec<f64>> =
        metrics.lines().skip(1).map(|l| l.split(',').map(|f| f.parse().unwrap()).collect()).collect();
    let tags = [
        ("train/loss", 3),
        ("valid/perplexity", 4),
        ("valid/bleu", 5),
        ("train/learning_rate", 6),
        ("train/tokens_per_s", 7),
    ];
    for (tag, col) in tags {
        let got: Vec<(i64, f32)> =
            after.iter().filter(|(_, t, _)| t == tag).map(|(s, _, v)| (*s, *v)).collect();
        let want: Vec<(i64, f32)> = rows.iter().map(|r| (r[0] as i64, r[col] as f32)).collect();
        assert_eq!(got, want, "{tag}");
    }
    assert_eq!(steps(&after, "train/grad_norm"), [2, 4, 6, 8]);
    assert!(
        after.iter().filter(|(_, t, _)| t == "train/grad_norm").all(|(_, _, v)| v.is_finite() && *v > 0.0)
    );
    // Steps 2 and 4 come from the first run, unchanged.
    for (s, t, v) in before.iter().filter(|(s, _, _)| *s <= 4) {
        assert!(after.iter().any(|(s2, t2, v2)| s2 == s && t2 == t && v2 == v), "{t} at {s}");
    }
    let Ok(()) =
        python_with(&["tensorboard"]).map_err(|why| eprintln!("skipped tensorboard's reader: {why}"))
    else {
        return;
    };
    let script = r#"
import sys, glob, json
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
raw = {}
for f in sorted(glob.glob(sys.argv[1] + "/*tfevents*")):
    for record in RawEventFileLoader(f).Load():
        e = event_pb2.Event.FromString(record)
        for v in e.summary.value:
            raw.setdefault(v.tag, []).append([e.step, v.simple_value])
acc = event_accumulator.EventAccumulator(sys.argv[1])
acc.Reload()
accumulated = {t: [[s.step, s.value] for s in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
print(json.dumps({"raw": raw, "accumulated": accumulated}))
"#;
    let got: serde_json::Value =
        serde_json::from_str(&python(script, &[run.join("tensorboard").to_str().unwrap()])).unwrap();
    for source in ["raw", "accumulated"] {
        for (tag, _) in tags.iter().chain(&[("train/grad_norm", 0)]) {
            let want: Vec<(i64, f32)> =
                after.iter().filter(|(_, t, _)| t == tag).map(|(s, _, v)| (*s, *v)).collect();
            let have: Vec<(i64, f32)> = got[source][tag]
                .as_array()
                .unwrap_or_else(|| panic!("{source}: no {tag}: {got}"))
                .iter()
                .map(|p| (p[0].as_i64().unwrap(), p[1].as_f64().unwrap() as f32))
                .collect();
            assert_eq!(have, want, "{source} {tag}");
        }
    }
}

/// A SentencePiece model brought with `--tokenizer` (the fixture of s2s-data's
/// `tokenizer_files` test, trained by the `sentencepiece` package on the built-in pair): a tiny
/// model trains with it, the run keeps it, and `translate` needs nothing else; `data prepare`
/// takes it too; a bad tokenizer file is refused naming the flag, or the config's line.
#[test]
fn a_sentencepiece_model_given_with_tokenizer_trains_and_translates() {
    let fixture = manifest_dir().join("../s2s-data/tests/fixtures/spm/pair.model");
    let dir = tmp("spm-train");
    let user = dir.join("user.model");
    std::fs::copy(&fixture, &user).unwrap();
    let cfg = dir.join("run.toml");
    std::fs::write(&cfg, "[data]\nsource = \"builtin\"\npairs = 300\n\n[model]\nkind = \"transformer\"\n")
        .unwrap();
    let run = dir.join("run");
    let common = [
        "train",
        "--config",
        cfg.to_str().unwrap(),
        "--emb",
        "16",
        "--heads",
        "2",
        "--ffn",
        "32",
        "--layers",
        "1",
        "--steps",
        "4",
        "--valid-every",
        "2",
        "--max-tokens",
        "512",
        "--quiet",
        "--device",
        "cpu",
    ];
    let mut args = common.to_vec();
    args.extend(["--tokenizer", user.to_str().unwrap(), "--run", run.to_str().unwrap()]);
    let o = s2s(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let saved = std::fs::read_to_string(run.join("tokenizer/joint.json")).unwrap();
    assert!(saved.contains("\"sentencepiece\"") && saved.contains("user.model"), "{}", &saved[..200]);
    let manifest = std::fs::read_to_string(run.join("run.json")).unwrap();
    assert!(manifest.contains("user.model"), "run.json records the file");
    std::fs::remove_file(&user).unwrap();
    let o = s2s_stdin(
        &["translate", "--model", run.to_str().unwrap(), "--device", "cpu"],
        "the queen dances .\nthe big dog sees a cat .\n",
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).lines().count(), 2, "{}", text(&o.stdout));

    // `data prepare` with the same model: its dataset holds it.
    let data = dir.join("pair");
    assert!(s2s(&["data", "synth", "--pairs", "200", "--out", data.to_str().unwrap()]).status.success());
    let (src, tgt) = (data.join("train.src"), data.join("train.tgt"));
    let cache = dir.join("cache");
    let prep = [
        "data",
        "prepare",
        "--src",
        src.to_str().unwrap(),
        "--tgt",
        tgt.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
        "--tokenizer",
        fixture.to_str().unwrap(),
    ];
    let o = s2s(&prep);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let prepared = PathBuf::from(text(&o.stdout).lines().next().unwrap().trim());
    let kept = std::fs::read_to_string(prepared.join("tokenizer/joint.json")).unwrap();
    assert!(kept.contains("\"sentencepiece\""));

    // An experiment's [tokenizer] names one model per side: each run keeps both.
    let extras = manifest_dir().join("../s2s-data/tests/fixtures/spm/extras.model");
    let exp = dir.join("sides.toml");
    std::fs::write(
        &exp,
        format!(
            "[data]\nsource = \"builtin\"\npairs = 300\n[tokenizer]\nsrc_file = {:?}\ntgt_file = {:?}\n\
             [train]\nbudget = {{ steps = 2 }}\nvalid_every = 2\nbatch = {{ max_tokens = 512 }}\n[decode]\nbeam = 2\n\
             [[model]]\nkind = \"lstm\"\nemb = 8\nhidden = 8\n",
            fixture.to_str().unwrap(),
            extras.to_str().unwrap()
        ),
    )
    .unwrap();
    let out = dir.join("sides");
    let o = s2s(&[
        "experiment",
        "run",
        exp.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--device",
        "cpu",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let side = |f: &str| std::fs::read_to_string(out.join("lstm/tokenizer").join(f)).unwrap();
    assert!(side("src.json").contains("pair.model") && side("tgt.json").contains("extras.model"));
    assert!(out.join("lstm/test/scores.json").exists());

    // Bad files: the flag, or the config's line, and the file are named.
    let junk = dir.join("junk.model");
    std::fs::write(&junk, "no model\n").unwrap();
    let mut args = common.to_vec();
    let bad_run = dir.join("bad-run");
    args.extend(["--src-tokenizer", junk.to_str().unwrap(), "--tgt-tokenizer", fixture.to_str().unwrap()]);
    args.extend(["--run", bad_run.to_str().unwrap()]);
    let o = s2s(&args);
    let err = text(&o.stderr);
    assert!(!o.status.success() && err.contains("--src-tokenizer") && err.contains("junk.model"), "{err}");
    assert!(!bad_run.exists(), "nothing is written for a refused tokenizer");
    std::fs::write(
        &cfg,
        format!(
            "[data]\nsource = \"builtin\"\n\n[tokenizer]\nfile = {:?}\n\n[model]\nkind = \"transformer\"\n",
            junk.to_str().unwrap()
        ),
    )
    .unwrap();
    let mut args = common.to_vec();
    args.extend(["--run", bad_run.to_str().unwrap()]);
    let err = text(&s2s(&args).stderr);
    assert!(err.contains("run.toml:5: [tokenizer]") && err.contains("junk.model"), "{err}");
    let mut args = prep.to_vec();
    *args.last_mut().unwrap() = junk.to_str().unwrap();
    let err = text(&s2s(&args).stderr);
    assert!(err.contains("--tokenizer") && err.contains("junk.model"), "{err}");
    let exp = dir.join("exp.toml");
    std::fs::write(&exp, "[data]\nsource = \"builtin\"\n[[model]]\nkind = \"lstm\"\n").unwrap();
    let out = dir.join("exp-runs");
    let (exp, out) = (exp.to_str().unwrap(), out.to_str().unwrap());
    let o = s2s(&["experiment", "run", exp, "--out", out, "--tokenizer", junk.to_str().unwrap()]);
    let err = text(&o.stderr);
    assert!(!o.status.success() && err.contains("--tokenizer") && err.contains("junk.model"), "{err}");
    assert!(!dir.join("exp-runs").exists(), "nothing is written for a refused tokenizer");
}

/// `--quantize`: `none` changes nothing (the n-best lists and their scores as without the
/// flag), `int8` runs every model kind's products in int8 (the device line says so; the scores
/// move); `s2s quantize RUN --to int8` writes a checkpoint of under a third of the bytes that
/// translates (int8 by default) and whose damage is refused, naming the file.
#[test]
fn int8_decoding_and_checkpoints_for_every_model_kind() {
    let input = "the cat sees a dog\na big house\nthe river is long and the bridge is old\n";
    for kind in ["lstm", "bahdanau", "luong", "transformer"] {
        let run = tiny_run(&format!("int8-{kind}"), kind, "3");
        let r = run.to_str().unwrap();
        let translate = |extra: &[&str]| {
            let mut args = vec!["translate", "--model", r, "--device", "cpu", "--beam", "3", "--nbest", "3"];
            args.extend(extra);
            let o = s2s_stdin(&args, input);
            assert!(o.status.success(), "{kind} {extra:?}: {}", text(&o.stderr));
            (text(&o.stdout), text(&o.stderr))
        };
        let (plain, _) = translate(&[]);
        let (none, _) = translate(&["--quantize", "none"]);
        assert_eq!(plain, none, "{kind}: --quantize none changed the output");
        let (int8, err) = translate(&["--quantize", "int8"]);
        assert!(err.contains("products: int8 ("), "{kind}: {err}");
        assert_eq!(int8.lines().count(), plain.lines().count(), "{kind}");
        assert_ne!(int8, plain, "{kind}: int8 products left every score as it was");

        let o = s2s(&["quantize", r, "--to", "int8"]);
        assert!(o.status.success(), "{kind}: {}", text(&o.stderr));
        let dir = run.join("checkpoints/int8");
        assert_eq!(text(&o.stdout).trim(), dir.to_str().unwrap());
        let best: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("checkpoints/best.json")).unwrap())
                .unwrap();
        let f32_bytes =
            std::fs::metadata(run.join("checkpoints").join(best["dir"].as_str().unwrap()).join("model.bpk"))
                .unwrap()
                .len();
        let q8 = dir.join("model.q8");
        let int8_bytes = std::fs::metadata(&q8).unwrap().len();
        // Tiny widths (16) pay a 4-byte scale per 16 values; wide models reach under 30 %.
        assert!(int8_bytes * 100 < f32_bytes * 34, "{kind}: {int8_bytes} bytes against {f32_bytes}");
        let (from_int8, err) = translate(&["--checkpoint", "int8"]);
        assert!(err.contains("products: int8 ("), "{kind}: {err}");
        assert_eq!(from_int8.lines().count(), plain.lines().count(), "{kind}");
        let (_, err) = translate(&["--checkpoint", "int8", "--quantize", "none"]);
        assert!(!err.contains("products: int8"), "{kind}: {err}");

        let good = std::fs::read(&q8).unwrap();
        let mut bad = good.clone();
        bad[good.len() / 3] ^= 0x10;
        std::fs::write(&q8, &bad).unwrap();
        let o = s2s_stdin(&["translate", "--model", r, "--device", "cpu", "--checkpoint", "int8"], input);
        let err = text(&o.stderr);
        assert!(!o.status.success() && err.contains("model.q8") && err.contains("damaged"), "{kind}: {err}");
        std::fs::write(&q8, &good).unwrap();
    }
    let run = tiny_run("int8-refusals", "lstm", "1");
    let o = s2s(&["quantize", run.to_str().unwrap(), "--to", "int4"]);
    assert!(!o.status.success() && text(&o.stderr).contains("--to int8"), "{}", text(&o.stderr));
    let o = s2s_stdin(&["translate", "--model", run.to_str().unwrap(), "--quantize", "int4"], "a\n");
    assert!(!o.status.success() && text(&o.stderr).contains("none"), "{}", text(&o.stderr));
}

/// An experiment's `[decode] quantize = "int8"` tests with int8 products (training and its
/// validations stay f32, so the checkpoints are those of an f32 experiment); an unknown value
/// is refused naming the key.
#[test]
fn experiment_tests_with_int8_products() {
    let dir = tmp("experiment-int8");
    let body = "[data]\nsource = \"builtin\"\npairs = 300\n[tokenizer]\nlevel = \"word\"\n\
         [train]\nbudget = { steps = 3 }\nvalid_every = 3\nbatch = { max_tokens = 512 }\n\
         [decode]\nbeam = 2\nQUANT\n\
         [[model]]\nkind = \"transformer\"\nd_model = 16\nheads = 2\nffn = 32\nenc_layers = 1\ndec_layers = 1\n";
    let mut scores = Vec::new();
    let mut models = Vec::new();
    for q in ["none", "int8"] {
        let file = dir.join(format!("{q}.toml"));
        std::fs::write(&file, body.replace("QUANT", &format!("quantize = \"{q}\""))).unwrap();
        let out = dir.join(format!("runs-{q}"));
        let o = s2s(&[
            "experiment",
            "run",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--device",
            "cpu",
            "--quiet",
        ]);
        assert!(o.status.success(), "{q}: {}", text(&o.stderr));
        scores.push(std::fs::read_to_string(out.join("transformer/test/scores.json")).unwrap());
        // Training's losses and validations (not the wall clock).
        let metrics = std::fs::read_to_string(out.join("transformer/metrics.csv")).unwrap();
        let cols: Vec<String> = metrics
            .lines()
            .map(|l| {
                l.split(',').enumerate().filter(|(i, _)| [0, 3, 4, 5].contains(i)).map(|(_, c)| c).collect()
            })
            .collect();
        models.push(cols);
    }
    assert!(models[0] == models[1], "training differs: {:?} against {:?}", models[0], models[1]);
    assert_ne!(scores[0], scores[1], "the int8 test decoding scored as the f32 one");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, body.replace("QUANT", "quantize = \"int4\"")).unwrap();
    let o = s2s(&["experiment", "run", bad.to_str().unwrap(), "--out", dir.join("bad").to_str().unwrap()]);
    assert!(!o.status.success() && text(&o.stderr).contains("quantize"), "{}", text(&o.stderr));
}

/// `s2s bench --quantize int8` times the decoding passes with int8 products and says so in its
/// JSON (its training stays f32: the same loss as without the flag); int8 on a GPU is refused.
#[test]
fn bench_decodes_with_int8_products() {
    let shapes = concat!(env!("CARGO_MANIFEST_DIR"), "/../../experiments/bench/launch-bound.json");
    let run = |q: &str| {
        let o = s2s(&[
            "bench",
            "--device",
            "cpu",
            "--models",
            "transformer",
            "--shapes",
            shapes,
            "--steps",
            "1",
            "--quantize",
            q,
            "--json",
        ]);
        assert!(o.status.success(), "{q}: {}", text(&o.stderr));
        (serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap(), text(&o.stderr))
    };
    let (f32_run, _) = run("none");
    let (int8_run, err) = run("int8");
    assert_eq!((f32_run["quantize"].as_str(), int8_run["quantize"].as_str()), (Some("none"), Some("int8")));
    assert!(err.contains("decoding products: int8 ("), "{err}");
    assert_eq!(f32_run["train_loss"], int8_run["train_loss"], "training stays f32");
    assert!(int8_run["beam5_sentences_per_s"].as_f64().unwrap() > 0.0);
    let o =
        s2s(&["bench", "--device", "wgpu", "--models", "transformer", "--steps", "1", "--quantize", "int8"]);
    assert!(!o.status.success() && text(&o.stderr).contains("CPU only"), "{}", text(&o.stderr));
}
