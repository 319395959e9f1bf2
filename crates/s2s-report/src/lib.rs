//! # s2s-report: an experiment's results, the way a paper shows them
//!
//! Reads the run directories of an experiment (`runs/NAME/experiment.json` lists them; each has
//! `run.json`, `metrics.csv`, `test/scores.json`, `test/attention.json`) and writes
//! `results.csv`, `results.json`, `report.md`, `report.html` (one self-contained file with
//! inline SVG) and `plots/*.svg`. No burn: reports can be regenerated anywhere.

pub mod heatmap;
pub mod name;
pub mod plot;
pub mod render;
pub mod results;

pub use render::write_report;
pub use results::{Entry, ExperimentIndex, ReportError, RunResult, Summary, load, summarize};
