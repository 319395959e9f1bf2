//! What `s2s translate` reads beside stdin and writes beside its translations: given targets
//! (`--score-target`), prefixes (`--prefix`), Moses n-best lists (`--rescore`), and word
//! alignments from the attention (`--alignment`).

use std::io::BufReader;
use std::path::Path;

use anyhow::{Context, Result, bail};
use s2s_data::line::{LineRead, MAX_LINE_BYTES, read_line};
use s2s_data::{Level, Tokenizer};

/// The longest target `--score-target` and `--rescore` score, in tokens (fairseq's default
/// `--max-target-positions`).
pub const MAX_TARGET_TOKENS: usize = 1024;

/// The lines of `path` (given as `flag`), without their endings; an error naming the flag, the
/// file and the line for one that is not UTF-8 or is longer than 1 MiB.
pub fn read_lines(flag: &str, path: &Path) -> Result<Vec<String>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("{flag} {}: cannot open", path.display()))?;
    let mut reader = BufReader::new(file);
    let mut lines = Vec::new();
    let mut buf = Vec::new();
    loop {
        let read = read_line(&mut reader, &mut buf, MAX_LINE_BYTES)
            .with_context(|| format!("{flag} {}: reading line {}", path.display(), lines.len() + 1))?;
        match read {
            LineRead::End => return Ok(lines),
            LineRead::TooLong => bail!(
                "{flag} {}:{}: the line is longer than {MAX_LINE_BYTES} bytes",
                path.display(),
                lines.len() + 1
            ),
            LineRead::Line => {
                while buf.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
                    buf.pop();
                }
                let line = String::from_utf8(std::mem::take(&mut buf)).map_err(|_| {
                    anyhow::anyhow!(
                        "{flag} {}:{}: the line is not valid UTF-8 (convert the file, e.g. iconv -t UTF-8)",
                        path.display(),
                        lines.len() + 1
                    )
                })?;
                lines.push(line);
            }
        }
    }
}

/// The error for stdin line `line` (1-based) past the end of `flag`'s file of `lines` lines.
pub fn too_few_lines(flag: &str, path: &Path, lines: usize, line: usize) -> anyhow::Error {
    anyhow::anyhow!(
        "{flag} {} has {lines} lines but stdin has more: stdin line {line} has no line there \
         (give one line per source line)",
        path.display()
    )
}

/// The error for `flag`'s file of `lines` lines when stdin ended after `read` lines.
pub fn too_many_lines(flag: &str, path: &Path, lines: usize, read: usize) -> anyhow::Error {
    anyhow::anyhow!(
        "{flag} {} has {lines} lines but stdin had {read}: line {} has no source line \
         (give one line per source line)",
        path.display(),
        read + 1
    )
}

/// One line of a Moses n-best list: `id ||| hypothesis ||| features ||| score [||| …]`, or
/// `id ||| hypothesis ||| score` (what `s2s translate --nbest` writes).
#[derive(Debug, Clone, PartialEq)]
pub struct NbestLine {
    /// The 0-based source line.
    pub id: usize,
    /// The hypothesis text.
    pub hypothesis: String,
    /// The features field (empty when the line has none).
    pub features: String,
    /// The fields after the features (the total score, and any further), as written.
    pub rest: Vec<String>,
}

impl NbestLine {
    /// The line with ` Score= x` added to its features (as marian-scorer's `--n-best` adds its
    /// feature), its other fields as they were.
    pub fn with_feature(&self, score: f64) -> String {
        let features = if self.features.is_empty() {
            format!("Score= {score:.4}")
        } else {
            format!("{} Score= {score:.4}", self.features)
        };
        let mut fields = vec![self.id.to_string(), self.hypothesis.clone(), features];
        fields.extend(self.rest.iter().cloned());
        fields.join(" ||| ")
    }
}

/// Parses the n-best list `lines` of `path` (given as `--rescore`), each naming a source line
/// below `sources`.
pub fn parse_nbest(path: &Path, lines: &[String], sources: usize) -> Result<Vec<NbestLine>> {
    let mut out = Vec::with_capacity(lines.len());
    for (k, line) in lines.iter().enumerate() {
        let at = || format!("--rescore {}:{}", path.display(), k + 1);
        let fields: Vec<&str> = line.split("|||").map(str::trim).collect();
        if fields.len() < 3 {
            bail!(
                "{}: not an n-best line: expected `id ||| hypothesis ||| features ||| score` \
                 (Moses format), found {} `|||`",
                at(),
                fields.len() - 1
            );
        }
        let id: usize = fields[0].parse().map_err(|_| {
            anyhow::anyhow!("{}: the id `{}` is not a sentence number (0, 1, …)", at(), fields[0])
        })?;
        if id >= sources {
            bail!(
                "{}: sentence {id} is past the end of stdin, which has {sources} lines (ids count from 0)",
                at()
            );
        }
        let (features, rest) = if fields.len() == 3 {
            (String::new(), vec![fields[2].to_string()])
        } else {
            (fields[2].to_string(), fields[3..].iter().map(|f| f.to_string()).collect())
        };
        out.push(NbestLine { id, hypothesis: fields[1].to_string(), features, rest });
    }
    Ok(out)
}

