//! Prepares a large synthetic corpus and reports time, throughput and memory.
//!
//! ```text
//! cargo run --release -p s2s-data --example prepare_bench -- [PAIRS] [options]
//!   PAIRS              pairs to generate (default 100000)
//!   --dir DIR          work directory (default: a new one under the system temp dir, removed after)
//!   --keep             keep the work directory
//!   --threads N        encoding threads (default: every core)
//!   --level L          bpe, word or char (default bpe, vocabulary 8000)
//!   --filter           the recommended filters (dedup, copies, lengths, ratio)
//!   --sample N         tokenizer sample in pairs (default 1000000)
//! ```
//!
//! The corpus is the built-in language pair (`synth`), generated 100,000 pairs at a time with
//! seeds 1, 2, … by a child process, so the generator's memory is not in the figures. Peak RSS
//! is the kernel's `VmHWM`; `RssAnon` (heap) and `RssFile` (mapped shard pages, reclaimable)
//! are shown apart after streaming one epoch of batches.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use s2s_data::synth::{SynthConfig, generate};
use s2s_data::{
    BatchConfig, CorpusFiles, FilterConfig, Level, PrepareConfig, PreparedDataset, Preparer, StreamBatcher,
    TokenizerConfig,
};

const CHUNK: usize = 100_000;

fn status(field: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(field)).map(|l| l[field.len() + 1..].trim().to_string())
        })
        .unwrap_or_else(|| "n/a".into())
}

fn generate_into(n: usize, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut src = BufWriter::with_capacity(1 << 20, std::fs::File::create(dir.join("train.src"))?);
    let mut tgt = BufWriter::with_capacity(1 << 20, std::fs::File::create(dir.join("train.tgt"))?);
    let mut done = 0;
    let mut seed = 1;
    while done < n {
        let want = CHUNK.min(n - done);
        for (s, t) in generate(&SynthConfig { pairs: want, seed, ..SynthConfig::default() }) {
            writeln!(src, "{s}")?;
            writeln!(tgt, "{t}")?;
        }
        done += want;
        seed += 1;
    }
    src.flush()?;
    tgt.flush()
}

fn du(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|es| {
            es.flatten()
                .map(|e| {
                    let m = e.metadata().map(|m| (m.is_dir(), m.len())).unwrap_or((false, 0));
                    if m.0 { du(&e.path()) } else { m.1 }
                })
                .sum()
        })
        .unwrap_or(0)
}

/// The command line after `PAIRS` and the options were read (see the module doc).
struct Options {
    pairs: usize,
    dir: Option<PathBuf>,
    keep: bool,
    threads: usize,
    level: Level,
    filter: bool,
    sample: usize,
}

/// Reads `PAIRS` and the options from `args` (the arguments after the program's name).
fn parse_args(args: &[String]) -> Result<Options, Box<dyn std::error::Error>> {
    let mut pairs = 100_000usize;
    let (mut dir, mut keep, mut threads, mut level, mut filter, mut sample) =
        (None, false, 0usize, Level::Bpe, false, 1_000_000usize);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--dir" => dir = Some(PathBuf::from(val()?)),
            "--keep" => keep = true,
            "--threads" => threads = val()?.parse()?,
            "--level" => level = val()?.parse()?,
            "--filter" => filter = true,
            "--sample" => sample = val()?.parse()?,
            n => pairs = n.replace('_', "").parse().map_err(|_| format!("unknown argument {n}"))?,
        }
    }
    Ok(Options { pairs, dir, keep, threads, level, filter, sample })
}

