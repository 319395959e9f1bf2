//! Tokenizers a user brings instead of learning one: a Hugging Face `tokenizer.json` (BPE,
//! Unigram, WordPiece or WordLevel) or a SentencePiece `.model` (Unigram or BPE, [`crate::spm`]).
//!
//! **Specials.** Inside the toolkit `<pad> <unk> <s> </s>` are ids 0–3 ([`crate::vocab`]):
//! the batcher, the models and the searches rely on it. A brought tokenizer keeps its own ids
//! and is seen through a permutation: ids 0–3 are its padding, unknown, beginning- and
//! end-of-sentence tokens, the others follow in its own order. The four are found by name
//! ([`PAD_NAMES`] …; a SentencePiece model's `unk_id`/`bos_id`/`eos_id`/`pad_id` first, a
//! `tokenizer.json` model's own unknown token first); without an unknown, beginning or end
//! token the file is refused, naming the token. Without a padding token one is added (padding
//! never appears in text), so such a vocabulary is one entry larger inside the model.
//!
//! Text spelled like a special is never the control token, as for our own tokenizers: a
//! `tokenizer.json` encodes its special added tokens as text, and an id of a padding,
//! beginning or end token that a vocabulary's plain entries still produce becomes `<unk>`.
//!
//! **Saved form** (`tokenizer/joint.json` or `src.json`/`tgt.json` of a run): `{"external":
//! {"format", "source", "specials", …}}` with the whole `tokenizer.json` under `tokenizer`, or
//! the `.model` file's bytes in hexadecimal under `model`, so a run needs nothing else.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{DataError, Result};
use crate::spm::SentencePiece;
use crate::vocab::{BOS, EOS, PAD, SPECIALS, UNK};

/// Names a padding token goes by.
pub const PAD_NAMES: &[&str] = &["<pad>", "[PAD]", "<PAD>", "<|pad|>"];
/// Names an unknown token goes by.
pub const UNK_NAMES: &[&str] = &["<unk>", "[UNK]", "<UNK>", "<|unk|>"];
/// Names a beginning-of-sentence token goes by (BERT's `[CLS]` starts a sequence).
pub const BOS_NAMES: &[&str] =
    &["<s>", "[BOS]", "<bos>", "<BOS>", "<|startoftext|>", "<|begin_of_text|>", "[CLS]"];
/// Names an end-of-sentence token goes by (BERT's `[SEP]` ends one).
pub const EOS_NAMES: &[&str] =
    &["</s>", "[EOS]", "<eos>", "<EOS>", "<|endoftext|>", "<|end_of_text|>", "[SEP]"];

/// No id: the padding token a vocabulary without one is given.
const NONE: u32 = u32::MAX;

/// The file's own ids of the four specials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Specials {
    /// Padding (`None`: added).
    pub pad: Option<u32>,
    /// Unknown.
    pub unk: u32,
    /// Beginning of sentence.
    pub bos: u32,
    /// End of sentence.
    pub eos: u32,
}

#[derive(Clone)]
enum Kind {
    Json(Box<tokenizers::Tokenizer>),
    Spm { model: Box<SentencePiece>, bytes: Vec<u8> },
}

/// A tokenizer read from a user's file, seen with the specials at ids 0–3 (module doc).
#[derive(Clone)]
pub struct External {
    kind: Kind,
    /// The file name it was read from, for messages and the saved form.
    source: String,
    specials: Specials,
    /// Our id → the file's ([`NONE`] for an added padding token).
    to_ext: Vec<u32>,
    /// The file's id → ours.
    to_int: Vec<u32>,
}

impl std::fmt::Debug for External {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "External({} {}, {} entries)", self.format(), self.source, self.to_ext.len())
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Saved {
    format: String,
    source: String,
    specials: Specials,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tokenizer: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<String>,
}

