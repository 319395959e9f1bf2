//! `run_score` against the sacreBLEU 2.6.0 command line's output on the shared fixtures.

use std::io::Cursor;
use std::path::PathBuf;

use s2s_eval::{EvalError, Format, Metric, ScoreRequest, run_score};

fn fixture(name: &str) -> PathBuf {
    std::env::var_os("S2S_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../../../shared"))
        .join("fixtures/bleu")
        .join(name)
}

/// sacreBLEU's output with our version instead of 2.6.0.
fn ours(s: &str) -> String {
    s.replace("version:2.6.0", &format!("version:{}", s2s_eval::VERSION))
        .replace("\"version\": \"2.6.0\"", &format!("\"version\": \"{}\"", s2s_eval::VERSION))
}

fn online_b(metrics: Vec<Metric>, format: Format, width: usize) -> ScoreRequest {
    ScoreRequest {
        hyps: vec![fixture("wmt22.en-de.Online-B.de")],
        refs: vec![fixture("wmt22.en-de.ref.de")],
        metrics,
        format,
        width,
        ..ScoreRequest::default()
    }
}

fn no_stdin() -> Cursor<Vec<u8>> {
    Cursor::new(Vec::new())
}

// sacrebleu wmt22.en-de.ref.de -i wmt22.en-de.Online-B.de -m bleu chrf -f text
const TEXT_BOTH: &str = "  BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0 = 38.4 66.9/44.1/31.6/23.3 (BP = 1.000 ratio = 1.005 hyp_len = 39114 ref_len = 38914)
chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0 = 64.6
";

// sacrebleu wmt22.en-de.ref.de -i wmt22.en-de.Online-B.de -m chrf bleu -f json -w 2
const JSON_BOTH: &str = r#"[
{
 "name": "BLEU",
 "score": 38.37,
 "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
 "verbose_score": "66.9/44.1/31.6/23.3 (BP = 1.000 ratio = 1.005 hyp_len = 39114 ref_len = 38914)",
 "nrefs": "1",
 "case": "mixed",
 "eff": "no",
 "tok": "13a",
 "smooth": "exp",
 "version": "2.6.0"
},
{
 "name": "chrF2",
 "score": 64.64,
 "signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0",
 "nrefs": "1",
 "case": "mixed",
 "eff": "yes",
 "nc": "6",
 "nw": "0",
 "space": "no",
 "version": "2.6.0"
}
]
"#;

// sacrebleu wmt22.en-de.ref.de -i wmt22.en-de.Online-B.de -f json
const JSON_BLEU: &str = r#"{
 "name": "BLEU",
 "score": 38.4,
 "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
 "verbose_score": "66.9/44.1/31.6/23.3 (BP = 1.000 ratio = 1.005 hyp_len = 39114 ref_len = 38914)",
 "nrefs": "1",
 "case": "mixed",
 "eff": "no",
 "tok": "13a",
 "smooth": "exp",
 "version": "2.6.0"
}
"#;

#[test]
fn text_output_matches_sacrebleu() {
    if !have_fixtures() {
        return;
    }
    let out = run_score(&online_b(vec![Metric::Bleu, Metric::Chrf], Format::Text, 1), no_stdin()).unwrap();
    assert_eq!(out, ours(TEXT_BOTH));
    // Order given does not matter; duplicates are ignored.
    let out =
        run_score(&online_b(vec![Metric::Chrf, Metric::Bleu, Metric::Chrf], Format::Text, 1), no_stdin())
            .unwrap();
    assert_eq!(out, ours(TEXT_BOTH));
}

#[test]
fn json_output_matches_sacrebleu() {
    if !have_fixtures() {
        return;
    }
    let out = run_score(&online_b(vec![Metric::Chrf, Metric::Bleu], Format::Json, 2), no_stdin()).unwrap();
    assert_eq!(out, ours(JSON_BOTH));
    let out = run_score(&online_b(vec![], Format::Json, 1), no_stdin()).unwrap();
    assert_eq!(out, ours(JSON_BLEU));
}

