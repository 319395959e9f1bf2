//! Preparing a corpus once for training: learn the tokenizer on a sample, encode every pair in
//! parallel, write the token ids into binary shards read back through memory mapping
//! ([`crate::PreparedDataset`]), and reuse the result while the inputs and settings stay the
//! same.
//!
//! Memory does not grow with the corpus: it holds two chunks of pairs, the tokenizer trainer's
//! counts (the sample is streamed into training, never held), the current shard's length index
//! and offsets (16 bytes per example of [`PrepareConfig::shard_examples`]) and, only when
//! [`crate::FilterConfig::dedup`] is on, 8 bytes per kept pair (a hash set: about 150 MiB at
//! ten million pairs).
//!
//! # Steps
//! 1. **Tokenizer** (skipped when tokenizers are given, [`Preparer::tokenizers`], or read from
//!    the files [`crate::TokenizerConfig::file`] names, which then count as given): count the
//!    lines, then stream the sampled pairs that the reading rules keep
//!    ([`crate::read_verdict`]) into [`crate::Tokenizer::train_stream`] (one pass per side
//!    for separate vocabularies) and save them under `tokenizer/`. A corpus with no more than
//!    [`PrepareConfig::sample_pairs`] lines is used whole, in file order, so the tokenizer is
//!    the one `Tokenizers::train(cfg, &read_corpus(..).pairs)` learns in memory. A larger one
//!    is sampled line by line: line `i` is in the sample when the first output of
//!    `SplitMix64(sample_seed ^ i·0x9E3779B97F4A7C15)` is below `sample_pairs / lines · 2⁶⁴` —
//!    about `sample_pairs` pairs spread over the whole file, a function of the seed only.
//! 2. **Encode**: read the corpus again in chunks ([`Preparer::chunk_pairs`]); each chunk is
//!    normalised, filtered ([`crate::filter`]) and encoded on every core (rayon) while the next
//!    chunk is read; kept examples are appended, in file order, to the current shard, a new
//!    shard starting every [`PrepareConfig::shard_examples`] examples. The output does not
//!    depend on the chunk size or the number of threads.
//! 3. **Finish**: write `manifest.json`, check every shard, compute `stats.json`, write the
//!    `COMPLETE` marker, and rename the directory into place.
//!
//! # Where a prepared dataset lives, and when it is reused
//! `CACHE/<name>-<key>/`, `name` being the corpus file name and `key` 16 hex digits of XXH64
//! over the JSON of: the format version, the canonical (absolute) paths of the input files with
//! each one's **size and modification time (nanoseconds)**, the column settings, the whole
//! [`PrepareConfig`], and — when tokenizers are given — their JSON. The same inputs and
//! settings give the same directory, which is opened instead of prepared again; any change
//! gives a new one (old ones are left for the user to delete).
//!
//! Metadata rather than a content hash: checking a content hash means reading the whole corpus
//! (minutes for a large one) on every run just to learn that nothing changed, while every
//! ordinary way of changing a file (an editor, `cp`, `sed -i`, a download) changes its mtime or
//! size. What it misses is a rewrite that keeps both the size and the nanosecond mtime (e.g. a
//! `touch -r` afterwards); delete the prepared directory after such an edit. Touching a file
//! without changing it prepares anew, which costs time, never correctness.
//!
//! # Completion
//! Everything is written into `CACHE/.<name>-<key>.tmp-<pid>` and the directory is renamed to
//! its final name only after the `COMPLETE` marker (format name and version) was written and
//! synced, so an interrupted preparation never looks complete: [`crate::PreparedDataset::open`]
//! refuses a directory without the marker, and the next preparation of the same key deletes
//! temporary directories whose process is gone (on Linux) and starts again. Two processes
//! preparing the same key at once both finish; the first rename wins and the second opens it.
//!
//! # Directory layout (format version 1)
//! - `COMPLETE`: `{"format": "s2s-prepared", "version": 1, "key": …, "examples": …}`
//! - `manifest.json`: [`Manifest`] — inputs, settings, reading and filter reports, shards
//! - `stats.json`: [`crate::stats::CorpusStats`] as `s2s data stats --json` prints it, for
//!   [`crate::BatchConfig::default`] batches of epoch 0, seed 1
//! - `tokenizer/`: [`crate::Tokenizers::save`] (`joint.json`, or `src.json` + `tgt.json`)
//! - `shard-00000.bin`, `shard-00001.bin`, …
//!
//! # Shard layout (little-endian)
//! | bytes | content |
//! |---|---|
//! | 0–7 | magic `S2SSHARD` |
//! | 8–11 | format version (u32, 1) |
//! | 12–15 | header size (u32, 64) |
//! | 16–23 | examples `n` (u64) |
//! | 24–31 | token ids `T` (u64) |
//! | 32–39 | global index of the first example (u64) |
//! | 40–63 | zero |
//! | 64 … | `T` token ids (u32): each example's source ids then its target ids, no specials; then 4 zero bytes if `T` is odd |
//! | … | length index: `n` × (source length u32, target length u32) |
//! | … | offsets: `n` × u64, where each example's ids start (in ids from the first) |
//! | last 16 | checksum (u64), end marker `S2SEND\0\0` |
//!
//! The checksum is XXH64 (seed 0) of the 64 header bytes followed by the little-endian u64
//! XXH64 (seed 0) of every byte between the header and the trailer. Opening checks the magic,
//! version, that the size is the one the header implies (a truncated shard is named as such),
//! the counts against the manifest, the checksum, and that the offsets agree with the lengths.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::batch::BatchConfig;
use crate::corpus::{CorpusFiles, Pair, PairReader, ReadOptions, ReadReport, ReadSkip, read_verdict};
use crate::error::{DataError, Result};
use crate::filter::{Dropped, FilterConfig, FilterReport, pair_hash};
use crate::hash::xxh64;
use crate::manifest::Marker;
pub use crate::manifest::{FORMAT_NAME, FORMAT_VERSION, InputFile, MARKER, Manifest, PrepareConfig};
use crate::prepared::PreparedDataset;
use crate::rng::SplitMix64;
use crate::shard::{ShardInfo, ShardWriter};
use crate::stats::{CorpusStats, SideAccumulator};
use crate::stream::StreamBatcher;
use crate::tokenizer::Tokenizers;

