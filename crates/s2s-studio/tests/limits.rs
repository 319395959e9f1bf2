//! What one client can take from the studio, bounded: the models a request names, its limits
//! checked before any decoding, its deadline, a client that leaves, the `Host` and
//! `Content-Type` a request must carry, and the server's read timeout and connection cap.
//!
//! The router is driven with tower's `oneshot` where no socket is needed, and a server on
//! 127.0.0.1 where one is. Models are tiny and untrained (what they translate does not
//! matter here). No test depends on how fast anything runs: waits are bounded loops on
//! counters, and the one wait for something *not* to happen cannot fail when the server is
//! right.

use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode};
use burn::tensor::Device;
use s2s_data::{Level, Pair, TokenizerConfig, Tokenizers};
use s2s_decode::MaxLength;
use s2s_studio::{Limits, Loaded, Options, Request, Stats, Stopped, Studio, router, run_request, serve_on};
use serde_json::{Value, json};
use tower::ServiceExt;

const PAIRS: [(&str, &str); 4] = [
    ("dogs sleep .", "hunde schlafen ."),
    ("cats sleep .", "katzen schlafen ."),
    ("dogs see cats .", "hunde sehen katzen ."),
    ("cats see dogs .", "katzen sehen hunde ."),
];

/// A tiny untrained LSTM with its tokenizers of `level`, named `name`.
fn model(name: &str, level: Level, device: &Device) -> Loaded {
    let pairs: Vec<Pair> =
        PAIRS.iter().map(|(s, t)| Pair { src: s.to_string(), tgt: t.to_string() }).collect();
    let cfg = TokenizerConfig { level, vocab_size: 0, joint: true, min_freq: 1, ..Default::default() };
    let tok = Tokenizers::train(&cfg, &pairs).unwrap();
    let (_, spec) = s2s_models::testing::tiny_specs(0.0).into_iter().find(|(k, _)| *k == "lstm").unwrap();
    device.seed(7);
    let model = spec.init(tok.src.vocab_size(), tok.tgt.vocab_size(), device).unwrap();
    Loaded {
        name: name.into(),
        run: PathBuf::from(name),
        kind: "lstm",
        model,
        tok,
        limit: MaxLength { a: 1.0, b: 4 },
        params: 0,
        aer: None,
    }
}

/// A studio of `words` word-level models `w0`, `w1` … and, with `chars`, a character-level
/// model `chars` last.
fn studio(words: usize, chars: bool) -> Studio {
    let device = Device::flex();
    let mut models: Vec<Loaded> = (0..words).map(|i| model(&format!("w{i}"), Level::Word, &device)).collect();
    if chars {
        models.push(model("chars", Level::Char, &device));
    }
    Studio { models, examples: Vec::new(), gold: Default::default(), device, device_name: "cpu".into() }
}

fn app(studio: Studio, opts: &Options) -> (Router, Arc<Stats>) {
    let stats = Arc::new(Stats::default());
    (router(studio, opts, stats.clone()), stats)
}

fn count(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// One request through the router: (status, JSON body).
async fn call(
    app: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, Value) {
    let mut req = HttpRequest::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = app.clone().oneshot(req.body(Body::from(body.to_string())).unwrap()).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX).await.unwrap();
    let v =
        serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(&bytes) }));
    (status, v)
}

const JSON: [(&str, &str); 2] = [("host", "127.0.0.1:8340"), ("content-type", "application/json")];

async fn translate(app: &Router, body: &Value) -> (StatusCode, Value) {
    call(app, "POST", "/api/translate", &JSON, &body.to_string()).await
}

fn says(v: &Value, what: &str) -> bool {
    v["error"].as_str().is_some_and(|e| e.contains(what))
}

