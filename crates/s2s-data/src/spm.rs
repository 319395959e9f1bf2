//! SentencePiece `.model` files: a reader of the protobuf fields that segmentation needs, and
//! the segmentation itself, as `spm_encode` does it for a Unigram or a BPE model.
//!
//! A `.model` file is a serialised `ModelProto` (sentencepiece_model.proto). Read here: the
//! pieces (text, score, type), `trainer_spec`'s model type, byte fallback, whitespace placement
//! and special-token ids and names, and `normalizer_spec` (its precompiled character map and
//! the three whitespace flags). Everything else is skipped, as protobuf allows.
//!
//! Encoding follows SentencePiece's `Normalizer::Normalize` and its Unigram Viterbi search or
//! BPE merges:
//! 1. **Normalise**: at each position, a user-defined piece that starts there is kept as it is;
//!    else the longest rule of the precompiled character map that matches is applied; else the
//!    character is kept. Leading whitespace is dropped, runs of spaces collapse to one, trailing
//!    ones are dropped (`remove_extra_whitespaces`), `▁` is put in front
//!    (`add_dummy_prefix`) and every space becomes `▁` (`escape_whitespaces`).
//! 2. **Segment** (Unigram): the best-scoring segmentation of the normalised text into normal
//!    and user-defined pieces (the `tokenizers` crate's Unigram search, a port of
//!    SentencePiece's); a user-defined piece scores `bytes · max_score − 0.1` as in
//!    SentencePiece, so it always wins; control, unknown, unused and byte pieces are never
//!    matched in text.
//!
//!    **Segment** (BPE, `bpe_model.cc`): the text is cut into characters (a user-defined piece
//!    that starts at a position is one symbol, never merged); then, as long as some pair of
//!    neighbouring symbols spells a normal, user-defined or unused piece, the pair whose piece
//!    scores highest (the leftmost among equals) becomes one symbol. A symbol that ends as an
//!    unused piece is split back into the two it was merged from.
//!
//!    Either way a character no piece covers is unknown, a run of them one `<unk>`, or, with
//!    `byte_fallback`, its UTF-8 bytes as `<0xXX>` pieces.
//!
//! Decoding concatenates the pieces (byte pieces as bytes, control and unknown ones dropped),
//! turns `▁` back into spaces and drops the dummy prefix's.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;

use tokenizers::Model;
use tokenizers::models::unigram::Unigram;

/// A piece's type (`ModelProto.SentencePiece.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceType {
    /// An ordinary piece.
    Normal,
    /// `<unk>`.
    Unknown,
    /// `<s>`, `</s>`, `<pad>` and other control symbols: never in text.
    Control,
    /// Always segmented as one piece wherever it occurs.
    UserDefined,
    /// Reserved, never used.
    Unused,
    /// One byte (`<0x41>`), for byte fallback.
    Byte,
}

impl PieceType {
    fn from_proto(v: u64) -> Option<Self> {
        Some(match v {
            1 => PieceType::Normal,
            2 => PieceType::Unknown,
            3 => PieceType::Control,
            4 => PieceType::UserDefined,
            5 => PieceType::Unused,
            6 => PieceType::Byte,
            _ => return None,
        })
    }
}

/// One piece of the vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    /// Its text (`▁` for a space).
    pub piece: String,
    /// Its log-probability.
    pub score: f32,
    /// Its type.
    pub kind: PieceType,
}

/// The `trainer_spec` fields read (with protobuf's defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct TrainerSpec {
    /// 1 Unigram, 2 BPE, 3 word, 4 char.
    pub model_type: u64,
    /// Unknown characters become their UTF-8 bytes' pieces instead of `<unk>`.
    pub byte_fallback: bool,
    /// `▁` ends a word instead of starting it.
    pub treat_whitespace_as_suffix: bool,
    /// Special-token ids (−1: none).
    pub unk_id: i32,
    /// Beginning of sentence.
    pub bos_id: i32,
    /// End of sentence.
    pub eos_id: i32,
    /// Padding.
    pub pad_id: i32,
}

