//! The reference docs name code that exists. `docs/models.md` and `docs/kernels.md` name code
//! in backticks, in two forms this test reads:
//!
//! - a file from the repository root, `crates/<crate>/…/<file>.rs`, alone or followed by what
//!   it defines: `::item` (a function, type, trait, module, constant), `::Type::method` (a
//!   function in an `impl` block of `Type`), or a group, `::{a, b}` and `::Type::{a, b}`;
//! - an operation of the kernels crate, `ops::name` (or `s2s_kernels::ops::name`), defined in
//!   or re-exported by `crates/s2s-kernels/src/ops.rs`.
//!
//! Any other backticked `.rs` (a file named from a crate's `src/`, or from nowhere) is an error
//! too, so the docs keep to one form. The code is rustfmt'ed, which this test relies on: an
//! `impl` block ends at the first line holding only `}` at its indentation.

use std::path::{Path, PathBuf};

/// The docs held to their code.
const DOCS: [&str; 2] = ["docs/models.md", "docs/kernels.md"];

/// Where `ops::` names live.
const OPS: &str = "crates/s2s-kernels/src/ops.rs";

/// The repository root: two up from this crate's directory (cargo's run-time
/// `CARGO_MANIFEST_DIR`, as a target directory shared by clones at other paths may hold a test
/// binary built elsewhere; else the compile-time one).
fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("../..")
}

/// The backticked spans of a Markdown text outside fenced blocks, with their line numbers.
fn code_spans(text: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Between the odd and even backticks of the line.
        spans.extend(line.split('`').skip(1).step_by(2).map(|s| (i + 1, s.to_string())));
    }
    spans
}

/// The identifier-like words of `code`, in order.
fn words(code: &str) -> Vec<&str> {
    code.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '!')).filter(|w| !w.is_empty()).collect()
}

/// Whether `code` defines `name` as an item (or a method, in an `impl` block's text).
fn defines(code: &str, name: &str) -> bool {
    const KINDS: [&str; 10] =
        ["fn", "struct", "enum", "trait", "type", "const", "static", "mod", "union", "macro_rules!"];
    words(code).windows(2).any(|w| w[1] == name && KINDS.contains(&w[0]))
}

/// The text of every `impl` block (and `trait` block) of `ty` in `code`: from its header line to
/// the line holding only `}` at the header's indentation.
fn impl_blocks(code: &str, ty: &str) -> Vec<String> {
    let lines: Vec<&str> = code.lines().collect();
    let mut blocks = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let header = body.strip_prefix("pub ").unwrap_or(body);
        let opens = header.starts_with("impl") || header.starts_with("trait ");
        // The type named after `for` (a trait's impl) or after `impl<…>`, as a whole word.
        if !opens || !words(header).contains(&ty) {
            continue;
        }
        let end = lines[i + 1..]
            .iter()
            .position(|l| *l == format!("{indent}}}"))
            .map_or(lines.len(), |e| i + 1 + e);
        blocks.push(lines[i..end].join("\n"));
    }
    blocks
}

/// What is wrong with a span that names a `.rs` file, if anything.
fn check_file_span(root: &Path, span: &str) -> Result<(), String> {
    let at = span.find(".rs").expect("a .rs span") + 3;
    let (file, rest) = span.split_at(at);
    if !file.starts_with("crates/") {
        return Err("not a path from the repository root (`crates/<crate>/…/<file>.rs`)".into());
    }
    let code = std::fs::read_to_string(root.join(file)).map_err(|e| format!("{file}: {e}"))?;
    if rest.is_empty() {
        return Ok(());
    }
    let Some(items) = rest.strip_prefix("::") else {
        return Err(format!("after `{file}` comes `{rest}`, not `::item`"));
    };
    // `A::B::{c, d}` → container path `A::B`, names `c`, `d`; `A::b` → `A`, `b`; `b` → ``, `b`.
    let (container, names): (&str, Vec<&str>) = match items.split_once('{') {
        Some((head, group)) => {
            let group = group.strip_suffix('}').ok_or_else(|| format!("`{items}`: an unclosed group"))?;
            (head.trim_end_matches("::"), group.split(',').map(str::trim).collect())
        }
        None => match items.rsplit_once("::") {
            Some((head, last)) => (head, vec![last]),
            None => ("", vec![items]),
        },
    };
    if names.iter().any(|n| n.is_empty() || !n.chars().all(|c| c.is_alphanumeric() || c == '_')) {
        return Err(format!("`{items}`: not a list of names"));
    }
    if container.is_empty() {
        let missing: Vec<&str> = names.into_iter().filter(|n| !defines(&code, n)).collect();
        return match missing.is_empty() {
            true => Ok(()),
            false => Err(format!("{file} defines no {}", missing.join(", "))),
        };
    }
    if container.contains("::") {
        return Err(format!("`{container}`: one type before the method, please"));
    }
    let blocks = impl_blocks(&code, container);
    if blocks.is_empty() {
        return Err(format!("{file} has no `impl` block of {container}"));
    }
    let missing: Vec<&str> = names.into_iter().filter(|n| !blocks.iter().any(|b| defines(b, n))).collect();
    match missing.is_empty() {
        true => Ok(()),
        false => Err(format!("{file}: {container}'s `impl` blocks define no {}", missing.join(", "))),
    }
}