#[tokio::test]
async fn a_models_list_with_duplicates_or_more_names_than_models_is_refused() {
    let (app, stats) = app(studio(3, false), &Options::default());
    let (status, v) = translate(&app, &json!({ "text": "dogs sleep .", "models": ["w0", "w0"] })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(says(&v, "`w0` is asked for twice"), "{v}");
    let (status, v) =
        translate(&app, &json!({ "text": "dogs sleep .", "models": ["w0", "w1", "w2", "w1"] })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(says(&v, "4 models asked for; the studio has 3"), "{v}");
    // What a 64 KiB body could ask before: one model ~9,000 times, run one after the other.
    let many = vec!["w0"; 9000];
    let body = json!({ "text": "dogs sleep .", "models": many }).to_string();
    assert!(body.len() < 64 * 1024);
    let (status, v) = call(&app, "POST", "/api/translate", &JSON, &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(says(&v, "9000 models asked for"), "{v}");
    assert_eq!(count(&stats.models_run), 0, "refused before decoding");
    // A list of distinct names runs those models, in its order.
    let (status, v) =
        translate(&app, &json!({ "text": "dogs sleep .", "models": ["w2", "w0"], "beam": 2 })).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let names: Vec<&str> =
        v["results"].as_array().unwrap().iter().map(|r| r["model"].as_str().unwrap()).collect();
    assert_eq!(names, ["w2", "w0"]);
    assert_eq!(count(&stats.models_run), 2);
}

#[tokio::test]
async fn every_limit_is_checked_before_any_model_decodes() {
    let opts =
        Options { limits: Limits { max_chars: 60, max_src_tokens: 5, max_beam: 8 }, ..Options::default() };
    let (app, stats) = app(studio(2, true), &opts);
    // Three word tokens fit every word model; the character model, last, sees 12 tokens.
    let (status, v) = translate(&app, &json!({ "text": "dogs sleep ." })).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert!(says(&v, "chars: the text is") && says(&v, "the limit is 5 (--max-src-tokens)"), "{v}");
    // The reference's token limit, which was checked after the beam search.
    let (status, v) = translate(
        &app,
        &json!({ "text": "dogs sleep .", "reference": "hunde hunde hunde hunde hunde hunde .", "models": ["w1"] }),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert!(says(&v, "w1: the reference is 7 tokens long"), "{v}");
    let (status, v) = translate(&app, &json!({ "text": "dogs ".repeat(13) })).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert!(says(&v, "--max-chars"), "{v}");
    let (status, v) = translate(&app, &json!({ "text": "dogs sleep .", "beam": 9 })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(count(&stats.models_run), 0, "no model decoded for a request over a limit");
    // Within every limit: decoded.
    let (status, v) = translate(&app, &json!({ "text": "cats", "models": ["w0", "chars"], "beam": 1 })).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(count(&stats.models_run), 2);
}

#[tokio::test]
async fn requests_must_name_this_machine_and_posts_must_be_json() {
    let opts = Options { allowed_hosts: vec!["studio.lan".into()], ..Options::default() };
    let (app, stats) = app(studio(1, false), &opts);
    let body = json!({ "text": "dogs sleep .", "beam": 1 }).to_string();
    // A page that rebinds its own name to 127.0.0.1 sends its name as the Host.
    for host in ["evil.example", "evil.example:8340", "localhost.evil.example", "10.1.2.3:8340"] {
        for (method, uri) in
            [("GET", "/"), ("GET", "/api/info"), ("POST", "/api/translate"), ("GET", "/nothing")]
        {
            let headers = [("host", host), ("content-type", "application/json")];
            let (status, v) = call(&app, method, uri, &headers, &body).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {uri} for {host}: {v}");
            assert!(says(&v, "--allow-host") && says(&v, host), "{v}");
        }
    }
    let (status, v) = call(&app, "GET", "/api/info", &[], "").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "no Host at all: {v}");
    // A target in absolute form names the host itself (RFC 9112 §3.2.2: Host is ignored).
    let (status, v) = call(&app, "GET", "http://evil.example/api/info", &[("host", "localhost")], "").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{v}");
    assert!(says(&v, "not for host `evil.example`"), "{v}");
    let (status, v) = call(&app, "GET", "http://localhost:8340/api/info", &[("host", "other")], "").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    for host in ["localhost:8340", "127.0.0.1:1234", "[::1]:8340", "studio.lan:8340", "LOCALHOST"] {
        let (status, v) = call(&app, "GET", "/api/info", &[("host", host)], "").await;
        assert_eq!(status, StatusCode::OK, "{host}: {v}");
    }
    // A form or a text/plain post needs no CORS preflight: any page could send one.
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
    ] {
        let mut headers = vec![("host", "localhost:8340")];
        headers.extend(ct.map(|c| ("content-type", c)));
        let (status, v) = call(&app, "POST", "/api/translate", &headers, &body).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct:?}: {v}");
        assert!(says(&v, "application/json"), "{v}");
    }
    assert_eq!(count(&stats.models_run), 0);
    let headers = [("host", "localhost:8340"), ("content-type", "application/json; charset=utf-8")];
    let (status, v) = call(&app, "POST", "/api/translate", &headers, &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn a_request_past_its_deadline_stops_with_504() {
    let opts = Options { request_timeout: Duration::ZERO, ..Options::default() };
    let (app, stats) = app(studio(3, false), &opts);
    let (status, v) = translate(&app, &json!({ "text": "dogs sleep ." })).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{v}");
    assert!(says(&v, "--request-timeout"), "{v}");
    assert_eq!(count(&stats.timed_out), 1);
    // The job ends on its own thread, at its first check: wait for it (bounded), then look.
    wait_for("the job to stop", || count(&stats.stopped) == 1);
    assert_eq!(count(&stats.models_run), 0);
    assert_eq!(count(&stats.answered), 0);
}

/// Decoding checks where it is told to stop: before each model, before each step of its beam
/// search and between the search and its forced passes — and asks nothing more once stopped,
/// wherever that is, mid-search included.
#[test]
fn run_request_stops_at_the_first_check_that_says_so() {
    let studio = studio(2, false);
    let req: Request = serde_json::from_value(json!({ "text": "dogs see cats .", "beam": 2 })).unwrap();
    let encoded = req.prepare(&studio, &Limits::default()).unwrap();
    // A whole run: how many checks, and how many had been asked when each model finished.
    let asked = Cell::new(0);
    let mut finished_at = Vec::new();
    let counting = || {
        asked.set(asked.get() + 1);
        None
    };
    let results = run_request(&studio, &encoded, &req, counting, |_| finished_at.push(asked.get())).unwrap();
    assert_eq!(results.len(), 2);
    let total = asked.get();
    // Model 0: one check before it, one after its search, and one before each search step.
    let steps = results[0].steps.len();
    assert!(steps >= 2, "a search of several steps: {steps}");
    assert_eq!(finished_at[0], 2 + steps, "the search asks before each of its {steps} steps");
    for allowed in 0..total {
        let asked = Cell::new(0);
        let stop = || {
            asked.set(asked.get() + 1);
            (asked.get() > allowed).then_some(Stopped::Deadline)
        };
        let mut done = 0;
        let r = run_request(&studio, &encoded, &req, stop, |_| done += 1);
        assert_eq!(r.err(), Some(Stopped::Deadline), "stopped after {allowed} checks");
        let models_done = finished_at.iter().filter(|&&at| at <= allowed).count();
        assert_eq!((asked.get(), done), (allowed + 1, models_done), "after {allowed} checks");
    }
}

/// Waits for `what` (bounded: a minute, in 10 ms steps).
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < until, "waited a minute for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A studio served on 127.0.0.1 by its own runtime (at most `blocking` blocking threads, the
/// decoding jobs'), stopped when dropped.
struct Server {
    addr: SocketAddr,
    stats: Arc<Stats>,
    runtime: Arc<tokio::runtime::Runtime>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(studio: Studio, opts: Options, blocking: usize) -> Self {
        let runtime = Arc::new(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .max_blocking_threads(blocking)
                .enable_all()
                .build()
                .unwrap(),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (app, stats) = app(studio, &opts);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let rt = runtime.clone();
        let thread = std::thread::spawn(move || {
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                serve_on(listener, app, &opts, async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
            })
        });
        Self { addr, stats, runtime, stop: Some(stop), thread: Some(thread) }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes one request (keep-alive) on `s`.
fn send(s: &mut TcpStream, method: &str, path: &str, body: &str) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
}

/// Reads one response from `s` (its head, then `Content-Length` bytes): (status, body).
fn response(s: &mut TcpStream) -> (u16, String) {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).expect("a response"), 1, "the connection closed mid-response: {raw:?}");
        raw.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&raw).to_string();
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status code");
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    (status, String::from_utf8_lossy(&body).to_string())
}

/// Reads until the server closes `s` (end of stream or reset); returns what came.
fn until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!("the server did not close the connection within a minute")
            }
            Err(_) => return got, // reset
        }
    }
}