impl Default for TrainerSpec {
    fn default() -> Self {
        Self {
            model_type: 1,
            byte_fallback: false,
            treat_whitespace_as_suffix: false,
            unk_id: 0,
            bos_id: 1,
            eos_id: 2,
            pad_id: -1,
        }
    }
}

/// The `normalizer_spec` fields read (with protobuf's defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct NormalizerSpec {
    /// The rule set's name (`nmt_nfkc`, `identity`, …), for messages.
    pub name: String,
    /// The compiled rules: a Darts double-array trie and the replacement strings.
    pub precompiled_charsmap: Vec<u8>,
    /// Put `▁` in front of the text.
    pub add_dummy_prefix: bool,
    /// Drop leading and trailing whitespace, collapse runs.
    pub remove_extra_whitespaces: bool,
    /// Spaces become `▁`.
    pub escape_whitespaces: bool,
}

impl Default for NormalizerSpec {
    fn default() -> Self {
        Self {
            name: String::new(),
            precompiled_charsmap: Vec::new(),
            add_dummy_prefix: true,
            remove_extra_whitespaces: true,
            escape_whitespaces: true,
        }
    }
}

/// The fields of a `ModelProto` that segmentation needs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelProto {
    /// The vocabulary, in id order.
    pub pieces: Vec<Piece>,
    /// Training settings that matter for encoding.
    pub trainer: TrainerSpec,
    /// The normaliser.
    pub normalizer: NormalizerSpec,
}

/// A protobuf wire-format reader over a byte slice.
struct Wire<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// A field's value as the wire format carries it.
enum Value<'a> {
    Varint(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

impl<'a> Wire<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or("truncated varint")?;
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err("varint longer than 64 bits".into());
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or("truncated field")?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next field's number and value, or `None` at the end.
    fn field(&mut self) -> Result<Option<(u64, Value<'a>)>, String> {
        if self.pos == self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let (number, wire) = (key >> 3, key & 7);
        let value = match wire {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Value::Varint(0)
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| "field too long")?;
                Value::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Value::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            w => return Err(format!("wire type {w} of field {number} is not protobuf's current format")),
        };
        if number == 0 {
            return Err("field number 0".into());
        }
        Ok(Some((number, value)))
    }
}

fn text(b: &[u8], what: &str) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
}

impl ModelProto {
    /// Parses a serialised `ModelProto`.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let mut m = ModelProto::default();
        let mut w = Wire::new(bytes);
        while let Some((n, v)) = w.field()? {
            match (n, v) {
                (1, Value::Bytes(b)) => m.pieces.push(parse_piece(b, m.pieces.len())?),
                (2, Value::Bytes(b)) => m.trainer = parse_trainer(b)?,
                (3, Value::Bytes(b)) => m.normalizer = parse_normalizer(b)?,
                (1..=3, _) => return Err(format!("field {n} of ModelProto has the wrong wire type")),
                _ => {}
            }
        }
        Ok(m)
    }
}

fn parse_piece(b: &[u8], id: usize) -> Result<Piece, String> {
    let mut p = Piece { piece: String::new(), score: 0.0, kind: PieceType::Normal };
    let mut w = Wire::new(b);
    while let Some((n, v)) = w.field()? {
        match (n, v) {
            (1, Value::Bytes(s)) => p.piece = text(s, &format!("piece {id}"))?,
            (2, Value::Fixed32(f)) => p.score = f32::from_bits(f),
            (3, Value::Varint(t)) => {
                p.kind = PieceType::from_proto(t).ok_or_else(|| format!("piece {id} has unknown type {t}"))?
            }
            (1..=3, _) => return Err(format!("piece {id}: field {n} has the wrong wire type")),
            _ => {}
        }
    }
    Ok(p)
}

