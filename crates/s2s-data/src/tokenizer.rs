//! Tokenizers at three levels — BPE subwords (the `tokenizers` crate), whitespace words and
//! characters — behind one type, plus the source/target pair saved in a run directory. A
//! tokenizer can also be brought from a file instead of learned ([`TokenizerConfig::file`]: a
//! Hugging Face `tokenizer.json` or a SentencePiece `.model`, [`crate::external`]).
//!
//! Every level maps text to ids without specials ([`Tokenizer::encode`]) and back to plain text
//! ([`Tokenizer::decode`], which drops specials). For text already normalised by
//! [`crate::normalize`], `decode(encode(s)) == s` unless `s` holds tokens the vocabulary lacks.
//!
//! Text spelled like a special (`<s>`, `</s>`, `<pad>`, `<unk>`) is never encoded as the control
//! token: BPE splits it like any other text, word-level vocabularies map it to `<unk>`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokenizers::decoders::metaspace::Metaspace as MetaspaceDecoder;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::metaspace::Metaspace;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, TokenizerBuilder, TokenizerImpl};

use crate::error::{DataError, Result};
use crate::external::External;
use crate::vocab::{SPECIALS, Vocab};

/// Tokenisation granularity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Byte-pair-encoding subwords learned on the training split (Sennrich et al., 2016), with
    /// an NFC normaliser and the Metaspace (`▁`) pre-tokenizer and decoder.
    Bpe,
    /// Whitespace-separated words.
    Word,
    /// Unicode characters (the space is a token).
    Char,
}

impl std::str::FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "bpe" => Ok(Level::Bpe),
            "word" => Ok(Level::Word),
            "char" => Ok(Level::Char),
            _ => Err(format!("unknown tokenizer level `{s}`: use bpe, word or char")),
        }
    }
}

/// How to build the tokenizers of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizerConfig {
    /// Granularity.
    #[serde(default = "default_level")]
    pub level: Level,
    /// Vocabulary size (specials included): the BPE target size, or the cap for word/char
    /// vocabularies (0: no cap).
    #[serde(default = "default_vocab_size")]
    pub vocab_size: usize,
    /// One vocabulary for both sides (trained on source and target text together).
    #[serde(default = "default_joint")]
    pub joint: bool,
    /// Minimum count for a word/char/merge to enter the vocabulary.
    #[serde(default = "default_min_freq")]
    pub min_freq: usize,
    /// A tokenizer for both sides read from this file instead of learned: a Hugging Face
    /// `tokenizer.json` or a SentencePiece `.model` (`level`, `vocab_size`, `joint` and
    /// `min_freq` are then unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// The source side's tokenizer file (with `tgt_file`; instead of `file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_file: Option<PathBuf>,
    /// The target side's tokenizer file (with `src_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_file: Option<PathBuf>,
}

/// The tokenizer files a [`TokenizerConfig`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerFiles<'a> {
    /// One file for both sides (`file`).
    Joint(&'a Path),
    /// One per side (`src_file`, `tgt_file`).
    Separate(&'a Path, &'a Path),
}

fn default_level() -> Level {
    Level::Bpe
}
fn default_vocab_size() -> usize {
    8000
}
fn default_joint() -> bool {
    true
}
fn default_min_freq() -> usize {
    1
}

impl Default for TokenizerConfig {
    fn default() -> Self {
        Self {
            level: Level::Bpe,
            vocab_size: 8000,
            joint: true,
            min_freq: 1,
            file: None,
            src_file: None,
            tgt_file: None,
        }
    }
}