/// A client that closes its connection while its request waits for a blocking thread: the
/// job, when it gets one, stops before its first model. The runtime's single blocking thread
/// is held by the test until the studio has seen the client leave, so the order is fixed.
#[test]
fn a_request_whose_client_leaves_stops_before_decoding_further() {
    let server = Server::start(studio(3, false), Options { workers: 1, queue: 0, ..Options::default() }, 1);
    let (release, held) = std::sync::mpsc::channel::<()>();
    server.runtime.spawn_blocking(move || {
        let _ = held.recv();
    });
    let mut client = server.connect();
    send(&mut client, "POST", "/api/translate", &json!({ "text": "dogs see cats .", "beam": 4 }).to_string());
    let stats = server.stats.clone();
    wait_for("the request to reach its worker", || count(&stats.started) == 1);
    // The only worker is taken: another request is refused as busy.
    let mut probe = server.connect();
    send(&mut probe, "POST", "/api/translate", &json!({ "text": "dogs ." }).to_string());
    let (status, body) = response(&mut probe);
    assert_eq!(status, 503, "{body}");
    drop(client);
    wait_for("the studio to see the client leave", || count(&stats.abandoned) == 1);
    let _ = release.send(());
    wait_for("the job to stop", || count(&stats.stopped) == 1);
    assert_eq!(count(&stats.models_run), 0, "no model decoded for a client that left");
    assert_eq!(count(&stats.answered), 0);
    // The worker is free again.
    let mut next = server.connect();
    send(&mut next, "POST", "/api/translate", &json!({ "text": "dogs .", "beam": 1 }).to_string());
    let (status, body) = response(&mut next);
    assert_eq!(status, 200, "{body}");
    assert_eq!(count(&stats.models_run), 3);
}

