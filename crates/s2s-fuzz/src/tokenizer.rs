//! Fuzz property of the tokenizers (`s2s_data::Tokenizer`): the round trip.
//!
//! Input layout: byte 0 picks the level (BPE, word, char); the rest, read as UTF-8 with invalid
//! bytes replaced, is a small training corpus, one sentence per line, normalised like every
//! corpus line.
//!
//! Properties, for a tokenizer trained on those lines (no vocabulary cap, so every token seen
//! in training has an id): `decode(encode(s)) == s` for every line (at word level, for every
//! line without a word spelled like a special, which is `<unk>` instead); `encode` yields only
//! in-range ids, never `<pad>`, `<s>` or `</s>`; the tokenizer saved and loaded again encodes every line the same;
//! encoding text it never saw does not panic and stays in range.

use s2s_data::{Level, SPECIALS, Tokenizer, TokenizerConfig, UNK, normalize};

/// Runs the property on one input (see the module doc).
pub fn check(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else { return };
    let level = [Level::Bpe, Level::Word, Level::Char][mode as usize % 3];
    let text = String::from_utf8_lossy(body);
    let lines: Vec<String> = text.lines().map(normalize).filter(|l| !l.is_empty()).take(64).collect();
    if lines.is_empty() {
        return;
    }
    let cfg = TokenizerConfig {
        level,
        vocab_size: if level == Level::Bpe { 200 } else { 0 },
        joint: true,
        min_freq: 1,
        ..Default::default()
    };
    let tok = Tokenizer::train(&cfg, &lines).expect("training on non-empty normalised lines");
    let size = tok.vocab_size() as u32;
    let in_range = |ids: &[u32]| ids.iter().all(|&i| i < size);
    for line in &lines {
        let ids = tok.encode(line);
        assert!(in_range(&ids), "{level:?}: id out of range for {line:?}: {ids:?}");
        let specials = line.split(' ').filter(|w| SPECIALS.contains(w)).count();
        if level == Level::Word && specials > 0 {
            let unks = ids.iter().filter(|&&i| i == UNK).count();
            assert_eq!(unks, specials, "{level:?}: {line:?} → {ids:?}");
            continue;
        }
        assert!(
            ids.iter().all(|&i| i as usize >= SPECIALS.len()),
            "{level:?}: {line:?} encodes to a special id: {ids:?}"
        );
        assert_eq!(&tok.decode(&ids), line, "{level:?}: round trip of {line:?} via {ids:?}");
    }
    let dir = std::env::temp_dir().join(format!("s2s-fuzz-tok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("tokenizer.json");
    tok.save(&path).expect("save");
    let back = Tokenizer::load(&path).expect("a saved tokenizer loads");
    for line in &lines {
        assert_eq!(back.encode(line), tok.encode(line), "{level:?}: saved tokenizer differs on {line:?}");
    }
    let unseen: String = text.chars().rev().collect();
    assert!(in_range(&tok.encode(&normalize(&unseen))));
    assert!(in_range(&tok.encode(&unseen)));
}
