//! The binary shard of a prepared dataset: writing one while examples stream in, checking one
//! through a memory map, and reading examples with positioned reads. The layout is described
//! in [`mod@crate::prepare`].
//!
//! # Why training reads with `pread`, not through the map
//! On Linux 6.18 with ext4, a page fault on a file mapping maps the whole large folio of the
//! page cache around it, not one page: measured, about 1 MB of resident set per random touch
//! of a shard, `MADV_RANDOM` and `MADV_NOHUGEPAGE` or not. A batch of 150 examples drawn from
//! all over a 10M-pair corpus then held 150–340 MB of file pages until they were given back,
//! and the peak resident set grew with the corpus. Positioned reads copy only the bytes asked
//! for and map nothing, so training's resident set does not depend on where the examples lie.
//! The map stays for the checks at opening and the sequential passes, which give their pages
//! back as they go.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use serde::{Deserialize, Serialize};

use crate::error::{DataError, Result};
use crate::hash::Xxh64;

/// First 8 bytes of every shard.
pub const SHARD_MAGIC: [u8; 8] = *b"S2SSHARD";
/// Last 8 bytes of every shard.
pub const SHARD_END: [u8; 8] = *b"S2SEND\0\0";
/// Version of the shard layout (and of the prepared-dataset format it belongs to).
pub const SHARD_VERSION: u32 = 1;
const HEADER: usize = 64;
const TRAILER: usize = 16;

/// One shard as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// File name inside the dataset directory (`shard-00000.bin`, …).
    pub file: String,
    /// Global index of its first example.
    pub first: usize,
    /// Examples in it.
    pub examples: usize,
    /// Token ids in it (source and target, specials excluded).
    pub tokens: u64,
    /// File size in bytes.
    pub bytes: u64,
    /// The shard checksum (see the format), 16 lowercase hex digits.
    pub checksum: String,
}

/// Size in bytes of a shard of `n` examples and `t` token ids.
fn shard_size(n: u64, t: u64) -> Option<u64> {
    let toks = t.checked_mul(4)?;
    let pad = (t % 2) * 4;
    let index = n.checked_mul(16)?;
    (HEADER as u64 + TRAILER as u64).checked_add(toks)?.checked_add(pad)?.checked_add(index)
}

fn header_bytes(n: u64, t: u64, first: u64) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[0..8].copy_from_slice(&SHARD_MAGIC);
    h[8..12].copy_from_slice(&SHARD_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER as u32).to_le_bytes());
    h[16..24].copy_from_slice(&n.to_le_bytes());
    h[24..32].copy_from_slice(&t.to_le_bytes());
    h[32..40].copy_from_slice(&first.to_le_bytes());
    h
}

fn checksum(header: &[u8], body_digest: u64) -> u64 {
    let mut h = Xxh64::new(0);
    h.update(header);
    h.update(&body_digest.to_le_bytes());
    h.digest()
}

/// Writes one shard: token ids as they come, the length index and offsets at the end, then
/// the header (seeked back to) and the trailer.
pub(crate) struct ShardWriter {
    path: PathBuf,
    file: BufWriter<File>,
    body: Xxh64,
    first: u64,
    tokens: u64,
    lens: Vec<u32>,
    offsets: Vec<u64>,
    buf: Vec<u8>,
}