/// The phase a preparation is in, for [`Progress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Streaming the sample into tokenizer training.
    Tokenizer,
    /// Reading, filtering, encoding and writing.
    Encoding,
    /// Checking the shards and computing statistics.
    Finishing,
}

/// Where a preparation is, given to the progress callback after every chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The phase.
    pub phase: Phase,
    /// Line pairs read in this phase.
    pub pairs_read: usize,
    /// Examples written.
    pub examples: usize,
    /// Shards finished.
    pub shards: usize,
}

/// Seconds spent in each phase of a preparation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Counting lines, and the sampling pass that trains the tokenizer.
    pub tokenizer_s: f64,
    /// Encoding pass (read, filter, encode, write).
    pub encode_s: f64,
    /// Checking the shards, statistics, marker, rename.
    pub finish_s: f64,
    /// The whole preparation.
    pub total_s: f64,
}

/// What [`Preparer::run`] returns.
#[derive(Debug)]
pub struct Prepared {
    /// The opened, checked dataset.
    pub dataset: PreparedDataset,
    /// True when an existing complete dataset was opened instead of preparing one.
    pub reused: bool,
    /// Phase times (all zero when reused).
    pub timings: Timings,
}

type ProgressFn<'a> = dyn FnMut(&Progress) -> ControlFlow<()> + Send + 'a;

/// Prepares a corpus (see the module doc); [`prepare`] is the short form.
pub struct Preparer<'a> {
    files: &'a CorpusFiles,
    cfg: &'a PrepareConfig,
    cache: &'a Path,
    given: Option<std::borrow::Cow<'a, Tokenizers>>,
    threads: usize,
    chunk: usize,
    progress: Option<&'a mut ProgressFn<'a>>,
}

/// Prepares `files` with `cfg` under `cache`, or opens the dataset prepared before with the same
/// inputs and settings.
pub fn prepare(files: &CorpusFiles, cfg: &PrepareConfig, cache: &Path) -> Result<Prepared> {
    Preparer::new(files, cfg, cache).run()
}

impl<'a> Preparer<'a> {
    /// A preparation of `files` with `cfg` into the cache directory `cache` (created).
    pub fn new(files: &'a CorpusFiles, cfg: &'a PrepareConfig, cache: &'a Path) -> Self {
        Self { files, cfg, cache, given: None, threads: 0, chunk: 1 << 14, progress: None }
    }

