//! Special tokens and the frequency-ranked vocabulary used by the word and char tokenizers.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Padding id: never a prediction target, never attended to.
pub const PAD: u32 = 0;
/// Unknown token id.
pub const UNK: u32 = 1;
/// Beginning of sentence: the first decoder input.
pub const BOS: u32 = 2;
/// End of sentence: appended to every source and target.
pub const EOS: u32 = 3;
/// The specials, in id order.
pub const SPECIALS: [&str; 4] = ["<pad>", "<unk>", "<s>", "</s>"];

/// A token ↔ id table whose first four entries are [`SPECIALS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "VocabFile", into = "VocabFile")]
pub struct Vocab {
    tokens: Vec<String>,
    index: HashMap<String, u32>,
}

#[derive(Serialize, Deserialize)]
struct VocabFile {
    tokens: Vec<String>,
}

impl From<VocabFile> for Vocab {
    fn from(f: VocabFile) -> Self {
        Vocab::from_tokens(f.tokens)
    }
}

impl From<Vocab> for VocabFile {
    fn from(v: Vocab) -> Self {
        VocabFile { tokens: v.tokens }
    }
}

impl Vocab {
    /// Builds from an explicit token list (specials are expected first).
    pub fn from_tokens(tokens: Vec<String>) -> Self {
        let index = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        Self { tokens, index }
    }

    /// Counts `tokens` and keeps the most frequent (ties broken by the token's text, so the
    /// result does not depend on input order), at most `max_size` entries including the
    /// specials (0: no cap), each seen at least `min_freq` times.
    pub fn build<'a>(tokens: impl Iterator<Item = &'a str>, max_size: usize, min_freq: usize) -> Self {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for t in tokens {
            *counts.entry(t).or_default() += 1;
        }
        Self::ranked(counts.into_iter(), max_size, min_freq)
    }

    /// [`Vocab::build`] from counts already made (token → occurrences).
    pub fn from_counts(counts: &HashMap<String, usize>, max_size: usize, min_freq: usize) -> Self {
        Self::ranked(counts.iter().map(|(t, &c)| (t.as_str(), c)), max_size, min_freq)
    }

    fn ranked<'a>(counts: impl Iterator<Item = (&'a str, usize)>, max_size: usize, min_freq: usize) -> Self {
        let mut ranked: Vec<(&str, usize)> =
            counts.filter(|(t, c)| *c >= min_freq && !SPECIALS.contains(t)).collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        if max_size > 0 {
            ranked.truncate(max_size.saturating_sub(SPECIALS.len()));
        }
        let all =
            SPECIALS.iter().map(|s| s.to_string()).chain(ranked.into_iter().map(|(t, _)| t.to_string()));
        Self::from_tokens(all.collect())
    }

    /// Number of entries, specials included.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True when only the specials are present.
    pub fn is_empty(&self) -> bool {
        self.tokens.len() <= SPECIALS.len()
    }

    /// The id of `token`, or [`UNK`] — also for text spelled like a special (`<s>` in a corpus
    /// is a word, never a control token).
    pub fn id(&self, token: &str) -> u32 {
        match self.index.get(token) {
            Some(&id) if id as usize >= SPECIALS.len() => id,
            _ => UNK,
        }
    }

    /// The token of `id` (`<unk>` when out of range).
    pub fn token(&self, id: u32) -> &str {
        self.tokens.get(id as usize).map(String::as_str).unwrap_or(SPECIALS[UNK as usize])
    }

    /// True when the table starts with the four specials in order and has no duplicates.
    pub fn is_well_formed(&self) -> bool {
        self.tokens.len() >= SPECIALS.len()
            && self.tokens.iter().zip(SPECIALS).all(|(a, b)| a == b)
            && self.index.len() == self.tokens.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specials_first_then_by_frequency_then_text() {
        let v = Vocab::build("b a c a b a".split(' '), 0, 1);
        assert_eq!(v.token(4), "a");
        assert_eq!(v.token(5), "b");
        assert_eq!(v.token(6), "c");
        assert_eq!(v.id("<pad>"), UNK, "text spelled like a special is not a control token");
        assert_eq!(v.id("</s>"), UNK);
        assert_eq!(v.id("zzz"), UNK);
        assert!(v.is_well_formed());
    }

    #[test]
    fn size_cap_and_min_freq() {
        let v = Vocab::build("b a c a b a".split(' '), 5, 1);
        assert_eq!(v.len(), 5);
        let v = Vocab::build("b a c a b a".split(' '), 0, 2);
        assert_eq!(v.len(), 6);
        assert_eq!(v.id("c"), UNK);
    }
}
