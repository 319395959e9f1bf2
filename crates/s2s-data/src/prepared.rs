//! Reading a prepared dataset (format in [`mod@crate::prepare`]): checked once at
//! [`PreparedDataset::open`], then examples by index straight from the memory-mapped shards.

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::de::DeserializeOwned;

use crate::batch::{Batch, Example};
use crate::error::{DataError, Result};
use crate::manifest::{FORMAT_NAME, FORMAT_VERSION, MARKER, Manifest, Marker};
use crate::shard::ShardView;
use crate::stats::{CorpusStats, Histogram, SideStats};
use crate::tokenizer::Tokenizers;

/// A complete, checked prepared dataset: `len()` examples of (source ids, target ids) without
/// specials, read in place from memory-mapped shards. Memory: a few words per shard; the pages
/// of the maps that have been read show in the process's resident set as file pages (`RssFile`
/// in `/proc/self/status`), page cache that the kernel could evict, but counted in the
/// process's peak RSS. Reading one example maps more than its ids (the kernel maps the pages
/// around a fault too: 64 KiB, so a batch of a hundred examples from random blocks maps tens
/// of MiB), so [`PreparedDataset::collate`] gives every mapped page back after each batch it
/// reads (a `madvise` over the maps: microseconds beside a training step; the pages stay in the
/// page cache), and [`PreparedDataset::release_pages`] does it on demand.
pub struct PreparedDataset {
    dir: PathBuf,
    manifest: Manifest,
    stats: CorpusStats,
    tokenizers: Tokenizers,
    shards: Vec<ShardView>,
    /// Global index of each shard's first example.
    starts: Vec<usize>,
    len: usize,
}

impl std::fmt::Debug for PreparedDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PreparedDataset({}, {} examples, {} shards)",
            self.dir.display(),
            self.len,
            self.shards.len()
        )
    }
}

fn read_json<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<T> {
    let path = dir.join(name);
    let bad = |message: String| DataError::Shard { path: path.clone(), dir: dir.to_path_buf(), message };
    let text = std::fs::read_to_string(&path).map_err(|e| bad(format!("cannot read: {e}")))?;
    serde_json::from_str(&text).map_err(|e| bad(format!("unreadable: {e}")))
}