    /// Encodes with these tokenizers instead of learning new ones (a validation or test split
    /// encoded with the training split's tokenizers); they are part of the key.
    pub fn tokenizers(mut self, t: &'a Tokenizers) -> Self {
        self.given = Some(std::borrow::Cow::Borrowed(t));
        self
    }

    /// Threads to encode with (0, the default: rayon's global pool, one per core). Not part of
    /// the key: the output does not depend on it.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }

    /// Line pairs read, encoded and written at a time (default 16384; memory grows with it).
    /// Not part of the key: the output does not depend on it.
    pub fn chunk_pairs(mut self, n: usize) -> Self {
        self.chunk = n.max(1);
        self
    }

    /// Calls `f` after every chunk; `ControlFlow::Break(())` stops the preparation with
    /// [`DataError::Interrupted`], deleting what it wrote.
    pub fn progress(mut self, f: &'a mut ProgressFn<'a>) -> Self {
        self.progress = Some(f);
        self
    }

    /// The directory the dataset lives in (whether or not it is prepared yet).
    pub fn dir(&self) -> Result<PathBuf> {
        Ok(self.cache.join(self.identity()?.name))
    }

    /// The canonical files and inputs, and the directory name and key they give.
    fn identity(&self) -> Result<Identity> {
        let canon = |p: &PathBuf| std::fs::canonicalize(p).map_err(|e| DataError::io(p, e));
        let files = match self.files {
            CorpusFiles::Aligned { src, tgt } => CorpusFiles::Aligned { src: canon(src)?, tgt: canon(tgt)? },
            CorpusFiles::Tsv { tsv, src_col, tgt_col } => {
                CorpusFiles::Tsv { tsv: canon(tsv)?, src_col: *src_col, tgt_col: *tgt_col }
            }
        };
        let mut inputs = Vec::new();
        for p in files.paths() {
            let m = std::fs::metadata(p).map_err(|e| DataError::io(p, e))?;
            let t = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .unwrap_or_default();
            inputs.push(InputFile {
                path: p.to_path_buf(),
                bytes: m.len(),
                modified_s: t.as_secs(),
                modified_ns: t.subsec_nanos(),
            });
        }
        let from_files;
        let given = match &self.given {
            Some(t) => Some(t.as_ref()),
            None => {
                from_files = Tokenizers::from_config(&self.cfg.tokenizer)?;
                from_files.as_ref()
            }
        };
        let given = match given {
            Some(t) => Some(format!(
                "{:016x}",
                xxh64(format!("{}\n{}\n{}", t.joint, t.src.to_json()?, t.tgt.to_json()?).as_bytes(), 0)
            )),
            None => None,
        };
        let key_json = serde_json::to_vec(&serde_json::json!({
            "format": FORMAT_VERSION,
            "files": files,
            "inputs": inputs,
            "config": self.cfg,
            "tokenizers": given,
        }))
        .map_err(|e| DataError::Config(format!("cannot serialise the preparation key: {e}")))?;
        let key = format!("{:016x}", xxh64(&key_json, 0));
        let stem: String = files
            .anchor()
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' { c } else { '_' })
            .take(48)
            .collect();
        let stem = stem.trim_start_matches('.').to_string();
        Ok(Identity { files, inputs, name: format!("{stem}-{key}"), key })
    }

    /// Prepares the dataset, or opens it if it is already complete.
    pub fn run(mut self) -> Result<Prepared> {
        if self.cfg.shard_examples == 0 {
            return Err(DataError::Config("shard_examples must be at least 1".into()));
        }
        if self.given.is_none() {
            self.given = Tokenizers::from_config(&self.cfg.tokenizer)?.map(std::borrow::Cow::Owned);
        }
        let id = self.identity()?;
        let dir = self.cache.join(&id.name);
        if dir.exists() {
            return open_reused(&dir);
        }
        let tmp = self.fresh_tmp(&id.name)?;
        let started = Instant::now();
        let built = match self.pool()? {
            Some(pool) => pool.install(|| self.build(&tmp, &dir, id)),
            None => self.build(&tmp, &dir, id),
        };
        // An input written to while it was read would leave a dataset keyed by metadata that
        // no longer describes it: refuse rather than keep it.
        let built = built.and_then(|b| {
            self.check_unchanged(&b.0)?;
            Ok(b)
        });
        let (mut dataset, mut timings) = match built {
            Ok(b) => b,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
        };
        if let Err(e) = std::fs::rename(&tmp, &dir) {
            let _ = std::fs::remove_dir_all(&tmp);
            if dir.join(MARKER).exists() {
                // Another process prepared the same key first.
                return open_reused(&dir);
            }
            return Err(DataError::io(&dir, e));
        }
        if let Ok(d) = std::fs::File::open(self.cache) {
            let _ = d.sync_all();
        }
        dataset.moved_to(dir);
        timings.total_s = started.elapsed().as_secs_f64();
        Ok(Prepared { dataset, reused: false, timings })
    }

