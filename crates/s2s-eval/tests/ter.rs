//! TER against sacreBLEU 2.6.0: its tokeniser under every option, segment edits on
//! synthetic pairs built to exercise the shift search, and corpus TER on the WMT22 outputs
//! of the shared fixtures (read in place). Expected values: `tests/fixtures/ter.jsonl`,
//! written by `scripts/sacrebleu-expected.py`.

use std::path::PathBuf;

use s2s_eval::{TerConfig, corpus_ter};
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

fn wmt(system: &str) -> Vec<String> {
    read(&format!("wmt22.en-de.{system}.de"))
}

fn cases(kind: &str) -> Vec<Value> {
    let path = manifest_dir().join("tests/fixtures/ter.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("bad line {l}: {e}")))
        .filter(|c| c["kind"] == kind)
        .collect()
}

fn options(v: &Value) -> TerConfig {
    let flag = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
    TerConfig {
        normalized: flag("normalized"),
        no_punct: flag("no_punct"),
        asian_support: flag("asian_support"),
        case_sensitive: flag("case_sensitive"),
    }
}

/// A float written as a string by the generator (serde_json's own float parsing is not
/// always correctly rounded).
fn float(v: &Value) -> f64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("not a float string: {v}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect()
}

#[test]
fn tercom_tokenizer_matches_sacrebleu_under_every_option() {
    let cases = cases("tokenize");
    assert!(cases.len() >= 10);
    for c in &cases {
        let text = c["text"].as_str().unwrap();
        for (n, want) in strings(&c["tokens"]).iter().enumerate() {
            let cfg = TerConfig {
                normalized: n & 1 != 0,
                no_punct: n & 2 != 0,
                asian_support: n & 4 != 0,
                case_sensitive: n & 8 != 0,
            };
            assert_eq!(&cfg.tokenize(text.trim_end()), want, "{text:?} with {cfg:?}");
        }
    }
}

#[test]
fn segment_edits_match_sacrebleu_on_synthetic_pairs() {
    let cases = cases("segment");
    assert!(cases.len() >= 500);
    let cfg = TerConfig::default();
    for c in &cases {
        let hyp = c["hyp"].as_str().unwrap();
        let refs = strings(&c["refs"]);
        let s = cfg.sentence_score(hyp, &refs).unwrap();
        assert_eq!(s.num_edits, c["edits"].as_u64().unwrap(), "edits of {hyp:?} vs {refs:?}");
        assert_eq!(s.ref_length, float(&c["ref_length"]), "{hyp:?} vs {refs:?}");
    }
}

#[test]
fn corpus_ter_matches_sacrebleu_on_wmt22() {
    if !have_fixtures() {
        return;
    }
    let cases = cases("corpus");
    assert!(cases.len() >= 15);
    for c in &cases {
        let cfg = options(&c["options"]);
        let hyps = wmt(c["hyp"].as_str().unwrap());
        let refs: Vec<Vec<String>> = strings(&c["refs"]).iter().map(|r| wmt(r)).collect();
        let what = format!("{} {cfg:?} refs {}", c["hyp"], c["refs"]);
        let stats = cfg.segment_stats(&hyps, &refs).unwrap();
        let checksum: u64 = stats.iter().enumerate().map(|(i, s)| (i as u64 + 1) * s.num_edits).sum();
        assert_eq!(checksum, c["edits_checksum"].as_u64().unwrap(), "{what}: per-segment edits");
        let s = cfg.score_stats(&TerConfig::sum_stats(&stats), refs.len());
        assert_eq!(s.num_edits, c["num_edits"].as_u64().unwrap(), "{what}");
        assert_eq!(s.ref_length, float(&c["ref_length"]), "{what}");
        assert_eq!(s.score, float(&c["score"]), "{what}");
        let sig = c["signature"]
            .as_str()
            .unwrap()
            .replace("version:2.6.0", &format!("version:{}", s2s_eval::VERSION));
        assert_eq!(s.signature, sig, "{what}");
    }
    // The default configuration through the convenience function.
    let s = corpus_ter(&wmt("PROMT"), &[wmt("ref")]).unwrap();
    let want = cases.iter().find(|c| c["hyp"] == "PROMT" && c["options"] == serde_json::json!({})).unwrap();
    assert_eq!(s.score, float(&want["score"]));
    assert!(s.signature.starts_with("nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:"));
}

#[test]
fn errors_instead_of_panics() {
    let refs: [Vec<&str>; 0] = [];
    assert!(corpus_ter(&["a"], &refs).is_err());
    assert!(corpus_ter(&["a", "b"], &[vec!["a"]]).is_err());
    let empty: [&str; 0] = [];
    assert!(TerConfig::default().sentence_score("a", &empty).is_err());
    // Empty sides: no reference words means edits = hypothesis words (score 100 when the
    // whole corpus has no reference words), nothing at all scores 0.
    let s = corpus_ter(&["a b", ""], &[vec!["", ""]]).unwrap();
    assert_eq!((s.num_edits, s.ref_length, s.score), (2, 0.0, 100.0));
    assert_eq!(corpus_ter(&[""], &[vec![""]]).unwrap().score, 0.0);
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
