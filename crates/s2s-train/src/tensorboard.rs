//! TensorBoard event files: a run's scalars in `RUN/tensorboard/`, written as it trains.
//!
//! The format is TensorFlow's: a file of records, each `u64` length, its masked CRC-32C, the
//! bytes, their masked CRC-32C (all little-endian); each record one `Event` protobuf
//! (`wall_time` = 1, `step` = 2, `file_version` = 3, `summary` = 5, `session_log` = 6), a
//! `Summary` holding `Value`s (`tag` = 1, `simple_value` = 2). The first event of a file says
//! `brain.Event:2`. No crate writes it without a protobuf toolchain (prost and its build
//! step, or tensorboard-rs's), so the ~60 lines of both sides are here.
//!
//! A resumed run rewinds, as `metrics.csv` does: [`EventWriter::open`] keeps the scalars of
//! steps up to the checkpoint's (the last copy of each tag at each step, so a kill between
//! writing the new file and removing the old ones duplicates nothing), writes them into a new
//! file that sorts after the old ones, then removes those. The new file starts with a
//! `SessionLog` START at the next step, which makes a TensorBoard that already read the old
//! files drop what it had past the checkpoint.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// One event of a file, as [`read`] gives it back.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Seconds since the Unix epoch.
    pub wall_time: f64,
    /// The training step.
    pub step: i64,
    /// What it holds.
    pub what: What,
}

/// What an [`Event`] holds.
#[derive(Debug, Clone, PartialEq)]
pub enum What {
    /// The file's header (`brain.Event:2`).
    FileVersion(String),
    /// Scalars: (tag, value).
    Scalars(Vec<(String, f32)>),
    /// A session (re)start: TensorBoard forgets the steps from this one on.
    SessionStart,
    /// Anything else (left as it was).
    Other,
}

/// Appends events to a run's current event file.
#[derive(Debug)]
pub struct EventWriter {
    path: PathBuf,
    file: File,
}

/// The directory of a run's event files.
pub fn dir(run_dir: &Path) -> PathBuf {
    run_dir.join("tensorboard")
}

/// The event files in `dir`, oldest (the order TensorBoard reads them in) first.
pub fn files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for e in entries {
                let p = e?.path();
                let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if name.contains("tfevents") && !name.starts_with('.') {
                    out.push(p);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    out.sort();
    Ok(out)
}

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl EventWriter {
    /// Opens `run_dir/tensorboard/` for a run that stands at `step` (0: a fresh run): the
    /// scalars of steps up to `step` are kept, the rest dropped (module doc).
    pub fn open(run_dir: &Path, step: u64) -> std::io::Result<Self> {
        let dir = dir(run_dir);
        std::fs::create_dir_all(&dir)?;
        // What a kill inside an earlier rewrite left aside (`write_atomic`'s `.NAME.tmpPID`).
        for e in std::fs::read_dir(&dir)? {
            let p = e?.path();
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name.starts_with('.') && name.contains("tfevents") && name.contains(".tmp") {
                std::fs::remove_file(&p)?;
            }
        }
        let old = files(&dir)?;
        let mut kept: Vec<Event> = Vec::new();
        for f in &old {
            for e in read(f)? {
                if let What::Scalars(values) = e.what
                    && e.step >= 0
                    && e.step as u64 <= step
                {
                    for (tag, v) in values {
                        kept.retain(|k| {
                            !(k.step == e.step && matches!(&k.what, What::Scalars(t) if t[0].0 == tag))
                        });
                        kept.push(Event { what: What::Scalars(vec![(tag, v)]), ..e });
                    }
                }
            }
        }
        let wall = now();
        let mut bytes =
            record(&Event { wall_time: wall, step: 0, what: What::FileVersion("brain.Event:2".into()) });
        for e in &kept {
            bytes.extend(record(e));
        }
        if !old.is_empty() {
            bytes.extend(record(&Event { wall_time: wall, step: step as i64 + 1, what: What::SessionStart }));
        }
        // A name that sorts after every old file (TensorBoard reads them in name order).
        let mut secs = wall as u64;
        let name = |s: u64| format!("events.out.tfevents.{s:010}.s2s");
        while old.iter().any(|p| p.file_name().is_some_and(|n| *n.to_string_lossy() >= *name(secs))) {
            secs += 1;
        }
        let path = dir.join(name(secs));
        s2s_data::write_atomic(&path, &bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
        for f in old {
            std::fs::remove_file(f)?;
        }
        let file = OpenOptions::new().append(true).open(&path)?;
        Ok(Self { path, file })
    }

    /// The file written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event of `scalars` at `step` (one write: a kill leaves a torn last record at
    /// worst, which [`read`] and the next [`EventWriter::open`] leave out).
    pub fn scalars(&mut self, step: u64, scalars: &[(&str, f64)]) -> std::io::Result<()> {
        let values = scalars.iter().map(|&(t, v)| (t.to_string(), v as f32)).collect();
        self.file.write_all(&record(&Event {
            wall_time: now(),
            step: step as i64,
            what: What::Scalars(values),
        }))
    }
}

/// CRC-32C (Castagnoli), bit by bit: a few hundred bytes a validation.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0x82f6_3b78 } else { crc >> 1 };
        }
    }
    !crc
}