impl TokenizerConfig {
    /// The tokenizer files it names, if any; `file` with `src_file`/`tgt_file`, or one of
    /// those two alone, is refused (naming the keys).
    pub fn files(&self) -> Result<Option<TokenizerFiles<'_>>> {
        match (&self.file, &self.src_file, &self.tgt_file) {
            (None, None, None) => Ok(None),
            (Some(f), None, None) => Ok(Some(TokenizerFiles::Joint(f))),
            (None, Some(s), Some(t)) => Ok(Some(TokenizerFiles::Separate(s, t))),
            (Some(_), _, _) => Err(DataError::Config(
                "a tokenizer `file` (--tokenizer) serves both sides: give it, or `src_file` and `tgt_file` (--src-tokenizer and --tgt-tokenizer), not both".into(),
            )),
            _ => Err(DataError::Config(
                "`src_file` (--src-tokenizer) and `tgt_file` (--tgt-tokenizer) go together: give both, or one `file` (--tokenizer) for both sides".into(),
            )),
        }
    }

    /// Reads every tokenizer file it names, to refuse a bad one before anything runs; an error
    /// comes with the key whose file it is (`file`, `src_file` or `tgt_file`; `None` when the
    /// keys do not go together).
    pub fn check_files(&self) -> std::result::Result<(), (Option<&'static str>, DataError)> {
        let keys = [("file", &self.file), ("src_file", &self.src_file), ("tgt_file", &self.tgt_file)];
        self.files().map_err(|e| (None, e))?;
        for (key, path) in keys {
            if let Some(p) = path {
                Tokenizer::from_file(p).map_err(|e| (Some(key), e))?;
            }
        }
        Ok(())
    }
}

type Bpe = TokenizerImpl<BPE, NFC, Metaspace, PostProcessorWrapper, MetaspaceDecoder>;

/// One side's tokenizer.
#[derive(Clone)]
pub enum Tokenizer {
    /// BPE through the `tokenizers` crate.
    Bpe(Box<Bpe>),
    /// Whitespace words.
    Word(Vocab),
    /// Characters.
    Char(Vocab),
    /// Read from a user's `tokenizer.json` or SentencePiece `.model`.
    External(Box<External>),
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tokenizer::External(t) => write!(f, "Tokenizer({t:?})"),
            _ => write!(f, "Tokenizer({:?}, {} entries)", self.level(), self.vocab_size()),
        }
    }
}

/// The on-disk form of word and char tokenizers.
#[derive(Serialize, Deserialize)]
struct VocabTokenizerFile {
    level: Level,
    vocab: Vocab,
}

impl Tokenizer {
    /// Learns a tokenizer from `texts` (normalised sentences).
    pub fn train<S: AsRef<str> + Send + Sync>(cfg: &TokenizerConfig, texts: &[S]) -> Result<Self> {
        match cfg.level {
            Level::Bpe => train_bpe(cfg, texts.iter().map(|t| t.as_ref())),
            Level::Word => Ok(Tokenizer::Word(Vocab::build(
                texts.iter().flat_map(|t| t.as_ref().split(' ')),
                cfg.vocab_size,
                cfg.min_freq,
            ))),
            Level::Char => {
                let chars: Vec<String> =
                    texts.iter().flat_map(|t| t.as_ref().chars().map(String::from)).collect();
                Ok(Tokenizer::Char(Vocab::build(
                    chars.iter().map(String::as_str),
                    cfg.vocab_size,
                    cfg.min_freq,
                )))
            }
        }
    }

    /// Learns a tokenizer from a stream of normalised sentences, without holding them: the
    /// same tokenizer [`Tokenizer::train`] learns from the same sentences (BPE counts words
    /// on every core as the stream is read; word and char vocabularies count as they go).
    pub fn train_stream<I>(cfg: &TokenizerConfig, texts: I) -> Result<Self>
    where
        I: Iterator<Item = String> + Send,
    {
        match cfg.level {
            Level::Bpe => train_bpe(cfg, texts),
            Level::Word | Level::Char => {
                let mut counts: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
                let mut buf = [0u8; 4];
                for t in texts {
                    if cfg.level == Level::Word {
                        for w in t.split(' ') {
                            match counts.get_mut(w) {
                                Some(c) => *c += 1,
                                None => {
                                    counts.insert(w.to_string(), 1);
                                }
                            }
                        }
                    } else {
                        for ch in t.chars() {
                            *counts.entry(ch.encode_utf8(&mut buf).to_string()).or_default() += 1;
                        }
                    }
                }
                let v = Vocab::from_counts(&counts, cfg.vocab_size, cfg.min_freq);
                Ok(if cfg.level == Level::Word { Tokenizer::Word(v) } else { Tokenizer::Char(v) })
            }
        }
    }