    /// Creates the cache and (after reaping stale ones) an empty temporary directory for `name`.
    fn fresh_tmp(&self, name: &str) -> Result<PathBuf> {
        crate::create_dir_all(self.cache)?;
        reap_stale(self.cache, name);
        let tmp = self.cache.join(format!(".{name}.tmp-{}", std::process::id()));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| DataError::io(&tmp, e))?;
        }
        std::fs::create_dir(&tmp).map_err(|e| DataError::io(&tmp, e))?;
        Ok(tmp)
    }

    /// A pool of [`Preparer::threads`] threads, or `None` (0) for rayon's global pool.
    fn pool(&self) -> Result<Option<rayon::ThreadPool>> {
        let threads = self.threads;
        if threads == 0 {
            return Ok(None);
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map(Some)
            .map_err(|e| DataError::Config(format!("cannot start {threads} threads: {e}")))
    }

    /// Fails when the inputs' metadata are no longer those `dataset` was prepared from.
    fn check_unchanged(&self, dataset: &PreparedDataset) -> Result<()> {
        let now = self.identity()?.inputs;
        if now == dataset.manifest().inputs {
            Ok(())
        } else {
            Err(DataError::Config(format!(
                "{} changed while it was being prepared; nothing was kept: prepare it again",
                self.files.describe()
            )))
        }
    }

    fn report(&mut self, p: Progress, dir: &Path) -> Result<()> {
        if let Some(f) = self.progress.as_mut()
            && f(&p).is_break()
        {
            return Err(DataError::Interrupted { dir: dir.to_path_buf() });
        }
        Ok(())
    }

    /// Both passes, then the manifest, statistics and marker, in `tmp`; returns the dataset and times.
    fn build(&mut self, tmp: &Path, dir: &Path, id: Identity) -> Result<(PreparedDataset, Timings)> {
        let mut timings = Timings::default();
        let t0 = Instant::now();
        let (tokenizers, sample) = match &self.given {
            Some(t) => (t.as_ref().clone(), 0),
            None => {
                let learned = self.learn(dir)?;
                timings.tokenizer_s = t0.elapsed().as_secs_f64();
                learned
            }
        };
        tokenizers.save(&tmp.join("tokenizer"))?;
        let t2 = Instant::now();
        let enc = self.encode(tmp, dir, &tokenizers)?;
        timings.encode_s = t2.elapsed().as_secs_f64();
        let t3 = Instant::now();
        self.report(
            Progress {
                phase: Phase::Finishing,
                pairs_read: enc.read.lines,
                examples: enc.filter.kept,
                shards: enc.shards.len(),
            },
            dir,
        )?;
        self.check_usable(&enc)?;
        let dataset = self.write_dataset(tmp, dir, id, sample, enc, &tokenizers)?;
        timings.finish_s = t3.elapsed().as_secs_f64();
        Ok((dataset, timings))
    }

    /// Fails when reading kept no pair, or the filters dropped every pair reading kept.
    fn check_usable(&self, enc: &Encoded) -> Result<()> {
        let anchor = self.files.anchor().to_path_buf();
        if enc.read.kept == 0 {
            return Err(DataError::NothingUsable {
                path: anchor,
                skipped_empty: enc.read.skipped_empty,
                skipped_long: enc.read.skipped_long,
            });
        }
        if enc.filter.kept == 0 {
            return Err(DataError::AllFiltered { path: anchor, summary: enc.filter.to_string() });
        }
        Ok(())
    }

    /// Writes `manifest.json`, opens (checks) the shards, writes `stats.json` and the marker.
    fn write_dataset(
        &self,
        tmp: &Path,
        dir: &Path,
        id: Identity,
        sample: usize,
        enc: Encoded,
        tokenizers: &Tokenizers,
    ) -> Result<PreparedDataset> {
        let manifest = Manifest {
            format: FORMAT_NAME.into(),
            version: FORMAT_VERSION,
            key: id.key.clone(),
            files: id.files,
            inputs: id.inputs,
            config: self.cfg.clone(),
            tokenizer_given: self.given.is_some(),
            tokenizer_sample: sample,
            read: enc.read,
            filter: enc.filter,
            examples: enc.filter.kept,
            tokens: enc.shards.iter().map(|s| s.tokens).sum(),
            shards: enc.shards,
        };
        write_json(&tmp.join("manifest.json"), &manifest)?;
        let mut dataset = PreparedDataset::open_unmarked(tmp, manifest, None)?;
        let stats = dataset_stats(&dataset, dir, enc.src, enc.tgt, tokenizers);
        write_json(&tmp.join("stats.json"), &stats)?;
        dataset.set_stats(stats);
        let marker = Marker {
            format: FORMAT_NAME.into(),
            version: FORMAT_VERSION,
            key: id.key,
            examples: dataset.len(),
        };
        write_json(&tmp.join(MARKER), &marker)?;
        Ok(dataset)
    }

    /// Pass 1: the tokenizers, learned from the sample streamed straight into training; and
    /// the number of pairs they learned from.
    fn learn(&mut self, dir: &Path) -> Result<(Tokenizers, usize)> {
        let lines = count_lines(self.files.anchor())?;
        let sampler = Sampler::new(self.cfg.sample_pairs, lines, self.cfg.sample_seed);
        self.report(Progress { phase: Phase::Tokenizer, pairs_read: 0, examples: 0, shards: 0 }, dir)?;
        let cfg = &self.cfg.tokenizer;
        let train = |side: Side| -> Result<(crate::Tokenizer, usize)> {
            let fed = AtomicUsize::new(0);
            let err = Mutex::new(None);
            let texts = SampleStream {
                reader: PairReader::open(self.files)?,
                opts: self.cfg.read,
                side,
                sampler,
                line: 0,
                pending: None,
                fed: &fed,
                err: &err,
            };
            let learned = crate::Tokenizer::train_stream(cfg, texts);
            if let Some(e) = err.into_inner().ok().flatten() {
                return Err(e);
            }
            Ok((learned?, fed.into_inner()))
        };
        if cfg.joint {
            let (t, n) = train(Side::Both)?;
            Ok((Tokenizers { src: t.clone(), tgt: t, joint: true }, n))
        } else {
            let (src, n) = train(Side::Src)?;
            let (tgt, _) = train(Side::Tgt)?;
            Ok((Tokenizers { src, tgt, joint: false }, n))
        }
    }

    /// Pass 2: read, filter, encode, write shards.
    fn encode(&mut self, tmp: &Path, dir: &Path, tok: &Tokenizers) -> Result<Encoded> {
        let opts = self.cfg.read;
        let filter = self.cfg.filter;
        let mut out = Encoded {
            read: ReadReport::default(),
            filter: FilterReport::default(),
            shards: Vec::new(),
            src: SideAccumulator::new(),
            tgt: SideAccumulator::new(),
        };
        let mut seen: HashSet<u64> = HashSet::new();
        let mut sink = ShardSink { tmp, shard_examples: self.cfg.shard_examples, writer: None, written: 0 };
        let mut reader = PairReader::open(self.files)?;
        let mut cur = Vec::new();
        reader.read_chunk(self.chunk, &mut cur)?;
        while !cur.is_empty() {
            let mut next = Vec::with_capacity(self.chunk);
            let chunk = self.chunk;
            let (r, verdicts) = rayon::join(
                || reader.read_chunk(chunk, &mut next),
                || classify(&cur, &opts, &filter, &mut seen, tok),
            );
            r?;
            out.read.lines += cur.len();
            out.record(verdicts, &mut sink)?;
            let p = Progress {
                phase: Phase::Encoding,
                pairs_read: out.read.lines,
                examples: sink.written,
                shards: out.shards.len(),
            };
            self.report(p, dir)?;
            cur = next;
        }
        sink.close(&mut out.shards)?;
        Ok(out)
    }
}

