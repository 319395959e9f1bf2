//! BLEU tokenisers: `none`, `13a` (the mteval-v13a tokeniser WMT uses) and `intl`
//! (mteval-v14 "international"), reproducing sacreBLEU's `tokenizer_none.py`,
//! `tokenizer_13a.py` + `tokenizer_re.py` and `tokenizer_intl.py`.
//!
//! Python's notion of whitespace (`str.split()`, `str.rstrip()`) is reproduced by
//! [`is_py_whitespace`]: it is Unicode `White_Space` plus the four ASCII
//! information separators U+001C..=U+001F, which Python also splits on.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::error::EvalError;

/// A BLEU tokeniser, named as sacreBLEU names it (`--tokenize none|13a|intl`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Tokenizer {
    /// `none`: no tokenisation; BLEU splits the line on whitespace.
    #[serde(rename = "none")]
    None,
    /// `13a`: mteval-v13a, sacreBLEU's default.
    #[default]
    #[serde(rename = "13a")]
    V13a,
    /// `intl`: mteval-v14 international tokenisation (Unicode punctuation and symbols).
    #[serde(rename = "intl")]
    Intl,
}

impl Tokenizer {
    /// The name used in signatures and on the command line: `none`, `13a` or `intl`.
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::None => "none",
            Tokenizer::V13a => "13a",
            Tokenizer::Intl => "intl",
        }
    }

    /// Tokenises one line exactly as sacreBLEU's tokeniser of the same name does.
    ///
    /// `none` returns the line unchanged; `13a` and `intl` return the tokens joined by
    /// single spaces, without leading or trailing whitespace.
    pub fn tokenize(self, line: &str) -> String {
        match self {
            Tokenizer::None => line.to_owned(),
            Tokenizer::V13a => tokenize_13a(line),
            Tokenizer::Intl => tokenize_intl(line),
        }
    }

    /// Calls `f` on the bytes of each token of `line`, i.e. on the items of
    /// `tokenizer(line).split()` in sacreBLEU. Tokens are always valid UTF-8 (they are
    /// cut at whitespace or next to ASCII characters).
    pub(crate) fn for_each_token(self, line: &str, mut f: impl FnMut(&[u8])) {
        match self {
            Tokenizer::None => py_split_bytes(line.as_bytes()).for_each(f),
            Tokenizer::V13a => for_each_token_13a(line, f),
            Tokenizer::Intl => py_split_bytes(intl_raw(line).as_bytes()).for_each(&mut f),
        }
    }
}

impl fmt::Display for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Tokenizer {
    type Err = EvalError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Tokenizer::None),
            "13a" => Ok(Tokenizer::V13a),
            "intl" => Ok(Tokenizer::Intl),
            other => Err(EvalError::InvalidOption(format!(
                "unknown tokenizer {other:?} (expected none, 13a or intl)"
            ))),
        }
    }
}

/// Whether Python's `str.isspace()` is true for `c`: Unicode `White_Space` plus
/// U+001C..=U+001F. This is the set `str.split()` and `str.rstrip()` use.
pub fn is_py_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// ASCII bytes Python treats as whitespace: `\t\n\x0b\x0c\r`, `\x1c`..=`\x1f`, space.
pub(crate) const ASCII_PY_WS: [bool; 128] = {
    let mut t = [false; 128];
    let mut b = 0;
    while b < 128 {
        t[b] = matches!(b, 0x09..=0x0d | 0x1c..=0x20);
        b += 1;
    }
    t
};