impl ShardWriter {
    /// Creates `path` for examples numbered from `first`.
    pub(crate) fn create(path: &Path, first: usize) -> Result<Self> {
        let f = File::create(path).map_err(|e| DataError::io(path, e))?;
        let mut file = BufWriter::with_capacity(1 << 20, f);
        file.write_all(&[0u8; HEADER]).map_err(|e| DataError::io(path, e))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            body: Xxh64::new(0),
            first: first as u64,
            tokens: 0,
            lens: Vec::new(),
            offsets: Vec::new(),
            buf: Vec::new(),
        })
    }

    /// Examples written so far.
    pub(crate) fn len(&self) -> usize {
        self.offsets.len()
    }

    fn write(&mut self) -> Result<()> {
        self.body.update(&self.buf);
        self.file.write_all(&self.buf).map_err(|e| DataError::io(&self.path, e))?;
        self.buf.clear();
        Ok(())
    }

    /// Appends one example.
    pub(crate) fn push(&mut self, src: &[u32], tgt: &[u32]) -> Result<()> {
        self.offsets.push(self.tokens);
        self.lens.push(src.len() as u32);
        self.lens.push(tgt.len() as u32);
        self.tokens += (src.len() + tgt.len()) as u64;
        for &id in src.iter().chain(tgt) {
            self.buf.extend_from_slice(&id.to_le_bytes());
        }
        if self.buf.len() >= 1 << 16 { self.write() } else { Ok(()) }
    }

    /// Writes the index, header and trailer, syncs the file, and describes it.
    pub(crate) fn finish(mut self) -> Result<ShardInfo> {
        if self.tokens % 2 == 1 {
            self.buf.extend_from_slice(&[0u8; 4]);
        }
        self.write()?;
        let lens = std::mem::take(&mut self.lens);
        for chunk in lens.chunks(1 << 14) {
            chunk.iter().for_each(|l| self.buf.extend_from_slice(&l.to_le_bytes()));
            self.write()?;
        }
        let offsets = std::mem::take(&mut self.offsets);
        for chunk in offsets.chunks(1 << 13) {
            chunk.iter().for_each(|o| self.buf.extend_from_slice(&o.to_le_bytes()));
            self.write()?;
        }
        let n = offsets.len() as u64;
        let header = header_bytes(n, self.tokens, self.first);
        let sum = checksum(&header, self.body.digest());
        let io = |e| DataError::io(&self.path, e);
        self.file.write_all(&sum.to_le_bytes()).map_err(io)?;
        self.file.write_all(&SHARD_END).map_err(io)?;
        self.file.seek(SeekFrom::Start(0)).map_err(io)?;
        self.file.write_all(&header).map_err(io)?;
        let file = self.file.into_inner().map_err(|e| DataError::io(&self.path, e.into_error()))?;
        file.sync_all().map_err(|e| DataError::io(&self.path, e))?;
        let bytes = shard_size(n, self.tokens).unwrap_or(0);
        Ok(ShardInfo {
            file: self.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
            first: self.first as usize,
            examples: n as usize,
            tokens: self.tokens,
            bytes,
            checksum: format!("{sum:016x}"),
        })
    }
}

/// A checked, memory-mapped shard.
pub(crate) struct ShardView {
    path: PathBuf,
    dir: PathBuf,
    file: File,
    map: Mmap,
    n: usize,
    tokens_at: (usize, usize),
    lens_at: (usize, usize),
    offsets_at: (usize, usize),
}

/// Bytes of a shard hashed between two releases of its pages.
const CHECK_WINDOW: usize = 16 << 20;

/// Drops the pages of `map[at..at + len]` from this process's resident set (they stay in the
/// page cache; the next read maps them again).
fn release(map: &Mmap, at: usize, len: usize) {
    #[cfg(unix)]
    // SAFETY: a shared, read-only file mapping: dropping its pages loses nothing, the next read
    // faults them in again from the page cache or the file.
    let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, at, len) };
    #[cfg(not(unix))]
    let _ = (map, at, len);
}

fn as_u32(b: &[u8]) -> &[u32] {
    // SAFETY: every bit pattern is a valid u32; `align_to` only returns the aligned middle.
    let (pre, mid, _) = unsafe { b.align_to::<u32>() };
    debug_assert!(pre.is_empty(), "checked at open");
    mid
}

fn as_u64(b: &[u8]) -> &[u64] {
    // SAFETY: every bit pattern is a valid u64; `align_to` only returns the aligned middle.
    let (pre, mid, _) = unsafe { b.align_to::<u64>() };
    debug_assert!(pre.is_empty(), "checked at open");
    mid
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Fills `buf` from `file` at `offset` (a positioned read: no seek, no map).
fn read_at(file: &File, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < buf.len() {
            match std::os::windows::fs::FileExt::seek_read(file, &mut buf[done..], offset + done as u64)? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => done += n,
            }
        }
        Ok(())
    }
}

fn read_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// What one of the checks at opening found wrong with a shard (the message of
/// [`DataError::Shard`]).
#[derive(Debug, thiserror::Error)]
enum Defect {
    #[error("not a shard (bad magic)")]
    Magic,
    #[error("shard format version {0}, this build reads {SHARD_VERSION}")]
    Version(u32),
    #[error("impossible counts in the header")]
    Counts,
    #[error("truncated: {size} bytes where the header says {expected}")]
    Truncated { size: u64, expected: u64 },
    #[error("{0} bytes too many after the end")]
    Trailing(u64),
    #[error(
        "header (examples {n}, tokens {t}, first {first}, {size} bytes) disagrees with the \
         manifest (examples {}, tokens {}, first {}, {} bytes)",
        .manifest.examples, .manifest.tokens, .manifest.first, .manifest.bytes
    )]
    Manifest { n: u64, t: u64, first: u64, size: u64, manifest: ShardInfo },
    #[error("bad end marker: the file is truncated or overwritten")]
    EndMarker,
    #[error(
        "checksum mismatch (stored {stored:016x}, manifest {manifest}, computed {computed:016x}): the \
         file is corrupted"
    )]
    Checksum { stored: u64, manifest: String, computed: u64 },
    #[error("the map is not aligned for reading ids in place")]
    Unaligned,
    #[error("example {example}: offset {offset} where the lengths give {at}")]
    Offset { example: usize, offset: u64, at: u64 },
    #[error("the lengths add up to {at} ids, the header says {t}")]
    Lengths { at: u64, t: usize },
}

