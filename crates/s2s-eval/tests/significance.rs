//! Paired bootstrap resampling and approximate randomization against sacreBLEU 2.6.0
//! (with numpy 2): every mean, confidence interval and p-value identical, for BLEU, chrF
//! and TER, on the WMT22 outputs of the shared fixtures (read in place) and on a tiny
//! hand-made corpus; and the command line's output (`sacrebleu ... -f text|json`) byte for
//! byte. Expected values: `tests/fixtures/significance.jsonl` and `cli.jsonl`, written by
//! `scripts/sacrebleu-expected.py`.

use std::io::Cursor;
use std::path::PathBuf;

use s2s_eval::{
    BleuConfig, ChrfConfig, Format, Metric, MetricConfig, PairedColumn, PairedOptions, PairedResult,
    PairedTest, ScoreRequest, Seed, Smoothing, TerConfig, Tokenizer, format_systems, paired_test, run_score,
};
use serde_json::Value;

fn shared(name: &str) -> PathBuf {
    std::env::var_os("S2S_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../../../shared"))
        .join("fixtures/bleu")
        .join(name)
}

/// One segment per line, as sacreBLEU's command line reads them.
fn read(name: &str) -> Vec<String> {
    let path = shared(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(&text);
    body.split('\n').map(|l| l.trim_end().to_owned()).collect()
}

/// A system of the generator: `Online-B` (a WMT22 file) or `mix:A,B,k` (line i from B when
/// i % k == 0, else from A).
fn system(spec: &str) -> Vec<String> {
    if let Some(rest) = spec.strip_prefix("mix:") {
        let parts: Vec<&str> = rest.split(',').collect();
        let (a, b, k) = (system(parts[0]), system(parts[1]), parts[2].parse::<usize>().unwrap());
        return a.into_iter().zip(b).enumerate().map(|(i, (x, y))| if i % k == 0 { y } else { x }).collect();
    }
    read(&format!("wmt22.en-de.{spec}.de"))
}

fn jsonl(name: &str) -> Vec<Value> {
    let path = manifest_dir().join("tests/fixtures").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l}: {e}"))).collect()
}

/// A float written as a string by the generator (parsed exactly), or null.
fn float(v: &Value) -> Option<f64> {
    if v.is_null() {
        return None;
    }
    Some(v.as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("not a float string: {v}")))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect()
}

/// sacreBLEU's metric keyword arguments as a configuration.
fn metric(m: &Value) -> MetricConfig {
    let flag = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
    match m["metric"].as_str().unwrap() {
        "bleu" => {
            let value = m.get("smooth_value").and_then(Value::as_f64);
            let smoothing = match m.get("smooth_method").and_then(Value::as_str).unwrap_or("exp") {
                "exp" => Smoothing::Exp,
                "none" => Smoothing::None,
                "floor" => Smoothing::Floor(value.unwrap_or(0.1)),
                "add-k" => Smoothing::AddK(value.unwrap_or(1.0)),
                other => panic!("smoothing {other}"),
            };
            let tokenize =
                m.get("tokenize").and_then(Value::as_str).map_or(Tokenizer::V13a, |t| t.parse().unwrap());
            MetricConfig::Bleu(BleuConfig {
                tokenize,
                lowercase: flag("lowercase"),
                smoothing,
                effective_order: false,
            })
        }
        "chrf" => MetricConfig::Chrf(ChrfConfig {
            word_order: m.get("word_order").and_then(Value::as_u64).unwrap_or(0) as usize,
            eps_smoothing: flag("eps_smoothing"),
            ..ChrfConfig::default()
        }),
        "ter" => MetricConfig::Ter(TerConfig {
            normalized: flag("normalized"),
            no_punct: flag("no_punct"),
            asian_support: flag("asian_support"),
            case_sensitive: flag("case_sensitive"),
        }),
        other => panic!("metric {other}"),
    }
}