/// Byte length of the Python whitespace character starting at byte `i` of `b`
/// (a character boundary), or 0 if there is none. Besides ASCII, Python's whitespace
/// is U+0085, U+00A0, U+1680, U+2000..=U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
#[inline(always)]
fn py_ws_len(b: &[u8], i: usize) -> usize {
    let c = b[i];
    if c < 0x80 {
        return usize::from(ASCII_PY_WS[usize::from(c)]);
    }
    let b1 = b.get(i + 1).copied().unwrap_or(0);
    let b2 = b.get(i + 2).copied().unwrap_or(0);
    let hit = match c {
        0xC2 => return if b1 == 0x85 || b1 == 0xA0 { 2 } else { 0 },
        0xE1 => b1 == 0x9A && b2 == 0x80,
        0xE2 => (b1 == 0x80 && matches!(b2, 0x80..=0x8A | 0xA8 | 0xA9 | 0xAF)) || (b1 == 0x81 && b2 == 0x9F),
        0xE3 => b1 == 0x80 && b2 == 0x80,
        _ => false,
    };
    if hit { 3 } else { 0 }
}

/// Iterator of [`py_split_bytes`].
pub(crate) struct PySplit<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for PySplit<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let b = self.b;
        loop {
            if self.pos >= b.len() {
                return None;
            }
            match py_ws_len(b, self.pos) {
                0 => break,
                w => self.pos += w,
            }
        }
        let start = self.pos;
        // Continuation bytes are never whitespace starts, so stepping by bytes is fine.
        while self.pos < b.len() && py_ws_len(b, self.pos) == 0 {
            self.pos += 1;
        }
        Some(&b[start..self.pos])
    }
}

/// Python's `s.split()` on the UTF-8 bytes of a string: the non-empty runs between
/// whitespace characters (each a valid UTF-8 string).
pub(crate) fn py_split_bytes(b: &[u8]) -> PySplit<'_> {
    PySplit { b, pos: 0 }
}

/// Python's `s.split()`: the non-empty runs between whitespace characters.
pub(crate) fn py_split(s: &str) -> impl Iterator<Item = &str> {
    let mut it = py_split_bytes(s.as_bytes());
    // Runs start and end at character boundaries, so `get` always succeeds.
    std::iter::from_fn(move || {
        let t = it.next()?;
        let start = t.as_ptr() as usize - s.as_ptr() as usize;
        s.get(start..start + t.len())
    })
}

/// Python's `s.rstrip()`.
pub(crate) fn py_rstrip(s: &str) -> &str {
    s.trim_end_matches(is_py_whitespace)
}

/// Tokenises `line` as sacreBLEU's `Tokenizer13a` does (mteval-v13a).
///
/// In order: removes `<skipped>`, removes `-\n`, turns `\n` into a space, unescapes
/// `&quot;`, `&amp;`, `&lt;`, `&gt;` (in that order, one after the other), pads the line
/// with a space on each side and applies the four regular expressions of
/// `TokenizerRegexp`:
///
/// 1. `([\{-\~\[-\` -\&\(-\+\:-\@\/])` → `" \1 "` (ASCII punctuation other than
///    `'`, `,`, `-` and `.`),
/// 2. `([^0-9])([\.,])` → `"\1 \2 "` (period and comma unless preceded by a digit),
/// 3. `([\.,])([^0-9])` → `" \1 \2"` (period and comma unless followed by a digit),
/// 4. `([0-9])(-)` → `"\1 \2 "` (dash preceded by a digit),
///
/// and finally joins the whitespace-separated tokens with single spaces.
pub fn tokenize_13a(line: &str) -> String {
    let mut out = Vec::with_capacity(line.len() + 16);
    for_each_token_13a(line, |t| {
        if !out.is_empty() {
            out.push(b' ');
        }
        out.extend_from_slice(t);
    });
    // Tokens are cut at whitespace or next to ASCII bytes, so this is valid UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Joins Python-whitespace-separated tokens with single spaces.
fn join_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for tok in py_split(text) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(tok);
    }
    out
}