/// How `--alignment` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AlignMode {
    /// Pharaoh `i-j` pairs: source word i, target word j.
    Hard,
    /// The matrix: per target word, its attention over the source words.
    Soft,
}

/// The word of each token of `ids` (0-based), `None` for a token in no word (a character
/// tokenizer's space): one word per token at word level; at BPE a new word at each `▁`-piece;
/// at character level a new word after each space.
pub fn word_of_tokens(tok: &Tokenizer, ids: &[u32]) -> Vec<Option<usize>> {
    let mut out = Vec::with_capacity(ids.len());
    let mut word: Option<usize> = None;
    let mut gap = true;
    for (k, &id) in ids.iter().enumerate() {
        let piece = tok.token(id);
        match tok.level() {
            Level::Word => word = Some(k),
            Level::Bpe => {
                if word.is_none() || piece.starts_with('\u{2581}') {
                    word = Some(word.map_or(0, |w| w + 1));
                }
            }
            Level::Char => {
                if piece == " " {
                    gap = true;
                    out.push(None);
                    continue;
                }
                if gap {
                    word = Some(word.map_or(0, |w| w + 1));
                    gap = false;
                }
            }
        }
        out.push(word);
    }
    out
}

/// The alignment field of a sentence: `attention` `[target tokens + 1][source tokens + 1]`
/// (`</s>` last on both sides) mapped from tokens to words by `src_words` and `tgt_words`
/// ([`word_of_tokens`]).
///
/// `hard`: each target token linked to the source token it attends to most (none where that is
/// `</s>`), the links of the tokens taken as links of their words, `i-j` (source word, target
/// word; 0-based), in target order, each once. `soft`: per target word, comma-separated, its
/// attention over each source word (the sum over the word's tokens, averaged over the target
/// word's tokens; `</s>` left out), words separated by spaces.
pub fn alignment_field(
    mode: AlignMode,
    attention: &[Vec<f32>],
    src_words: &[Option<usize>],
    tgt_words: &[Option<usize>],
) -> String {
    let n_src = src_words.iter().flatten().max().map_or(0, |w| w + 1);
    let n_tgt = tgt_words.iter().flatten().max().map_or(0, |w| w + 1);
    match mode {
        AlignMode::Hard => {
            let mut links: Vec<(usize, usize)> = s2s_eval::alignment::hard_links(attention)
                .into_iter()
                .filter_map(|[j, i]| Some((tgt_words.get(j).copied()??, src_words.get(i).copied()??)))
                .collect();
            links.sort_unstable();
            links.dedup();
            links.iter().map(|(j, i)| format!("{i}-{j}")).collect::<Vec<_>>().join(" ")
        }
        AlignMode::Soft => {
            let mut m = vec![vec![0f64; n_src]; n_tgt];
            let mut pieces = vec![0usize; n_tgt];
            for (row, tw) in attention.iter().zip(tgt_words) {
                let Some(j) = *tw else { continue };
                pieces[j] += 1;
                for (&w, sw) in row.iter().zip(src_words) {
                    if let Some(i) = sw {
                        m[j][*i] += w as f64;
                    }
                }
            }
            m.iter()
                .zip(&pieces)
                .map(|(row, &p)| {
                    row.iter().map(|v| format!("{:.6}", v / p.max(1) as f64)).collect::<Vec<_>>().join(",")
                })
                .collect::<Vec<_>>()
                .join(" ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nbest_lines_are_parsed_and_malformed_ones_named() {
        let p = Path::new("n.txt");
        let lines = vec!["0 ||| a b ||| LM0= -1 ||| -1.5".to_string(), "1 ||| c ||| -2".to_string()];
        let got = parse_nbest(p, &lines, 2).unwrap();
        assert_eq!(got[0].with_feature(-0.25), "0 ||| a b ||| LM0= -1 Score= -0.2500 ||| -1.5");
        assert_eq!(got[1].with_feature(-1.0), "1 ||| c ||| Score= -1.0000 ||| -2");
        let err = parse_nbest(p, &["0 a b".to_string()], 2).unwrap_err().to_string();
        assert!(err.contains("--rescore n.txt:1") && err.contains("`|||`"), "{err}");
        let err = parse_nbest(p, &lines, 1).unwrap_err().to_string();
        assert!(err.contains("--rescore n.txt:2") && err.contains("past the end of stdin"), "{err}");
        let err = parse_nbest(p, &["x ||| a ||| 1".to_string()], 1).unwrap_err().to_string();
        assert!(err.contains("`x`"), "{err}");
    }

    #[test]
    fn alignments_map_tokens_to_words() {
        // Two target tokens of one word and one of another over three source tokens of two words.
        let att = vec![
            vec![0.7, 0.1, 0.1, 0.1],
            vec![0.1, 0.6, 0.2, 0.1],
            vec![0.1, 0.1, 0.1, 0.7], // attends most to </s>: no link
            vec![0.0, 0.0, 0.0, 1.0],
        ];
        let src = [Some(0), Some(0), Some(1)];
        let tgt = [Some(0), Some(0), Some(1)];
        assert_eq!(alignment_field(AlignMode::Hard, &att, &src, &tgt), "0-0");
        let soft = alignment_field(AlignMode::Soft, &att, &src, &tgt);
        assert_eq!(soft, "0.750000,0.150000 0.200000,0.100000");
    }
}
