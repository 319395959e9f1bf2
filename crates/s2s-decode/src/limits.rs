//! Limits of a search: the output length limit `a · source_len + b` (fairseq's
//! `--max-len-a/--max-len-b`), and the memory a search holds at its largest
//! ([`SearchSize::bytes`]), checked against a budget ([`MemoryLimit`]) before anything is
//! allocated, so that a beam too large for the machine is refused with what to lower instead
//! of aborting on a failed allocation.
//!
//! # What a beam search holds
//! With `K` the beam, `B` the sentences decoded together (padded to the captured search's
//! bucket, [`padded_rows`]), `R = B·K` decoder rows, `V` the target vocabulary, `W = min(2K,
//! V)` candidates a row, `S` the longest source (with `</s>`, padded to 8) and `T` the most
//! steps (the length limit of `S`, plus `</s>`), at the largest step:
//!
//! - the step's scores `[R, V]` f32 three times over (the logits, their log-softmax on a GPU
//!   or an ensemble member's, an ensemble's running sum): `12·R·V` bytes;
//! - each row's `W` best (log-probability, id) on the device and read back: `16·R·W`;
//! - one sentence's ranked candidates at a time, `K` parents × `W` (24 bytes each): `24·K·W`;
//! - the decoder state ([`RowState`]): each row's fixed and per-source-position state twice
//!   (a reordering writes a copy beside the original), its per-step state (the Transformer's
//!   keys and values) three times (a cache's room doubles while the old one is copied in);
//! - the hypotheses: the live ones of two consecutive steps and up to `2K` finished ones a
//!   sentence (`4·R` in all), each `T` token ids and, when kept, `T × S` attention weights;
//! - with an observer that keeps every step (the studio's trace, [`SearchSize::observed`]):
//!   each step's beam (`K` hypotheses of up to `T` tokens) and `2K` candidates, with their
//!   JSON.
//!
//! The model's weights and the encoder's pass over the batch are not counted: they do not
//! grow with the beam.

use s2s_models::ModelSpec;
use s2s_models::cell::CellKind;
use serde::{Deserialize, Serialize};

/// Maximum output tokens (without `</s>`) as a linear function of the source length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaxLength {
    /// Slope `a`.
    pub a: f64,
    /// Intercept `b`.
    pub b: usize,
}

impl Default for MaxLength {
    fn default() -> Self {
        Self { a: 1.5, b: 10 }
    }
}

impl MaxLength {
    /// The limit for a source of `src_len` tokens.
    pub fn for_source(&self, src_len: usize) -> usize {
        ((self.a * src_len as f64).floor() as usize).saturating_add(self.b)
    }
}

/// What one decoder row (one hypothesis) of a model holds, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RowState {
    /// Whatever the lengths: the recurrent layers' states, Luong's fed vector.
    pub fixed: u64,
    /// Per source position: the encoder outputs and projected keys an attention reads, the
    /// Transformer's cross-attention keys and values, the key mask.
    pub per_source_token: u64,
    /// Per output position: the Transformer's self-attention keys and values (and the row's
    /// ancestry in the CPU's tree of them).
    pub per_step: u64,
}

impl RowState {
    /// A decoder row of a model of `spec` (f32 tensors).
    pub fn of(spec: &ModelSpec) -> Self {
        const F: u64 = 4;
        let n = |x: usize| x as u64;
        let states = |cell: CellKind| if cell == CellKind::Lstm { 2 } else { 1 };
        match spec {
            ModelSpec::Lstm(s) => RowState {
                fixed: n(s.layers) * states(s.cell) * n(s.hidden) * F,
                per_source_token: F,
                per_step: 0,
            },
            ModelSpec::Bahdanau(s) | ModelSpec::Luong(s) => {
                let keys = if s.attention_dim == 0 { s.hidden } else { s.attention_dim }.max(s.rank);
                RowState {
                    fixed: (n(s.layers) * states(s.cell) + 1) * n(s.hidden) * F,
                    per_source_token: (n(s.hidden) + n(keys) + 1) * F,
                    per_step: 0,
                }
            }
            ModelSpec::Transformer(s) => RowState {
                fixed: 0,
                per_source_token: (n(s.dec_layers) * 2 * n(s.d_model) + 1) * F,
                per_step: n(s.dec_layers) * (2 * n(s.d_model) + 1) * F,
            },
        }
    }
}

