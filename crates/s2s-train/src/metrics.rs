//! `metrics.csv`: one row per validation (and at the end of training).

use std::fs::OpenOptions;
use std::path::Path;

/// One row of `metrics.csv` — defined once, in the report crate that reads the file.
pub use s2s_report::results::MetricsRow;

/// Appends `row` (with a header when the file is new).
pub fn append(path: &Path, row: &MetricsRow) -> std::io::Result<()> {
    let new = !path.exists();
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let mut w = csv::WriterBuilder::new().has_headers(new).from_writer(file);
    w.serialize(row)?;
    w.flush()?;
    Ok(())
}

/// Reads every row.
pub fn read(path: &Path) -> Result<Vec<MetricsRow>, csv::Error> {
    csv::Reader::from_path(path)?.deserialize().collect()
}

/// Keeps only rows up to `step` (a resumed run rewinds the log to its checkpoint).
pub fn truncate_after(path: &Path, step: u64) -> Result<(), csv::Error> {
    if !path.exists() {
        return Ok(());
    }
    let rows: Vec<MetricsRow> = read(path)?.into_iter().filter(|r| r.step <= step).collect();
    let mut w = csv::Writer::from_path(path)?;
    for r in &rows {
        w.serialize(r)?;
    }
    w.flush()?;
    Ok(())
}