/// What is wrong with an `ops::name` span, if anything: `ops.rs` defines `name` or re-exports it.
fn check_ops_span(ops: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains('…') {
        return Ok(()); // `ops::` and `ops::…` name the module
    }
    if !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return Err(format!("`{name}`: not a name"));
    }
    let reexported = ops
        .split("pub use ")
        .skip(1)
        .map(|s| s.split(';').next().unwrap_or(""))
        .any(|statement| words(statement).contains(&name));
    match defines(ops, name) || reexported {
        true => Ok(()),
        false => Err(format!("{OPS} neither defines nor re-exports {name}")),
    }
}

/// Every problem in `doc`'s code spans, as `doc:line: `span`: what is wrong`.
fn problems(root: &Path, doc: &str, text: &str) -> Vec<String> {
    let ops = std::fs::read_to_string(root.join(OPS)).expect("ops.rs");
    let mut out = Vec::new();
    for (line, span) in code_spans(text) {
        let checked = if span.contains(".rs") {
            check_file_span(root, &span)
        } else if let Some(name) = span.strip_prefix("s2s_kernels::ops::").or(span.strip_prefix("ops::")) {
            check_ops_span(&ops, name)
        } else {
            Ok(())
        };
        if let Err(why) = checked {
            out.push(format!("{doc}:{line}: `{span}`: {why}"));
        }
    }
    out
}

#[test]
fn every_code_path_the_reference_docs_name_exists() {
    let root = repo();
    let mut all = Vec::new();
    let mut named = 0;
    for doc in DOCS {
        let text = std::fs::read_to_string(root.join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
        named += code_spans(&text).iter().filter(|(_, s)| s.contains(".rs") || s.contains("ops::")).count();
        all.extend(problems(&root, doc, &text));
    }
    assert!(named > 50, "only {named} code paths found: is the parser reading the docs?");
    assert!(all.is_empty(), "{} code paths the docs name do not check out:\n{}", all.len(), all.join("\n"));
}

/// The checker itself: it refuses a missing file, a missing function, a method outside its
/// type's `impl`, a path not from the root and an unknown operation, and takes what exists.
#[test]
fn the_checker_refuses_what_does_not_exist() {
    let root = repo();
    let bad = [
        "`crates/s2s-models/src/no_such_file.rs`",
        "`crates/s2s-models/src/cell.rs::no_such_function`",
        "`crates/s2s-models/src/cell.rs::RecurrentCell::no_such_method`",
        "`crates/s2s-models/src/cell.rs::NoSuchType::step`",
        "`crates/s2s-models/src/cell.rs::RecurrentCell::{step, no_such_method}`",
        "`s2s-models/src/cell.rs`",
        "`cell.rs::RecurrentCell::step`",
        "`ops::no_such_operation`",
    ];
    for span in bad {
        assert_eq!(problems(&root, "t.md", span).len(), 1, "{span} passed");
    }
    let good = "`crates/s2s-models/src/cell.rs::RecurrentCell::{step, project_first}` \
                `crates/s2s-models/src/cell.rs` `ops::fast_lstm_step` `ops::KeyValue` `ops::Route`";
    assert_eq!(problems(&root, "t.md", good), Vec::<String>::new());
}

/// README is a front page: at most 120 lines, its two commands (the main job and the test
/// command `.ci/run` reads, the line after `# test`) within the first 40.
#[test]
fn the_readme_is_a_front_page() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let lines: Vec<&str> = readme.lines().collect();
    assert!(
        lines.len() <= 120,
        "README.md has {} lines: at most 120 (the rest belongs in docs/)",
        lines.len()
    );
    let test = lines.iter().position(|l| *l == "# test").expect("a `# test` line in README.md");
    assert!(test + 1 < 40, "README.md's test command is on line {}: it belongs in the first 40", test + 2);
    assert!(
        lines[..test].iter().any(|l| l.starts_with("cargo run --release")),
        "the main job comes before `# test`"
    );
}