    /// Reads a tokenizer a user brings: a Hugging Face `tokenizer.json` or a SentencePiece
    /// `.model` ([`crate::external`]), or a tokenizer file a run saved (`tokenizer/joint.json`).
    pub fn from_file(path: &Path) -> Result<Self> {
        let head = {
            use std::io::Read;
            let mut buf = Vec::new();
            let f = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
            f.take(1 << 16).read_to_end(&mut buf).map_err(|e| DataError::io(path, e))?;
            buf
        };
        // Our own saved files start `{"external"` or `{"level"`; a tokenizer.json `{"version"`.
        let ours = |key: &str| {
            let text = String::from_utf8_lossy(&head);
            text.trim_start().strip_prefix('{').is_some_and(|t| t.trim_start().starts_with(key))
        };
        if ours("\"external\"") || ours("\"level\"") {
            return Tokenizer::load(path);
        }
        Ok(Tokenizer::External(Box::new(External::from_file(path)?)))
    }

    /// The granularity (BPE for a subword tokenizer read from a file).
    pub fn level(&self) -> Level {
        match self {
            Tokenizer::Bpe(_) | Tokenizer::External(_) => Level::Bpe,
            Tokenizer::Word(_) => Level::Word,
            Tokenizer::Char(_) => Level::Char,
        }
    }

    /// Number of ids, specials included.
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Bpe(t) => t.get_vocab_size(true),
            Tokenizer::Word(v) | Tokenizer::Char(v) => v.len(),
            Tokenizer::External(t) => t.vocab_size(),
        }
    }

    /// Text → ids, without `<s>`/`</s>`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        match self {
            // Encoding a plain &str with BPE + Metaspace cannot fail; an error would be a bug in
            // the tokenizers crate, so fall back to <unk> rather than panic on user input.
            Tokenizer::Bpe(t) => t
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_else(|_| vec![crate::vocab::UNK]),
            Tokenizer::Word(v) => {
                if text.is_empty() {
                    Vec::new()
                } else {
                    text.split(' ').map(|w| v.id(w)).collect()
                }
            }
            Tokenizer::Char(v) => {
                let mut buf = [0u8; 4];
                text.chars().map(|c| v.id(c.encode_utf8(&mut buf))).collect()
            }
            Tokenizer::External(t) => t.encode(text),
        }
    }

    /// Ids → plain text; specials (and ids after none of them) are dropped.
    pub fn decode(&self, ids: &[u32]) -> String {
        let keep = ids.iter().copied().filter(|&i| i as usize >= SPECIALS.len());
        match self {
            Tokenizer::Bpe(t) => {
                let ids: Vec<u32> = keep.collect();
                t.decode(&ids, true).unwrap_or_default()
            }
            Tokenizer::Word(v) => keep.map(|i| v.token(i)).collect::<Vec<_>>().join(" "),
            Tokenizer::Char(v) => keep.map(|i| v.token(i)).collect(),
            Tokenizer::External(t) => t.decode(ids),
        }
    }

    /// The surface string of one id (`▁`-prefixed pieces for BPE), for attention plots.
    pub fn token(&self, id: u32) -> String {
        match self {
            Tokenizer::Bpe(t) => t.id_to_token(id).unwrap_or_else(|| SPECIALS[1].to_string()),
            Tokenizer::Word(v) | Tokenizer::Char(v) => v.token(id).to_string(),
            Tokenizer::External(t) => t.token(id),
        }
    }

    /// Writes the tokenizer as JSON (the `tokenizers` format for BPE).
    pub fn save(&self, path: &Path) -> Result<()> {
        let json = self.to_json().map_err(|e| match e {
            DataError::Tokenizer { message, .. } => {
                DataError::Tokenizer { path: path.to_path_buf(), message }
            }
            e => e,
        })?;
        crate::write_atomic(path, json.as_bytes())
    }

    /// Whether `other` encodes alike: the same serialised vocabulary and rules.
    pub fn same_as(&self, other: &Tokenizer) -> Result<bool> {
        Ok(self.to_json()? == other.to_json()?)
    }

    /// The JSON [`Tokenizer::save`] writes (what a prepared dataset's key hashes when it is
    /// encoded with given tokenizers).
    pub fn to_json(&self) -> Result<String> {
        match self {
            Tokenizer::Bpe(t) => serde_json::to_string(t.as_ref()),
            Tokenizer::Word(v) => {
                serde_json::to_string(&VocabTokenizerFile { level: Level::Word, vocab: v.clone() })
            }
            Tokenizer::Char(v) => {
                serde_json::to_string(&VocabTokenizerFile { level: Level::Char, vocab: v.clone() })
            }
            Tokenizer::External(t) => {
                return t.to_json().map_err(|message| DataError::Tokenizer {
                    path: PathBuf::from("<serialising>"),
                    message,
                });
            }
        }
        .map_err(|e| DataError::Tokenizer { path: PathBuf::from("<serialising>"), message: e.to_string() })
    }

    /// Reads a tokenizer written by [`Tokenizer::save`]; a truncated or foreign file is
    /// [`DataError::Corrupt`].
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        let corrupt = |message: String| DataError::Corrupt { path: path.to_path_buf(), message };
        let text = String::from_utf8(bytes).map_err(|_| corrupt("not UTF-8 text".into()))?;
        let mut value: serde_json::Value = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
        if let Some(ext) = value.get_mut("external") {
            return Ok(Tokenizer::External(Box::new(External::from_saved(path, ext.take())?)));
        }
        if value.get("model").is_some() {
            let t: Bpe = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
            if (0..SPECIALS.len() as u32).any(|i| t.id_to_token(i).as_deref() != Some(SPECIALS[i as usize])) {
                return Err(corrupt("the specials <pad> <unk> <s> </s> are not ids 0–3".into()));
            }
            return Ok(bpe(t));
        }
        let f: VocabTokenizerFile = serde_json::from_value(value).map_err(|e| corrupt(e.to_string()))?;
        if !f.vocab.is_well_formed() {
            return Err(corrupt("the vocabulary does not start with <pad> <unk> <s> </s>".into()));
        }
        Ok(match f.level {
            Level::Word => Tokenizer::Word(f.vocab),
            Level::Char => Tokenizer::Char(f.vocab),
            Level::Bpe => return Err(corrupt("a BPE tokenizer without a model".into())),
        })
    }
}