fn parse_trainer(b: &[u8]) -> Result<TrainerSpec, String> {
    let mut t = TrainerSpec::default();
    let mut w = Wire::new(b);
    // int32 fields are sign-extended to 64 bits on the wire.
    let int32 = |v: u64| v as i64 as i32;
    while let Some((n, v)) = w.field()? {
        if let Value::Varint(v) = v {
            match n {
                3 => t.model_type = v,
                24 => t.treat_whitespace_as_suffix = v != 0,
                35 => t.byte_fallback = v != 0,
                40 => t.unk_id = int32(v),
                41 => t.bos_id = int32(v),
                42 => t.eos_id = int32(v),
                43 => t.pad_id = int32(v),
                _ => {}
            }
        }
    }
    Ok(t)
}

fn parse_normalizer(b: &[u8]) -> Result<NormalizerSpec, String> {
    let mut s = NormalizerSpec::default();
    let mut w = Wire::new(b);
    while let Some((n, v)) = w.field()? {
        match (n, v) {
            (1, Value::Bytes(b)) => s.name = text(b, "the normaliser's name")?,
            (2, Value::Bytes(b)) => s.precompiled_charsmap = b.to_vec(),
            (3, Value::Varint(v)) => s.add_dummy_prefix = v != 0,
            (4, Value::Varint(v)) => s.remove_extra_whitespaces = v != 0,
            (5, Value::Varint(v)) => s.escape_whitespaces = v != 0,
            _ => {}
        }
    }
    Ok(s)
}

/// A precompiled character map: a Darts double-array trie over UTF-8 bytes whose values are
/// offsets of NUL-terminated replacements (SentencePiece's `normalizer.cc` format:
/// `u32 trie size in bytes`, the trie's `u32` units, then the replacements).
#[derive(Debug, Clone)]
struct Charsmap {
    units: Vec<u32>,
    normalized: Vec<u8>,
}

impl Charsmap {
    fn parse(blob: &[u8]) -> Result<Option<Self>, String> {
        if blob.is_empty() {
            return Ok(None);
        }
        let bad = || "the normaliser's precompiled_charsmap is malformed".to_string();
        let size = u32::from_le_bytes(blob.get(..4).ok_or_else(bad)?.try_into().map_err(|_| bad())?) as usize;
        let trie = blob.get(4..4 + size).ok_or_else(bad)?;
        if size % 4 != 0 || size == 0 {
            return Err(bad());
        }
        let units = trie.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Ok(Some(Self { units, normalized: blob[4 + size..].to_vec() }))
    }

    /// The longest rule that matches a prefix of `key`: (bytes matched, replacement).
    fn longest(&self, key: &[u8]) -> Option<(usize, &str)> {
        let unit = |i: usize| self.units.get(i).copied();
        let offset = |u: u32| ((u >> 10) << ((u & (1 << 9)) >> 6)) as usize;
        let mut pos = offset(unit(0)?);
        let mut best = None;
        for (i, &c) in key.iter().enumerate() {
            if c == 0 {
                break;
            }
            pos ^= c as usize;
            let u = unit(pos)?;
            if (u & ((1 << 31) | 0xFF)) != u32::from(c) {
                break;
            }
            pos ^= offset(u);
            if (u >> 8) & 1 == 1 {
                let value = (unit(pos)? & ((1 << 31) - 1)) as usize;
                best = Some((i + 1, value));
            }
        }
        let (len, value) = best?;
        let rest = self.normalized.get(value..)?;
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        Some((len, std::str::from_utf8(&rest[..end]).ok()?))
    }
}

/// How a model cuts normalised text into pieces.
#[derive(Clone)]
enum Search {
    /// The search over normal and user-defined pieces; other pieces hold names no text has.
    Unigram(Box<Unigram>),
    /// Normal, user-defined and unused pieces by their text: the pieces a merge may make.
    Bpe(HashMap<String, u32>),
}

/// A SentencePiece Unigram or BPE model ready to encode and decode.
#[derive(Clone)]
pub struct SentencePiece {
    proto: ModelProto,
    charsmap: Option<Charsmap>,
    /// User-defined pieces, longest first (they pass through normalisation unchanged).
    user_defined: Vec<String>,
    search: Search,
    /// `<0xXX>` → id, for byte fallback.
    bytes: HashMap<u8, u32>,
    unk: u32,
}