/// The rows of the first Markdown table after `marker` in `text`, each a list of its cells
/// (the header first, the `|---|` line left out).
fn table_after(text: &str, marker: &str) -> Vec<Vec<String>> {
    let at = text.find(marker).unwrap_or_else(|| panic!("no `{marker}`"));
    text[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter(|l| !l.starts_with("|---"))
        .map(|l| l.trim().trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

/// The first number in `cell` (`18.06 (± 1.44)` → 18.06).
fn first_number(cell: &str) -> Option<f64> {
    let start = cell.find(|c: char| c.is_ascii_digit())?;
    let rest = &cell[start..];
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// README's quickstart table is the benchmarks' quickstart block (`scripts/experiment-doc.sh`
/// writes it) for the machine README names, each number rounded as README shows it; README's
/// marker `<!-- quickstart: LABEL -->` names the block.
#[test]
fn the_readmes_quickstart_table_is_the_benchmarks_block() {
    let root = repo();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let bench = std::fs::read_to_string(root.join("docs/benchmarks.md")).expect("docs/benchmarks.md");
    let tag = "<!-- quickstart: ";
    let at = readme.find(tag).expect("README.md marks its quickstart table `<!-- quickstart: LABEL -->`");
    let label = &readme[at + tag.len()..at + readme[at..].find(" -->").unwrap()];
    let block = table_after(&bench, &format!("<!-- experiment: quickstart, {label} -->"));
    let ours = table_after(&readme[at..], tag);
    let (head, rows) = ours.split_first().unwrap();
    let (bhead, brows) = block.split_first().unwrap();
    assert_eq!(rows.len(), brows.len(), "README's quickstart rows against the block's");
    for (c, name) in head.iter().enumerate().skip(1) {
        let b = bhead
            .iter()
            .position(|h| h.starts_with(name.as_str()))
            .unwrap_or_else(|| panic!("README's column `{name}` is none of the block's: {bhead:?}"));
        for (row, brow) in rows.iter().zip(brows) {
            assert!(brow[0] == row[0] || row[0].contains(&format!("`{}`", brow[0])), "{row:?} / {brow:?}");
            let shown = &row[c];
            let decimals = shown.split_once('.').map_or(0, |(_, d)| d.len());
            let want = format!("{:.*}", decimals, first_number(&brow[b]).unwrap());
            assert_eq!(
                shown, &want,
                "README's `{name}` of {} against docs/benchmarks.md ({})",
                row[0], brow[b]
            );
        }
    }
}

/// README's speed table is the benchmarks' summary of ratios, copied as it is.
#[test]
fn the_readmes_speed_table_is_the_benchmarks_summary() {
    let root = repo();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let bench = std::fs::read_to_string(root.join("docs/benchmarks.md")).expect("docs/benchmarks.md");
    let marker = "<!-- speed summary -->";
    assert_eq!(
        table_after(&readme, marker),
        table_after(&bench, marker),
        "README.md's speed table differs from docs/benchmarks.md's (after `{marker}`): copy the latter"
    );
}

/// README's line on the course counts the verdicts of the page's `docs/course/summary.md`.
#[test]
fn the_readmes_course_line_counts_the_pages_verdicts() {
    let root = repo();
    let summary =
        std::fs::read_to_string(root.join("docs/course/summary.md")).expect("docs/course/summary.md");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let rows = table_after(&summary, "| claim");
    let count = |verdict: &str| rows.iter().filter(|r| r[1].starts_with(verdict)).count();
    let line = format!(
        "{} claims: {} hold, {} do not hold here, {} not testable here",
        rows.len() - 1,
        count("**holds**"),
        count("**does not hold here**"),
        count("**not testable here**")
    );
    assert!(readme.contains(&line), "README.md should say `{line}` (from docs/course/summary.md)");
}
