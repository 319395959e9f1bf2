//! `results.csv`, `results.json`, `plots/*.svg`, `report.md` and `report.html` of an
//! experiment directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::heatmap;
use crate::plot::{Chart, Series, line_chart};
use crate::results::{ExperimentIndex, MetricsRow, ReportError, RunResult, Summary, load, summarize};

fn write(path: &Path, text: &str) -> Result<(), ReportError> {
    // Atomic: a reader never sees half a report.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|source| ReportError::Io { path: path.to_path_buf(), source })
}

fn pm(v: (f64, f64), seeds: usize, digits: usize) -> String {
    if seeds > 1 {
        format!("{:.*} ± {:.*}", digits, v.0, digits, v.1)
    } else {
        format!("{:.*}", digits, v.0)
    }
}

/// The p-values of a model against the baseline, one per seed, `*` below 0.05 (as sacreBLEU
/// marks them); `baseline` for the baseline itself.
fn p_cell(s: &Summary) -> String {
    if s.baseline {
        return "baseline".into();
    }
    if s.p_vs_baseline.is_empty() {
        return "-".into();
    }
    let one = |p: &f64| format!("{p:.4}{}", if *p < 0.05 { "*" } else { "" });
    s.p_vs_baseline.iter().map(one).collect::<Vec<_>>().join(" / ")
}

/// The results table rows (model, kind, seeds, params, BLEU, its 95% interval, p against the
/// baseline, chrF, ppl, minutes, tok/s, sent/s).
fn table_rows(s: &[Summary]) -> Vec<Vec<String>> {
    s.iter()
        .map(|s| {
            vec![
                s.model.clone(),
                s.kind.clone(),
                s.seeds.to_string(),
                format!("{:.2}M", s.params as f64 / 1e6),
                pm(s.bleu, s.seeds, 2),
                s.bleu_ci.map(|c| format!("± {c:.2}")).unwrap_or_else(|| "-".into()),
                p_cell(s),
                pm(s.chrf, s.seeds, 2),
                pm(s.ppl, s.seeds, 2),
                format!("{:.1}", s.train_minutes),
                format!("{:.0}", s.tokens_per_s),
                format!("{:.1}", s.decode_sentences_per_s),
            ]
        })
        .collect()
}

const HEADER: [&str; 12] = [
    "model",
    "kind",
    "seeds",
    "params",
    "BLEU",
    "BLEU 95% CI",
    "p vs baseline",
    "chrF",
    "ppl",
    "train min",
    "train tok/s",
    "decode sent/s",
];

/// A plot file: (file name, title, SVG).
type PlotFile = (String, String, String);

/// The plots, as (file name, title, SVG).
fn plots(runs: &[RunResult]) -> Vec<PlotFile> {
    let mut out = curve_plots(runs);
    // BLEU against source length: one line per run, buckets with sentences only.
    if let Some(p) = length_plot(runs) {
        out.push(p);
    }
    // Cross-attention of the first two examples of each model's first run.
    attention_plots(runs, &mut out);
    out
}

/// One series per run with a validation curve, its points `f` of each row.
fn curve_series(runs: &[RunResult], f: &dyn Fn(&MetricsRow) -> (f64, f64)) -> Vec<Series> {
    runs.iter()
        .filter(|r| !r.curve.is_empty())
        .map(|r| Series { name: r.entry.name.clone(), points: r.curve.iter().map(f).collect() })
        .collect()
}

/// The perplexity plots' y limit: 4 × the largest of the runs' best validation perplexities.
fn ppl_y_max(runs: &[RunResult]) -> Option<f64> {
    runs.iter()
        .filter_map(|r| r.curve.iter().map(|m| m.val_ppl).filter(|p| p.is_finite()).reduce(f64::min))
        .reduce(f64::max)
        .map(|m| m * 4.0)
}

/// The validation BLEU and perplexity curves, by step and by training time.
fn curve_plots(runs: &[RunResult]) -> Vec<PlotFile> {
    let ppl_cap = ppl_y_max(runs);
    let mut out = Vec::new();
    let mut add = |file: &str, title: &str, x: &str, y: &str, s: Vec<Series>, y_max: Option<f64>| {
        let svg = line_chart(&Chart { title, x, y, x_labels: None, y_max }, &s);
        out.push((file.to_string(), title.to_string(), svg));
    };
    add(
        "bleu_steps.svg",
        "Validation BLEU by step",
        "step",
        "BLEU (greedy)",
        curve_series(runs, &|m| (m.step as f64, m.val_bleu)),
        None,
    );
    add(
        "bleu_wall.svg",
        "Validation BLEU by training time",
        "minutes",
        "BLEU (greedy)",
        curve_series(runs, &|m| (m.wall / 60.0, m.val_bleu)),
        None,
    );
    add(
        "ppl_steps.svg",
        "Validation perplexity by step",
        "step",
        "perplexity",
        curve_series(runs, &|m| (m.step as f64, m.val_ppl)),
        ppl_cap,
    );
    add(
        "ppl_wall.svg",
        "Validation perplexity by training time",
        "minutes",
        "perplexity",
        curve_series(runs, &|m| (m.wall / 60.0, m.val_ppl)),
        ppl_cap,
    );
    out
}