impl std::ops::Add for RowState {
    type Output = RowState;

    /// Two models' rows side by side (an ensemble's members).
    fn add(self, o: RowState) -> RowState {
        RowState {
            fixed: self.fixed.saturating_add(o.fixed),
            per_source_token: self.per_source_token.saturating_add(o.per_source_token),
            per_step: self.per_step.saturating_add(o.per_step),
        }
    }
}

/// The shape of a search, for its memory estimate ([`SearchSize::bytes`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchSize {
    /// Beam size (1: greedy search or sampling).
    pub beam: usize,
    /// Sentences decoded together.
    pub sentences: usize,
    /// Target vocabulary size.
    pub vocab: usize,
    /// Longest source, in tokens with `</s>`.
    pub src_len: usize,
    /// The output length limit.
    pub max_length: MaxLength,
    /// Whether each hypothesis keeps its cross-attention.
    pub attention: bool,
    /// Whether an observer keeps every step's beam and candidates (the studio's trace).
    pub observed: bool,
    /// One decoder row (an ensemble's members' summed).
    pub state: RowState,
}

/// Rows of a batch of `sentences` as the captured search pads it: its bucket
/// ([`s2s_data::bucket_rows`], without overflow for any count).
pub fn padded_rows(sentences: usize) -> u128 {
    s2s_data::bucket_rows(sentences.max(1) as u128)
}

/// Bytes of a hypothesis besides its tokens (its vectors' headers, score, row).
const HYPOTHESIS: u128 = 64;

impl SearchSize {
    /// The most decoding steps: the length limit of the longest source, then `</s>`.
    pub fn steps(&self) -> usize {
        self.max_length.for_source(self.src_len).saturating_add(1)
    }

    /// The most bytes the search holds at once (see the [module](self)), saturating.
    pub fn bytes(&self) -> u64 {
        let k = self.beam.max(1) as u128;
        let r = padded_rows(self.sentences).saturating_mul(k);
        let v = self.vocab.max(1) as u128;
        let w = (2 * k).min(v);
        let s = (self.src_len.max(1) as u128).div_ceil(8) * 8;
        let t = self.steps() as u128;
        let st = self.state;
        let mul = |xs: &[u128]| xs.iter().fold(1u128, |acc, &x| acc.saturating_mul(x));
        let scores = mul(&[12, r, v]);
        let tops = mul(&[16, r, w]);
        let candidates = mul(&[24, k, w]);
        let per_row = mul(&[2, (st.fixed as u128).saturating_add(mul(&[s, st.per_source_token as u128]))])
            .saturating_add(mul(&[3, t, st.per_step as u128]));
        let state = mul(&[r, per_row]);
        let per_hypothesis = HYPOTHESIS.saturating_add(mul(&[t, 4, 1 + if self.attention { s } else { 0 }]));
        let hypotheses = mul(&[4, r, per_hypothesis]);
        // Each step's beam (K hypotheses of up to T tokens, each spelled out: ~48 bytes a token)
        // and 2K candidates (~100 bytes), kept for every step, then as much again as JSON.
        let trace = if self.observed {
            let per_step = mul(&[k, t, 48]).saturating_add(mul(&[2, k, 100]));
            mul(&[2, t, per_step])
        } else {
            0
        };
        let total = [scores, tops, candidates, state, hypotheses, trace]
            .into_iter()
            .fold(0u128, u128::saturating_add);
        u64::try_from(total).unwrap_or(u64::MAX)
    }