fn train_bpe<S, I>(cfg: &TokenizerConfig, texts: I) -> Result<Tokenizer>
where
    S: AsRef<str> + Send,
    I: Iterator<Item = S> + Send,
{
    let err = |e: tokenizers::Error| DataError::Tokenizer {
        path: PathBuf::from("<training>"),
        message: e.to_string(),
    };
    let model = BPE::builder().unk_token(SPECIALS[1].to_string()).build().map_err(err)?;
    let mut tok: Bpe = TokenizerBuilder::new()
        .with_model(model)
        .with_normalizer(Some(NFC))
        .with_pre_tokenizer(Some(Metaspace::default()))
        .with_post_processor(None)
        .with_decoder(Some(MetaspaceDecoder::default()))
        .build()
        .map_err(err)?;
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(cfg.vocab_size)
        .min_frequency(cfg.min_freq as u64)
        .show_progress(false)
        .special_tokens(SPECIALS.iter().map(|s| AddedToken::from(s.to_string(), true)).collect())
        .build();
    tok.set_encode_special_tokens(true);
    tok.train(&mut trainer, texts).map_err(err)?;
    Ok(bpe(tok))
}

/// Wraps a BPE tokenizer so that `<s>` in text is text, not the special (the flag is not saved
/// in `tokenizer.json`, so it is set on every load too).
fn bpe(mut tok: Bpe) -> Tokenizer {
    tok.set_encode_special_tokens(true);
    Tokenizer::Bpe(Box::new(tok))
}

/// The source and target tokenizers of a run (the same one twice when joint).
#[derive(Debug, Clone)]
pub struct Tokenizers {
    /// Source side.
    pub src: Tokenizer,
    /// Target side.
    pub tgt: Tokenizer,
    /// Whether one vocabulary serves both sides.
    pub joint: bool,
}