/// Opens the complete dataset in `dir` as the result of a preparation that reused it.
fn open_reused(dir: &Path) -> Result<Prepared> {
    let dataset = PreparedDataset::open(dir)?;
    Ok(Prepared { dataset, reused: true, timings: Timings::default() })
}

/// The statistics of `dataset` (its split named after `dir`), from the sides' accumulators.
fn dataset_stats(
    dataset: &PreparedDataset,
    dir: &Path,
    src: SideAccumulator,
    tgt: SideAccumulator,
    tokenizers: &Tokenizers,
) -> CorpusStats {
    let name = dir.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let batcher = StreamBatcher::new(dataset, BatchConfig::default());
    let (batches, padding_ratio) = batcher.summary(1, 0);
    let (bucket_padding_ratio, bucket_shapes) = batcher.bucket_summary(1, 0);
    CorpusStats {
        split: name,
        pairs: dataset.len(),
        src: src.finish(tokenizers.src.vocab_size()),
        tgt: tgt.finish(tokenizers.tgt.vocab_size()),
        batches,
        mean_batch_sentences: dataset.len() as f64 / batches.max(1) as f64,
        padding_ratio,
        bucket_padding_ratio,
        bucket_shapes,
    }
}

/// Each raw pair's verdict, in order: skipped by the reading rules, dropped by a filter, or encoded.
fn classify(
    chunk: &[(String, String)],
    opts: &ReadOptions,
    filter: &FilterConfig,
    seen: &mut HashSet<u64>,
    tok: &Tokenizers,
) -> Vec<Verdict> {
    // Normalise, read rules, copies and pair hashes in parallel…
    let mut v: Vec<Verdict> = chunk
        .par_iter()
        .map(|(s, t)| match read_verdict(s, t, opts) {
            Err(skip) => Verdict::Read(skip),
            Ok(p) if filter.drop_copies && p.src == p.tgt => Verdict::Drop(Dropped::Copy),
            Ok(p) => {
                let h = if filter.dedup { pair_hash(&p.src, &p.tgt) } else { 0 };
                Verdict::Text(p, h)
            }
        })
        .collect();
    // …duplicates in file order…
    if filter.dedup {
        for x in v.iter_mut() {
            if let Verdict::Text(_, h) = x
                && !seen.insert(*h)
            {
                *x = Verdict::Drop(Dropped::Duplicate);
            }
        }
    }
    // …then encode and apply the length rules in parallel.
    v.into_par_iter()
        .map(|x| match x {
            Verdict::Text(p, _) => {
                let (s, t) = (tok.src.encode(&p.src), tok.tgt.encode(&p.tgt));
                match filter.check_lengths(s.len(), t.len()) {
                    Some(d) => Verdict::Drop(d),
                    None => Verdict::Ids(s, t),
                }
            }
            x => x,
        })
        .collect::<Vec<_>>()
}