/// The outcome of one of the checks at opening.
type Check<T> = std::result::Result<T, Defect>;

/// Checks the header against the format, the file's `size` and `info`; returns (examples, token ids).
fn check_header(map: &[u8], size: u64, info: &ShardInfo) -> Check<(u64, u64)> {
    if map[0..8] != SHARD_MAGIC {
        return Err(Defect::Magic);
    }
    let version = u32::from_le_bytes([map[8], map[9], map[10], map[11]]);
    if version != SHARD_VERSION {
        return Err(Defect::Version(version));
    }
    let (n, t, first) = (read_u64(map, 16), read_u64(map, 24), read_u64(map, 32));
    let expected = shard_size(n, t).ok_or(Defect::Counts)?;
    if size < expected {
        return Err(Defect::Truncated { size, expected });
    }
    if size > expected {
        return Err(Defect::Trailing(size - expected));
    }
    if (n as usize, t, first as usize, size) != (info.examples, info.tokens, info.first, info.bytes) {
        return Err(Defect::Manifest { n, t, first, size, manifest: info.clone() });
    }
    Ok((n, t))
}

/// Checks the end marker and that the stored, manifest and computed checksums agree.
fn check_checksum(map: &Mmap, size: u64, info: &ShardInfo) -> Check<()> {
    let end = size as usize;
    if map[end - 8..] != SHARD_END {
        return Err(Defect::EndMarker);
    }
    let stored = read_u64(map, end - TRAILER);
    // Hash the body a window at a time, giving each window's pages back once hashed, so
    // that checking a shard never holds more than one window of it resident.
    let mut body = Xxh64::new(0);
    let mut at = HEADER;
    while at < end - TRAILER {
        let len = CHECK_WINDOW.min(end - TRAILER - at);
        body.update(&map[at..at + len]);
        release(map, at, len);
        at += len;
    }
    let computed = checksum(&map[..HEADER], body.digest());
    if stored != computed || info.checksum != format!("{computed:016x}") {
        return Err(Defect::Checksum { stored, manifest: info.checksum.clone(), computed });
    }
    Ok(())
}

impl ShardView {
    /// Maps and checks `dir/info.file`: size, magic, version, counts against the manifest,
    /// checksum, and that the offsets agree with the lengths (see the format).
    pub(crate) fn open(dir: &Path, info: &ShardInfo) -> Result<Self> {
        let path = dir.join(&info.file);
        let bad = |message: String| DataError::Shard { path: path.clone(), dir: dir.to_path_buf(), message };
        let file = File::open(&path).map_err(|e| bad(format!("cannot open: {e}")))?;
        let size = file.metadata().map_err(|e| bad(format!("cannot stat: {e}")))?.len();
        if size < (HEADER + TRAILER) as u64 {
            return Err(bad(format!("truncated: {size} bytes, a shard has at least {}", HEADER + TRAILER)));
        }
        // SAFETY: a prepared dataset is never written after its directory is complete; the
        // map is read-only (changing the file behind it is the one way to break this).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| bad(format!("cannot map: {e}")))?;
        let defect = |d: Defect| bad(d.to_string());
        let (n, t) = check_header(&map, size, info).map_err(&defect)?;
        check_checksum(&map, size, info).map_err(&defect)?;
        let (n, t) = (n as usize, t as usize);
        let tok_end = HEADER + 4 * t + (t % 2) * 4;
        let view = Self {
            path: path.clone(),
            dir: dir.to_path_buf(),
            file,
            n,
            tokens_at: (HEADER, HEADER + 4 * t),
            lens_at: (tok_end, tok_end + 8 * n),
            offsets_at: (tok_end + 8 * n, tok_end + 16 * n),
            map,
        };
        view.check_aligned().map_err(&defect)?;
        view.check_offsets(t).map_err(&defect)?;
        // The offsets check touched the whole index; give it back too, so that resident memory
        // grows only with what training reads.
        release(&view.map, 0, view.map.len());
        Ok(view)
    }

