//! `s2s studio` end to end: the JSON API on tiny trained models, bad requests, many
//! concurrent requests on the loopback address, Ctrl-C, and the page in headless Chromium.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// An experiment-like directory of three tiny runs on the built-in pair (trained once per test
/// binary): `lstm` (no attention), `bahdanau` (one map) and `transformer` (every kind of map).
fn experiment() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exp = tmp("studio-exp");
        for kind in ["lstm", "bahdanau", "transformer"] {
            let run = tiny_run(&format!("studio-{kind}"), kind, "3");
            std::fs::rename(&run, exp.join(kind)).unwrap();
        }
        exp
    })
}

/// A running `s2s studio`, killed when dropped.
struct Studio {
    child: Child,
    addr: String,
}

impl Drop for Studio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the studio on `experiment()` on a free port and waits for its address line.
fn start(extra: &[&str]) -> Studio {
    let mut child = Command::new(env!("CARGO_BIN_EXE_s2s"))
        .args(["studio", experiment().to_str().unwrap(), "--port", "0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("s2s studio runs");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(out).lines();
        if let Some(Ok(l)) = lines.next() {
            let _ = tx.send(l);
        }
        for _ in lines {}
    });
    let line = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(l) => l,
        Err(_) => {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("the studio printed no address: {}", text(&o.stderr));
        }
    };
    let addr = line
        .strip_prefix("studio: http://")
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_string();
    Studio { child, addr }
}

/// One HTTP/1.1 request over a fresh connection: (status, body).
fn http(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete response") + 4;
    let status_line = String::from_utf8_lossy(&raw[..split]).lines().next().unwrap_or("").to_string();
    let status: u16 = status_line.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status code");
    (status, raw[split..].to_vec())
}

fn post(addr: &str, v: &Value) -> (u16, Value) {
    let (status, body) = http(addr, "POST", "/api/translate", v.to_string().as_bytes());
    (status, serde_json::from_slice(&body).unwrap_or_else(|_| panic!("not JSON: {}", text(&body))))
}

fn info(addr: &str) -> Value {
    let (status, body) = http(addr, "GET", "/api/info", b"");
    assert_eq!(status, 200);
    serde_json::from_slice(&body).unwrap()
}