/// The language-independent part of 13a: `<skipped>`, line breaks and HTML entities.
fn preprocess_13a(line: &str) -> Cow<'_, str> {
    let b = line.as_bytes();
    // `contains` on bytes is a fast memchr.
    if !(b.contains(&b'&') || b.contains(&b'\n') || b.contains(&b'<')) {
        return Cow::Borrowed(line);
    }
    let mut s = Cow::Borrowed(line);
    if s.contains("<skipped>") {
        s = Cow::Owned(s.replace("<skipped>", ""));
    }
    if s.contains('\n') {
        s = Cow::Owned(s.replace("-\n", "").replace('\n', " "));
    }
    if s.contains('&') {
        s = Cow::Owned(
            s.replace("&quot;", "\"").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"),
        );
    }
    s
}

/// Characters of the first 13a regex: `[\{-\~\[-\` -\&\(-\+\:-\@\/]`.
const fn is_13a_punct(b: u8) -> bool {
    matches!(b, b'{'..=b'~' | b'['..=b'`' | b' '..=b'&' | b'('..=b'+' | b':'..=b'@' | b'/')
}

/// Byte classes for the 13a tokeniser: 1 for the characters of the first regex
/// (always padded with spaces; the space itself is left out, padding it changes
/// nothing), 2 for `.` and `,`, 3 for `-`, 4 for ASCII whitespace, 5 for lead bytes of
/// non-ASCII whitespace characters (which may or may not start one), 0 otherwise.
const SPECIAL_13A: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = if c == b'.' || c == b',' {
            2
        } else if c == b'-' {
            3
        } else if c < 0x80 && ASCII_PY_WS[b] {
            4
        } else if matches!(c, 0xC2 | 0xE1 | 0xE2 | 0xE3) {
            5
        } else if is_13a_punct(c) {
            1
        } else {
            0
        };
        b += 1;
    }
    t
};

/// Tokenises `line` with 13a and calls `f` on each token, without building the
/// tokenised string.
///
/// Every replacement of `TokenizerRegexp` puts spaces around one character and keeps
/// the other captured character as it is, so the four passes amount to deciding, for
/// each character, whether it ends up with spaces around it (and so is a token of its
/// own); the tokens are then the whitespace-separated runs of the line with those
/// characters cut out. With `x` the preprocessed line, out-of-range neighbours standing
/// for the padding spaces, and `digit(k)`/`pc(k)` meaning `x[k]` is an ASCII digit / a
/// `.` or `,`:
///
/// 1. `([\{-\~\[-\` -\&\(-\+\:-\@\/])` → `" \1 "`: these characters always. They
///    are neither digits nor `.`/`,`, exactly like the spaces put around them, so the
///    later passes can look at `x` directly.
/// 2. `([^0-9])([\.,])` → `"\1 \2 "`, scanned left to right without overlaps:
///    `m2(j) = !digit(j-1) && !(pc(j-1) && m2(j-1))` (a `.`/`,` consumed as the
///    second character of the previous match cannot be the first of this one).
/// 3. `([\.,])([^0-9])` → `" \1 \2"` on pass 2's output, where the character after
///    `x[j]` is a space if `m2(j)` (or if `m2(j+1)`, but then `x[j+1]` is no digit
///    anyway): `m3(j) = (m2(j) || !digit(j+1)) && !consumed(j)`, where `x[j]` was
///    consumed by a match at `j-1` iff `pc(j-1) && m3(j-1) && !m2(j-1) && !m2(j)`
///    (no space was put between them).
/// 4. `([0-9])(-)` → `"\1 \2 "`: a `-` iff `digit(j-1)` (passes 2 and 3 never put a
///    space after a digit, and a digit is never consumed as a `-`).
///
/// A `.`/`,` gets spaces iff `m2(j) || m3(j)`. The regexes only test ASCII bytes, so
/// working on bytes is the same as on code points. The differential tests against the
/// literal regexes keep this honest.
fn for_each_token_13a(line: &str, mut f: impl FnMut(&[u8])) {
    let line = preprocess_13a(line);
    let x = line.as_bytes();
    let digit_at = |k: usize| x.get(k).is_some_and(u8::is_ascii_digit);
    let pc_at = |k: usize| matches!(x.get(k), Some(b'.' | b','));
    // m2 and m3 of position j-1, meaningful only when x[j-1] is '.' or ','.
    let (mut prev_m2, mut prev_m3) = (false, false);
    // Start of the token being read, if any.
    let mut start: Option<usize> = None;
    let mut j = 0;
    while j < x.len() {
        let c = x[j];
        let isolate = match SPECIAL_13A[usize::from(c)] {
            0 => {
                start.get_or_insert(j);
                j += 1;
                continue;
            }
            kind @ (4 | 5) => {
                let ws = if kind == 4 { 1 } else { py_ws_len(x, j) };
                if ws > 0 {
                    if let Some(s) = start.take() {
                        f(&x[s..j]);
                    }
                    j += ws;
                } else {
                    start.get_or_insert(j);
                    j += 1;
                }
                continue;
            }
            1 => true,
            2 => {
                let prev_pc = j > 0 && pc_at(j - 1);
                let prev_digit = j > 0 && digit_at(j - 1);
                let m2 = !(prev_digit || (prev_pc && prev_m2));
                let consumed = prev_pc && prev_m3 && !prev_m2 && !m2;
                let m3 = (m2 || !digit_at(j + 1)) && !consumed;
                prev_m2 = m2;
                prev_m3 = m3;
                m2 || m3
            }
            _ => j > 0 && digit_at(j - 1),
        };
        if isolate {
            if let Some(s) = start.take() {
                f(&x[s..j]);
            }
            f(&x[j..j + 1]);
        } else {
            start.get_or_insert(j);
        }
        j += 1;
    }
    if let Some(s) = start {
        f(&x[s..]);
    }
}