/// Test BLEU by source length, one line per run; `None` when no run has length buckets.
fn length_plot(runs: &[RunResult]) -> Option<PlotFile> {
    let labels: Vec<String> = runs
        .iter()
        .find(|r| !r.by_length.is_empty())
        .map(|r| r.by_length.iter().map(|b| b.0.clone()).collect())
        .unwrap_or_default();
    if labels.is_empty() {
        return None;
    }
    let series: Vec<Series> = runs
        .iter()
        .filter(|r| !r.by_length.is_empty())
        .map(|r| Series {
            name: r.entry.name.clone(),
            points: r
                .by_length
                .iter()
                .enumerate()
                .filter(|(_, b)| b.1 > 0)
                .map(|(i, b)| (i as f64, b.2))
                .collect(),
        })
        .collect();
    let svg = line_chart(
        &Chart {
            title: "Test BLEU by source length (words)",
            x: "source length",
            y: "BLEU",
            x_labels: Some(&labels),
            y_max: None,
        },
        &series,
    );
    Some(("bleu_length.svg".into(), "Test BLEU by source length".into(), svg))
}

/// Appends the heatmaps of the first two test sentences of each model's first run with attention.
fn attention_plots(runs: &[RunResult], out: &mut Vec<PlotFile>) {
    let mut seen = Vec::new();
    for r in runs {
        if seen.contains(&r.entry.model) || r.attention.is_empty() {
            continue;
        }
        seen.push(r.entry.model.clone());
        for (i, a) in r.attention.iter().take(2).enumerate() {
            out.push((
                format!("attention-{}-{}.svg", r.entry.model, i + 1),
                format!("Cross-attention, {} (test sentence {})", r.entry.model, i + 1),
                heatmap::svg(&a.src, &a.out, &a.weights),
            ));
        }
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// `results.csv`: one row per run, written by the `csv` crate so that a name holding a comma, a
/// quote or a line break is quoted, not split across columns.
fn results_csv(runs: &[RunResult]) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "name",
        "model",
        "kind",
        "seed",
        "params",
        "bleu",
        "bleu_ci95",
        "p_vs_baseline",
        "chrf",
        "ppl",
        "decoding",
        "train_seconds",
        "train_tokens_per_s",
        "decode_sentences_per_s",
    ])?;
    for r in runs {
        let f = |v: Option<f64>| v.map(|x| format!("{x:.4}")).unwrap_or_default();
        w.write_record([
            r.entry.name.clone(),
            r.entry.model.clone(),
            r.entry.kind.clone(),
            r.entry.seed.to_string(),
            r.params.to_string(),
            f(r.bleu),
            f(r.bleu_ci),
            f(r.p_vs_baseline),
            f(r.chrf),
            f(r.ppl),
            r.decoding.clone().unwrap_or_default(),
            format!("{:.1}", r.train_seconds),
            format!("{:.1}", r.tokens_per_s),
            f(r.decode_sentences_per_s),
        ])?;
    }
    let bytes = w.into_inner().map_err(|e| csv::Error::from(e.into_error()))?;
    Ok(String::from_utf8(bytes).expect("csv writes the UTF-8 strings it is given"))
}

/// Regenerates every report file of the experiment in `dir`; returns the paths written.
pub fn write_report(dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let (index, runs) = load(dir)?;
    let summaries = summarize(&runs, index.baseline_model());
    let mut written = Vec::new();
    let p = dir.join("results.csv");
    write(&p, &results_csv(&runs).map_err(|e| ReportError::Io { path: p.clone(), source: e.into() })?)?;
    written.push(p);
    let json = serde_json::json!({ "experiment": index.name, "models": summaries, "runs": runs });
    let p = dir.join("results.json");
    write(&p, &(serde_json::to_string_pretty(&json).expect("results serialise") + "\n"))?;
    written.push(p);
    let plot_dir = dir.join("plots");
    std::fs::create_dir_all(&plot_dir)
        .map_err(|source| ReportError::Io { path: plot_dir.clone(), source })?;
    let plots = plots(&runs);
    for (file, _, svg) in &plots {
        let p = plot_dir.join(file);
        write(&p, svg)?;
        written.push(p);
    }
    let rows = table_rows(&summaries);
    let p = dir.join("report.md");
    write(&p, &markdown(&index, &runs, &rows, &plots))?;
    written.push(p);
    let p = dir.join("report.html");
    write(&p, &html(&index, &runs, &rows, &plots))?;
    written.push(p);
    Ok(written)
}