impl Tokenizers {
    /// The tokenizers read from the files `cfg` names ([`TokenizerConfig::files`]), or `None`
    /// when it names none (they are to be learned). One file serves both sides (joint); two
    /// files that are one (the same path) are one too.
    pub fn from_config(cfg: &TokenizerConfig) -> Result<Option<Self>> {
        Ok(match cfg.files()? {
            None => None,
            Some(TokenizerFiles::Joint(f)) => {
                let t = Tokenizer::from_file(f)?;
                Some(Self { src: t.clone(), tgt: t, joint: true })
            }
            Some(TokenizerFiles::Separate(s, t)) => {
                let src = Tokenizer::from_file(s)?;
                let same =
                    std::fs::canonicalize(s).ok().is_some_and(|c| std::fs::canonicalize(t).ok() == Some(c));
                if same {
                    Some(Self { src: src.clone(), tgt: src, joint: true })
                } else {
                    Some(Self { src, tgt: Tokenizer::from_file(t)?, joint: false })
                }
            }
        })
    }

    /// Trains on the training pairs' source and target text.
    pub fn train(cfg: &TokenizerConfig, pairs: &[crate::Pair]) -> Result<Self> {
        if cfg.joint {
            let texts: Vec<&str> = pairs.iter().flat_map(|p| [p.src.as_str(), p.tgt.as_str()]).collect();
            let t = Tokenizer::train(cfg, &texts)?;
            Ok(Self { src: t.clone(), tgt: t, joint: true })
        } else {
            let src: Vec<&str> = pairs.iter().map(|p| p.src.as_str()).collect();
            let tgt: Vec<&str> = pairs.iter().map(|p| p.tgt.as_str()).collect();
            Ok(Self { src: Tokenizer::train(cfg, &src)?, tgt: Tokenizer::train(cfg, &tgt)?, joint: false })
        }
    }