/// A test sentence of at least `words` words with its reference (the built-in pair's test split).
fn example(info: &Value, words: u64) -> (String, String) {
    let e =
        info["examples"].as_array().unwrap().iter().find(|e| e["words"].as_u64().unwrap() >= words).unwrap();
    (e["source"].as_str().unwrap().to_string(), e["reference"].as_str().unwrap().to_string())
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

/// Every model answers, and the answer is consistent with itself and with `s2s translate`:
/// the teacher-forced score of the output equals the score beam search found (cached == full
/// forward), beam 1 equals greedy decoding by the CLI, attention rows are distributions of
/// the right shapes, the verdict follows the two scores, and AER comes with the gold
/// alignment for the models with attention.
#[test]
fn the_api_answers_every_model_consistently() {
    let studio = start(&[]);
    let info = info(&studio.addr);
    let names: Vec<String> =
        info["models"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap().into()).collect();
    assert_eq!(
        names,
        ["bahdanau", "lstm", "transformer"],
        "a directory without experiment.json: runs by name"
    );
    assert_eq!(info["gold"], json!(true));
    assert!(info["examples"].as_array().unwrap().len() >= 10);
    for m in info["models"].as_array().unwrap() {
        let aer = &m["aer"];
        match m["kind"].as_str().unwrap() {
            "lstm" => assert!(aer.is_null(), "no attention, no AER"),
            _ => assert!((0.0..=1.0).contains(&aer.as_f64().unwrap()), "{m}"),
        }
    }
    let (src, reference) = example(&info, 6);
    for beam in [1usize, 3] {
        let (status, a) =
            post(&studio.addr, &json!({ "text": src, "reference": reference, "beam": beam, "alpha": 0.6 }));
        assert_eq!(status, 200, "{a}");
        let results = a["results"].as_array().unwrap();
        assert_eq!(results.len(), 3);
        for r in results {
            let name = r["model"].as_str().unwrap();
            let t = &r["translation"];
            let tokens = strings(&t["tokens"]);
            let probs = floats(&t["probs"]);
            let cut = r["cut"].as_bool().unwrap();
            assert_eq!(
                tokens.last().map(String::as_str) == Some("</s>"),
                !cut,
                "{name}: </s> unless cut at the limit"
            );
            assert_eq!(probs.len(), tokens.len());
            assert!(probs.iter().all(|&p| p > 0.0 && p <= 1.0));
            let logp: f64 = probs.iter().map(|p| p.ln()).sum();
            assert!(
                (logp - t["score"].as_f64().unwrap()).abs() < 1e-3,
                "{name}: score is the sum of log-probabilities"
            );
            let finished = r["finished"].as_array().unwrap();
            assert!(!finished.is_empty() && finished.len() <= beam);
            let best = finished[0]["normalized"].as_f64().unwrap();
            assert!(
                (best - t["normalized"].as_f64().unwrap()).abs() < 1e-3,
                "{name}: the search's score {best} equals the teacher-forced output's {}",
                t["normalized"]
            );
            assert_eq!(finished[0]["text"], r["output"]);
            // The search's steps: at most `beam` kept and 2·beam ranked per step.
            let steps = r["steps"].as_array().unwrap();
            assert!(!steps.is_empty());
            for s in steps {
                let c = s["candidates"].as_array().unwrap();
                assert!(c.len() <= 2 * beam.max(1));
                assert!(c.iter().filter(|c| c["fate"] == "kept").count() <= beam);
                assert!(s["live"].as_array().unwrap().len() <= beam);
            }
            // The reference, forced.
            let rf = &r["reference"];
            let ref_tokens = strings(&rf["tokens"]);
            assert_eq!(ref_tokens.len(), reference.split_whitespace().count() + 1);
            let verdict = r["verdict"].as_str().unwrap();
            let (out_n, ref_n) = (t["normalized"].as_f64().unwrap(), rf["normalized"].as_f64().unwrap());
            match verdict {
                "correct" => assert_eq!(ref_tokens, tokens),
                "search error" => assert!(ref_n > out_n),
                "model error" => assert!(ref_n <= out_n),
                v => panic!("unknown verdict {v}"),
            }
            // Attention maps: shapes and distributions.
            let src_len = r["source_tokens"].as_array().unwrap().len();
            let maps = t["maps"].as_array().unwrap();
            let kinds: Vec<&str> = maps.iter().map(|m| m["kind"].as_str().unwrap()).collect();
            match r["kind"].as_str().unwrap() {
                "lstm" => assert!(kinds.is_empty() && r["alignment"].is_null()),
                "bahdanau" => assert_eq!(kinds, ["cross"]),
                _ => assert_eq!(kinds, ["cross", "decoder-self", "encoder-self"]),
            }
            for m in maps {
                let (rows, cols) = match m["kind"].as_str().unwrap() {
                    "cross" => (tokens.len(), src_len),
                    "decoder-self" => (tokens.len(), tokens.len()),
                    _ => (src_len, src_len),
                };
                for head in m["heads"].as_array().unwrap() {
                    let head = head.as_array().unwrap();
                    assert_eq!(head.len(), rows, "{name} {}", m["kind"]);
                    for row in head {
                        let row = floats(row);
                        assert_eq!(row.len(), cols);
                        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-3);
                    }
                }
            }
            if r["kind"] != "lstm" {
                let al = &r["alignment"];
                assert_eq!(al["gold"].as_array().unwrap().len(), reference.split_whitespace().count());
                assert!((0.0..=1.0).contains(&al["aer"].as_f64().unwrap()));
            }
            if beam == 1 {
                let run = experiment().join(name);
                let o = s2s_stdin(
                    &["translate", "--model", run.to_str().unwrap(), "--beam", "1", "--device", "cpu"],
                    &format!("{src}\n"),
                );
                assert!(o.status.success(), "{}", text(&o.stderr));
                assert_eq!(
                    text(&o.stdout).trim_end_matches('\n'),
                    r["output"].as_str().unwrap(),
                    "{name}: beam 1 == greedy"
                );
            }
        }
    }
    // One model by name.
    let (status, a) = post(&studio.addr, &json!({ "text": src, "models": ["transformer"] }));
    assert_eq!(status, 200);
    assert_eq!(a["results"].as_array().unwrap().len(), 1);
}

