//! Conformance with sacreBLEU 2.6.0 on the shared fixtures (`shared/fixtures/bleu`,
//! see its README.md). The fixture data is read in place, never copied.

use std::path::PathBuf;

use s2s_eval::{BleuConfig, ChrfConfig, Tokenizer, corpus_bleu, corpus_chrf};
use serde::Deserialize;

fn fixtures() -> PathBuf {
    std::env::var_os("S2S_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../../../shared"))
        .join("fixtures/bleu")
}

/// One segment per line, as sacreBLEU's command line reads them.
fn read(name: &str) -> Vec<String> {
    let path = fixtures().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let body = text.strip_suffix('\n').unwrap_or(&text);
    if text.is_empty() {
        return Vec::new();
    }
    body.split('\n').map(|l| l.trim_end().to_owned()).collect()
}

#[derive(Deserialize)]
struct Case {
    name: String,
    hyp: String,
    refs: Vec<String>,
    bleu: f64,
    counts: [u64; 4],
    totals: [u64; 4],
    precisions: [f64; 4],
    bp: f64,
    sys_len: u64,
    ref_len: u64,
    bleu_signature: String,
    chrf: f64,
    chrf_signature: String,
}

fn cases() -> Vec<Case> {
    let path = fixtures().join("expected.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad case {l}: {e}")))
        .collect()
}

/// sacreBLEU's signature with our version instead of 2.6.0.
fn ours(sig: &str) -> String {
    sig.replace("version:2.6.0", &format!("version:{}", s2s_eval::VERSION))
}

#[test]
fn every_fixture_case_matches_sacrebleu() {
    if !have_fixtures() {
        return;
    }
    let cases = cases();
    assert!(cases.len() >= 8, "expected the 8 fixture cases, got {}", cases.len());
    for c in &cases {
        let hyps = read(&c.hyp);
        let refs: Vec<Vec<String>> = c.refs.iter().map(|r| read(r)).collect();

        let b = corpus_bleu(&hyps, &refs).unwrap();
        assert!((b.score - c.bleu).abs() < 1e-6, "{}: BLEU {} != {}", c.name, b.score, c.bleu);
        assert_eq!(b.counts, c.counts, "{}: counts", c.name);
        assert_eq!(b.totals, c.totals, "{}: totals", c.name);
        assert_eq!(b.sys_len, c.sys_len, "{}: sys_len", c.name);
        assert_eq!(b.ref_len, c.ref_len, "{}: ref_len", c.name);
        assert!((b.bp - c.bp).abs() < 1e-9, "{}: bp {} != {}", c.name, b.bp, c.bp);
        for (p, q) in b.precisions.iter().zip(&c.precisions) {
            assert!((p - q).abs() < 1e-9, "{}: precisions {:?} != {:?}", c.name, b.precisions, c.precisions);
        }
        assert_eq!(b.signature, ours(&c.bleu_signature), "{}", c.name);

        let ch = corpus_chrf(&hyps, &refs).unwrap();
        assert!((ch.score - c.chrf).abs() < 1e-6, "{}: chrF {} != {}", c.name, ch.score, c.chrf);
        assert_eq!(ch.signature, ours(&c.chrf_signature), "{}", c.name);
    }
}

fn wmt(system: &str) -> Vec<String> {
    read(&format!("wmt22.en-de.{system}.de"))
}

// Expected values below: sacreBLEU 2.6.0 in shared/fixtures/bleu, with
// r=lambda f: [l.rstrip() for l in open(f, encoding='utf-8', newline='\n')]
// H=r('wmt22.en-de.Online-B.de'); R=r('wmt22.en-de.ref.de'); P=r('wmt22.en-de.PROMT.de'); W=r('wmt22.en-de.Online-W.de')

#[test]
fn three_references_on_wmt22() {
    if !have_fixtures() {
        return;
    }
    // s=BLEU().corpus_score(H,[R,P,W]); print(repr(s.score), s.counts, s.totals, s.sys_len, s.ref_len)
    // -> 79.27272571322764 [36420, 30979, 26322, 22305] [39114, 37077, 35040, 33009] 39114 39071
    // CHRF().corpus_score(H,[R,P,W]).score -> 85.20665399387954
    let hyps = wmt("Online-B");
    let refs = [wmt("ref"), wmt("PROMT"), wmt("Online-W")];
    let b = corpus_bleu(&hyps, &refs).unwrap();
    assert!((b.score - 79.27272571322764).abs() < 1e-6, "{}", b.score);
    assert_eq!(b.counts, [36420, 30979, 26322, 22305]);
    assert_eq!(b.totals, [39114, 37077, 35040, 33009]);
    assert_eq!((b.sys_len, b.ref_len), (39114, 39071));
    assert!(b.signature.starts_with("nrefs:3|"));
    let c = corpus_chrf(&hyps, &refs).unwrap();
    assert!((c.score - 85.20665399387954).abs() < 1e-6, "{}", c.score);
}

