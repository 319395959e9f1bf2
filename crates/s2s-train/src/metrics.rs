//! `metrics.csv`: one row per validation (and at the end of training).

use std::fs::OpenOptions;
use std::path::Path;

/// One row of `metrics.csv` — defined once, in the report crate that reads the file.
pub use s2s_report::results::MetricsRow;

/// Appends `row`, with a header when the file is new or empty (a run killed inside
/// [`truncate_after`] before it wrote atomically could leave it empty; a headerless file
/// would read its first row as the header).
pub fn append(path: &Path, row: &MetricsRow) -> std::io::Result<()> {
    let new = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let mut w = csv::WriterBuilder::new().has_headers(new).from_writer(file);
    w.serialize(row)?;
    w.flush()?;
    Ok(())
}

/// Reads every complete row: a last line without its newline (an append that a kill cut
/// short) is left out.
pub fn read(path: &Path) -> Result<Vec<MetricsRow>, csv::Error> {
    let bytes = std::fs::read(path)?;
    let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    csv::Reader::from_reader(&bytes[..end]).deserialize().collect()
}

/// Keeps only rows up to `step` (a resumed run rewinds the log to its checkpoint), and no
/// torn last row. The file is replaced atomically (written aside, fsynced, renamed): a kill
/// leaves the old file or the new one.
pub fn truncate_after(path: &Path, step: u64) -> std::io::Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let rows: Vec<MetricsRow> = read(path)?.into_iter().filter(|r| r.step <= step).collect();
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in &rows {
        w.serialize(r)?;
    }
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    s2s_data::write_atomic(path, &bytes).map_err(|e| std::io::Error::other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(step: u64) -> MetricsRow {
        MetricsRow {
            step,
            epoch: 0,
            wall: 1.5,
            train_loss: 2.0,
            val_ppl: 9.0,
            val_bleu: 1.0,
            lr: 1e-3,
            tokens_per_s: 100.0,
        }
    }

    fn file(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("s2s-metrics-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("metrics.csv")
    }

    /// A kill in the middle of an append leaves a last line without its newline: reading
    /// leaves it out, and rewinding drops it from the file.
    #[test]
    fn a_torn_last_row_is_left_out() {
        let p = file("torn");
        let _ = std::fs::remove_file(&p);
        for step in [10, 20] {
            append(&p, &row(step)).unwrap();
        }
        let mut text = std::fs::read_to_string(&p).unwrap();
        text.push_str("30,0,1.5,2.0,9"); // cut short
        std::fs::write(&p, &text).unwrap();
        assert_eq!(read(&p).unwrap().iter().map(|r| r.step).collect::<Vec<_>>(), vec![10, 20]);
        truncate_after(&p, 15).unwrap();
        assert_eq!(read(&p).unwrap().iter().map(|r| r.step).collect::<Vec<_>>(), vec![10]);
        append(&p, &row(40)).unwrap();
        assert_eq!(read(&p).unwrap().iter().map(|r| r.step).collect::<Vec<_>>(), vec![10, 40]);
    }

    /// An empty file (what a kill inside a non-atomic rewrite left) gets a header with its
    /// first row, and rewinding past every row leaves a file that appends start afresh.
    #[test]
    fn an_empty_file_gets_a_header() {
        let p = file("empty");
        std::fs::write(&p, "").unwrap();
        append(&p, &row(10)).unwrap();
        assert_eq!(read(&p).unwrap().iter().map(|r| r.step).collect::<Vec<_>>(), vec![10]);
        truncate_after(&p, 5).unwrap();
        assert!(read(&p).unwrap().is_empty());
        append(&p, &row(20)).unwrap();
        assert_eq!(read(&p).unwrap().iter().map(|r| r.step).collect::<Vec<_>>(), vec![20]);
    }
}