    /// The estimate, when within `limit`; otherwise why not and what would fit.
    pub fn check(&self, limit: MemoryLimit) -> Result<u64, SearchMemoryError> {
        let estimate = self.bytes();
        if estimate <= limit.bytes {
            return Ok(estimate);
        }
        Err(SearchMemoryError {
            estimate,
            limit,
            size: *self,
            largest_beam: largest(self.beam, |beam| SearchSize { beam, ..*self }.bytes() <= limit.bytes),
            largest_sentences: largest(self.sentences, |sentences| {
                SearchSize { sentences, ..*self }.bytes() <= limit.bytes
            }),
        })
    }

    /// The most sentences (up to `sentences`) this search may decode together within `limit`
    /// (0: not even one).
    pub fn sentences_within(&self, limit: MemoryLimit) -> usize {
        largest(self.sentences, |sentences| SearchSize { sentences, ..*self }.bytes() <= limit.bytes)
    }
}

/// The largest `x` in `1..=upto` for which `fits(x)` (monotone: true up to some point), or 0.
fn largest(upto: usize, fits: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0usize, upto);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) { lo = mid } else { hi = mid - 1 }
    }
    lo
}

/// Where a [`MemoryLimit`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSource {
    /// `S2S_SEARCH_MEMORY`.
    Env,
    /// Half of the machine's memory (`MemTotal` in `/proc/meminfo`).
    HalfOfMemory,
    /// [`MemoryLimit::DEFAULT`]: the machine's memory is not known.
    Default,
    /// Given by the caller.
    Given,
}

/// The most bytes one search may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimit {
    /// Bytes.
    pub bytes: u64,
    /// Where it comes from.
    pub source: LimitSource,
}

/// The environment variable that sets the search memory limit (`8G`, `512M`, bytes).
pub const MEMORY_VAR: &str = "S2S_SEARCH_MEMORY";

impl MemoryLimit {
    /// The limit where the machine's memory is unknown: 4 GiB.
    pub const DEFAULT: u64 = 4 << 30;

    /// A limit of `bytes`.
    pub fn bytes(bytes: u64) -> Self {
        Self { bytes, source: LimitSource::Given }
    }

    /// This machine's limit: [`MEMORY_VAR`] when set, else half of its memory, else
    /// [`MemoryLimit::DEFAULT`].
    pub fn from_env() -> Result<Self, LimitError> {
        if let Some(v) = std::env::var_os(MEMORY_VAR) {
            let text = v.to_string_lossy().into_owned();
            return match parse_size(&text) {
                Some(bytes) if bytes > 0 => Ok(Self { bytes, source: LimitSource::Env }),
                _ => Err(LimitError(text)),
            };
        }
        Ok(match std::fs::read_to_string("/proc/meminfo").ok().as_deref().and_then(mem_total) {
            Some(total) => Self { bytes: total / 2, source: LimitSource::HalfOfMemory },
            None => Self { bytes: Self::DEFAULT, source: LimitSource::Default },
        })
    }
}

impl std::fmt::Display for MemoryLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self.source {
            LimitSource::Env => format!(" ({MEMORY_VAR})"),
            LimitSource::HalfOfMemory => {
                format!(" (half of this machine's memory; {MEMORY_VAR} sets another)")
            }
            LimitSource::Default => format!(" (this machine's memory is unknown; {MEMORY_VAR} sets another)"),
            LimitSource::Given => String::new(),
        };
        write!(f, "{}{why}", human(self.bytes))
    }
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line["MemTotal:".len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// A size such as `8G`, `1.5GiB`, `512M`, `4096K` or `1048576` (binary units), in bytes.
fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let x: f64 = number.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().trim_end_matches("ib").trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    let bytes = x * (1u64 << shift) as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// Bytes in binary units, `1.5 GiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut x = bytes as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{bytes} B") } else { format!("{x:.1} {}", UNITS[u]) }
}

/// A [`MEMORY_VAR`] that is not a size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("S2S_SEARCH_MEMORY=`{0}` is not a size: give one such as 8G, 512M or a number of bytes")]
pub struct LimitError(pub String);

/// A search whose estimate ([`SearchSize::bytes`]) exceeds its limit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.message(&Names::default()))]
pub struct SearchMemoryError {
    /// The estimate, in bytes.
    pub estimate: u64,
    /// The limit.
    pub limit: MemoryLimit,
    /// The search refused.
    pub size: SearchSize,
    /// The largest beam that fits with as many sentences (0: none).
    pub largest_beam: usize,
    /// The most sentences that fit at this beam (0: not one).
    pub largest_sentences: usize,
}

