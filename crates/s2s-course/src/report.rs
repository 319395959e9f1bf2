//! The course page: Markdown and self-contained HTML, one section per claim.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::{Budget, Claim, CourseError, Finding, Knobs, Verdict};

fn write(path: PathBuf, text: &str) -> Result<(), CourseError> {
    std::fs::write(&path, text).map_err(|source| CourseError::Io { path, source })
}

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Holds => "**holds**",
        Verdict::DoesNotHold => "**does not hold here**",
        Verdict::NotTestable => "**not testable here**",
    }
}

/// A finding's seeds in words: ` (met for 3 of 3 seeds)`, ` (met for 1 of 3 seeds: not 2, 3)`,
/// or nothing for a claim not measured seed by seed.
pub(crate) fn seeds(f: &Finding) -> String {
    let Some(seeds) = &f.seeds else { return String::new() };
    let met = seeds.iter().filter(|s| s.1).count();
    let missed: Vec<String> = seeds.iter().filter(|s| !s.1).map(|s| s.0.to_string()).collect();
    let plural = if seeds.len() == 1 { "" } else { "s" };
    if missed.is_empty() || met == 0 {
        format!(" (met for {met} of {} seed{plural})", seeds.len())
    } else {
        format!(" (met for {met} of {} seeds: not {})", seeds.len(), missed.join(", "))
    }
}