impl std::fmt::Debug for SentencePiece {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SentencePiece({} pieces, normaliser {:?})",
            self.proto.pieces.len(),
            self.proto.normalizer.name
        )
    }
}

impl SentencePiece {
    /// Reads a `.model` file; an error says what is wrong with it (the caller names the file).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let proto = ModelProto::parse(bytes)?;
        Self::new(proto)
    }

    /// Reads the `.model` file at `path`.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
        Self::from_bytes(&bytes)
    }

    /// Builds the encoder of a parsed model.
    pub fn new(proto: ModelProto) -> Result<Self, String> {
        if proto.pieces.is_empty() {
            return Err("the model has no pieces: not a SentencePiece model".into());
        }
        let kind = match proto.trainer.model_type {
            1 | 2 => None,
            3 => Some("word"),
            4 => Some("char"),
            _ => Some("an unknown"),
        };
        if let Some(kind) = kind {
            return Err(format!(
                "a SentencePiece {kind} model: only Unigram (spm_train's default) and BPE models are read; train one of those or convert it to a tokenizer.json"
            ));
        }
        if proto.trainer.treat_whitespace_as_suffix {
            return Err("trained with treat_whitespace_as_suffix, which is not supported".into());
        }
        let unks: Vec<usize> =
            (0..proto.pieces.len()).filter(|&i| proto.pieces[i].kind == PieceType::Unknown).collect();
        let &[unk] = unks.as_slice() else {
            return Err(format!(
                "the model has {} unknown pieces (<unk>); SentencePiece models have one",
                unks.len()
            ));
        };
        let charsmap = Charsmap::parse(&proto.normalizer.precompiled_charsmap)?;
        let normal = proto.pieces.iter().filter(|p| p.kind == PieceType::Normal);
        let max_score = normal.clone().map(|p| p.score).fold(f32::MIN, f32::max);
        let min_score = normal.map(|p| p.score).fold(f32::MAX, f32::min);
        let mut user_defined = Vec::new();
        let mut bytes = HashMap::new();
        let vocab: Vec<(String, f64)> = proto
            .pieces
            .iter()
            .enumerate()
            .map(|(i, p)| match p.kind {
                PieceType::Normal => (p.piece.clone(), f64::from(p.score)),
                PieceType::UserDefined => {
                    // An empty one would match everywhere and consume nothing.
                    if !p.piece.is_empty() {
                        user_defined.push(p.piece.clone());
                    }
                    (p.piece.clone(), f64::from(p.piece.len() as f32 * max_score - 0.1))
                }
                kind => {
                    if kind == PieceType::Byte
                        && let Some(b) = parse_byte_piece(&p.piece)
                    {
                        bytes.insert(b, i as u32);
                    }
                    // A name no normalised text holds (spaces are `▁` by then, and NUL
                    // ends a rule), so the search never picks it.
                    (format!(" \0{i}\0"), 0.0)
                }
            })
            .collect();
        user_defined.sort_by_key(|p| std::cmp::Reverse(p.len()));
        let search = if proto.trainer.model_type == 2 {
            let mergeable =
                |k: PieceType| matches!(k, PieceType::Normal | PieceType::UserDefined | PieceType::Unused);
            let mut pieces = HashMap::new();
            for (i, p) in proto.pieces.iter().enumerate().filter(|(_, p)| mergeable(p.kind)) {
                // The first of two pieces with one text wins (SentencePiece refuses such files).
                pieces.entry(p.piece.clone()).or_insert(i as u32);
            }
            Search::Bpe(pieces)
        } else {
            let mut unigram = Unigram::from(vocab, Some(unk), false).map_err(|e| e.to_string())?;
            // SentencePiece's unknown score is the lowest normal piece's minus 10.
            unigram.min_score = f64::from(if min_score == f32::MAX { 0.0 } else { min_score });
            Search::Unigram(Box::new(unigram))
        };
        Ok(Self { proto, charsmap, user_defined, search, bytes, unk: unk as u32 })
    }

    /// The parsed model.
    pub fn proto(&self) -> &ModelProto {
        &self.proto
    }

    /// Number of pieces.
    pub fn len(&self) -> usize {
        self.proto.pieces.len()
    }

    /// Whether the model has no pieces (never: [`SentencePiece::new`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.proto.pieces.is_empty()
    }

    /// The id of the unknown piece.
    pub fn unk_id(&self) -> u32 {
        self.unk
    }

    /// The id of a piece by its text.
    pub fn piece_id(&self, piece: &str) -> Option<u32> {
        self.proto.pieces.iter().position(|p| p.piece == piece).map(|i| i as u32)
    }

    /// The text SentencePiece segments: `text` normalised (see the module doc).
    pub fn normalize(&self, text: &str) -> String {
        let spec = &self.proto.normalizer;
        let mut out = String::with_capacity(text.len() + 3);
        let mut rest = text;
        if spec.remove_extra_whitespaces {
            while !rest.is_empty() {
                let (piece, used) = self.normalize_prefix(rest);
                if piece != " " {
                    break;
                }
                rest = &rest[used..];
            }
        }
        if spec.add_dummy_prefix {
            out.push(if spec.escape_whitespaces { '▁' } else { ' ' });
        }
        let mut prev_space = spec.remove_extra_whitespaces;
        while !rest.is_empty() {
            let (piece, used) = self.normalize_prefix(rest);
            let mut piece: &str = &piece;
            while prev_space && let Some(p) = piece.strip_prefix(' ') {
                piece = p;
            }
            if !piece.is_empty() {
                for c in piece.chars() {
                    out.push(if spec.escape_whitespaces && c == ' ' { '▁' } else { c });
                }
                prev_space = piece.ends_with(' ');
            }
            rest = &rest[used..];
            prev_space = prev_space && spec.remove_extra_whitespaces;
        }
        if spec.remove_extra_whitespaces {
            let space = if spec.escape_whitespaces { "▁" } else { " " };
            while let Some(s) = out.strip_suffix(space) {
                out.truncate(s.len());
            }
        }
        out
    }

    /// The normalised form of the start of `text` and the bytes of `text` it covers.
    fn normalize_prefix<'t>(&'t self, text: &'t str) -> (std::borrow::Cow<'t, str>, usize) {
        if let Some(u) = self.user_defined.iter().find(|u| text.starts_with(u.as_str())) {
            return (u.as_str().into(), u.len());
        }
        if let Some(map) = &self.charsmap
            && let Some((len, to)) = map.longest(text.as_bytes())
        {
            // A rule may end inside a character only in a malformed map: keep the character then.
            if text.is_char_boundary(len) {
                return (to.into(), len);
            }
        }
        let len = text.chars().next().map_or(1, char::len_utf8);
        (text[..len].into(), len)
    }

    /// Segments `text`: each piece's id and its text (an unknown piece's is the text it covers,
    /// as `spm_encode` prints it).
    pub fn encode_pieces(&self, text: &str) -> Vec<(u32, String)> {
        let normalized = self.normalize(text);
        if normalized.is_empty() {
            return Vec::new();
        }
        let tokens: Vec<(u32, String)> = match &self.search {
            // The search cannot fail with an unknown piece present; an error would be a bug
            // there, so fall back to one unknown piece rather than panic on user input.
            Search::Unigram(u) => {
                u.tokenize(&normalized).unwrap_or_default().into_iter().map(|t| (t.id, t.value)).collect()
            }
            Search::Bpe(pieces) => self.bpe(pieces, &normalized),
        };
        if tokens.is_empty() {
            return vec![(self.unk, normalized)];
        }
        let mut out: Vec<(u32, String)> = Vec::with_capacity(tokens.len());
        for (id, value) in tokens {
            if id == self.unk && self.proto.trainer.byte_fallback {
                let ids: Option<Vec<u32>> = value.bytes().map(|b| self.bytes.get(&b).copied()).collect();
                if let Some(ids) = ids {
                    out.extend(ids.into_iter().map(|id| (id, self.proto.pieces[id as usize].piece.clone())));
                    continue;
                }
            }
            // A run of unknown characters is one unknown piece, as SentencePiece prints it.
            match out.last_mut() {
                Some((last, text)) if id == self.unk && *last == self.unk => text.push_str(&value),
                _ => out.push((id, value)),
            }
        }
        out
    }

    /// SentencePiece's BPE segmentation of normalised text (`bpe_model.cc`, `Model::Encode`):
    /// pieces with their ids, `unk` for a symbol no piece spells.
    fn bpe(&self, pieces: &HashMap<String, u32>, text: &str) -> Vec<(u32, String)> {
        /// A symbol: `text[start..end]`, its neighbours in the list, and whether it may merge.
        struct Symbol {
            start: usize,
            end: usize,
            prev: Option<usize>,
            next: Option<usize>,
            frozen: bool,
        }
        /// Two neighbouring symbols whose concatenation is a piece of this score and length.
        struct Pair {
            score: f32,
            left: usize,
            right: usize,
            len: usize,
        }
        impl PartialEq for Pair {
            fn eq(&self, o: &Self) -> bool {
                self.cmp(o) == Ordering::Equal
            }
        }
        impl Eq for Pair {}
        impl PartialOrd for Pair {
            fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
                Some(self.cmp(o))
            }
        }
        impl Ord for Pair {
            /// The highest score first; among equal scores the leftmost.
            fn cmp(&self, o: &Self) -> Ordering {
                self.score.total_cmp(&o.score).then(o.left.cmp(&self.left))
            }
        }
        let mut symbols = Vec::new();
        let mut pos = 0;
        while pos < text.len() {
            let rest = &text[pos..];
            let (len, frozen) = match self.user_defined.iter().find(|u| rest.starts_with(u.as_str())) {
                Some(u) => (u.len(), true),
                None => (rest.chars().next().map_or(1, char::len_utf8), false),
            };
            let i = symbols.len();
            symbols.push(Symbol {
                start: pos,
                end: pos + len,
                prev: i.checked_sub(1),
                next: (pos + len < text.len()).then_some(i + 1),
                frozen,
            });
            pos += len;
        }
        // Unused pieces a merge made: piece → the two texts it was made of.
        let mut unmerge: HashMap<&str, (&str, &str)> = HashMap::new();
        let mut agenda = BinaryHeap::new();
        let mut offer =
            |symbols: &[Symbol], agenda: &mut BinaryHeap<Pair>, l: Option<usize>, r: Option<usize>| {
                let (Some(l), Some(r)) = (l, r) else { return };
                let (a, b) = (&symbols[l], &symbols[r]);
                if a.frozen || b.frozen {
                    return;
                }
                let piece = &text[a.start..b.end];
                let Some(&id) = pieces.get(piece) else { return };
                let p = &self.proto.pieces[id as usize];
                if p.kind == PieceType::Unused {
                    unmerge.insert(piece, (&text[a.start..a.end], &text[b.start..b.end]));
                }
                agenda.push(Pair { score: p.score, left: l, right: r, len: piece.len() });
            };
        for i in 1..symbols.len() {
            offer(&symbols, &mut agenda, Some(i - 1), Some(i));
        }
        while let Some(top) = agenda.pop() {
            let (l, r) = (&symbols[top.left], &symbols[top.right]);
            // Stale: one side has merged with something else since the pair was offered.
            if l.start == l.end || r.start == r.end || l.next != Some(top.right) || r.end - l.start != top.len
            {
                continue;
            }
            let (end, next) = (r.end, r.next);
            symbols[top.left].end = end;
            symbols[top.left].next = next;
            if let Some(n) = next {
                symbols[n].prev = Some(top.left);
            }
            symbols[top.right].end = symbols[top.right].start;
            let prev = symbols[top.left].prev;
            offer(&symbols, &mut agenda, prev, Some(top.left));
            offer(&symbols, &mut agenda, Some(top.left), next);
        }
        let mut out = Vec::new();
        fn emit<'t>(
            w: &'t str,
            pieces: &HashMap<String, u32>,
            unmerge: &HashMap<&'t str, (&'t str, &'t str)>,
            unk: u32,
            out: &mut Vec<(u32, String)>,
        ) {
            match (pieces.get(w), unmerge.get(w)) {
                (Some(_), Some(&(a, b))) => {
                    emit(a, pieces, unmerge, unk, out);
                    emit(b, pieces, unmerge, unk, out);
                }
                (Some(&id), None) => out.push((id, w.to_string())),
                (None, _) => out.push((unk, w.to_string())),
            }
        }
        let mut at = (!symbols.is_empty()).then_some(0);
        while let Some(i) = at {
            emit(&text[symbols[i].start..symbols[i].end], pieces, &unmerge, self.unk, &mut out);
            at = symbols[i].next;
        }
        out
    }

    /// Segments `text` into piece ids.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.encode_pieces(text).into_iter().map(|(id, _)| id).collect()
    }

    /// Pieces back to text: byte pieces as bytes, control and unknown pieces dropped, `▁` as a
    /// space, the dummy prefix's space dropped.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            let Some(p) = self.proto.pieces.get(id as usize) else { continue };
            match p.kind {
                PieceType::Normal | PieceType::UserDefined => bytes.extend_from_slice(p.piece.as_bytes()),
                PieceType::Byte => bytes.extend(parse_byte_piece(&p.piece)),
                PieceType::Control | PieceType::Unknown | PieceType::Unused => {}
            }
        }
        let text = String::from_utf8_lossy(&bytes).replace('▁', " ");
        match text.strip_prefix(' ') {
            Some(t) if self.proto.normalizer.add_dummy_prefix => t.to_string(),
            _ => text,
        }
    }

    /// The text of piece `id`.
    pub fn piece(&self, id: u32) -> Option<&str> {
        self.proto.pieces.get(id as usize).map(|p| p.piece.as_str())
    }
}

