//! The course page: Markdown and self-contained HTML, one section per claim.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::{Budget, Claim, CourseError, Finding, Verdict};

fn write(path: PathBuf, text: &str) -> Result<(), CourseError> {
    std::fs::write(&path, text).map_err(|source| CourseError::Io { path, source })
}

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Holds => "**holds**",
        Verdict::DoesNotHold => "**does not hold here**",
    }
}

/// Writes `course.md`, `course.html`, `findings.json` and `plots/*.svg` into `out`; returns the
/// Markdown page's path.
pub fn write_report(out: &Path, done: &[(Claim, Finding)], budget: Budget) -> Result<PathBuf, CourseError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CourseError::Io { path, source }
    };
    std::fs::create_dir_all(out.join("plots")).map_err(io(out))?;
    let mut md = String::new();
    let _ = writeln!(md, "# The course as experiments\n");
    let _ = writeln!(
        md,
        "Each claim of the lecture notes (`../shared/course-notes/`), measured and judged by the \
         criterion beside it. Budget: {}. Regenerate with `s2s course run{}`.\n",
        budget.pick("full", "quick"),
        budget.pick("", " --quick")
    );
    let _ = writeln!(md, "| claim | lecture | verdict |\n|---|---|---|");
    for (c, f) in done {
        let _ = writeln!(md, "| [{}](#{}) | {} | {} |", c.statement, c.name, c.lecture, verdict(f.verdict));
    }
    for (c, f) in done {
        let _ = writeln!(md, "\n## {}\n<a id=\"{}\"></a>\n", c.statement, c.name);
        let _ = writeln!(md, "*{}* · `s2s course run {}`\n", c.lecture, c.name);
        let _ = writeln!(md, "**Measured:** {}\n", c.method);
        let _ = writeln!(md, "**Criterion:** {}\n", c.criterion);
        let _ = writeln!(md, "**Verdict:** {} — {}\n", verdict(f.verdict), f.because);
        if !f.not_measured.is_empty() {
            let _ = writeln!(md, "**Not measured here:** {}\n", f.not_measured);
        }
        for (i, t) in std::iter::once(&f.table).chain(&f.more).enumerate() {
            if i > 0 {
                let _ = writeln!(md);
            }
            let _ = writeln!(md, "| {} |", t.header.join(" | "));
            let _ = writeln!(md, "|{}|", vec!["---"; t.header.len()].join("|"));
            for r in &t.rows {
                let _ = writeln!(md, "| {} |", r.join(" | "));
            }
        }
        for fig in &f.figures {
            write(out.join("plots").join(&fig.file), &fig.svg)?;
            let _ = writeln!(md, "\n![{}](plots/{})", fig.caption, fig.file);
        }
    }
    let page = out.join("course.md");
    write(page.clone(), &md)?;
    write(out.join("course.html"), &html(done))?;
    let json = serde_json::to_string_pretty(
        &done
            .iter()
            .map(|(c, f)| serde_json::json!({"name": c.name, "statement": c.statement, "lecture": c.lecture, "criterion": c.criterion, "finding": f}))
            .collect::<Vec<_>>(),
    )
    .expect("findings serialise");
    write(out.join("findings.json"), &json)?;
    Ok(page)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The same page as HTML, plots inline (one file to open or send).
fn html(done: &[(Claim, Finding)]) -> String {
    let mut h = String::from(
        "<!doctype html><meta charset=utf-8><title>The course as experiments</title>\
         <style>body{font-family:sans-serif;max-width:60em;margin:auto}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:2px 6px}.holds{color:#070}.not{color:#a00}</style>\
         <h1>The course as experiments</h1><table><tr><th>claim<th>lecture<th>verdict",
    );
    for (c, f) in done {
        let (class, word) = match f.verdict {
            Verdict::Holds => ("holds", "holds"),
            Verdict::DoesNotHold => ("not", "does not hold here"),
        };
        let _ = write!(
            h,
            "<tr><td><a href=\"#{}\">{}</a><td>{}<td class={class}>{word}",
            c.name,
            escape(c.statement),
            escape(c.lecture)
        );
    }
    h.push_str("</table>");
    for (c, f) in done {
        let class = if f.verdict == Verdict::Holds { "holds" } else { "not" };
        let _ = write!(
            h,
            "<h2 id=\"{}\">{}</h2><p><i>{}</i><p><b>Measured:</b> {}<p><b>Criterion:</b> {}\
             <p><b>Verdict:</b> <span class={class}>{}</span> — {}",
            c.name,
            escape(c.statement),
            escape(c.lecture),
            escape(c.method),
            escape(c.criterion),
            if f.verdict == Verdict::Holds { "holds" } else { "does not hold here" },
            escape(&f.because)
        );
        if !f.not_measured.is_empty() {
            let _ = write!(h, "<p><b>Not measured here:</b> {}", escape(&f.not_measured));
        }
        for t in std::iter::once(&f.table).chain(&f.more) {
            h.push_str("<table><tr>");
            for col in &t.header {
                let _ = write!(h, "<th>{}", escape(col));
            }
            for r in &t.rows {
                h.push_str("<tr>");
                for cell in r {
                    let _ = write!(h, "<td>{}", escape(cell));
                }
            }
            h.push_str("</table>");
        }
        for fig in &f.figures {
            let _ =
                write!(h, "<figure>{}<figcaption>{}</figcaption></figure>", fig.svg, escape(&fig.caption));
        }
    }
    h
}