/// sacreBLEU's output with our version instead of 2.6.0.
fn ours(s: &str) -> String {
    s.replace("version:2.6.0", &format!("version:{}", s2s_eval::VERSION))
        .replace("\"version\": \"2.6.0\"", &format!("\"version\": \"{}\"", s2s_eval::VERSION))
}

#[test]
fn paired_tests_match_sacrebleu() {
    if !have_fixtures() {
        return;
    }
    let cases = jsonl("significance.jsonl");
    assert!(cases.len() >= 20, "{} cases", cases.len());
    let (mut bs, mut ar) = (0, 0);
    for c in &cases {
        let name = c["name"].as_str().unwrap();
        let (systems, refs): (Vec<Vec<String>>, Vec<Vec<String>>) = match c.get("data") {
            Some(d) => (
                d["systems"].as_array().unwrap().iter().map(strings).collect(),
                d["refs"].as_array().unwrap().iter().map(strings).collect(),
            ),
            None => (
                strings(&c["systems"]).iter().map(|s| system(s)).collect(),
                strings(&c["refs"]).iter().map(|s| system(s)).collect(),
            ),
        };
        let test = match c["test"].as_str().unwrap() {
            "bs" => {
                bs += 1;
                PairedTest::Bootstrap
            }
            _ => {
                ar += 1;
                PairedTest::ApproximateRandomization
            }
        };
        let seed = match c["seed"].as_u64() {
            Some(s) => Seed::Fixed(u128::from(s)),
            None => Seed::default(),
        };
        let opts = PairedOptions { test, samples: c["samples"].as_u64().unwrap() as usize, seed };
        let metrics: Vec<MetricConfig> = c["metrics"].as_array().unwrap().iter().map(metric).collect();
        let got = paired_test(&systems, &refs, &metrics, &opts).unwrap();
        let want = c["columns"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{name}");
        for (g, w) in got.iter().zip(want) {
            let what = format!("{name} {}", g.name);
            assert_eq!(g.name, w["name"].as_str().unwrap(), "{name}");
            assert_eq!(g.signature, ours(w["signature"].as_str().unwrap()), "{what}");
            let results = w["results"].as_array().unwrap();
            assert_eq!(g.results.len(), results.len(), "{what}");
            for (i, (r, e)) in g.results.iter().zip(results).enumerate() {
                let expected = PairedResult {
                    score: float(&e["score"]).unwrap(),
                    p_value: float(&e["p_value"]),
                    mean: float(&e["mean"]),
                    ci: float(&e["ci"]),
                };
                assert_eq!(r, &expected, "{what}, system {i}");
            }
        }
    }
    assert!(bs >= 5 && ar >= 5, "{bs} bootstrap and {ar} randomization cases");
}

/// What a recorded sacreBLEU command line asked for.
struct Cli {
    refs: Vec<String>,
    inputs: Vec<String>,
    req: ScoreRequest,
    stdout: String,
}

fn parse_cli(c: &Value) -> Cli {
    let args = strings(&c["args"]);
    let mut req = ScoreRequest { metrics: vec![], ..ScoreRequest::default() };
    let (mut refs, mut inputs) = (Vec::new(), Vec::new());
    let mut i = 0;
    let mut in_inputs = false;
    while i < args.len() {
        let a = args[i].as_str();
        let mut value = || {
            i += 1;
            args[i].clone()
        };
        match a {
            "-i" => in_inputs = true,
            "-m" => {
                in_inputs = false;
                while i + 1 < args.len() && !args[i + 1].starts_with('-') {
                    i += 1;
                    req.metrics.push(args[i].parse::<Metric>().unwrap());
                }
            }
            "--paired-bs" => req.paired = Some(PairedTest::Bootstrap),
            "--paired-ar" => req.paired = Some(PairedTest::ApproximateRandomization),
            "--paired-bs-n" => req.paired_bs_n = value().parse().unwrap(),
            "--paired-ar-n" => req.paired_ar_n = value().parse().unwrap(),
            "-w" => req.width = value().parse().unwrap(),
            "-f" => req.format = value().parse::<Format>().unwrap(),
            "--ter-normalized" => req.ter.normalized = true,
            "--ter-no-punct" => req.ter.no_punct = true,
            "--ter-case-sensitive" => req.ter.case_sensitive = true,
            "--ter-asian-support" => req.ter.asian_support = true,
            f if f.starts_with('-') => panic!("flag {f} not handled"),
            f if in_inputs => inputs.push(f.to_owned()),
            f => refs.push(f.to_owned()),
        }
        if a.starts_with('-') && a != "-i" {
            in_inputs = false;
        }
        i += 1;
    }
    if let Some(seed) = c["env"].get("SACREBLEU_SEED").and_then(Value::as_str) {
        req.seed = seed.parse().unwrap();
    }
    req.refs = refs.iter().map(|r| shared(r)).collect();
    req.hyps = inputs.iter().map(|h| shared(h)).collect();
    Cli { refs, inputs, req, stdout: ours(c["stdout"].as_str().unwrap()) }
}

/// The columns `run_score` computes for a multi-system request, through the public API.
fn columns(cli: &Cli) -> Vec<PairedColumn> {
    let refs: Vec<Vec<String>> = cli.refs.iter().map(|r| read(r)).collect();
    let systems: Vec<Vec<String>> = cli.inputs.iter().map(|h| read(h)).collect();
    let mut metrics: Vec<Metric> = Vec::new();
    for m in &cli.req.metrics {
        if !metrics.contains(m) {
            metrics.push(*m);
        }
    }
    if cli.req.paired.is_none() {
        metrics.sort();
    }
    let configs: Vec<MetricConfig> = metrics.iter().map(|&m| cli.req.metric_config(m)).collect();
    match cli.req.paired {
        Some(test) => {
            let samples =
                if test == PairedTest::Bootstrap { cli.req.paired_bs_n } else { cli.req.paired_ar_n };
            let opts = PairedOptions { test, samples, seed: cli.req.seed };
            paired_test(&systems, &refs, &configs, &opts).unwrap()
        }
        None => configs
            .iter()
            .map(|cfg| PairedColumn {
                name: cfg.name(),
                signature: cfg.signature(refs.len()),
                results: systems
                    .iter()
                    .map(|h| PairedResult {
                        score: cfg.corpus_score(h, &refs).unwrap(),
                        p_value: None,
                        mean: None,
                        ci: None,
                    })
                    .collect(),
            })
            .collect(),
    }
}

#[test]
fn command_line_output_matches_sacrebleu() {
    if !have_fixtures() {
        return;
    }
    let cases = jsonl("cli.jsonl");
    assert!(cases.len() >= 8);
    let mut checked = std::collections::HashSet::new();
    for c in &cases {
        let cli = parse_cli(c);
        let what = c["args"].to_string();
        if cli.inputs.len() == 1 {
            // One system: run_score's whole output.
            let out = run_score(&cli.req, Cursor::new(Vec::new())).unwrap();
            assert_eq!(out, cli.stdout, "{what}");
            continue;
        }
        // Several systems are named by their paths as given: sacreBLEU ran in the fixture
        // folder, so format the same columns under its names, then check that run_score
        // (given full paths) prints exactly that report under its own names.
        let cols = columns(&cli);
        let test = cli.req.paired.map(|t| {
            let n = if t == PairedTest::Bootstrap { cli.req.paired_bs_n } else { cli.req.paired_ar_n };
            (t, n)
        });
        let named = |names: Vec<String>| -> Vec<String> {
            let mut names = names;
            if cli.req.paired.is_some() {
                names[0] = format!("Baseline: {}", names[0]);
            }
            names
        };
        let report = format_systems(&named(cli.inputs.clone()), &cols, test, cli.req.format, cli.req.width);
        assert_eq!(report, cli.stdout, "{what}");
        // run_score computes the same columns: check it once per kind of test (it costs a
        // second computation of every score).
        if !checked.insert(cli.req.paired) {
            continue;
        }
        let full: Vec<String> = cli.req.hyps.iter().map(|p| p.display().to_string()).collect();
        let out = run_score(&cli.req, Cursor::new(Vec::new())).unwrap();
        assert_eq!(out, format_systems(&named(full), &cols, test, cli.req.format, cli.req.width), "{what}");
    }
}

#[test]
fn paired_requests_are_checked() {
    if !have_fixtures() {
        return;
    }
    let one = ScoreRequest {
        hyps: vec![shared("wmt22.en-de.Online-B.de")],
        refs: vec![shared("wmt22.en-de.ref.de")],
        paired: Some(PairedTest::Bootstrap),
        ..ScoreRequest::default()
    };
    let err = run_score(&one, Cursor::new(Vec::new())).unwrap_err();
    assert!(err.to_string().contains("two or more hypothesis files"), "{err}");
    // The baseline given again is ignored in a paired test (so one system remains: the
    // error says the file is given twice) ...
    let mut again = one.clone();
    again.hyps.push(shared("wmt22.en-de.Online-B.de"));
    let err = run_score(&again, Cursor::new(Vec::new())).unwrap_err().to_string();
    assert!(err.contains("Online-B.de is given twice") && err.contains("add a different"), "{err}");
    // ... and an error otherwise.
    again.paired = None;
    let err = run_score(&again, Cursor::new(Vec::new())).unwrap_err();
    assert!(err.to_string().contains("given twice"), "{err}");

    let refs = [vec!["a b c"]];
    let opts = PairedOptions { test: PairedTest::Bootstrap, samples: 10, seed: Seed::default() };
    let bleu = [MetricConfig::Bleu(BleuConfig::default())];
    assert!(paired_test(&[vec!["a b c"]], &refs, &bleu, &opts).is_err(), "one system");
    assert!(paired_test(&[vec!["a b c"], vec!["a b"]], &refs, &[], &opts).is_err(), "no metric");
    assert!(paired_test(&[vec!["a b c"], vec!["a b", "x"]], &refs, &bleu, &opts).is_err(), "lengths");
    let huge = PairedOptions { samples: usize::MAX / 2, ..opts };
    let err = paired_test(&[vec!["a b c"], vec!["a b"]], &refs, &bleu, &huge).unwrap_err();
    assert!(err.to_string().contains("too many"), "{err}");
    let empty: [Vec<&str>; 2] = [vec![], vec![]];
    assert!(paired_test(&empty, &[Vec::<&str>::new()], &bleu, &opts).is_err(), "no segment");
    // Fresh randomness still gives valid results.
    let opts = PairedOptions { seed: Seed::Entropy, ..opts };
    let cols = paired_test(&[vec!["a b c"], vec!["a b"]], &refs, &bleu, &opts).unwrap();
    assert!(cols[0].signature.contains("|bs:10|seed:none|"), "{}", cols[0].signature);
    let p = cols[0].results[1].p_value.unwrap();
    assert!(p > 0.0 && p <= 1.0);
}

#[test]
fn seeds_parse_like_sacrebleu() {
    assert_eq!("12345".parse::<Seed>().unwrap(), Seed::Fixed(12345));
    assert_eq!("None".parse::<Seed>().unwrap(), Seed::Entropy);
    assert_eq!(Seed::default().to_string(), "12345");
    assert_eq!(Seed::Entropy.to_string(), "none");
    assert!("-1".parse::<Seed>().is_err());
    assert!("x".parse::<Seed>().is_err());
}

/// True when the shared fixtures are here; otherwise the test skips, saying in one line what
/// is missing and how to get it (under `CI=true` it fails instead).
fn have_fixtures() -> bool {
    s2s_data::shared::require(&manifest_dir(), "fixtures/bleu").is_some()
}

/// This crate's directory: cargo's run-time `CARGO_MANIFEST_DIR` (a target directory shared by
/// clones at other paths may hold a test binary built elsewhere), else the compile-time one.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}