/// Writes `course.md`, `course.html`, `findings.json`, `summary.md` (the table README.md
/// counts, [`summary`]) and `plots/*.svg` into `out`; returns the Markdown page's path.
pub fn write_report(
    out: &Path,
    done: &[(Claim, Finding)],
    budget: Budget,
    knobs: &Knobs,
) -> Result<PathBuf, CourseError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CourseError::Io { path, source }
    };
    std::fs::create_dir_all(out.join("plots")).map_err(io(out))?;
    let notes = notes_from(out);
    let lecture = |l: &str| linked(l, notes.as_deref(), false);
    let mut md = String::new();
    let _ = writeln!(md, "# The course as experiments\n");
    let _ = writeln!(
        md,
        "Each claim of the lecture notes ({}), measured and judged by the \
         criterion beside it. Budget: {}; knobs: {}. Regenerate with `s2s course run{}{}`.\n\n{}\n",
        match &notes {
            Some(rel) => format!("[`course-notes/`]({rel}/README.md)"),
            None => "`../shared/course-notes/`".to_string(),
        },
        budget.pick("full", "quick"),
        knobs.said(),
        budget.pick("", " --quick"),
        knobs.flags(budget),
        crate::RULE
    );
    let _ = writeln!(md, "| claim | lecture | verdict |\n|---|---|---|");
    for (c, f) in done {
        let _ = writeln!(
            md,
            "| [{}](#{}) | {} | {}{} |",
            c.statement,
            c.name,
            lecture(c.lecture),
            verdict(f.verdict),
            seeds(f)
        );
    }
    for (c, f) in done {
        let _ = writeln!(md, "\n## {}\n<a id=\"{}\"></a>\n", c.statement, c.name);
        let _ = writeln!(md, "*{}* · `s2s course run {}`\n", lecture(c.lecture), c.name);
        let _ = writeln!(md, "**Why:** {}\n", c.why);
        let _ = writeln!(md, "**Measured:** {}\n", c.method);
        let _ = writeln!(md, "**Criterion:** {}\n", c.criterion);
        let _ = writeln!(md, "**Verdict:** {}{} — {}\n", verdict(f.verdict), seeds(f), f.because);
        if !f.not_measured.is_empty() {
            let _ = writeln!(md, "**Not measured here:** {}\n", f.not_measured);
        }
        if !f.runs.is_empty() {
            let _ = writeln!(md, "**Trained:** {}\n", trained(&f.runs));
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
    write(out.join("course.html"), &html(done, notes.as_deref(), knobs))?;
    let json = serde_json::to_string_pretty(
        &done
            .iter()
            .map(|(c, f)| serde_json::json!({"name": c.name, "statement": c.statement, "lecture": c.lecture, "criterion": c.criterion, "knobs": knobs, "finding": f}))
            .collect::<Vec<_>>(),
    )
    .expect("findings serialise");
    write(out.join("findings.json"), &json)?;
    write(out.join("summary.md"), &summary(done))?;
    Ok(page)
}

/// The findings as one table, a row a claim: its statement, its verdict, the seeds that met its
/// criterion and its one-line reason (README.md gives its count of verdicts, which
/// `crates/s2s/tests/docs.rs` checks against this file).
pub fn summary(done: &[(Claim, Finding)]) -> String {
    let mut md = String::from("| claim | verdict here, and why |\n|---|---|\n");
    for (c, f) in done {
        let because = f.reason.replace('|', "\\|");
        let _ = writeln!(md, "| {} | {}{} — {} |", c.statement, verdict(f.verdict), seeds(f), because);
    }
    md
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The same page as HTML, plots inline (one file to open or send).
fn html(done: &[(Claim, Finding)], notes: Option<&str>, knobs: &Knobs) -> String {
    let mut h = String::from(
        "<!doctype html><meta charset=utf-8><title>The course as experiments</title>\
         <style>body{font-family:sans-serif;max-width:60em;margin:auto}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:2px 6px}.holds{color:#070}.not{color:#a00}.untested{color:#666}</style>\
         <h1>The course as experiments</h1>",
    );
    let _ = write!(
        h,
        "<p>Knobs: {}.<p>{}<table><tr><th>claim<th>lecture<th>verdict",
        escape(&knobs.said()),
        escape(crate::RULE)
    );
    for (c, f) in done {
        let class = match f.verdict {
            Verdict::Holds => "holds",
            Verdict::DoesNotHold => "not",
            Verdict::NotTestable => "untested",
        };
        let word = f.verdict.words();
        let _ = write!(
            h,
            "<tr><td><a href=\"#{}\">{}</a><td>{}<td class={class}>{word}{}",
            c.name,
            escape(c.statement),
            linked(c.lecture, notes, true),
            escape(&seeds(f))
        );
    }
    h.push_str("</table>");
    for (c, f) in done {
        let class = match f.verdict {
            Verdict::Holds => "holds",
            Verdict::DoesNotHold => "not",
            Verdict::NotTestable => "untested",
        };
        let _ = write!(
            h,
            "<h2 id=\"{}\">{}</h2><p><i>{}</i><p><b>Why:</b> {}<p><b>Measured:</b> {}<p><b>Criterion:</b> {}\
             <p><b>Verdict:</b> <span class={class}>{}</span>{} — {}",
            c.name,
            escape(c.statement),
            linked(c.lecture, notes, true),
            escape(c.why),
            escape(c.method),
            escape(c.criterion),
            f.verdict.words(),
            escape(&seeds(f)),
            escape(&f.because)
        );
        if !f.not_measured.is_empty() {
            let _ = write!(h, "<p><b>Not measured here:</b> {}", escape(&f.not_measured));
        }
        if !f.runs.is_empty() {
            let _ = write!(h, "<p><b>Trained:</b> {}", escape(&trained(&f.runs).replace('`', "")));
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

/// The lecture notes' folder as a path relative to `out`, for links that resolve from the page:
/// `$S2S_SHARED/course-notes`, else `../shared/course-notes` from the working directory (the
/// project root, beside which `shared/` lives); `None` when neither exists.
fn notes_from(out: &Path) -> Option<String> {
    let shared =
        std::env::var_os("S2S_SHARED").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("../shared"));
    let (notes, out) = (shared.join("course-notes").canonicalize().ok()?, out.canonicalize().ok()?);
    let common = notes.components().zip(out.components()).take_while(|(a, b)| a == b).count();
    let mut rel: Vec<String> = vec!["..".to_string(); out.components().count() - common];
    rel.extend(notes.components().skip(common).map(|c| c.as_os_str().to_string_lossy().into_owned()));
    Some(rel.join("/"))
}

/// A claim's `lecture` ("file.md § Section; § Section; other.md § …") with each file name a
/// link into the notes' folder `notes` (relative to the page); Markdown, or HTML (escaped).
fn linked(lecture: &str, notes: Option<&str>, html: bool) -> String {
    lecture
        .split(' ')
        .map(|word| {
            let file = word.trim_end_matches([',', ';']);
            let rest = &word[file.len()..];
            match notes {
                Some(dir) if file.ends_with(".md") && html => {
                    format!("<a href=\"{dir}/{file}\">{}</a>{}", escape(file), escape(rest))
                }
                Some(dir) if file.ends_with(".md") => format!("[{file}]({dir}/{file}){rest}"),
                _ if html => escape(word),
                _ => word.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod link_tests {
    use super::*;

    #[test]
    fn lecture_files_become_links_into_the_notes() {
        let l = "attention-mechanisms.md § Bahdanau; § Luong; self-attention-guide.md § Scala";
        assert_eq!(
            linked(l, Some("../../shared/course-notes"), false),
            "[attention-mechanisms.md](../../shared/course-notes/attention-mechanisms.md) § Bahdanau; § Luong; \
             [self-attention-guide.md](../../shared/course-notes/self-attention-guide.md) § Scala"
        );
        assert!(linked(l, Some("n"), true).starts_with("<a href=\"n/attention-mechanisms.md\">"));
        assert_eq!(linked(l, None, false), l);
    }

    #[test]
    fn the_notes_folder_is_found_relative_to_the_page() {
        let base = std::env::temp_dir().join(format!("s2s-notes-{}", std::process::id()));
        let page = base.join("repo/docs/course");
        std::fs::create_dir_all(&page).unwrap();
        std::fs::create_dir_all(base.join("shared/course-notes")).unwrap();
        // SAFETY: no other test of this crate reads S2S_SHARED.
        unsafe { std::env::set_var("S2S_SHARED", base.join("shared")) };
        let rel = notes_from(&page);
        unsafe { std::env::remove_var("S2S_SHARED") };
        let _ = std::fs::remove_dir_all(&base);
        assert_eq!(rel.as_deref(), Some("../../../shared/course-notes"));
    }
}

/// The runs a claim trained, each with its steps of its budget: `name 1200 steps`, or
/// `name 600 of 1200 steps` where one stopped short.
fn trained(runs: &[crate::TrainedRun]) -> String {
    runs.iter()
        .map(|r| {
            if r.steps == r.budget {
                format!("`{}` {} steps", r.name, r.steps)
            } else {
                format!("`{}` {} of {} steps", r.name, r.steps, r.budget)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