/// `<0x41>` → 0x41.
fn parse_byte_piece(p: &str) -> Option<u8> {
    let hex = p.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-built model: the wire format written field by field.
    fn model(pieces: &[(&str, f32, u64)], trainer: &[(u64, u64)]) -> Vec<u8> {
        fn varint(mut v: u64, out: &mut Vec<u8>) {
            loop {
                let b = (v & 0x7f) as u8;
                v >>= 7;
                if v == 0 {
                    out.push(b);
                    return;
                }
                out.push(b | 0x80);
            }
        }
        fn bytes_field(n: u64, b: &[u8], out: &mut Vec<u8>) {
            varint(n << 3 | 2, out);
            varint(b.len() as u64, out);
            out.extend_from_slice(b);
        }
        let mut out = Vec::new();
        for (p, s, t) in pieces {
            let mut m = Vec::new();
            bytes_field(1, p.as_bytes(), &mut m);
            varint(2 << 3 | 5, &mut m);
            m.extend_from_slice(&s.to_le_bytes());
            varint(3 << 3, &mut m);
            varint(*t, &mut m);
            bytes_field(1, &m, &mut out);
        }
        let mut t = Vec::new();
        for &(n, v) in trainer {
            varint(n << 3, &mut t);
            varint(v, &mut t);
        }
        bytes_field(2, &t, &mut out);
        out
    }

    fn pieces() -> Vec<(&'static str, f32, u64)> {
        vec![
            ("<unk>", 0.0, 2),
            ("<s>", 0.0, 3),
            ("</s>", 0.0, 3),
            ("<sep>", 0.0, 4),
            ("▁", -1.0, 1),
            ("a", -2.0, 1),
            ("b", -2.0, 1),
            ("▁ab", -1.5, 1),
            ("<0x41>", 0.0, 6),
        ]
    }

    #[test]
    fn reads_pieces_and_trainer_fields_with_negative_ids() {
        let bytes = model(&pieces(), &[(40, 0), (43, (-1i64) as u64), (35, 1)]);
        let m = ModelProto::parse(&bytes).unwrap();
        assert_eq!(m.pieces.len(), 9);
        assert_eq!(m.pieces[7], Piece { piece: "▁ab".into(), score: -1.5, kind: PieceType::Normal });
        assert_eq!((m.trainer.pad_id, m.trainer.bos_id, m.trainer.byte_fallback), (-1, 1, true));
        assert!(m.normalizer.add_dummy_prefix, "absent fields take protobuf's defaults");
    }

    #[test]
    fn segments_normalises_whitespace_and_falls_back_to_bytes() {
        let sp = SentencePiece::from_bytes(&model(&pieces(), &[])).unwrap();
        assert_eq!(sp.normalize("  ab   b "), "▁ab▁b");
        let p: Vec<String> = sp.encode_pieces("ab<sep>b <s>").into_iter().map(|(_, p)| p).collect();
        assert_eq!(p, ["▁ab", "<sep>", "b", "▁", "<s>"], "a control piece is never matched in text");
        assert_eq!(sp.encode("ab<sep>b <s>")[4], 0, "`<s>` is one run of unknown characters");
        assert_eq!(sp.decode(&sp.encode("ab  b")), "ab b");
        let fallback = SentencePiece::from_bytes(&model(&pieces(), &[(35, 1)])).unwrap();
        assert_eq!(fallback.encode("A"), [4, 8], "A is 0x41");
        assert_eq!(fallback.decode(&[4, 8, 5]), "Aa");
    }

    #[test]
    fn refuses_what_it_cannot_encode_and_never_panics_on_garbage() {
        let word = SentencePiece::from_bytes(&model(&pieces(), &[(3, 3)])).unwrap_err();
        assert!(word.contains("word model"), "{word}");
        assert!(SentencePiece::from_bytes(b"{\"model\": 1}").is_err());
        let mut empty = pieces();
        empty.push(("", 0.0, 4));
        let sp = SentencePiece::from_bytes(&model(&empty, &[])).unwrap();
        assert_eq!(sp.decode(&sp.encode("ab")), "ab", "an empty user-defined piece matches nothing");
        let bytes = model(&pieces(), &[]);
        for n in 0..bytes.len() {
            let _ = SentencePiece::from_bytes(&bytes[..n]);
        }
    }

    #[test]
    fn bpe_merges_the_best_pair_first_the_leftmost_among_equals_and_splits_unused_pieces() {
        let base = [
            ("<unk>", 0.0, 2),
            ("<s>", 0.0, 3),
            ("▁", -1.0, 1),
            ("x", -2.0, 1),
            ("y", -2.0, 1),
            ("z", -2.0, 1),
        ];
        let bpe = |extra: &[(&'static str, f32, u64)]| {
            let p: Vec<_> = base.iter().chain(extra).copied().collect();
            SentencePiece::from_bytes(&model(&p, &[(3, 2)])).unwrap()
        };
        let pieces =
            |sp: &SentencePiece, t: &str| sp.encode_pieces(t).into_iter().map(|(_, p)| p).collect::<Vec<_>>();
        let equal = bpe(&[("xy", -1.0, 1), ("yz", -1.0, 1)]);
        assert_eq!(pieces(&equal, "xyz"), ["▁", "xy", "z"]);
        let better = bpe(&[("xy", -1.0, 1), ("yz", -0.5, 1)]);
        assert_eq!(pieces(&better, "xyz"), ["▁", "x", "yz"]);
        // An unused piece is merged through, then split back where nothing bigger took it.
        assert_eq!(pieces(&bpe(&[("xy", -0.5, 5), ("▁xy", -0.6, 1)]), "xy"), ["▁xy"]);
        assert_eq!(pieces(&bpe(&[("xy", -0.5, 5)]), "xy"), ["▁", "x", "y"]);
        // A run of unknown characters is one unknown piece; a control piece is never made.
        assert_eq!(pieces(&equal, "qq xy"), ["▁", "qq", "▁", "xy"]);
        assert_eq!(equal.encode("qq xy"), [2, 0, 2, 6]);
        assert_eq!(pieces(&bpe(&[("<s", -0.1, 1)]), "<s>"), ["▁", "<s", ">"]);
        assert_eq!(equal.decode(&equal.encode("xyz  xy")), "xyz xy");
    }
}