/// Generates `pairs` pairs into `corpus` by a child process, unless it holds a corpus already.
fn ensure_corpus(pairs: usize, corpus: &Path) -> Result<(), Box<dyn std::error::Error>> {
    if !corpus.join("train.tgt").exists() {
        let t = Instant::now();
        let ok = std::process::Command::new(std::env::current_exe()?)
            .args(["--generate", &pairs.to_string(), &corpus.to_string_lossy()])
            .status()?
            .success();
        if !ok {
            return Err("generating the corpus failed".into());
        }
        eprintln!("generated {pairs} pairs in {:.1} s (child process)", t.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Prepares `files` into `cache` on `threads` threads (0: every core) and prints the time by
/// phase, the throughput, what was written and the peak RSS.
fn bench_prepare(
    files: &CorpusFiles,
    cfg: &PrepareConfig,
    cache: &Path,
    threads: usize,
    pairs: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let t = Instant::now();
    let p = Preparer::new(files, cfg, cache).threads(threads).run()?;
    let total = t.elapsed().as_secs_f64();
    let hwm_prepare = status("VmHWM");
    let m = p.dataset.manifest();
    let tm = p.timings;
    println!(
        "prepare: {total:.2} s = tokenizer (sample + training) {:.2} + encode {:.2} + finish {:.2}",
        tm.tokenizer_s, tm.encode_s, tm.finish_s
    );
    println!(
        "  {:.0} pairs/s overall, {:.0} pairs/s encoding pass; tokenizer learned from {} pairs",
        pairs as f64 / total,
        pairs as f64 / tm.encode_s,
        m.tokenizer_sample
    );
    println!(
        "  {} examples, {} tokens, {} shards, {:.1} MiB on disk",
        m.examples,
        m.tokens,
        m.shards.len(),
        du(p.dataset.dir()) as f64 / (1 << 20) as f64
    );
    println!("  filters: {}", m.filter);
    println!("  peak RSS after prepare (VmHWM): {hwm_prepare}");
    drop(p);
    Ok(())
}

/// Opens the prepared data in `cache` again (checking every shard), prints how long that took,
/// and returns it.
fn bench_reuse(
    files: &CorpusFiles,
    cfg: &PrepareConfig,
    cache: &Path,
) -> Result<PreparedDataset, Box<dyn std::error::Error>> {
    let t = Instant::now();
    let again = Preparer::new(files, cfg, cache).run()?;
    assert!(again.reused);
    println!(
        "reuse (open + check every shard): {:.2} s, VmHWM {}",
        t.elapsed().as_secs_f64(),
        status("VmHWM")
    );
    Ok(again.dataset)
}

/// Streams one epoch of batches of `data` and prints the time, the batcher's pool and the
/// memory after.
fn bench_stream(data: &PreparedDataset) -> Result<(), Box<dyn std::error::Error>> {
    let t = Instant::now();
    let b = StreamBatcher::new(data, BatchConfig::default());
    let (mut batches, mut sentences, mut most) = (0usize, 0usize, 0usize);
    let mut plan = b.epoch(1, 0);
    while let Some(ix) = plan.next() {
        most = most.max(plan.buffered());
        let batch = data.collate(&ix)?;
        sentences += batch.size();
        batches += 1;
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "stream one epoch: {batches} batches, {sentences} sentences in {secs:.2} s ({:.0} sentences/s); pool {} examples (most held {most}), {} blocks",
        sentences as f64 / secs,
        b.pool_examples(),
        plan.blocks()
    );
    println!(
        "  after streaming: VmHWM {}, RssAnon {}, RssFile {}",
        status("VmHWM"),
        status("RssAnon"),
        status("RssFile")
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--generate") {
        let n: usize = args[1].parse()?;
        generate_into(n, Path::new(&args[2]))?;
        return Ok(());
    }
    let Options { pairs, dir, keep, threads, level, filter, sample } = parse_args(&args)?;
    let dir =
        dir.unwrap_or_else(|| std::env::temp_dir().join(format!("s2s-prepare-bench-{}", std::process::id())));
    let corpus = dir.join("corpus");
    ensure_corpus(pairs, &corpus)?;
    let files = CorpusFiles::Aligned { src: corpus.join("train.src"), tgt: corpus.join("train.tgt") };
    let corpus_bytes = du(&corpus);
    let cfg = PrepareConfig {
        tokenizer: TokenizerConfig { level, ..TokenizerConfig::default() },
        sample_pairs: sample,
        filter: if filter { FilterConfig::recommended() } else { FilterConfig::default() },
        ..PrepareConfig::default()
    };
    let cache = dir.join("prepared");
    let _ = std::fs::remove_dir_all(&cache);

    println!(
        "pairs {pairs}, corpus {:.1} MiB, {} threads",
        corpus_bytes as f64 / (1 << 20) as f64,
        if threads == 0 { rayon_threads() } else { threads }
    );
    bench_prepare(&files, &cfg, &cache, threads, pairs)?;
    let data = bench_reuse(&files, &cfg, &cache)?;
    bench_stream(&data)?;
    if !keep {
        drop(data);
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