/// The canonical inputs of a preparation, and the directory name and key they give.
struct Identity {
    files: CorpusFiles,
    inputs: Vec<InputFile>,
    name: String,
    key: String,
}

enum Verdict {
    Read(ReadSkip),
    Drop(Dropped),
    Text(Pair, u64),
    Ids(Vec<u32>, Vec<u32>),
}

struct Encoded {
    read: ReadReport,
    filter: FilterReport,
    shards: Vec<ShardInfo>,
    src: SideAccumulator,
    tgt: SideAccumulator,
}

impl Encoded {
    /// Counts a chunk's verdicts and appends its encoded examples, in order, to the shards.
    fn record(&mut self, verdicts: Vec<Verdict>, sink: &mut ShardSink<'_>) -> Result<()> {
        for v in verdicts {
            match v {
                Verdict::Read(skip) => self.read.count(skip),
                Verdict::Drop(d) => {
                    self.read.kept += 1;
                    self.filter.count(d);
                }
                Verdict::Ids(s, t) => {
                    self.read.kept += 1;
                    self.filter.keep();
                    self.src.push(&s);
                    self.tgt.push(&t);
                    sink.push(&s, &t, &mut self.shards)?;
                }
                Verdict::Text(..) => unreachable!("every text verdict is encoded"),
            }
        }
        Ok(())
    }
}

/// Pass 2's shards being written into `tmp`: the open one, and the examples written so far.
struct ShardSink<'p> {
    tmp: &'p Path,
    shard_examples: usize,
    writer: Option<ShardWriter>,
    written: usize,
}