    /// Checks that the map puts the ids, lengths and offsets where they can be read in place.
    fn check_aligned(&self) -> Check<()> {
        let aligned = |r: (usize, usize), a: usize| (self.map.as_ptr() as usize + r.0).is_multiple_of(a);
        if !(aligned(self.tokens_at, 4) && aligned(self.lens_at, 4) && aligned(self.offsets_at, 8)) {
            return Err(Defect::Unaligned);
        }
        Ok(())
    }

    /// Checks that each offset is the sum of the lengths before it, and that they add up to `t`.
    fn check_offsets(&self, t: usize) -> Check<()> {
        let (lens, offs) = (self.lens(), self.offsets());
        let mut at = 0u64;
        for j in 0..self.n {
            if offs[j] != at {
                return Err(Defect::Offset { example: j, offset: offs[j], at });
            }
            at += lens[2 * j] as u64 + lens[2 * j + 1] as u64;
        }
        if at != t as u64 {
            return Err(Defect::Lengths { at, t });
        }
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        self.n
    }

    /// Drops every page of the shard from this process's resident set (see [`release`]).
    pub(crate) fn release_pages(&self) {
        release(&self.map, 0, self.map.len());
    }

    fn tokens(&self) -> &[u32] {
        as_u32(&self.map[self.tokens_at.0..self.tokens_at.1])
    }

    /// `[src_len, tgt_len]` per example, flattened.
    pub(crate) fn lens(&self) -> &[u32] {
        as_u32(&self.map[self.lens_at.0..self.lens_at.1])
    }

    fn offsets(&self) -> &[u64] {
        as_u64(&self.map[self.offsets_at.0..self.offsets_at.1])
    }

    /// The dataset's directory was renamed to `dir`.
    pub(crate) fn moved_to(&mut self, dir: &Path, file: &str) {
        self.path = dir.join(file);
        self.dir = dir.to_path_buf();
    }

    /// `len` bytes at `at`, read from the file (nothing mapped).
    fn read_bytes(&self, at: usize, len: usize, buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        buf.resize(len, 0);
        read_at(&self.file, at as u64, buf).map_err(|e| DataError::Shard {
            path: self.path.clone(),
            dir: self.dir.clone(),
            message: format!("cannot read {len} bytes at {at} ({e}): the file changed after it was checked"),
        })
    }

    /// Appends (source length, target length) of examples `j..j + count` to `out`: one
    /// positioned read of the length index.
    pub(crate) fn read_lens(&self, j: usize, count: usize, out: &mut Vec<(u32, u32)>) -> Result<()> {
        assert!(j + count <= self.n, "examples {j}..{} of a shard of {}", j + count, self.n);
        let mut buf = Vec::new();
        self.read_bytes(self.lens_at.0 + 8 * j, 8 * count, &mut buf)?;
        out.extend(buf.chunks_exact(8).map(|c| (le_u32(&c[..4]), le_u32(&c[4..]))));
        Ok(())
    }

    /// Appends the ids of example `j` (source, then target) to `ids` and returns their
    /// lengths: positioned reads of its lengths, its offset and its ids.
    pub(crate) fn read_pair(
        &self,
        j: usize,
        ids: &mut Vec<u32>,
        buf: &mut Vec<u8>,
    ) -> Result<(usize, usize)> {
        assert!(j < self.n, "example {j} of a shard of {}", self.n);
        self.read_bytes(self.lens_at.0 + 8 * j, 8, buf)?;
        let (s, t) = (le_u32(&buf[..4]) as usize, le_u32(&buf[4..]) as usize);
        self.read_bytes(self.offsets_at.0 + 8 * j, 8, buf)?;
        let at = read_u64(buf, 0) as usize;
        if at + s + t > self.tokens_at.1.saturating_sub(self.tokens_at.0) / 4 {
            return Err(DataError::Shard {
                path: self.path.clone(),
                dir: self.dir.clone(),
                message: format!("example {j} points past the ids: the file changed after it was checked"),
            });
        }
        self.read_bytes(self.tokens_at.0 + 4 * at, 4 * (s + t), buf)?;
        ids.extend(buf.chunks_exact(4).map(le_u32));
        Ok((s, t))
    }

    /// Example `j` of this shard: (source ids, target ids), borrowed from the map.
    pub(crate) fn pair(&self, j: usize) -> (&[u32], &[u32]) {
        let (s, t) = (self.lens()[2 * j] as usize, self.lens()[2 * j + 1] as usize);
        let at = self.offsets()[j] as usize;
        let ids = &self.tokens()[at..at + s + t];
        ids.split_at(s)
    }
}
