//! Fuzz property of the studio's request handling: the bytes a client sends on one connection,
//! through hyper's HTTP/1 parser and the studio's router — the `Host` and `Content-Type`
//! checks, the body's size, UTF-8 and JSON, every limit of a translation request
//! ([`s2s_studio::server::answer_bytes`]).
//!
//! Input layout: the bytes themselves, as sent before the client stops sending and waits for
//! the answers. The studio serves one tiny untrained word-level model (what it translates does
//! not matter here) with small limits, so that a request that passes every check decodes in
//! microseconds.
//!
//! Properties: no panic; what comes back is nothing or HTTP/1 responses, none of them a 5xx
//! (a studio error or a decoding that failed); a request whose head parses with two or more
//! `Host` headers is answered 400 (431 when hyper finds too many headers first); one that
//! declares a body over 64 KiB is not answered 200.

use std::path::PathBuf;
use std::sync::OnceLock;

use axum::Router;
use burn::tensor::Device;
use s2s_data::{Level, Pair, TokenizerConfig, Tokenizers};
use s2s_studio::{Limits, Loaded, Options, Stats, Studio};

/// Runs the property on one input (see the module doc).
pub fn check(data: &[u8]) {
    static APP: OnceLock<Router> = OnceLock::new();
    let app = APP.get_or_init(app);
    let out = s2s_studio::server::answer_bytes(app, data);
    let statuses = statuses(&out);
    for &s in &statuses {
        assert!(s < 500, "answered {s}: {}", String::from_utf8_lossy(&out));
    }
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    if let Ok(httparse::Status::Complete(_)) = req.parse(data) {
        let first = statuses.iter().copied().find(|&s| s >= 200);
        let hosts = req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("host")).count();
        if hosts > 1 {
            assert!(
                matches!(first, Some(400 | 431)),
                "{hosts} Host headers answered {first:?}: {}",
                String::from_utf8_lossy(&out)
            );
        }
        let declared = req
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
            .filter_map(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<u64>().ok())
            .max();
        if declared.is_some_and(|n| n > s2s_studio::server::MAX_BODY as u64) {
            assert_ne!(
                first,
                Some(200),
                "a body declared over the limit was taken: {}",
                String::from_utf8_lossy(&out)
            );
        }
    }
}

/// The status codes of the responses in `out`, in order, as far as they can be read (each
/// body skipped by its `Content-Length`). Panics when `out` does not begin as a response.
fn statuses(out: &[u8]) -> Vec<u16> {
    let mut found = Vec::new();
    let mut rest = out;
    while !rest.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut res = httparse::Response::new(&mut headers);
        let head = match res.parse(rest) {
            Ok(httparse::Status::Complete(n)) => n,
            // A body whose length was not what `Content-Length` said (a HEAD's): stop there.
            _ if !found.is_empty() => break,
            other => panic!("not an HTTP response ({other:?}): {}", String::from_utf8_lossy(out)),
        };
        found.push(res.code.expect("a complete head has a code"));
        let len = res
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok())
            .unwrap_or(0);
        rest = rest.get(head + len..).unwrap_or(&[]);
    }
    found
}

const PAIRS: [(&str, &str); 3] =
    [("dogs sleep .", "hunde schlafen ."), ("cats see dogs .", "katzen sehen hunde ."), ("a b", "c d")];

/// The studio the property talks to: one tiny untrained LSTM, word level, small limits.
fn app() -> Router {
    let device = Device::flex();
    let pairs: Vec<Pair> =
        PAIRS.iter().map(|(s, t)| Pair { src: s.to_string(), tgt: t.to_string() }).collect();
    let cfg =
        TokenizerConfig { level: Level::Word, vocab_size: 0, joint: true, min_freq: 1, ..Default::default() };
    let tok = Tokenizers::train(&cfg, &pairs).expect("tokenizers of three pairs");
    let (_, spec) =
        s2s_models::testing::tiny_specs(0.0).into_iter().find(|(k, _)| *k == "lstm").expect("a tiny lstm");
    device.seed(7);
    let model = spec.init(tok.src.vocab_size(), tok.tgt.vocab_size(), &device).expect("a tiny model");
    let loaded = Loaded {
        name: "m".into(),
        run: PathBuf::from("m"),
        kind: "lstm",
        model,
        tok,
        limit: s2s_decode::MaxLength { a: 1.0, b: 4 },
        params: 0,
        aer: None,
    };
    let studio = Studio {
        models: vec![loaded],
        examples: Vec::new(),
        gold: Default::default(),
        device,
        device_name: "cpu".into(),
    };
    let opts =
        Options { limits: Limits { max_chars: 200, max_src_tokens: 16, max_beam: 3 }, ..Options::default() };
    s2s_studio::router(studio, &opts, std::sync::Arc::new(Stats::default()))
}