impl ShardSink<'_> {
    /// Appends one example, opening a shard if none is open and finishing it into `shards` when full.
    fn push(&mut self, s: &[u32], t: &[u32], shards: &mut Vec<ShardInfo>) -> Result<()> {
        let w = match &mut self.writer {
            Some(w) => w,
            None => self.writer.insert(ShardWriter::create(
                &self.tmp.join(format!("shard-{:05}.bin", shards.len())),
                self.written,
            )?),
        };
        w.push(s, t)?;
        self.written += 1;
        if w.len() >= self.shard_examples
            && let Some(w) = self.writer.take()
        {
            shards.push(w.finish()?);
        }
        Ok(())
    }

    /// Finishes the open shard, if any, into `shards`.
    fn close(mut self, shards: &mut Vec<ShardInfo>) -> Result<()> {
        if let Some(w) = self.writer.take() {
            shards.push(w.finish()?);
        }
        Ok(())
    }
}

/// Which side(s) of the sampled pairs a sample stream yields.
#[derive(Clone, Copy)]
enum Side {
    Both,
    Src,
    Tgt,
}

/// Which line pairs are in the tokenizer sample: all of them when the corpus has no more than
/// the sample size; otherwise line `i` is in when `SplitMix64(seed ^ i·φ)`'s first output is
/// below `size / lines · 2⁶⁴` — a Bernoulli draw per line, so the sample holds about `size`
/// pairs, spread over the whole corpus without periodic patterns, and needs no memory.
#[derive(Clone, Copy)]
struct Sampler {
    all: bool,
    threshold: u64,
    seed: u64,
}

impl Sampler {
    fn new(size: usize, lines: u64, seed: u64) -> Self {
        let all = size == 0 || lines <= size as u64;
        let p = if all { 1.0 } else { size as f64 / lines as f64 };
        Self { all, threshold: (p * u64::MAX as f64) as u64, seed }
    }

    fn take(&self, line: u64) -> bool {
        self.all
            || SplitMix64::new(self.seed ^ line.wrapping_mul(0x9E37_79B9_7F4A_7C15)).next_u64()
                < self.threshold
    }
}

/// The normalised sentences of the sampled pairs that the reading rules keep, read from the
/// files as training pulls them. An error (invalid UTF-8, …) ends the stream and is kept in
/// `err`.
struct SampleStream<'e> {
    reader: PairReader,
    opts: ReadOptions,
    side: Side,
    sampler: Sampler,
    line: u64,
    pending: Option<String>,
    fed: &'e AtomicUsize,
    err: &'e Mutex<Option<DataError>>,
}

impl Iterator for SampleStream<'_> {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        if let Some(t) = self.pending.take() {
            return Some(t);
        }
        loop {
            let (s, t) = match self.reader.next_pair() {
                Ok(Some(p)) => p,
                Ok(None) => return None,
                Err(e) => {
                    if let Ok(mut slot) = self.err.lock() {
                        *slot = Some(e);
                    }
                    return None;
                }
            };
            let line = self.line;
            self.line += 1;
            if !self.sampler.take(line) {
                continue;
            }
            let Ok(p) = read_verdict(s, t, &self.opts) else { continue };
            self.fed.fetch_add(1, Ordering::Relaxed);
            return Some(match self.side {
                Side::Both => {
                    self.pending = Some(p.tgt);
                    p.src
                }
                Side::Src => p.src,
                Side::Tgt => p.tgt,
            });
        }
    }
}

/// Lines in `path` (a last line without `\n` counts), read in 1 MiB blocks.
fn count_lines(path: &Path) -> Result<u64> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut lines, mut last) = (0u64, b'\n');
    loop {
        let n = f.read(&mut buf).map_err(|e| DataError::io(path, e))?;
        if n == 0 {
            break;
        }
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    Ok(lines + u64::from(last != b'\n'))
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let json = serde_json::to_vec_pretty(value)
        .map_err(|e| DataError::Config(format!("cannot serialise {}: {e}", path.display())))?;
    crate::write_atomic(path, &json)
}

/// Deletes `CACHE/.<name>.tmp-<pid>` directories left by processes that no longer run (only
/// where `/proc` tells; elsewhere they are left alone).
fn reap_stale(cache: &Path, name: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let prefix = format!(".{name}.tmp-");
    let Ok(entries) = std::fs::read_dir(cache) else { return };
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = file.strip_prefix(&prefix).and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