/// Bad requests get a 4xx and a message saying what is wrong; the server keeps serving.
#[test]
fn bad_requests_get_a_4xx_and_the_server_keeps_serving() {
    let studio = start(&["--max-chars", "200", "--max-src-tokens", "30", "--max-beam", "8"]);
    let a = &studio.addr;
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{\"text\": \"dogs \xff sleep .\"}".to_vec(), 400, "UTF-8"),
        (b"{\"text\": ".to_vec(), 400, "not a translation request"),
        (b"{\"txt\": \"dogs sleep .\"}".to_vec(), 400, "not a translation request"),
        (json!({ "text": "   " }).to_string().into_bytes(), 400, "empty"),
        (json!({ "text": "x".repeat(201) }).to_string().into_bytes(), 413, "--max-chars"),
        (json!({ "text": "dogs ".repeat(35) }).to_string().into_bytes(), 413, "--max-src-tokens"),
        (
            json!({ "text": "dogs sleep .", "reference": "dogs ".repeat(35) }).to_string().into_bytes(),
            413,
            "the reference is 35 tokens long",
        ),
        (json!({ "text": "dogs sleep .", "beam": 0 }).to_string().into_bytes(), 400, "beam 0"),
        (json!({ "text": "dogs sleep .", "beam": 9 }).to_string().into_bytes(), 400, "1 (greedy) to 8"),
        (json!({ "text": "dogs sleep .", "alpha": -1 }).to_string().into_bytes(), 400, "alpha"),
        (
            json!({ "text": "dogs sleep .", "models": ["gru"] }).to_string().into_bytes(),
            404,
            "bahdanau, lstm, transformer",
        ),
    ];
    for (body, want, says) in cases {
        let (status, answer) = http(a, "POST", "/api/translate", &body);
        let answer = text(&answer);
        assert_eq!(status, want, "{} → {answer}", text(&body[..body.len().min(80)]));
        assert!(answer.contains(says), "{answer} should say {says}");
    }
    let (status, body) = http(a, "GET", "/nothing-here", b"");
    assert_eq!((status, text(&body).contains("no such page")), (404, true));
    // Still serving.
    let (status, _) = post(a, &json!({ "text": "dogs sleep ." }));
    assert_eq!(status, 200);
    assert_eq!(info(a)["models"].as_array().unwrap().len(), 3);
}

/// Many concurrent requests on the loopback address, bounded in count and time: every answer
/// is the single request's answer. With one worker and no queue, requests that find it busy
/// are refused with 503, and the ones served are still right.
#[test]
fn concurrent_requests_are_all_answered_correctly() {
    let studio = start(&["--workers", "2", "--queue", "64"]);
    let info = info(&studio.addr);
    let (src, _) = example(&info, 10);
    let req = json!({ "text": src, "beam": 2 });
    let (status, single) = post(&studio.addr, &req);
    assert_eq!(status, 200);
    let outputs = |a: &Value| -> Vec<(String, String)> {
        a["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (r["output"].as_str().unwrap().to_string(), format!("{:.5}", r["translation"]["normalized"]))
            })
            .collect()
    };
    let want = outputs(&single);
    let started = Instant::now();
    let (threads, each) = (12, 4);
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (addr, req, barrier) = (studio.addr.clone(), req.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                (0..each).map(|_| post(&addr, &req)).collect::<Vec<_>>()
            })
        })
        .collect();
    let mut n = 0;
    for h in handles {
        for (status, a) in h.join().unwrap() {
            assert_eq!(status, 200, "{a}");
            assert_eq!(outputs(&a), want);
            n += 1;
        }
    }
    assert_eq!(n, threads * each);
    assert!(started.elapsed() < Duration::from_secs(120), "48 requests took {:?}", started.elapsed());
    drop(studio);

    let busy = start(&["--workers", "1", "--queue", "0"]);
    let mut refused = 0;
    for _round in 0..5 {
        let barrier = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (addr, req, barrier) = (busy.addr.clone(), req.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    post(&addr, &req)
                })
            })
            .collect();
        for h in handles {
            let (status, a) = h.join().unwrap();
            match status {
                200 => assert_eq!(outputs(&a), want),
                503 => {
                    assert!(a["error"].as_str().unwrap().contains("busy"));
                    refused += 1;
                }
                s => panic!("status {s}: {a}"),
            }
        }
        if refused > 0 {
            break;
        }
    }
    assert!(refused > 0, "one worker and no queue refuse requests that find it busy");
}

/// SIGINT (Ctrl-C) stops the server cleanly: exit 0, "stopped".
#[test]
fn ctrl_c_stops_the_server_cleanly() {
    let mut studio = start(&[]);
    let (status, _) = post(&studio.addr, &json!({ "text": "dogs sleep .", "beam": 1 }));
    assert_eq!(status, 200);
    let pid = studio.child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = studio.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the studio did not stop within 30 s of SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let mut err = String::new();
    studio.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.contains("stopped"), "{err}");
    assert!(TcpStream::connect(&studio.addr).is_err(), "nothing listens any more");
}