/// A body declared larger than the studio takes is refused at once, before any of it arrives
/// (it used to wait for the request's deadline, then answer 408).
#[test]
fn a_body_declared_too_large_is_answered_413_before_it_arrives() {
    let server = Server::start(studio(1, false), Options::default(), 2);
    let mut s = server.connect();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(
        b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 99999999999999999\r\n\r\n{\"text\"",
    )
    .unwrap();
    let (status, body) = response(&mut s);
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("larger than 64 KiB"), "{body}");
}

#[test]
fn a_body_that_does_not_arrive_in_time_is_answered_408() {
    let opts = Options { request_timeout: Duration::from_millis(200), ..Options::default() };
    let server = Server::start(studio(1, false), opts, 2);
    let mut s = server.connect();
    s.write_all(
        b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\"",
    )
    .unwrap();
    let (status, body) = response(&mut s);
    assert_eq!(status, 408, "{body}");
    assert!(body.contains("did not arrive"), "{body}");
}

#[test]
fn a_connection_that_sends_no_headers_or_idles_is_closed_at_the_read_timeout() {
    // Long enough for the test to send a request right after connecting, on a busy machine.
    let opts = Options { read_timeout: Duration::from_secs(1), ..Options::default() };
    let server = Server::start(studio(1, false), opts, 2);
    // Half a request line, then nothing.
    let mut slow = server.connect();
    slow.write_all(b"GET /api/info HTTP/1.1\r\nHo").unwrap();
    let got = until_closed(&mut slow);
    assert!(!String::from_utf8_lossy(&got).contains(" 200 "), "{got:?}");
    // Nothing at all.
    let mut silent = server.connect();
    until_closed(&mut silent);
    // One request answered, then idle on a kept-alive connection.
    let mut idle = server.connect();
    send(&mut idle, "GET", "/api/info", "");
    assert_eq!(response(&mut idle).0, 200);
    assert!(until_closed(&mut idle).is_empty());
}

/// Whether the server has closed `s` (end of stream or reset) without waiting: `None` while it
/// is open with nothing to read.
fn closed_now(s: &mut TcpStream) -> Option<bool> {
    s.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let r = match s.read(&mut byte) {
        Ok(0) => Some(true),
        Ok(_) => Some(false),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(_) => Some(true),
    };
    s.set_nonblocking(false).unwrap();
    r
}

#[test]
fn a_connection_past_the_cap_closes_the_one_idle_longest() {
    let server = Server::start(studio(1, false), Options { max_connections: 2, ..Options::default() }, 2);
    // Two connections, each answered once (so both are accepted), then idle: the first longest.
    let mut held: Vec<TcpStream> = (0..2).map(|_| server.connect()).collect();
    for s in &mut held {
        send(s, "GET", "/api/info", "");
        assert_eq!(response(s).0, 200);
    }
    // A third is served at once: the first makes room.
    let mut third = server.connect();
    send(&mut third, "GET", "/api/info", "");
    assert_eq!(response(&mut third).0, 200);
    assert!(until_closed(&mut held[0]).is_empty(), "the connection idle longest is closed");
    // The second is still served on its connection.
    assert_eq!(closed_now(&mut held[1]), None);
    send(&mut held[1], "GET", "/api/info", "");
    assert_eq!(response(&mut held[1]).0, 200);
}