    /// Saves into `dir`: `joint.json`, or `src.json` and `tgt.json`. A `dir` that does not
    /// exist yet appears whole or not at all: the files are written into a sibling
    /// `.NAME.partial` folder (one a killed save left is replaced), which is then renamed to
    /// `dir`, so that a process killed while saving never leaves a `dir` without its files
    /// (which a resumed run would take for the saved tokenizers).
    pub fn save(&self, dir: &Path) -> Result<()> {
        if dir.is_dir() {
            return self.save_files(dir);
        }
        let name =
            dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "tokenizer".into());
        let partial = dir.with_file_name(format!(".{name}.partial"));
        if partial.exists() {
            std::fs::remove_dir_all(&partial).map_err(|e| DataError::io(&partial, e))?;
        }
        crate::create_dir_all(&partial)?;
        self.save_files(&partial)?;
        std::fs::rename(&partial, dir).map_err(|e| DataError::io(dir, e))
    }

    fn save_files(&self, dir: &Path) -> Result<()> {
        if self.joint {
            self.src.save(&dir.join("joint.json"))
        } else {
            self.src.save(&dir.join("src.json"))?;
            self.tgt.save(&dir.join("tgt.json"))
        }
    }

    /// Loads what [`Tokenizers::save`] wrote.
    pub fn load(dir: &Path) -> Result<Self> {
        let joint = dir.join("joint.json");
        if joint.exists() {
            let t = Tokenizer::load(&joint)?;
            return Ok(Self { src: t.clone(), tgt: t, joint: true });
        }
        Ok(Self {
            src: Tokenizer::load(&dir.join("src.json"))?,
            tgt: Tokenizer::load(&dir.join("tgt.json"))?,
            joint: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts() -> Vec<&'static str> {
        vec!["Ein Hund läuft über die Wiese .", "Zwei Männer spielen Fußball !", "A dog runs ."]
    }

    fn round_trip(level: Level) {
        let cfg = TokenizerConfig { level, vocab_size: 200, joint: true, min_freq: 1, ..Default::default() };
        let t = Tokenizer::train(&cfg, &texts()).unwrap();
        for s in texts() {
            let ids = t.encode(s);
            assert!(ids.iter().all(|&i| i >= 4), "{level:?}: unknown in {s}: {ids:?}");
            assert_eq!(t.decode(&ids), s, "{level:?}");
        }
    }

    #[test]
    fn bpe_round_trip() {
        round_trip(Level::Bpe);
    }

    #[test]
    fn word_round_trip() {
        round_trip(Level::Word);
    }

    #[test]
    fn char_round_trip() {
        round_trip(Level::Char);
    }

    #[test]
    fn specials_are_ids_0_to_3_and_dropped_on_decode() {
        for level in [Level::Bpe, Level::Word, Level::Char] {
            let cfg =
                TokenizerConfig { level, vocab_size: 100, joint: true, min_freq: 1, ..Default::default() };
            let t = Tokenizer::train(&cfg, &texts()).unwrap();
            for (i, s) in SPECIALS.iter().enumerate() {
                assert_eq!(t.token(i as u32), *s, "{level:?}");
            }
            let mut ids = vec![crate::BOS];
            ids.extend(t.encode("A dog"));
            ids.push(crate::EOS);
            assert_eq!(t.decode(&ids), "A dog");
        }
    }

    #[test]
    fn a_stream_learns_what_a_slice_learns() {
        let many: Vec<String> =
            (0..40).flat_map(|i| texts().into_iter().map(move |t| format!("{t} {i}"))).collect();
        for level in [Level::Bpe, Level::Word, Level::Char] {
            let cfg =
                TokenizerConfig { level, vocab_size: 60, joint: true, min_freq: 2, ..Default::default() };
            let a = Tokenizer::train(&cfg, &many).unwrap();
            let b = Tokenizer::train_stream(&cfg, many.clone().into_iter()).unwrap();
            assert_eq!(a.to_json().unwrap(), b.to_json().unwrap(), "{level:?}");
        }
    }

    #[test]
    fn unknown_word_maps_to_unk() {
        let cfg = TokenizerConfig {
            level: Level::Word,
            vocab_size: 0,
            joint: true,
            min_freq: 1,
            ..Default::default()
        };
        let t = Tokenizer::train(&cfg, &texts()).unwrap();
        assert_eq!(t.encode("A cat"), vec![t.encode("A")[0], crate::UNK]);
    }

    /// A new tokenizer folder appears whole: written aside, then renamed; what a killed save
    /// left aside (a half-written file) is replaced, not merged in.
    #[test]
    fn a_new_folder_is_renamed_into_place_whole() {
        let root = std::env::temp_dir().join(format!("s2s-tok-partial-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("tokenizer");
        let partial = root.join(".tokenizer.partial");
        std::fs::create_dir_all(&partial).unwrap();
        std::fs::write(partial.join("src.json"), "{ half").unwrap();
        let cfg = TokenizerConfig { level: Level::Word, joint: true, min_freq: 1, ..Default::default() };
        let pairs: Vec<crate::Pair> =
            texts().iter().map(|s| crate::Pair { src: s.to_string(), tgt: s.to_string() }).collect();
        let toks = Tokenizers::train(&cfg, &pairs).unwrap();
        toks.save(&dir).unwrap();
        assert!(!partial.exists(), "the folder written aside was renamed");
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["joint.json"], "only what this save wrote");
        assert!(Tokenizers::load(&dir).unwrap().joint);
        // Saving into a folder that exists writes into it, as before.
        toks.save(&dir).unwrap();
        assert!(Tokenizers::load(&dir).is_ok());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn save_load_and_corruption() {
        let dir = std::env::temp_dir().join(format!("s2s-tok-{}", std::process::id()));
        for level in [Level::Bpe, Level::Word, Level::Char] {
            let cfg =
                TokenizerConfig { level, vocab_size: 100, joint: false, min_freq: 1, ..Default::default() };
            let pairs: Vec<crate::Pair> =
                texts().iter().map(|s| crate::Pair { src: s.to_string(), tgt: s.to_uppercase() }).collect();
            let toks = Tokenizers::train(&cfg, &pairs).unwrap();
            let d = dir.join(format!("{level:?}"));
            toks.save(&d).unwrap();
            let back = Tokenizers::load(&d).unwrap();
            assert_eq!(back.tgt.encode("ZWEI MÄNNER"), toks.tgt.encode("ZWEI MÄNNER"));
            assert_eq!(back.src.vocab_size(), toks.src.vocab_size());
            // Truncate the file: a clear Corrupt error naming it, not a panic.
            let f = d.join("src.json");
            let bytes = std::fs::read(&f).unwrap();
            std::fs::write(&f, &bytes[..bytes.len() / 2]).unwrap();
            let e = Tokenizers::load(&d).unwrap_err();
            assert!(matches!(e, DataError::Corrupt { .. }), "{e}");
            assert!(e.to_string().contains("src.json"), "{e}");
        }
    }
}
