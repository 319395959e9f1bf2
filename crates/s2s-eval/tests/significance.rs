//! Paired bootstrap resampling and approximate randomization against sacreBLEU 2.6.0
//! (with numpy 2): every mean, confidence interval and p-value identical, for BLEU, chrF
//! and TER, on the WMT22 outputs of the shared fixtures (read in place) and on a tiny
//! hand-made corpus. Expected values: `tests/fixtures/significance.jsonl`, written by
//! `scripts/sacrebleu-expected.py`.

use std::path::PathBuf;

use s2s_eval::{
    BleuConfig, ChrfConfig, MetricConfig, PairedOptions, PairedResult, PairedTest, Seed, Smoothing, TerConfig,
    Tokenizer, paired_test,
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

#[test]
fn paired_requests_are_checked() {
    let refs = [vec!["a b c"]];
    let opts = PairedOptions { test: PairedTest::Bootstrap, samples: 10, seed: Seed::default() };
    let bleu = [MetricConfig::Bleu(BleuConfig::default())];
    assert!(paired_test(&[vec!["a b c"]], &refs, &bleu, &opts).is_err(), "one system");
    assert!(paired_test(&[vec!["a b c"], vec!["a b"]], &refs, &[], &opts).is_err(), "no metric");
    assert!(paired_test(&[vec!["a b c"], vec!["a b", "x"]], &refs, &bleu, &opts).is_err(), "lengths");
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

/// This crate's directory: cargo's run-time `CARGO_MANIFEST_DIR` (a target directory shared by
/// clones at other paths may hold a test binary built elsewhere), else the compile-time one.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}