fn status_line(index: &ExperimentIndex, runs: &[RunResult]) -> String {
    let done = runs.iter().filter(|r| r.bleu.is_some()).count();
    let decoding = runs.iter().find_map(|r| r.decoding.clone()).unwrap_or_else(|| "-".into());
    format!(
        "{} of {} runs finished · test decoding: {decoding} · from `{}` · device: {}",
        done,
        index.entries.len(),
        index.source,
        runs.first().map_or("-", |r| r.device.as_str())
    )
}

fn markdown(index: &ExperimentIndex, runs: &[RunResult], rows: &[Vec<String>], plots: &[PlotFile]) -> String {
    let mut s = format!("# Experiment `{}`\n\n{}\n\n", index.name, status_line(index, runs));
    let _ = writeln!(s, "| {} |", HEADER.join(" | "));
    let _ = writeln!(s, "|{}", "---|".repeat(HEADER.len()));
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s.push_str("\nBLEU and chrF: sacreBLEU defaults (13a, cased) on detokenised test output; ppl: teacher-forced test perplexity; BLEU 95% CI and p vs baseline: sacreBLEU's paired bootstrap (1,000 resamples, seed 12345) against the baseline model's run of the same seed; * marks p < 0.05. ");
    s.push_str("train tok/s: target tokens per second of training; mean ± sample std over seeds where several ran.\n\n");
    for (file, title, _) in plots {
        let _ = writeln!(s, "## {title}\n\n![{title}](plots/{file})\n");
    }
    s
}