fn err(path: &Path, message: impl Into<String>) -> DataError {
    DataError::Tokenizer { path: path.to_path_buf(), message: message.into() }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// Which of `names` the vocabulary has first, by `lookup`.
fn by_name(names: &[&str], lookup: &dyn Fn(&str) -> Option<u32>) -> Option<u32> {
    names.iter().find_map(|n| lookup(n))
}

fn missing(what: &str, names: &[&str], hint: &str) -> String {
    format!("it has no {what} token: none of {} is in its vocabulary; {hint}", names.join(" "))
}

impl External {
    /// Reads a `tokenizer.json` or a SentencePiece `.model` (told apart by their content).
    pub fn from_file(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first == Some(&b'{') {
            let text = String::from_utf8(bytes).map_err(|_| err(path, "not UTF-8 text"))?;
            let value: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| err(path, format!("not a tokenizer.json: {e}")))?;
            if value.get("model").is_none() {
                return Err(err(path, "a JSON file without a `model`: not a Hugging Face tokenizer.json"));
            }
            return Self::from_json(path, value, None);
        }
        Self::from_spm(path, bytes, None)
    }

    fn from_json(path: &Path, value: serde_json::Value, specials: Option<Specials>) -> Result<Self> {
        let mut tok: tokenizers::Tokenizer = serde_json::from_value(value.clone())
            .map_err(|e| err(path, format!("not a tokenizer.json the `tokenizers` crate reads: {e}")))?;
        tok.set_encode_special_tokens(true);
        let n = tok.get_vocab(true).values().max().map_or(0, |&m| m as usize + 1);
        let specials = match specials {
            Some(s) => s,
            None => {
                let lookup = |t: &str| tok.token_to_id(t);
                // The model's own unknown token first: `unk_token` (BPE, WordPiece,
                // WordLevel) or `unk_id` (Unigram).
                let model = &value["model"];
                let own_unk = model["unk_token"]
                    .as_str()
                    .and_then(lookup)
                    .or_else(|| model["unk_id"].as_u64().map(|i| i as u32));
                let hint = "add it to the tokenizer (an added special token)";
                Specials {
                    pad: by_name(PAD_NAMES, &lookup),
                    unk: own_unk
                        .or_else(|| by_name(UNK_NAMES, &lookup))
                        .ok_or_else(|| err(path, missing("unknown", UNK_NAMES, hint)))?,
                    bos: by_name(BOS_NAMES, &lookup)
                        .ok_or_else(|| err(path, missing("beginning-of-sentence", BOS_NAMES, hint)))?,
                    eos: by_name(EOS_NAMES, &lookup)
                        .ok_or_else(|| err(path, missing("end-of-sentence", EOS_NAMES, hint)))?,
                }
            }
        };
        Self::with(Kind::Json(Box::new(tok)), path, n, specials)
    }

    fn from_spm(path: &Path, bytes: Vec<u8>, specials: Option<Specials>) -> Result<Self> {
        let model = SentencePiece::from_bytes(&bytes).map_err(|e| {
            err(path, format!("neither a tokenizer.json nor a SentencePiece model it can read: {e}"))
        })?;
        let n = model.len();
        let specials = match specials {
            Some(s) => s,
            None => {
                let t = &model.proto().trainer;
                let lookup = |p: &str| model.piece_id(p);
                let id = |i: i32| u32::try_from(i).ok().filter(|&i| (i as usize) < n);
                let hint = |field: &str| format!("train it with a {field} (spm_train --{field}=N)");
                Specials {
                    pad: id(t.pad_id).or_else(|| by_name(PAD_NAMES, &lookup)),
                    unk: model.unk_id(),
                    bos: id(t.bos_id).or_else(|| by_name(BOS_NAMES, &lookup)).ok_or_else(|| {
                        err(path, missing("beginning-of-sentence", BOS_NAMES, &hint("bos_id")))
                    })?,
                    eos: id(t.eos_id)
                        .or_else(|| by_name(EOS_NAMES, &lookup))
                        .ok_or_else(|| err(path, missing("end-of-sentence", EOS_NAMES, &hint("eos_id"))))?,
                }
            }
        };
        Self::with(Kind::Spm { model: Box::new(model), bytes }, path, n, specials)
    }

    /// Builds the id permutation for a vocabulary of `n` ids.
    fn with(kind: Kind, path: &Path, n: usize, mut s: Specials) -> Result<Self> {
        // Padding shared with another special (GPT-2 style) is padding of its own here.
        if s.pad.is_some_and(|p| p == s.unk || p == s.bos || p == s.eos) {
            s.pad = None;
        }
        let ids = [s.pad.unwrap_or(NONE), s.unk, s.bos, s.eos];
        for (i, &id) in ids.iter().enumerate() {
            if id != NONE && id as usize >= n {
                return Err(err(path, format!("its {} id {id} is not below its {n} ids", SPECIALS[i])));
            }
            if let Some(j) = (0..i).find(|&j| ids[j] == id && id != NONE) {
                return Err(err(
                    path,
                    format!(
                        "{} and {} are the same token (id {id}); the two must differ: add a token for one",
                        SPECIALS[j], SPECIALS[i]
                    ),
                ));
            }
        }
        let mut to_ext = ids.to_vec();
        to_ext.extend((0..n as u32).filter(|i| !ids.contains(i)));
        let mut to_int = vec![UNK; n];
        for (ours, &theirs) in to_ext.iter().enumerate() {
            if theirs != NONE {
                to_int[theirs as usize] = ours as u32;
            }
        }
        Ok(Self { kind, source: file_name(path), specials: s, to_ext, to_int })
    }

    /// `tokenizer.json` or `sentencepiece`.
    pub fn format(&self) -> &'static str {
        match self.kind {
            Kind::Json(_) => "tokenizer.json",
            Kind::Spm { .. } => "sentencepiece",
        }
    }

    /// The name of the file it was read from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The file's own ids of the specials.
    pub fn specials(&self) -> Specials {
        self.specials
    }

    /// Number of ids inside the model: the file's, plus one for an added padding token.
    pub fn vocab_size(&self) -> usize {
        self.to_ext.len()
    }

    /// Text → our ids, without `<s>`/`</s>`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let ext = match &self.kind {
            // Encoding a &str cannot fail for a tokenizer that loaded; an error would be a
            // bug there, so fall back to <unk> rather than panic on user input.
            Kind::Json(t) => t
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_else(|_| vec![self.specials.unk]),
            Kind::Spm { model, .. } => model.encode(text),
        };
        ext.into_iter()
            .map(|e| match self.to_int.get(e as usize).copied().unwrap_or(UNK) {
                PAD | BOS | EOS => UNK,
                id => id,
            })
            .collect()
    }

    /// Our ids → text; the specials (ids 0–3) are dropped.
    pub fn decode(&self, ids: &[u32]) -> String {
        let ext: Vec<u32> = ids
            .iter()
            .filter(|&&i| i as usize >= SPECIALS.len())
            .filter_map(|&i| self.to_ext.get(i as usize).copied())
            .collect();
        match &self.kind {
            Kind::Json(t) => t.decode(&ext, true).unwrap_or_default(),
            Kind::Spm { model, .. } => model.decode(&ext),
        }
    }

    /// The file's text of our id `id` (`<pad>` for an added padding token).
    pub fn token(&self, id: u32) -> String {
        let fallback = || SPECIALS.get(id as usize).unwrap_or(&SPECIALS[UNK as usize]).to_string();
        let Some(&ext) = self.to_ext.get(id as usize).filter(|&&e| e != NONE) else { return fallback() };
        match &self.kind {
            Kind::Json(t) => t.id_to_token(ext),
            Kind::Spm { model, .. } => model.piece(ext).map(str::to_string),
        }
        .unwrap_or_else(fallback)
    }

    /// The saved form (module doc).
    pub fn to_json(&self) -> std::result::Result<String, String> {
        let (tokenizer, model) = match &self.kind {
            Kind::Json(t) => (Some(serde_json::to_value(t.as_ref()).map_err(|e| e.to_string())?), None),
            Kind::Spm { bytes, .. } => {
                let mut hex = String::with_capacity(bytes.len() * 2);
                for b in bytes {
                    hex.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
                    hex.push(char::from_digit(u32::from(b & 15), 16).unwrap_or('0'));
                }
                (None, Some(hex))
            }
        };
        let saved = Saved {
            format: self.format().into(),
            source: self.source.clone(),
            specials: self.specials,
            tokenizer,
            model,
        };
        serde_json::to_string(&serde_json::json!({ "external": saved })).map_err(|e| e.to_string())
    }

    /// Reads the saved form's `external` value, read from `path`.
    pub(crate) fn from_saved(path: &Path, value: serde_json::Value) -> Result<Self> {
        let corrupt = |message: String| DataError::Corrupt { path: path.to_path_buf(), message };
        let saved: Saved = serde_json::from_value(value).map_err(|e| corrupt(e.to_string()))?;
        let source = PathBuf::from(&saved.source);
        let mut t = match (saved.format.as_str(), saved.tokenizer, saved.model) {
            ("tokenizer.json", Some(json), None) => Self::from_json(&source, json, Some(saved.specials)),
            ("sentencepiece", None, Some(hex)) => {
                let bytes =
                    from_hex(&hex).ok_or_else(|| corrupt("the model's bytes are not hexadecimal".into()))?;
                Self::from_spm(&source, bytes, Some(saved.specials))
            }
            (f, _, _) => return Err(corrupt(format!("an external tokenizer of unknown format `{f}`"))),
        }
        .map_err(|e| corrupt(e.to_string()))?;
        t.source = saved.source;
        Ok(t)
    }
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|c| Some((char::from(c[0]).to_digit(16)? * 16 + char::from(c[1]).to_digit(16)?) as u8))
        .collect()
}