#[test]
fn tokenizers_and_lowercase_on_wmt22() {
    if !have_fixtures() {
        return;
    }
    let hyps = wmt("Online-B");
    let refs = [wmt("ref")];
    // BLEU(tokenize='intl') -> 39.42830511931261 [27565, 17339, 11861, 8347] [40530, 38493, 36456, 34425] 40530 40509
    // BLEU(tokenize='none') -> 33.41445364767865 [20116, 12387, 8014, 5297] [33482, 31445, 29416, 27397] 33482 33426
    // BLEU(lowercase=True)  -> 38.88831617037038 [26542, 16528, 11210, 7801] [39114, 37077, 35040, 33009] 39114 38914
    let expect = [
        (
            Tokenizer::Intl,
            false,
            39.42830511931261,
            [27565, 17339, 11861, 8347],
            [40530, 38493, 36456, 34425],
            40530,
            40509,
        ),
        (
            Tokenizer::None,
            false,
            33.41445364767865,
            [20116, 12387, 8014, 5297],
            [33482, 31445, 29416, 27397],
            33482,
            33426,
        ),
        (
            Tokenizer::V13a,
            true,
            38.88831617037038,
            [26542, 16528, 11210, 7801],
            [39114, 37077, 35040, 33009],
            39114,
            38914,
        ),
    ];
    for (tokenize, lowercase, score, counts, totals, sys_len, ref_len) in expect {
        let cfg = BleuConfig { tokenize, lowercase, ..BleuConfig::default() };
        let b = cfg.corpus_score(&hyps, &refs).unwrap();
        assert!((b.score - score).abs() < 1e-6, "{tokenize} lc={lowercase}: {}", b.score);
        assert_eq!(b.counts, counts, "{tokenize}");
        assert_eq!(b.totals, totals, "{tokenize}");
        assert_eq!((b.sys_len, b.ref_len), (sys_len, ref_len), "{tokenize}");
        assert!(b.signature.contains(&format!("|tok:{tokenize}|")));
    }
    // CHRF(lowercase=True) -> 65.51272962875146; CHRF(word_order=2) -> 62.241063534002535
    let c = ChrfConfig { lowercase: true, ..ChrfConfig::default() }.corpus_score(&hyps, &refs).unwrap();
    assert!((c.score - 65.51272962875146).abs() < 1e-6, "{}", c.score);
    let c = ChrfConfig { word_order: 2, ..ChrfConfig::default() }.corpus_score(&hyps, &refs).unwrap();
    assert!((c.score - 62.241063534002535).abs() < 1e-6, "{}", c.score);
    assert_eq!(c.name, "chrF2++");
}

#[test]
fn large_corpus_takes_the_parallel_path_and_still_matches() {
    if !have_fixtures() {
        return;
    }
    // 3 x 2037 = 6111 segments: above the size where scoring is split across threads.
    // h3=H*3; r3=R*3; p3=P*3; s=BLEU().corpus_score(h3,[r3,p3])
    // -> 71.46688319051624 [104310, 84828, 69684, 57483] [117342, 111231, 105120, 99027] 117342 116898
    // CHRF().corpus_score(h3,[r3,p3]).score -> 82.60488293898378
    let times3 = |v: Vec<String>| v.iter().cycle().take(3 * v.len()).cloned().collect::<Vec<_>>();
    let hyps = times3(wmt("Online-B"));
    let refs = [times3(wmt("ref")), times3(wmt("PROMT"))];
    let b = corpus_bleu(&hyps, &refs).unwrap();
    assert!((b.score - 71.46688319051624).abs() < 1e-6, "{}", b.score);
    assert_eq!(b.counts, [104310, 84828, 69684, 57483]);
    assert_eq!(b.totals, [117342, 111231, 105120, 99027]);
    assert_eq!((b.sys_len, b.ref_len), (117342, 116898));
    let c = corpus_chrf(&hyps, &refs).unwrap();
    assert!((c.score - 82.60488293898378).abs() < 1e-6, "{}", c.score);
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
