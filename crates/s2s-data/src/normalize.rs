//! Text normalisation applied to every corpus line before tokenisation.
//!
//! Exactly this and nothing else: Unicode NFC; every Unicode space (no-break space, thin space,
//! ideographic space, tabs, …) becomes an ASCII space; leading and trailing space is trimmed;
//! runs of spaces collapse to one. Case, punctuation and everything else are kept.
//!
//! `▁` (U+2581, the block BPE's Metaspace uses to mark a word start) also counts as a space, as
//! in SentencePiece, whose decoder turns it into one: otherwise a `▁` in a corpus would come back
//! from the BPE round trip as a space (found by the `tokenizer` fuzz target).

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

/// Normalises one line (see the module doc). Fast path: ASCII lines without double spaces are
/// returned as they are.
pub fn normalize(line: &str) -> String {
    let clean_ascii = line.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
        && !line.starts_with(' ')
        && !line.ends_with(' ')
        && !line.contains("  ");
    if clean_ascii {
        return line.to_owned();
    }
    let nfc: std::borrow::Cow<'_, str> = match is_nfc_quick(line.chars()) {
        IsNormalized::Yes => line.into(),
        _ => line.nfc().collect::<String>().into(),
    };
    let mut out = String::with_capacity(nfc.len());
    for word in nfc.split(is_space).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Unicode white space plus the zero-width and format spaces that editors leave in corpora
/// (U+200B zero width space, U+FEFF byte-order mark used as a space) and Metaspace's `▁`.
fn is_space(c: char) -> bool {
    c.is_whitespace() || matches!(c, '\u{200B}' | '\u{FEFF}' | '\u{2581}')
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn spaces_become_one_ascii_space_and_are_trimmed() {
        assert_eq!(normalize("  a\u{00A0}b\u{2009}\u{2009}c\t d \u{3000}"), "a b c d");
    }

    #[test]
    fn nfc_composes_combining_marks() {
        // "e" + COMBINING ACUTE ACCENT → "é" (U+00E9)
        assert_eq!(normalize("caf\u{0065}\u{0301}"), "caf\u{00E9}");
    }

    #[test]
    fn case_and_punctuation_are_kept() {
        assert_eq!(normalize("Hello, World! «Ça va?»"), "Hello, World! «Ça va?»");
    }

    #[test]
    fn blank_line_becomes_empty() {
        assert_eq!(normalize(" \u{00A0}\t "), "");
    }
}