/// The page in headless Chromium: it loads, translates the sentence in its URL, draws the
/// results table, the heatmap (with the gold alignment outlined) and the beam tree; the
/// screenshot has the heatmap's and the chips' colours, not a blank page.
#[test]
fn the_page_renders_in_headless_chromium() {
    let Some(browser) = browser() else { return };
    let studio = start(&[]);
    let info = info(&studio.addr);
    let (src, reference) = example(&info, 6);
    let query: String = [
        ("text", src.as_str()),
        ("reference", reference.as_str()),
        ("model", "bahdanau"),
        ("of", "reference"),
    ]
    .iter()
    .map(|(k, v)| format!("{k}={}", encode(v)))
    .collect::<Vec<_>>()
    .join("&");
    let url = format!("http://{}/?{query}", studio.addr);
    let dir = tmp("studio-chromium");
    let shot = dir.join("page.png");
    let run = |extra: &[String]| {
        Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--window-size=1300,1600",
                "--virtual-time-budget=30000",
            ])
            .arg(format!("--user-data-dir={}", dir.join("profile").display()))
            .args(extra)
            .arg(&url)
            .output()
            .expect("chromium runs")
    };
    let dom = text(&run(&["--dump-dom".into()]).stdout);
    assert!(dom.contains("data-state=\"done\""), "the page finished translating: {:.3000}", dom);
    // What the script drew, not the script's own text.
    let dom = dom.split("<script>").next().unwrap();
    for m in ["lstm", "bahdanau", "transformer"] {
        assert!(dom.contains(&format!("<tr data-model=\"{m}\">")), "a row for {m}");
    }
    let src_tokens = src.split_whitespace().count() + 1;
    let ref_tokens = reference.split_whitespace().count() + 1;
    assert_eq!(
        dom.matches("class=\"cell\"").count(),
        src_tokens * ref_tokens,
        "bahdanau's heatmap over the reference"
    );
    assert_eq!(dom.matches("stroke=\"#dc2626\"").count(), ref_tokens - 1, "the gold links outlined");
    assert!(dom.contains("class=\"node kept\"") && dom.contains("class=\"node finished\""), "the beam tree");
    assert!(dom.contains("AER"));
    let o = run(&[format!("--screenshot={}", shot.display())]);
    assert!(shot.exists(), "{}", text(&o.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut buf).unwrap();
    let px = frame.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..frame.buffer_size()].chunks(px).collect();
    let colours: std::collections::HashSet<&[u8]> = pixels.iter().copied().collect();
    let inked = pixels.iter().filter(|p| p[..3].iter().any(|&c| c < 200)).count();
    assert!(colours.len() > 200, "{} colours: the heatmap's and the chips' shades", colours.len());
    assert!(inked * 50 > pixels.len(), "{inked} of {} pixels inked", pixels.len());
}

/// Percent-encodes a query value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `--quantize int8` serves int8 products: the same request scores otherwise than on an f32
/// studio, each answer still a translation with its probabilities; `--quantize int4` is refused.
#[test]
fn the_studio_serves_int8_products() {
    let score = |extra: &[&str]| {
        let studio = start(extra);
        let info = info(&studio.addr);
        let (src, reference) = example(&info, 6);
        let (status, a) =
            post(&studio.addr, &json!({ "text": src, "reference": reference, "beam": 2, "alpha": 0.6 }));
        assert_eq!(status, 200, "{a}");
        a["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                assert!(!strings(&r["translation"]["tokens"]).is_empty());
                r["translation"]["score"].as_f64().unwrap()
            })
            .collect::<Vec<f64>>()
    };
    let (f32_scores, int8_scores) = (score(&[]), score(&["--quantize", "int8"]));
    assert_eq!(f32_scores.len(), int8_scores.len());
    assert_ne!(f32_scores, int8_scores, "int8 products scored as f32 ones");
    let o = Command::new(env!("CARGO_BIN_EXE_s2s"))
        .args(["studio", experiment().to_str().unwrap(), "--port", "0", "--quantize", "int4"])
        .output()
        .unwrap();
    assert!(!o.status.success() && text(&o.stderr).contains("int8"), "{}", text(&o.stderr));
}