struct IntlRegexes {
    punct_after_non_digit: Regex,
    punct_before_non_digit: Regex,
    symbol: Regex,
}

fn intl_regexes() -> &'static IntlRegexes {
    static RE: OnceLock<IntlRegexes> = OnceLock::new();
    RE.get_or_init(|| IntlRegexes {
        // These patterns are constants known to compile.
        punct_after_non_digit: Regex::new(r"(\P{N})(\p{P})").expect("valid regex"),
        punct_before_non_digit: Regex::new(r"(\p{P})(\P{N})").expect("valid regex"),
        symbol: Regex::new(r"(\p{S})").expect("valid regex"),
    })
}

/// The three `intl` substitutions, without the final whitespace normalisation.
fn intl_raw(line: &str) -> String {
    let re = intl_regexes();
    let s1 = re.punct_after_non_digit.replace_all(line, "${1} ${2} ");
    let s2 = re.punct_before_non_digit.replace_all(&s1, " ${1} ${2}");
    re.symbol.replace_all(&s2, " ${1} ").into_owned()
}

/// Tokenises `line` as sacreBLEU's `TokenizerV14International` (`intl`) does.
///
/// Applies, one after the other, `(\P{N})(\p{P})` → `"\1 \2 "`,
/// `(\p{P})(\P{N})` → `" \1 \2"` and `(\p{S})` → `" \1 "`, then joins the
/// whitespace-separated tokens with single spaces. Unlike 13a it does not pad the
/// line, so a number followed by a final period keeps the period (as mteval-v14 does).
/// Unicode property tables are the `regex` crate's; sacreBLEU uses the Python `regex`
/// module's, which may lag or lead by a Unicode version.
pub fn tokenize_intl(line: &str) -> String {
    join_tokens(&intl_raw(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The literal sacreBLEU 13a pipeline, with the `regex` crate doing the regexes.
    fn reference_13a(line: &str) -> String {
        let mut s = line.replace("<skipped>", "").replace("-\n", "").replace('\n', " ");
        if s.contains('&') {
            s = s.replace("&quot;", "\"").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">");
        }
        static RES: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
        let res = RES.get_or_init(|| {
            [
                (r"([\{-\~\[-\` -\&\(-\+\:-\@\/])", " ${1} "),
                (r"([^0-9])([\.,])", "${1} ${2} "),
                (r"([\.,])([^0-9])", " ${1} ${2}"),
                (r"([0-9])(-)", "${1} ${2} "),
            ]
            .into_iter()
            .map(|(pat, rep)| (Regex::new(pat).unwrap(), rep))
            .collect()
        });
        let mut s = format!(" {s} ");
        for (re, rep) in res {
            s = re.replace_all(&s, *rep).into_owned();
        }
        join_tokens(&s)
    }

    // Expected values come from sacreBLEU 2.6.0, e.g.
    // python -c "from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a as T; print(repr(T()('Hello, world!')))"
    #[test]
    fn t13a_basic_punctuation() {
        // -> 'Hello , world !'
        assert_eq!(tokenize_13a("Hello, world!"), "Hello , world !");
        // -> "It's 3.5 km ( approx . ) ."
        assert_eq!(tokenize_13a("It's 3.5 km (approx.)."), "It's 3.5 km ( approx . ) .");
    }

    #[test]
    fn t13a_numbers_and_dashes() {
        // T()('1,000.50 and 3-4 x-y 1999.') -> '1,000.50 and 3 - 4 x-y 1999 .'
        assert_eq!(tokenize_13a("1,000.50 and 3-4 x-y 1999."), "1,000.50 and 3 - 4 x-y 1999 .");
        // T()('a..b ,5 .5 5. 5,') -> 'a . . b , 5 . 5 5 . 5 ,'
        assert_eq!(tokenize_13a("a..b ,5 .5 5. 5,"), "a . . b , 5 . 5 5 . 5 ,");
        // T()('1..5 ...') -> '1 . . 5 . . .'
        assert_eq!(tokenize_13a("1..5 ..."), "1 . . 5 . . .");
    }

    #[test]
    fn t13a_entities_skipped_and_newlines() {
        // T()('&amp;lt; &quot;x&quot; &gt; <skipped>y') -> '< " x " > y'
        assert_eq!(tokenize_13a("&amp;lt; &quot;x&quot; &gt; <skipped>y"), "< \" x \" > y");
        // T()('co-\noperate\nnow') -> 'cooperate now'
        assert_eq!(tokenize_13a("co-\noperate\nnow"), "cooperate now");
        // T()('&apos;') -> '& apos ;'
        assert_eq!(tokenize_13a("&apos;"), "& apos ;");
    }

    #[test]
    fn t13a_unicode() {
        // T()('Größe: „Ü“… ü.ä,3') -> 'Größe : „Ü“… ü . ä , 3'
        assert_eq!(tokenize_13a("Größe: „Ü“… ü.ä,3"), "Größe : „Ü“… ü . ä , 3");
        // T()('a\xa0b\u3000c\x1cd\x0be') -> 'a b c d e'
        assert_eq!(tokenize_13a("a\u{a0}b\u{3000}c\u{1c}d\u{0b}e"), "a b c d e");
        // T()('') -> ''
        assert_eq!(tokenize_13a(""), "");
        assert_eq!(tokenize_13a("   "), "");
    }

    #[test]
    fn intl_cases() {
        // from sacrebleu.tokenizers.tokenizer_intl import TokenizerV14International as T
        // T()('Hello, world! 1,000.5 in 2024.') -> 'Hello , world ! 1,000.5 in 2024.'
        assert_eq!(tokenize_intl("Hello, world! 1,000.5 in 2024."), "Hello , world ! 1,000.5 in 2024.");
        // T()('„Größe“ €5 a+b ©x') -> '„ Größe “ € 5 a + b © x'
        assert_eq!(tokenize_intl("„Größe“ €5 a+b ©x"), "„ Größe “ € 5 a + b © x");
        // T()('x-y (z)…') -> 'x - y ( z ) …'
        assert_eq!(tokenize_intl("x-y (z)…"), "x - y ( z ) …");
        // T()("It's 3.5.") -> "It ' s 3.5."
        assert_eq!(tokenize_intl("It's 3.5."), "It ' s 3.5.");
    }

    #[test]
    fn none_keeps_line() {
        assert_eq!(Tokenizer::None.tokenize(" a,b  c "), " a,b  c ");
        let mut toks = Vec::new();
        Tokenizer::None.for_each_token(" a,b \u{1f} c ", |t| toks.push(t.to_vec()));
        assert_eq!(toks, [b"a,b".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn names_round_trip() {
        for t in [Tokenizer::None, Tokenizer::V13a, Tokenizer::Intl] {
            assert_eq!(t.name().parse::<Tokenizer>().unwrap(), t);
        }
        assert!("zh".parse::<Tokenizer>().is_err());
    }

    /// A tiny deterministic generator for the differential test.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }

    #[test]
    fn t13a_matches_literal_regexes_on_random_strings() {
        let alphabet: Vec<char> =
            "ab0159.,-'\" \t\n&;<>qtulgmpsk()[]{}~`^!?/:@\\|*+=#$%_ü€„–…\u{a0}\u{1c}".chars().collect();
        let pieces = ["&quot;", "&amp;", "&lt;", "&gt;", "<skipped>", "-\n", "3.", ".5", "a-"];
        let mut rng = Lcg(42);
        for _ in 0..20_000 {
            let len = (rng.next() % 24) as usize;
            let mut s = String::new();
            for _ in 0..len {
                if rng.next().is_multiple_of(8) {
                    s.push_str(pieces[(rng.next() % pieces.len() as u64) as usize]);
                } else {
                    s.push(alphabet[(rng.next() % alphabet.len() as u64) as usize]);
                }
            }
            assert_eq!(tokenize_13a(&s), reference_13a(&s), "input {s:?}");
        }
    }

    #[test]
    fn py_split_matches_char_predicate() {
        let ws: Vec<char> =
            (0..=0x3000u32).filter_map(char::from_u32).filter(|&c| is_py_whitespace(c)).collect();
        assert_eq!(ws.len(), 29, "python: sum(chr(c).isspace() for c in range(0x110000)) == 29");
        let alphabet: Vec<char> = ws
            .iter()
            .copied()
            .chain("ab\u{84}\u{86}\u{a1}\u{167f}\u{200b}\u{2030}\u{205e}\u{3001}é".chars())
            .collect();
        let mut rng = Lcg(7);
        for _ in 0..5000 {
            let len = (rng.next() % 12) as usize;
            let s: String =
                (0..len).map(|_| alphabet[(rng.next() % alphabet.len() as u64) as usize]).collect();
            let want: Vec<&str> = s.split(is_py_whitespace).filter(|t| !t.is_empty()).collect();
            assert_eq!(py_split(&s).collect::<Vec<_>>(), want, "{s:?}");
        }
    }

    #[test]
    fn t13a_matches_literal_regexes_on_dense_punctuation() {
        // Dense in the characters whose handling depends on their neighbours.
        let alphabet: Vec<char> = "0.,-a 9.,(ü".chars().collect();
        let mut rng = Lcg(1234);
        for _ in 0..50_000 {
            let len = (rng.next() % 14) as usize;
            let s: String =
                (0..len).map(|_| alphabet[(rng.next() % alphabet.len() as u64) as usize]).collect();
            assert_eq!(tokenize_13a(&s), reference_13a(&s), "input {s:?}");
        }
    }

    #[test]
    fn python_whitespace() {
        assert!(is_py_whitespace('\u{1f}'));
        assert!(is_py_whitespace('\u{85}'));
        assert!(is_py_whitespace('\u{0b}'));
        assert!(!is_py_whitespace('\u{200b}'));
        assert!(!is_py_whitespace('\u{feff}'));
        assert_eq!(py_rstrip("a b \u{a0}\r\t"), "a b");
    }
}