/// How a message names what to lower: the caller's flags or settings.
#[derive(Debug, Clone)]
pub struct Names<'a> {
    /// The beam (`--beam`).
    pub beam: &'a str,
    /// The sentences decoded together (`--batch-size`).
    pub sentences: &'a str,
    /// The longest source (`--max-src-tokens`).
    pub source: &'a str,
}

impl Default for Names<'_> {
    fn default() -> Self {
        Self { beam: "the beam", sentences: "the sentences decoded together", source: "the longest source" }
    }
}

impl SearchMemoryError {
    /// The message, naming what to lower as `names` does.
    pub fn message(&self, names: &Names) -> String {
        let s = &self.size;
        let search =
            if s.beam <= 1 { "greedy search".to_string() } else { format!("beam search of beam {}", s.beam) };
        let what = format!(
            "{search} over {} sentence{} at once would hold about {} (a target vocabulary of {}, sources \
             of up to {} tokens, up to {} steps); the limit is {}",
            s.sentences,
            if s.sentences == 1 { "" } else { "s" },
            human(self.estimate),
            s.vocab,
            s.src_len,
            s.steps(),
            self.limit
        );
        let remedy = match (self.largest_beam, self.largest_sentences) {
            (0, 0) => format!(
                "even greedy search of one sentence does not fit: lower {} (or raise the limit)",
                names.source
            ),
            (0, n) => format!("lower {} to at most {n}", names.sentences),
            (b, 0) => format!("lower {} to at most {b} (or {})", names.beam, names.source),
            (b, n) => format!("lower {} to at most {b}, or {} to at most {n}", names.beam, names.sentences),
        };
        format!("{what}: {remedy}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use s2s_models::{AttentionRnnSpec, LstmSpec, TransformerSpec};

    fn size(beam: usize, sentences: usize) -> SearchSize {
        SearchSize {
            beam,
            sentences,
            vocab: 8000,
            src_len: 251,
            max_length: MaxLength::default(),
            attention: false,
            observed: false,
            state: RowState::of(&ModelSpec::Transformer(TransformerSpec::default())),
        }
    }

    /// The terms as the module says them, for one shape worked by hand: beam 5 over 64
    /// sentences (64 rows padded: 320 rows), vocabulary 8000, sources of 251 tokens (256
    /// padded), 387 steps, the default Transformer (3 decoder layers of width 256).
    #[test]
    fn the_estimate_adds_up_the_terms() {
        let s = size(5, 64);
        assert_eq!(s.steps(), 387);
        let (r, v, w, src, t) = (320u64, 8000u64, 10u64, 256u64, 387u64);
        let per_source = (3 * 2 * 256 + 1) * 4;
        let per_step = 3 * (2 * 256 + 1) * 4;
        let expected = 12 * r * v
            + 16 * r * w
            + 24 * 5 * w
            + r * (2 * src * per_source + 3 * t * per_step)
            + 4 * r * (64 + 4 * t);
        assert_eq!(s.bytes(), expected);
        // About 3.1 GiB: within half of a 16 GiB laptop's memory.
        assert!(s.check(MemoryLimit::bytes(8 << 30)).is_ok());
        // Attention kept by every hypothesis adds T × S weights to each.
        let att = SearchSize { attention: true, ..s };
        assert_eq!(att.bytes() - s.bytes(), 4 * r * 4 * t * src);
    }

    #[test]
    fn the_estimate_grows_with_each_dimension() {
        let s = size(5, 64);
        for bigger in [
            SearchSize { beam: 6, ..s },
            SearchSize { sentences: 65, ..s },
            SearchSize { vocab: 8001, ..s },
            SearchSize { src_len: 300, ..s },
            SearchSize { observed: true, ..s },
            SearchSize { state: s.state + RowState::of(&ModelSpec::Lstm(LstmSpec::default())), ..s },
        ] {
            assert!(bigger.bytes() > s.bytes(), "{bigger:?}");
        }
    }

    /// The probe that aborted asking for 249,523,200,000 bytes: beam 100,000 is refused with
    /// the estimate, the limit and the largest beam and batch that fit, and each fits.
    #[test]
    fn a_huge_beam_is_refused_with_what_fits() {
        let s = size(100_000, 64);
        let limit = MemoryLimit::bytes(4 << 30);
        let e = s.check(limit).unwrap_err();
        assert!(e.estimate > 1 << 40, "{}", human(e.estimate));
        assert_eq!(e.largest_sentences, 0, "not one sentence fits at beam 100000");
        assert!(e.largest_beam >= 1 && e.largest_beam < 100_000);
        assert!(SearchSize { beam: e.largest_beam, ..s }.check(limit).is_ok());
        assert!(SearchSize { beam: e.largest_beam + 1, ..s }.check(limit).is_err());
        let m = e.message(&Names { beam: "--beam", sentences: "--batch-size", source: "--max-src-tokens" });
        assert!(m.contains("beam search of beam 100000 over 64 sentences"), "{m}");
        assert!(m.contains("the limit is 4.0 GiB"), "{m}");
        assert!(m.contains(&format!("lower --beam to at most {}", e.largest_beam)), "{m}");
        // Where fewer sentences would do, the message says how many.
        let e = size(50, 64).check(limit).unwrap_err();
        assert!(e.largest_sentences >= 1 && e.largest_sentences < 64, "{e:?}");
        assert!(
            e.to_string()
                .contains(&format!("the sentences decoded together to at most {}", e.largest_sentences))
        );
        assert_eq!(size(50, 64).sentences_within(limit), e.largest_sentences);
    }

    #[test]
    fn absurd_sizes_saturate_instead_of_overflowing() {
        let s = SearchSize {
            beam: usize::MAX,
            sentences: usize::MAX,
            vocab: usize::MAX,
            src_len: usize::MAX,
            ..size(1, 1)
        };
        assert_eq!(s.bytes(), u64::MAX);
        let e = s.check(MemoryLimit::bytes(1 << 30)).unwrap_err();
        assert_eq!((e.largest_beam, e.largest_sentences), (0, 0));
        assert!(e.to_string().contains("even greedy search of one sentence does not fit"), "{e}");
    }

    #[test]
    fn row_state_follows_the_model() {
        let lstm = RowState::of(&ModelSpec::Lstm(LstmSpec { layers: 2, hidden: 100, ..Default::default() }));
        assert_eq!(lstm, RowState { fixed: 2 * 2 * 100 * 4, per_source_token: 4, per_step: 0 });
        let gru = RowState::of(&ModelSpec::Lstm(LstmSpec {
            layers: 2,
            hidden: 100,
            cell: CellKind::Gru,
            ..Default::default()
        }));
        assert_eq!(gru.fixed, 2 * 100 * 4);
        let luong =
            RowState::of(&ModelSpec::Luong(AttentionRnnSpec { hidden: 100, rank: 8, ..Default::default() }));
        assert_eq!(luong.per_source_token, (100 + 100 + 1) * 4);
    }

    #[test]
    fn rows_are_padded_as_the_captured_search_pads_them() {
        for n in 1..=5000 {
            assert_eq!(padded_rows(n), s2s_data::bucket(n, 1, 1).0 as u128, "{n}");
        }
        assert!(padded_rows(usize::MAX) >= usize::MAX as u128);
    }

    #[test]
    fn sizes_and_meminfo_parse() {
        assert_eq!(parse_size("8G"), Some(8 << 30));
        assert_eq!(parse_size("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("-1G"), None);
        assert_eq!(parse_size("8X"), None);
        assert_eq!(mem_total("MemTotal:       16384 kB\nMemFree: 1 kB\n"), Some(16384 * 1024));
        assert_eq!(mem_total("nothing"), None);
        assert_eq!(human(3 << 29), "1.5 GiB");
        assert_eq!(human(12), "12 B");
    }
}