impl PreparedDataset {
    /// Opens and checks the prepared dataset in `dir`: the `COMPLETE` marker (format name and
    /// version), `manifest.json`, `stats.json`, the tokenizers, and every shard (size, magic,
    /// version, counts, checksum, offsets — so opening reads every shard once, in parallel).
    ///
    /// A directory without the marker (an interrupted preparation) or of another format
    /// version is [`DataError::NotPrepared`]; a damaged file is [`DataError::Shard`] naming it
    /// and telling to delete the directory and prepare again.
    pub fn open(dir: &Path) -> Result<Self> {
        let marker_path = dir.join(MARKER);
        let not = |message: String| DataError::NotPrepared { dir: dir.to_path_buf(), message };
        let text = match std::fs::read_to_string(&marker_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(not(format!(
                    "no {MARKER} marker: the preparation did not finish, or this is not a prepared dataset"
                )));
            }
            Err(e) => return Err(DataError::io(&marker_path, e)),
        };
        let marker: Marker =
            serde_json::from_str(&text).map_err(|e| not(format!("unreadable {MARKER}: {e}")))?;
        if marker.format != FORMAT_NAME {
            return Err(not(format!("format `{}`, expected `{FORMAT_NAME}`", marker.format)));
        }
        if marker.version != FORMAT_VERSION {
            return Err(not(format!(
                "prepared with format version {}, this build reads version {FORMAT_VERSION}",
                marker.version
            )));
        }
        let manifest: Manifest = read_json(dir, "manifest.json")?;
        if (&manifest.key, manifest.examples, manifest.version)
            != (&marker.key, marker.examples, marker.version)
        {
            return Err(DataError::Shard {
                path: dir.join("manifest.json"),
                dir: dir.to_path_buf(),
                message: format!("does not match {MARKER} (key, examples or version)"),
            });
        }
        let stats: CorpusStats = read_json(dir, "stats.json")?;
        Self::open_unmarked(dir, manifest, Some(stats))
    }

    /// Opens the shards of `manifest` in `dir` without looking for the marker (the last step of
    /// a preparation, before the marker exists).
    pub(crate) fn open_unmarked(dir: &Path, manifest: Manifest, stats: Option<CorpusStats>) -> Result<Self> {
        if cfg!(target_endian = "big") {
            return Err(DataError::Config(
                "prepared datasets hold little-endian ids read in place; this big-endian host cannot read them"
                    .into(),
            ));
        }
        let bad = |message: String| DataError::Shard {
            path: dir.join("manifest.json"),
            dir: dir.to_path_buf(),
            message,
        };
        let mut starts = Vec::with_capacity(manifest.shards.len());
        let mut len = 0usize;
        for s in &manifest.shards {
            if s.first != len || s.examples == 0 {
                return Err(bad(format!(
                    "shard {} starts at {} (expected {len}) or is empty",
                    s.file, s.first
                )));
            }
            starts.push(len);
            len += s.examples;
        }
        if len != manifest.examples {
            return Err(bad(format!(
                "the shards hold {len} examples, the manifest says {}",
                manifest.examples
            )));
        }
        let opened: Vec<Result<ShardView>> =
            manifest.shards.par_iter().map(|s| ShardView::open(dir, s)).collect();
        let shards = opened.into_iter().collect::<Result<Vec<_>>>()?;
        let tokenizers = Tokenizers::load(&dir.join("tokenizer"))?;
        let stats = stats.unwrap_or_else(|| {
            let empty = SideStats {
                tokens: 0,
                mean_len: 0.0,
                max_len: 0,
                coverage: 1.0,
                vocab_size: 0,
                lengths: Histogram::empty(10, 8),
            };
            CorpusStats {
                split: String::new(),
                pairs: len,
                src: empty.clone(),
                tgt: empty,
                batches: 0,
                mean_batch_sentences: 0.0,
                padding_ratio: 0.0,
                bucket_padding_ratio: 0.0,
                bucket_shapes: 0,
            }
        });
        Ok(Self { dir: dir.to_path_buf(), manifest, stats, tokenizers, shards, starts, len })
    }

    /// The directory was renamed to `dir` (the open files follow it; their names in errors too).
    pub(crate) fn moved_to(&mut self, dir: PathBuf) {
        for (shard, info) in self.shards.iter_mut().zip(&self.manifest.shards) {
            shard.moved_to(&dir, &info.file);
        }
        self.dir = dir;
    }

    pub(crate) fn set_stats(&mut self, stats: CorpusStats) {
        self.stats = stats;
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `manifest.json`: inputs, settings, reading and filter reports, shards.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// `stats.json`: the statistics `s2s data stats` shows, for default batches (epoch 0, seed 1).
    pub fn stats(&self) -> &CorpusStats {
        &self.stats
    }

    /// The tokenizers the ids were made with (loaded from `tokenizer/`).
    pub fn tokenizers(&self) -> &Tokenizers {
        &self.tokenizers
    }

    /// Number of examples.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no examples (a prepared dataset always has some).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    fn locate(&self, i: usize) -> (usize, usize) {
        let k = self.starts.partition_point(|&s| s <= i) - 1;
        (k, i - self.starts[k])
    }

    /// Example `i`: (source ids, target ids), without specials, borrowed from the map.
    /// Panics if `i >= len()`, like slice indexing; [`PreparedDataset::get`] does not.
    pub fn pair(&self, i: usize) -> (&[u32], &[u32]) {
        assert!(i < self.len, "example {i} of a prepared dataset of {}", self.len);
        let (k, j) = self.locate(i);
        self.shards[k].pair(j)
    }

    /// Example `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<(&[u32], &[u32])> {
        (i < self.len).then(|| self.pair(i))
    }

    /// Source ids of example `i` (panics past the end).
    pub fn src(&self, i: usize) -> &[u32] {
        self.pair(i).0
    }

    /// Target ids of example `i` (panics past the end).
    pub fn tgt(&self, i: usize) -> &[u32] {
        self.pair(i).1
    }

    /// (source length, target length) of example `i` in ids without specials, from the length
    /// index (a positioned read; panics past the end, or if the shard cannot be read any more —
    /// see [`PreparedDataset::read_lens`]).
    pub fn lens(&self, i: usize) -> (usize, usize) {
        assert!(i < self.len, "example {i} of a prepared dataset of {}", self.len);
        let mut out = Vec::with_capacity(1);
        self.read_lens(i, 1, &mut out).unwrap_or_else(|e| panic!("{e}"));
        (out[0].0 as usize, out[0].1 as usize)
    }

    /// Appends (source length, target length) of examples `first..first + count` to `out`,
    /// with one positioned read per shard they lie in (nothing is mapped: see
    /// [`mod@crate::shard`]). Panics past the end; an error only if a shard changed on disk
    /// after it was checked.
    pub fn read_lens(&self, first: usize, count: usize, out: &mut Vec<(u32, u32)>) -> Result<()> {
        assert!(
            first + count <= self.len,
            "examples {first}..{} of a prepared dataset of {}",
            first + count,
            self.len
        );
        let (mut i, end) = (first, first + count);
        while i < end {
            let (k, j) = self.locate(i);
            let take = (end - i).min(self.shards[k].len() - j);
            self.shards[k].read_lens(j, take, out)?;
            i += take;
        }
        Ok(())
    }

    /// Calls `f(i, src_len, tgt_len)` for every example in order, shard by shard (a sequential
    /// read of the length index, each shard's pages given back after it).
    pub fn for_each_len(&self, mut f: impl FnMut(usize, usize, usize)) {
        for (k, shard) in self.shards.iter().enumerate() {
            let l = shard.lens();
            for j in 0..shard.len() {
                f(self.starts[k] + j, l[2 * j] as usize, l[2 * j + 1] as usize);
            }
            shard.release_pages();
        }
    }

    /// Example `i` as an owned [`Example`] (panics past the end).
    pub fn example(&self, i: usize) -> Example {
        let (s, t) = self.pair(i);
        Example { src: s.to_vec(), tgt: t.to_vec() }
    }

    /// Every example, in memory (for small splits: validation, test).
    pub fn examples(&self) -> Vec<Example> {
        (0..self.len).map(|i| self.example(i)).collect()
    }

    /// The padded batch of examples `indices` (global indices; panics past the end), as
    /// [`Batch::collate`] makes it from in-memory examples. The ids are copied with positioned
    /// reads, so the resident set holds the batch and nothing of the shards (see
    /// [`mod@crate::shard`]); an error only if a shard changed on disk after it was checked.
    pub fn collate(&self, indices: &[usize]) -> Result<Batch> {
        let (mut ids, mut buf) = (Vec::new(), Vec::new());
        let mut spans = Vec::with_capacity(indices.len());
        for &i in indices {
            assert!(i < self.len, "example {i} of a prepared dataset of {}", self.len);
            let (k, j) = self.locate(i);
            let at = ids.len();
            let (s, t) = self.shards[k].read_pair(j, &mut ids, &mut buf)?;
            spans.push((at, s, t));
        }
        let rows: Vec<(&[u32], &[u32])> =
            spans.iter().map(|&(at, s, t)| ids[at..at + s + t].split_at(s)).collect();
        let mut batch = Batch::from_rows(&(0..rows.len()).collect::<Vec<_>>(), |r| rows[r]);
        batch.indices = indices.to_vec();
        Ok(batch)
    }

    /// Gives every mapped page of every shard back (they stay in the page cache; the next read
    /// maps them again), so the resident set holds only what is read next.
    pub fn release_pages(&self) {
        for s in &self.shards {
            s.release_pages();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Scratch, prepared};

    fn shard0(data: &PreparedDataset) -> PathBuf {
        data.dir().join(&data.manifest().shards[0].file)
    }

    fn refused(dir: &Path) -> DataError {
        PreparedDataset::open(dir).expect_err("a damaged dataset must be refused")
    }

    /// Collating reads the same ids as the map holds, and maps none of the shard's pages: the
    /// shard's resident pages (from /proc/self/smaps) stay at zero while batches are read.
    #[test]
    fn collating_reads_the_ids_and_maps_nothing() {
        let s = Scratch::new("pread");
        let data = prepared(s.path(), 3000, 1000);
        let all: Vec<usize> = (0..data.len()).rev().step_by(7).collect();
        let batch = data.collate(&all).unwrap();
        let rows: Vec<(&[u32], &[u32])> = all.iter().map(|&i| data.pair(i)).collect();
        let expected = Batch::from_rows(&(0..rows.len()).collect::<Vec<_>>(), |r| rows[r]);
        assert_eq!(
            (&batch.src, &batch.tgt_in, &batch.tgt_out),
            (&expected.src, &expected.tgt_in, &expected.tgt_out)
        );
        assert_eq!(batch.indices, all);
        let mut lens = Vec::new();
        data.read_lens(990, 20, &mut lens).unwrap(); // across the first shard's end
        let direct: Vec<(u32, u32)> =
            (990..1010).map(|i| (data.src(i).len() as u32, data.tgt(i).len() as u32)).collect();
        assert_eq!(lens, direct);
        #[cfg(target_os = "linux")]
        {
            // The measure sees pages read through the map…
            let ids: u64 = (0..1000).map(|i| data.src(i).iter().map(|&x| x as u64).sum::<u64>()).sum();
            assert!(ids > 0 && shard_resident_kb(&shard0(&data)) > 0, "the map's pages are not seen");
            // …and none once they are given back and only positioned reads happen.
            data.release_pages();
            for _ in 0..3 {
                data.collate(&all).unwrap();
                data.read_lens(0, data.len(), &mut lens).unwrap();
            }
            let resident = shard_resident_kb(&shard0(&data));
            assert_eq!(resident, 0, "collating mapped {resident} KB of the shard");
        }
    }

    /// Resident KB of the mappings of `file` in this process.
    #[cfg(target_os = "linux")]
    fn shard_resident_kb(file: &Path) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let name = file.to_string_lossy();
        let (mut inside, mut kb) = (false, 0);
        for line in smaps.lines() {
            let header = line
                .split(' ')
                .next()
                .is_some_and(|r| r.contains('-') && r.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
            if header {
                inside = line.ends_with(name.as_ref());
            } else if inside && line.starts_with("Rss:") {
                kb += line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap();
            }
        }
        kb
    }

    /// A shard cut short after it was checked: collating says so and names the file.
    #[test]
    fn a_shard_changed_after_opening_is_an_error_naming_it() {
        let s = Scratch::new("pread-cut");
        let data = prepared(s.path(), 300, 100);
        let path = shard0(&data);
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(64).unwrap();
        let e = data.collate(&[5, 150]).expect_err("a cut shard must not read");
        assert!(matches!(e, DataError::Shard { .. }), "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        assert!(data.collate(&[150]).is_ok(), "the other shards still read");
    }

    #[test]
    fn opens_what_was_prepared() {
        let s = Scratch::new("open-ok");
        let data = prepared(s.path(), 300, 100);
        assert_eq!(data.shard_count(), 3);
        let again = PreparedDataset::open(data.dir()).unwrap();
        assert_eq!(again.len(), 300);
        for i in [0, 99, 100, 299] {
            assert_eq!(again.pair(i), data.pair(i));
            assert_eq!(again.lens(i), (data.src(i).len(), data.tgt(i).len()));
        }
        assert!(again.get(300).is_none());
        assert_eq!(again.stats(), data.stats());
    }

    #[test]
    fn a_truncated_shard_is_refused_naming_the_file() {
        let s = Scratch::new("open-trunc");
        let data = prepared(s.path(), 300, 100);
        let (dir, path) = (data.dir().to_path_buf(), shard0(&data));
        drop(data);
        let bytes = std::fs::read(&path).unwrap();
        for keep in [bytes.len() - 1, bytes.len() / 2, 10] {
            std::fs::write(&path, &bytes[..keep]).unwrap();
            let e = refused(&dir);
            let msg = e.to_string();
            assert!(matches!(e, DataError::Shard { .. }), "{msg}");
            assert!(msg.contains("shard-00000.bin") && msg.contains("truncated"), "{msg}");
            assert!(msg.contains("delete the directory") && msg.contains("prepare it again"), "{msg}");
        }
    }

    #[test]
    fn a_corrupted_byte_anywhere_is_refused_naming_the_file() {
        let s = Scratch::new("open-flip");
        let data = prepared(s.path(), 200, 100);
        let (dir, path) = (data.dir().to_path_buf(), data.dir().join(&data.manifest().shards[1].file));
        drop(data);
        let good = std::fs::read(&path).unwrap();
        // A token id, the length index, the offsets, a reserved header byte, the checksum.
        for at in [64, good.len() / 2, good.len() - 40, 50, good.len() - 12] {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            std::fs::write(&path, &bad).unwrap();
            let msg = refused(&dir).to_string();
            assert!(msg.contains("shard-00001.bin"), "byte {at}: {msg}");
        }
        std::fs::write(&path, &good).unwrap();
        PreparedDataset::open(&dir).unwrap();
    }

    #[test]
    fn no_marker_or_another_version_is_not_a_prepared_dataset() {
        let s = Scratch::new("open-marker");
        let data = prepared(s.path(), 100, 100);
        let dir = data.dir().to_path_buf();
        drop(data);
        let marker = dir.join(MARKER);
        let text = std::fs::read_to_string(&marker).unwrap();
        std::fs::write(&marker, text.replace("\"version\": 1", "\"version\": 99")).unwrap();
        let e = refused(&dir);
        assert!(matches!(e, DataError::NotPrepared { .. }), "{e}");
        assert!(e.to_string().contains("format version 99"), "{e}");
        std::fs::remove_file(&marker).unwrap();
        let e = refused(&dir);
        assert!(
            matches!(e, DataError::NotPrepared { .. }) && e.to_string().contains("did not finish"),
            "{e}"
        );
    }

    #[test]
    fn a_damaged_manifest_or_stats_file_is_named() {
        let s = Scratch::new("open-manifest");
        let data = prepared(s.path(), 100, 100);
        let dir = data.dir().to_path_buf();
        drop(data);
        for name in ["manifest.json", "stats.json"] {
            let p = dir.join(name);
            let good = std::fs::read(&p).unwrap();
            std::fs::write(&p, &good[..good.len() / 2]).unwrap();
            let msg = refused(&dir).to_string();
            assert!(msg.contains(name) && msg.contains("delete the directory"), "{msg}");
            std::fs::write(&p, &good).unwrap();
        }
        // A manifest that lists another checksum than the shard holds.
        let p = dir.join("manifest.json");
        let good = std::fs::read_to_string(&p).unwrap();
        let m: Manifest = serde_json::from_str(&good).unwrap();
        let wrong = good.replace(&m.shards[0].checksum, "0123456789abcdef");
        std::fs::write(&p, wrong).unwrap();
        let msg = refused(&dir).to_string();
        assert!(msg.contains("shard-00000.bin") && msg.contains("checksum"), "{msg}");
    }
}