#[test]
fn width_and_lowercase_and_two_references() {
    if !have_fixtures() {
        return;
    }
    // sacrebleu edge.empty-lines.ref -i edge.empty-lines.hyp -m chrf -f text -w 3
    let req = ScoreRequest {
        hyps: vec![fixture("edge.empty-lines.hyp")],
        refs: vec![fixture("edge.empty-lines.ref")],
        metrics: vec![Metric::Chrf],
        width: 3,
        ..ScoreRequest::default()
    };
    assert_eq!(
        run_score(&req, no_stdin()).unwrap(),
        ours("chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0 = 58.267\n")
    );

    // sacrebleu wmt22.en-de.ref.de wmt22.en-de.PROMT.de -i wmt22.en-de.Online-B.de -m bleu chrf -f text -lc --chrf-lowercase
    let mut req = online_b(vec![Metric::Bleu, Metric::Chrf], Format::Text, 1);
    req.refs.push(fixture("wmt22.en-de.PROMT.de"));
    req.lowercase = true;
    let want = "  BLEU|nrefs:2|case:lc|eff:no|tok:13a|smooth:exp|version:2.6.0 = 71.9 89.3/76.6/66.7/58.4 (BP = 1.000 ratio = 1.004 hyp_len = 39114 ref_len = 38966)
chrF2|nrefs:2|case:lc|eff:yes|nc:6|nw:0|space:no|version:2.6.0 = 83.1
";
    assert_eq!(run_score(&req, no_stdin()).unwrap(), ours(want));
}

#[test]
fn stdin_hypotheses() {
    if !have_fixtures() {
        return;
    }
    let text = std::fs::read(fixture("wmt22.en-de.Online-B.de")).unwrap();
    let mut req = online_b(vec![Metric::Bleu, Metric::Chrf], Format::Text, 1);
    req.hyps = vec![];
    assert_eq!(run_score(&req, Cursor::new(text)).unwrap(), ours(TEXT_BOTH));
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("s2s-eval-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn errors_name_the_files() {
    let dir = temp_dir("errors");
    let hyp = dir.join("hyp.txt");
    let reference = dir.join("ref.txt");
    std::fs::write(&hyp, "a\nb\n").unwrap();
    std::fs::write(&reference, "a\nb\nc\n").unwrap();
    let req =
        ScoreRequest { hyps: vec![hyp.clone()], refs: vec![reference.clone()], ..ScoreRequest::default() };
    let err = run_score(&req, no_stdin()).unwrap_err();
    assert!(matches!(err, EvalError::LineCountMismatch { hyp_lines: 2, ref_lines: 3, .. }));
    assert_eq!(err.to_string(), format!("{} has 2 lines but {} has 3", hyp.display(), reference.display()));

    std::fs::write(&reference, b"a\n\xff\n").unwrap();
    let err = run_score(&req, no_stdin()).unwrap_err();
    assert!(matches!(err, EvalError::InvalidUtf8 { line: 2, .. }), "{err}");
    assert!(err.to_string().contains("ref.txt"), "{err}");

    let missing = dir.join("missing.txt");
    let req = ScoreRequest {
        hyps: vec![missing.clone()],
        refs: vec![reference.clone()],
        ..ScoreRequest::default()
    };
    let err = run_score(&req, no_stdin()).unwrap_err();
    assert!(matches!(err, EvalError::Read { .. }));
    assert!(err.to_string().contains("missing.txt"), "{err}");

    let req = ScoreRequest { hyps: vec![], refs: vec![], ..ScoreRequest::default() };
    assert!(matches!(run_score(&req, no_stdin()), Err(EvalError::NoReferences)));

    std::fs::write(&reference, "a\nb\n").unwrap();
    let req = ScoreRequest { hyps: vec![], refs: vec![reference.clone()], ..ScoreRequest::default() };
    let err = run_score(&req, Cursor::new(b"a\n".to_vec())).unwrap_err();
    assert_eq!(err.to_string(), format!("<stdin> has 1 lines but {} has 2", reference.display()));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn empty_input_scores_zero() {
    let dir = temp_dir("empty");
    let reference = dir.join("ref.txt");
    std::fs::write(&reference, "").unwrap();
    let req = ScoreRequest {
        hyps: vec![],
        refs: vec![reference],
        metrics: vec![Metric::Bleu, Metric::Chrf],
        ..ScoreRequest::default()
    };
    let out = run_score(&req, no_stdin()).unwrap();
    assert!(
        out.contains(" = 0.0 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 0.000 hyp_len = 0 ref_len = 0)"),
        "{out}"
    );
    assert!(out.contains("chrF2|") && out.trim_end().ends_with("= 0.0"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
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