/// TFRecord's masked CRC.
fn masked(bytes: &[u8]) -> u32 {
    let c = crc32c(bytes);
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited field.
fn field(out: &mut Vec<u8>, number: u64, bytes: &[u8]) {
    varint(out, number << 3 | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// The event as a framed record.
fn record(e: &Event) -> Vec<u8> {
    let mut ev = vec![0x09]; // wall_time, 64-bit
    ev.extend(e.wall_time.to_le_bytes());
    varint(&mut ev, 2 << 3); // step, varint
    varint(&mut ev, e.step as u64);
    match &e.what {
        What::FileVersion(v) => field(&mut ev, 3, v.as_bytes()),
        What::Scalars(values) => {
            let mut summary = Vec::new();
            for (tag, v) in values {
                let mut value = Vec::new();
                field(&mut value, 1, tag.as_bytes());
                value.push(2 << 3 | 5); // simple_value, 32-bit
                value.extend(v.to_le_bytes());
                field(&mut summary, 1, &value);
            }
            field(&mut ev, 5, &summary);
        }
        What::SessionStart => field(&mut ev, 6, &[0x08, 1]), // status = START
        What::Other => {}
    }
    let len = (ev.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(ev.len() + 16);
    out.extend(len);
    out.extend(masked(&len).to_le_bytes());
    out.extend(&ev);
    out.extend(masked(&ev).to_le_bytes());
    out
}

/// The protobuf fields of `b`: (number, wire type, varint or fixed value, bytes of a
/// length-delimited one); `None` when malformed.
fn fields(mut b: &[u8]) -> Option<Vec<(u64, u8, u64, &[u8])>> {
    fn take_varint(b: &mut &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&byte, rest) = b.split_first()?;
            *b = rest;
            v |= ((byte & 0x7f) as u64) << (7 * i);
            if byte < 0x80 {
                return Some(v);
            }
        }
        None
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = take_varint(&mut b)?;
        let (number, wire) = (key >> 3, (key & 7) as u8);
        match wire {
            0 => out.push((number, 0, take_varint(&mut b)?, &[][..])),
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                let (bytes, rest) = (b.get(..n)?, b.get(n..)?);
                let mut v = [0u8; 8];
                v[..n].copy_from_slice(bytes);
                out.push((number, wire, u64::from_le_bytes(v), bytes));
                b = rest;
            }
            2 => {
                let n = take_varint(&mut b)? as usize;
                out.push((number, 2, 0, b.get(..n)?));
                b = b.get(n..)?;
            }
            _ => return None,
        }
    }
    Some(out)
}

fn parse(ev: &[u8]) -> Option<Event> {
    let mut e = Event { wall_time: 0.0, step: 0, what: What::Other };
    for (number, wire, v, bytes) in fields(ev)? {
        match (number, wire) {
            (1, 1) => e.wall_time = f64::from_bits(v),
            (2, 0) => e.step = v as i64,
            (3, 2) => e.what = What::FileVersion(String::from_utf8_lossy(bytes).into_owned()),
            (5, 2) => {
                let mut values = Vec::new();
                for (n, w, _, value) in fields(bytes)? {
                    if (n, w) != (1, 2) {
                        continue;
                    }
                    let (mut tag, mut x) = (None, None);
                    for (n, w, v, bytes) in fields(value)? {
                        match (n, w) {
                            (1, 2) => tag = Some(String::from_utf8_lossy(bytes).into_owned()),
                            (2, 5) => x = Some(f32::from_bits(v as u32)),
                            _ => {}
                        }
                    }
                    if let (Some(t), Some(x)) = (tag, x) {
                        values.push((t, x));
                    }
                }
                e.what = What::Scalars(values);
            }
            (6, 2) => {
                if fields(bytes)?.iter().any(|&(n, w, v, _)| (n, w, v) == (1, 0, 1)) {
                    e.what = What::SessionStart;
                }
            }
            _ => {}
        }
    }
    Some(e)
}

/// Every event of one file, in order; reading stops at a torn or damaged record (what a kill
/// in the middle of an append leaves).
pub fn read(path: &Path) -> std::io::Result<Vec<Event>> {
    let bytes = std::fs::read(path)?;
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(head) = bytes.get(at..at + 12) {
        let (len, crc) = (&head[..8], u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")));
        if masked(len) != crc {
            break;
        }
        let n = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
        let Some(data) = bytes.get(at + 12..(at + 12).saturating_add(n)) else { break };
        let Some(crc) = bytes.get(at + 12 + n..at + 16 + n) else { break };
        if masked(data).to_le_bytes() != crc {
            break;
        }
        match parse(data) {
            Some(e) => out.push(e),
            None => break,
        }
        at += 16 + n;
    }
    Ok(out)
}

/// Every scalar of a run's event files, in order: (step, tag, value).
pub fn scalars(run_dir: &Path) -> std::io::Result<Vec<(i64, String, f32)>> {
    let mut out = Vec::new();
    for f in files(&dir(run_dir))? {
        for e in read(&f)? {
            if let What::Scalars(values) = e.what {
                out.extend(values.into_iter().map(|(t, v)| (e.step, t, v)));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CRC-32C's check value, and the masked CRCs that tensorboard's own Python
    /// (`tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c`) gives.
    #[test]
    fn crc_and_masking_match_tensorboard() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(masked(&0u64.to_le_bytes()), 0x0798_0329);
        assert_eq!(masked(b""), 0xa282_ead8);
        assert_eq!(masked(b"hello"), 0x191c_1fbb);
    }

    /// What is written reads back; a resume keeps the steps up to its own, once each, and a
    /// torn last record is left out.
    #[test]
    fn writes_read_back_and_a_resume_rewinds() {
        let run = std::env::temp_dir().join(format!("s2s-tb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&run);
        let mut w = EventWriter::open(&run, 0).unwrap();
        for step in [10, 20, 30] {
            w.scalars(step, &[("train/loss", step as f64 / 10.0), ("valid/bleu", 1.5)]).unwrap();
        }
        let path = w.path().to_path_buf();
        drop(w);
        let events = read(&path).unwrap();
        assert_eq!(events[0].what, What::FileVersion("brain.Event:2".into()));
        assert_eq!(events[2].step, 20);
        assert_eq!(
            events[2].what,
            What::Scalars(vec![("train/loss".into(), 2.0), ("valid/bleu".into(), 1.5)])
        );
        // A torn append.
        let mut bytes = std::fs::read(&path).unwrap();
        let whole = bytes.len();
        bytes.extend(&record(&Event { wall_time: 0.0, step: 40, what: What::Scalars(vec![]) })[..9]);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read(&path).unwrap().len(), 4);
        assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, whole + 9);
        // A resume at step 20, then at 20 again (a kill before the run's next validation);
        // a rewrite killed before its rename left its file aside.
        let aside = dir(&run).join(".events.out.tfevents.0000000001.s2s.tmp99");
        std::fs::write(&aside, b"partial").unwrap();
        for _ in 0..2 {
            let mut w = EventWriter::open(&run, 20).unwrap();
            w.scalars(25, &[("train/loss", 9.0)]).unwrap();
            drop(w);
            let mut w = EventWriter::open(&run, 20).unwrap();
            w.scalars(30, &[("train/loss", 7.0)]).unwrap();
        }
        assert_eq!(files(&dir(&run)).unwrap().len(), 1);
        assert!(!aside.exists());
        let got = scalars(&run).unwrap();
        let steps: Vec<(i64, &str)> = got.iter().map(|(s, t, _)| (*s, t.as_str())).collect();
        assert_eq!(
            steps,
            [
                (10, "train/loss"),
                (10, "valid/bleu"),
                (20, "train/loss"),
                (20, "valid/bleu"),
                (30, "train/loss")
            ]
        );
        assert_eq!(got[4].2, 7.0);
        let _ = std::fs::remove_dir_all(&run);
    }
}