/// Connections answering a request are not closed to make room: a connection past the cap then
/// waits (in the kernel's queue) until one is answered. The runtime's one blocking thread is
/// held by the test, so both translations wait for it, busy, until it is let go.
#[test]
fn connections_answering_requests_are_kept_and_a_new_one_waits_for_one_to_finish() {
    let opts = Options { max_connections: 2, workers: 2, queue: 0, ..Options::default() };
    let server = Server::start(studio(1, false), opts, 1);
    let (release, held) = std::sync::mpsc::channel::<()>();
    server.runtime.spawn_blocking(move || {
        let _ = held.recv();
    });
    let mut busy: Vec<TcpStream> = (0..2).map(|_| server.connect()).collect();
    for s in &mut busy {
        send(s, "POST", "/api/translate", &json!({ "text": "dogs .", "beam": 1 }).to_string());
    }
    let stats = server.stats.clone();
    wait_for("both translations to reach a worker", || count(&stats.started) == 2);
    let mut third = server.connect();
    send(&mut third, "GET", "/api/info", "");
    third.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut byte = [0u8; 1];
    match third.read(&mut byte) {
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
        other => panic!("a third connection was served while two answered requests: {other:?}"),
    }
    let _ = release.send(());
    for s in &mut busy {
        let (status, body) = response(s);
        assert_eq!(status, 200, "a busy connection kept its answer: {body}");
    }
    third.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    assert_eq!(response(&mut third).0, 200, "served once a connection was free");
}

/// A slowloris: more half-sent requests than `--max-connections`, each holding its connection
/// until the read timeout, kept every other client out for that long (29 s with the defaults).
/// Now a normal request is answered at once, the half-sent connections idle longest closing to
/// make room.
#[test]
fn half_sent_requests_past_the_cap_do_not_keep_a_normal_request_waiting() {
    // A read timeout far longer than the test may take: only making room can answer in time.
    let opts = Options { read_timeout: Duration::from_secs(600), ..Options::default() };
    let cap = opts.max_connections;
    let server = Server::start(studio(1, false), opts, 2);
    let mut slow: Vec<TcpStream> = (0..cap + 6)
        .map(|_| {
            let mut s = server.connect();
            s.write_all(b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad").unwrap();
            s
        })
        .collect();
    let started = Instant::now();
    let mut good = server.connect();
    good.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    send(&mut good, "GET", "/api/info", "");
    let mut byte = [0u8; 1];
    match good.read(&mut byte) {
        Ok(1) => {}
        other => panic!("no answer within 20 s behind {} half-sent requests: {other:?}", cap + 6),
    }
    eprintln!("answered after {:.2} s", started.elapsed().as_secs_f64());
    // The 7 idle longest were closed; the rest are still waiting for their headers.
    wait_for("seven half-sent connections to be closed", || {
        slow.iter_mut().filter_map(closed_now).filter(|&c| c).count() >= 7
    });
    assert_eq!(closed_now(&mut slow[0]), Some(true), "the oldest first");
    assert!(slow.iter_mut().filter_map(closed_now).count() <= 7, "only as many as needed");
}

/// Two `Host` headers: which one would a proxy in front have checked? RFC 9112 §3.2 says 400,
/// whatever the names (one allowed and one not, either order, or the same twice).
#[test]
fn a_request_with_two_host_headers_is_answered_400() {
    let server = Server::start(studio(1, false), Options::default(), 2);
    for (a, b) in [("127.0.0.1", "127.0.0.1"), ("localhost", "evil.example"), ("evil.example", "localhost")] {
        let mut s = server.connect();
        s.write_all(format!("GET /api/info HTTP/1.1\r\nHost: {a}\r\nHost: {b}\r\n\r\n").as_bytes()).unwrap();
        let (status, body) = response(&mut s);
        assert_eq!(status, 400, "{a} + {b}: {body}");
        assert!(body.contains("2 Host headers") && body.contains("exactly one"), "{body}");
    }
    // One Host: answered.
    let mut s = server.connect();
    send(&mut s, "GET", "/api/info", "");
    assert_eq!(response(&mut s).0, 200);
}
