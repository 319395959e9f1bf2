//! Wall time of corpus BLEU and chrF on 100k sentence pairs (the WMT22 en-de fixture,
//! repeated). Run with `cargo run --release -p s2s-eval --example score_speed`.
//! Optional arguments: a different number of pairs, then `bleu`, `chrf` or `ter` to run one
//! only.
//!
//! Also prints the process CPU time (user + system, all threads; Linux only, 10 ms
//! resolution), which stays meaningful on a busy machine where wall time does not.

use std::path::PathBuf;
use std::time::Instant;

use s2s_eval::{corpus_bleu, corpus_chrf, corpus_ter};

fn read(name: &str) -> Vec<String> {
    let path =
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/fixtures/bleu")).join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => text.lines().map(str::to_owned).collect(),
        Err(e) => {
            eprintln!("cannot read {}: {e}", path.display());
            std::process::exit(1);
        }
    }
}

/// User + system CPU time of this process so far, in seconds (None off Linux).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0) // USER_HZ is 100 on Linux
}

fn report(name: &str, score: f64, wall: std::time::Duration, cpu: Option<f64>, signature: &str) {
    let cpu = cpu.map_or_else(|| "n/a".to_owned(), |c| format!("{:.0} ms", c * 1e3));
    println!("{name:<6}{score:.4}  wall {:.1} ms  cpu {cpu}  ({signature})", wall.as_secs_f64() * 1e3);
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let hyp = read("wmt22.en-de.Online-B.de");
    let reference = read("wmt22.en-de.ref.de");
    let hyps: Vec<String> = hyp.iter().cycle().take(n).cloned().collect();
    let refs = [reference.iter().cycle().take(n).cloned().collect::<Vec<String>>()];
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
    println!("{n} sentence pairs, {threads} hardware threads");

    let only = std::env::args().nth(2);
    let mut wall = std::time::Duration::ZERO;
    let mut cpu = Some(0.0);
    if matches!(only.as_deref(), None | Some("bleu")) {
        let (c0, t) = (cpu_seconds(), Instant::now());
        let bleu = corpus_bleu(&hyps, &refs).expect("BLEU");
        let (w, c) = (t.elapsed(), c0.zip(cpu_seconds()).map(|(a, b)| b - a));
        report("BLEU", bleu.score, w, c, &bleu.signature);
        wall += w;
        cpu = cpu.zip(c).map(|(a, b)| a + b);
    }
    if matches!(only.as_deref(), None | Some("chrf")) {
        let (c0, t) = (cpu_seconds(), Instant::now());
        let chrf = corpus_chrf(&hyps, &refs).expect("chrF");
        let (w, c) = (t.elapsed(), c0.zip(cpu_seconds()).map(|(a, b)| b - a));
        report("chrF2", chrf.score, w, c, &chrf.signature);
        wall += w;
        cpu = cpu.zip(c).map(|(a, b)| a + b);
    }
    if matches!(only.as_deref(), None | Some("ter")) {
        let (c0, t) = (cpu_seconds(), Instant::now());
        let ter = corpus_ter(&hyps, &refs).expect("TER");
        let (w, c) = (t.elapsed(), c0.zip(cpu_seconds()).map(|(a, b)| b - a));
        report("TER", ter.score, w, c, &ter.signature);
        wall += w;
        cpu = cpu.zip(c).map(|(a, b)| a + b);
    }
    println!(
        "total  wall {:.1} ms  cpu {}",
        wall.as_secs_f64() * 1e3,
        cpu.map_or("n/a".into(), |c| format!("{:.0} ms", c * 1e3))
    );
}