fn html(index: &ExperimentIndex, runs: &[RunResult], rows: &[Vec<String>], plots: &[PlotFile]) -> String {
    let mut s = String::from("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    let _ = writeln!(s, "<title>Experiment {}</title>", html_escape(&index.name));
    s.push_str("<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}td:first-child,th:first-child{text-align:left}figure{margin:1.5em 0}figcaption{font-weight:bold;margin-bottom:.4em}</style>\n</head><body>\n");
    let _ = writeln!(
        s,
        "<h1>Experiment <code>{}</code></h1>\n<p>{}</p>",
        html_escape(&index.name),
        html_escape(&status_line(index, runs))
    );
    s.push_str("<table id=\"results\"><thead><tr>");
    for h in HEADER {
        let _ = write!(s, "<th>{h}</th>");
    }
    s.push_str("</tr></thead><tbody>\n");
    for r in rows {
        s.push_str("<tr>");
        for c in r {
            let _ = write!(s, "<td>{}</td>", html_escape(c));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</tbody></table>\n<p>BLEU and chrF: sacreBLEU defaults (13a, cased) on detokenised test output; ppl: teacher-forced test perplexity. BLEU 95% CI and p vs baseline: sacreBLEU's paired bootstrap (1,000 resamples, seed 12345) against the baseline model's run of the same seed; * marks p < 0.05.</p>\n");
    for (file, title, svg) in plots {
        let _ = writeln!(
            s,
            "<figure id=\"{}\"><figcaption>{}</figcaption>\n{}</figure>",
            html_escape(file),
            html_escape(title),
            svg
        );
    }
    s.push_str("</body></html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-run experiment directory written by hand.
    fn fixture(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("s2s-report-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (name, bleu) in [("lstm", 10.0), ("bahdanau", 20.0)] {
            let run = dir.join(name);
            std::fs::create_dir_all(run.join("test")).unwrap();
            std::fs::write(run.join("run.json"), r#"{"params": 1000, "device": "cpu"}"#).unwrap();
            std::fs::write(
                run.join("metrics.csv"),
                "step,epoch,wall,train_loss,val_ppl,val_bleu,lr,tokens_per_s\n10,0,5.0,3.0,20.0,1.0,0.001,100.0\n20,0,10.0,2.0,10.0,5.0,0.001,110.0\n",
            )
            .unwrap();
            let scores = serde_json::json!({"bleu": bleu, "chrf": 30.0, "ppl": 9.0, "decoding": "beam-5",
                "decode_sentences_per_s": 50.0,
                "bleu_by_source_length": [{"bucket": "0-9", "sentences": 3, "bleu": bleu + 5.0},
                                          {"bucket": "10-19", "sentences": 0, "bleu": 0.0},
                                          {"bucket": "20+", "sentences": 2, "bleu": bleu - 5.0}]});
            std::fs::write(run.join("test/scores.json"), scores.to_string()).unwrap();
            // 40 test sentences: the lstm keeps only their first words, bahdanau all of them.
            let refs: Vec<String> =
                (0..40).map(|i| format!("the cat number {i} sat on the mat today")).collect();
            let hyps: Vec<String> =
                refs.iter().map(|r| if name == "lstm" { r[..11].to_string() } else { r.clone() }).collect();
            std::fs::write(run.join("test/references.txt"), refs.join("\n") + "\n").unwrap();
            std::fs::write(run.join("test/hypotheses.txt"), hyps.join("\n") + "\n").unwrap();
            std::fs::write(
                run.join("test/attention.json"),
                r#"[{"src": ["a", "</s>"], "out": ["x", "</s>"], "weights": [[0.9, 0.1], [0.2, 0.8]]}]"#,
            )
            .unwrap();
        }
        let entries: Vec<serde_json::Value> = ["lstm", "bahdanau"]
            .iter()
            .map(|n| serde_json::json!({"name": n, "model": n, "kind": n, "seed": 1, "dir": n}))
            .collect();
        let index = serde_json::json!({"name": "t", "source": "t.toml", "entries": entries});
        std::fs::write(dir.join("experiment.json"), index.to_string()).unwrap();
        dir
    }

    #[test]
    fn writes_table_plots_and_self_contained_html() {
        let dir = fixture("html");
        let written = write_report(&dir).unwrap();
        assert!(written.iter().any(|p| p.ends_with("report.html")));
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.contains("| bahdanau | bahdanau | 1 | 0.00M | 20.00 | ± "), "{md}");
        // The first model is the baseline; bahdanau differs from it significantly (sacreBLEU's
        // smallest p-value at 1,000 resamples).
        assert!(md.contains("| baseline |") && md.contains("| 0.0010* |"), "{md}");
        assert!(md.contains("plots/bleu_length.svg"));
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        for remote in ["src=\"http", "href=\"http", "<script", "<link", "<img"] {
            assert!(!html.contains(remote), "report.html must be self-contained: {remote}");
        }
        assert_eq!(html.matches("<svg").count(), 5 + 2, "4 curves, the length plot, 2 heatmaps");
        let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
        assert_eq!(csv.lines().count(), 3);
    }

    /// An index edited to put a run or a model name outside the folder is refused before the
    /// report writes anything.
    #[test]
    fn an_entry_that_is_no_name_is_refused() {
        for (key, bad) in [("dir", "../lstm"), ("model", "a/b"), ("dir", ""), ("model", "..")] {
            let dir = fixture("bad-entry");
            let index = dir.join("experiment.json");
            let mut v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&index).unwrap()).unwrap();
            v["entries"][1][key] = bad.into();
            std::fs::write(&index, v.to_string()).unwrap();
            let e = write_report(&dir).unwrap_err().to_string();
            assert!(e.contains("experiment.json: entry #2 `") && e.contains(crate::name::RULE), "{e}");
            assert!(!dir.join("results.csv").exists() && !dir.join("plots").exists(), "{key} = {bad}");
        }
    }

    #[test]
    fn results_csv_quotes_names_with_commas_and_quotes() {
        let dir = fixture("csv");
        // Entry names are free text in experiment.json: give one a comma and a quote.
        let index = dir.join("experiment.json");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&index).unwrap()).unwrap();
        let odd = r#"lstm, "small""#;
        v["entries"][0]["name"] = odd.into();
        std::fs::write(&index, v.to_string()).unwrap();
        write_report(&dir).unwrap();
        let mut r = csv::Reader::from_path(dir.join("results.csv")).unwrap();
        let header = r.headers().unwrap().clone();
        assert_eq!(header.len(), 14);
        let rows: Vec<csv::StringRecord> = r.records().collect::<Result<_, _>>().unwrap();
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|row| row.len() == header.len()), "{rows:?}");
        let names: Vec<&str> = rows.iter().map(|row| &row[0]).collect();
        assert!(names.contains(&odd), "{names:?}");
        let bleu = header.iter().position(|h| h == "bleu").unwrap();
        assert!(rows.iter().any(|row| &row[bleu] == "10.0000"), "the columns after the name stay in place");
    }
}
