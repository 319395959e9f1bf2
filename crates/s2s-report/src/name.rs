//! The rule for the names of experiments, models and runs: each becomes a file name (a run's
//! directory under the experiment's folder, `runs/NAME`, a plot's file), so a name is one path
//! component that stays where it is joined — no separator, no `.` or `..`, nothing hidden —
//! in characters every file system and shell takes as they are.

/// The longest name, in characters: room left for a run's `-s<seed>` and a plot's
/// `attention-…-N.svg` within a file system's 255 bytes.
pub const MAX_LEN: usize = 200;

/// The rule in words, for messages and the documentation.
pub const RULE: &str = concat!(
    "a name is 1 to 200 ASCII letters, digits, `-`, `_`, `=` and `.`, not starting with `.` ",
    "(it becomes a file name)"
);

/// A name that breaks [`RULE`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Nothing.
    #[error("`` is not a name (it is empty): {RULE}")]
    Empty,
    /// `.`, `..` or a hidden name.
    #[error("`{0}` is not a name (it starts with `.`): {RULE}")]
    LeadingDot(String),
    /// A character outside the set (`/`, `\`, a space, …).
    #[error("`{name}` is not a name (it holds {ch:?}): {RULE}")]
    Char {
        /// The name.
        name: String,
        /// Its first character outside the set.
        ch: char,
    },
    /// Over [`MAX_LEN`] characters.
    #[error("`{head}…` is not a name (it is {len} characters long): {RULE}", head = &.name[..40])]
    TooLong {
        /// The name.
        name: String,
        /// Its length.
        len: usize,
    },
}

/// Checks `name` against [`RULE`].
pub fn check(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if let Some(ch) = name.chars().find(|&c| !(c.is_ascii_alphanumeric() || "-_=.".contains(c))) {
        return Err(NameError::Char { name: name.to_string(), ch });
    }
    if name.starts_with('.') {
        return Err(NameError::LeadingDot(name.to_string()));
    }
    if name.len() > MAX_LEN {
        return Err(NameError::TooLong { name: name.to_string(), len: name.len() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_single_plain_path_components() {
        for good in ["lstm", "luong-dot", "luong-input_feeding=true-dot", "lr=0.001", "x.v2", "A-1_b", "9"] {
            assert_eq!(check(good), Ok(()), "{good}");
        }
        assert_eq!(check(""), Err(NameError::Empty));
        for dot in [".", "..", ".hidden"] {
            assert_eq!(check(dot), Err(NameError::LeadingDot(dot.into())), "{dot}");
        }
        for (bad, ch) in
            [("../../e", '/'), ("a/b", '/'), ("a\\b", '\\'), ("two words", ' '), ("tab\t", '\t'), ("é", 'é')]
        {
            assert_eq!(check(bad), Err(NameError::Char { name: bad.into(), ch }), "{bad}");
        }
        assert_eq!(check(&"a".repeat(MAX_LEN)), Ok(()));
        let long = "a".repeat(MAX_LEN + 1);
        assert_eq!(check(&long), Err(NameError::TooLong { name: long.clone(), len: MAX_LEN + 1 }));
        // Every message states the rule.
        for e in [
            check("").unwrap_err(),
            check("..").unwrap_err(),
            check("a/b").unwrap_err(),
            check(&long).unwrap_err(),
        ] {
            assert!(e.to_string().ends_with(RULE), "{e}");
        }
        assert_eq!(
            check("../../e").unwrap_err().to_string(),
            format!("`../../e` is not a name (it holds '/'): {RULE}")
        );
    }
}
