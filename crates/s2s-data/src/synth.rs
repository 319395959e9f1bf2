//! The built-in synthetic language pair, **synth-en → synth-xx**: a deterministic generator of a
//! parallel corpus whose target side differs from the source in the ways that make attention
//! pay off (the grammar is documented in `datasets/README.md`).
//!
//! * Source (`synth-en`): English-like SVO, lowercase ASCII words and a final `.`:
//!   `the big black dog sees a small cat that the man likes .`
//! * Target (`synth-xx`): an invented language with its own word-for-word lexicon, nouns with
//!   lexical gender (masculine/feminine/neuter) and number, determiners, adjectives and
//!   relative pronouns inflected to agree with their noun, adjectives **after** the noun (in
//!   mirror order), subordinate, complement and relative clauses **verb-final** (German-like, a
//!   clause-final verb after its object, its prepositional phrase and its adverb), adverbs
//!   after the finite verb in main clauses, and verbs agreeing with the number of their subject:
//!   `lo vark swarto grendo videt una mirl pika wena lo drom amet .`
//!
//! Every source word becomes exactly one target word, so both sides have the same number of
//! tokens and [`generate_aligned`] can give the gold alignment (a permutation). Translation is
//! a function: the source grammar is unambiguous (see "Ambiguity" in the README), so a source
//! sentence has exactly one correct target.
//!
//! Sentences are grown, not drawn from a PCFG: for each pair a length `L` is drawn uniformly in
//! `min_tokens..=max_tokens` (source tokens, the `.` included), then a minimal sentence
//! (`dogs sleep .`) is expanded by random grammar operations (add a determiner, an adjective,
//! an adverb, an object, a prepositional phrase, a relative clause, a complement clause, a
//! subordinate clause, a coordinated clause) until it has exactly `L` tokens. Long sentences
//! are therefore genuinely long: coordinated clauses with nested relative and complement
//! clauses, not padding.
//!
//! Determinism: the only randomness is [`crate::rng::SplitMix64`] seeded with
//! [`SynthConfig::seed`], one stream for the whole corpus, integer arithmetic only — so the
//! corpus is bit-identical on every platform and never changes with a `rand` upgrade. The first
//! `n` pairs do not depend on [`SynthConfig::pairs`]. Pairs are deduplicated (a repeated source
//! sentence is redrawn), so splits never overlap.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::rng::SplitMix64;

/// Language code of the source side, used in file names (`train.src`).
pub const SRC_LANG: &str = "src";
/// Language code of the target side, used in file names (`train.tgt`).
pub const TGT_LANG: &str = "tgt";
/// Human name of the source language.
pub const SRC_NAME: &str = "synth-en";
/// Human name of the target language.
pub const TGT_NAME: &str = "synth-xx";
/// Human name of the pair, for reports.
pub const PAIR_NAME: &str = "synth-en → synth-xx";

/// Shortest sentence the grammar has (`dogs sleep .`).
pub const MIN_POSSIBLE_TOKENS: usize = 3;

/// Configuration of the built-in language pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SynthConfig {
    /// Number of distinct sentence pairs to generate.
    pub pairs: usize,
    /// Seed of the generator; the same seed always gives the same corpus.
    pub seed: u64,
    /// Shortest sentence, in source tokens including the final `.` (raised to 3 if smaller).
    pub min_tokens: usize,
    /// Longest sentence, in source tokens including the final `.` (raised to `min_tokens` if
    /// smaller). Lengths are drawn uniformly in `min_tokens..=max_tokens`.
    pub max_tokens: usize,
}

impl Default for SynthConfig {
    fn default() -> Self {
        Self { pairs: 20_000, seed: 1, min_tokens: 3, max_tokens: 64 }
    }
}

impl SynthConfig {
    /// The length range actually used: `min_tokens` raised to 3, `max_tokens` raised to it.
    pub fn length_range(&self) -> (usize, usize) {
        let lo = self.min_tokens.max(MIN_POSSIBLE_TOKENS);
        (lo, self.max_tokens.max(lo))
    }
}

/// One generated pair with its gold word alignment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlignedPair {
    /// Source sentence, tokens separated by single spaces.
    pub src: String,
    /// Target sentence, tokens separated by single spaces (same number of tokens as `src`).
    pub tgt: String,
    /// `alignment[j]` is the index of the source token that target token `j` translates; a
    /// permutation of `0..n`.
    pub alignment: Vec<usize>,
}

/// The files written by [`write_splits`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthSplits {
    /// `DIR/train.src`, `DIR/train.tgt`.
    pub train: (PathBuf, PathBuf),
    /// `DIR/valid.src`, `DIR/valid.tgt`.
    pub valid: (PathBuf, PathBuf),
    /// `DIR/test.src`, `DIR/test.tgt`.
    pub test: (PathBuf, PathBuf),
    /// Pairs in train, valid and test.
    pub counts: [usize; 3],
}

/// Generates `cfg.pairs` distinct sentence pairs `(source, target)`, tokens separated by single
/// spaces, already normalised. Deterministic in `cfg`. If the length range is too narrow to
/// hold `cfg.pairs` distinct sentences (e.g. `max_tokens = 3`), returns as many as it finds.
pub fn generate(cfg: &SynthConfig) -> Vec<(String, String)> {
    generate_aligned(cfg).into_iter().map(|p| (p.src, p.tgt)).collect()
}

/// [`generate`] with the gold alignment of every pair (the same pairs, in the same order).
pub fn generate_aligned(cfg: &SynthConfig) -> Vec<AlignedPair> {
    let (lo, hi) = cfg.length_range();
    let mut rng = SplitMix64::new(cfg.seed);
    let mut seen: HashSet<String> = HashSet::with_capacity(cfg.pairs);
    let mut out = Vec::with_capacity(cfg.pairs);
    // Generous cap for the degenerate case of a length range with few distinct sentences.
    let max_attempts = cfg.pairs.saturating_mul(50).saturating_add(10_000);
    let mut attempts = 0;
    while out.len() < cfg.pairs && attempts < max_attempts {
        attempts += 1;
        let len = lo + rng.below((hi - lo + 1) as u64) as usize;
        let sentence = grow(&mut rng, len);
        let r = render(&sentence);
        let src = r.source_string();
        if seen.contains(&src) {
            continue;
        }
        seen.insert(src.clone());
        out.push(AlignedPair { src, tgt: r.target_string(), alignment: r.alignment() });
    }
    out
}

/// Split sizes `[train, valid, test]` for `n` pairs: 5 % valid and 5 % test (rounded down, at
/// least 1 each), the rest train. Panics if `n < 3`.
pub fn split_sizes(n: usize) -> [usize; 3] {
    assert!(n >= 3, "a synthetic corpus needs at least 3 pairs to split, got {n}");
    let held = (n / 20).max(1);
    [n - 2 * held, held, held]
}

/// Indices of the pairs of each split `[train, valid, test]`, each in corpus order. Panics
/// with fewer than 3 pairs.
///
/// Valid and test are *length-stratified*: the pairs are ordered by source length (ties by
/// index) and valid/test take evenly spaced positions of that order, so both cover the whole
/// length range in proportion (every 10-token bucket up to `max_tokens` once there are a few
/// hundred pairs). Pairs are distinct (see [`generate`]), so the splits never overlap.
pub fn split_indices(pairs: &[(String, String)]) -> [Vec<usize>; 3] {
    let n = pairs.len();
    let [_, n_valid, n_test] = split_sizes(n);
    let lens: Vec<usize> = pairs.iter().map(|p| p.0.split(' ').count()).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (lens[i], i));
    let mut which = vec![0u8; n];
    for j in 0..n_valid {
        which[order[(4 * j + 1) * n / (4 * n_valid)]] = 1;
    }
    for j in 0..n_test {
        let k = order[(2 * j + 1) * n / (2 * n_test)];
        assert_eq!(which[k], 0, "valid and test positions collide");
        which[k] = 2;
    }
    let mut splits: [Vec<usize>; 3] = Default::default();
    for (i, &w) in which.iter().enumerate() {
        splits[w as usize].push(i);
    }
    splits
}

/// Generates the corpus and writes `DIR/{train,valid,test}.{src,tgt}` (one sentence per line,
/// UTF-8, `\n`), creating `DIR`. Needs at least 3 pairs.
pub fn write_splits(cfg: &SynthConfig, dir: &Path) -> io::Result<SynthSplits> {
    let pairs = generate(cfg);
    if pairs.len() < 3 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the synthetic corpus needs at least 3 pairs to split into train/valid/test, got {}",
                pairs.len()
            ),
        ));
    }
    std::fs::create_dir_all(dir)?;
    let splits = split_indices(&pairs);
    let mut paths = Vec::with_capacity(3);
    for (name, idx) in ["train", "valid", "test"].iter().zip(&splits) {
        let src = dir.join(format!("{name}.{SRC_LANG}"));
        let tgt = dir.join(format!("{name}.{TGT_LANG}"));
        write_lines(&src, idx.iter().map(|&i| pairs[i].0.as_str()))?;
        write_lines(&tgt, idx.iter().map(|&i| pairs[i].1.as_str()))?;
        paths.push((src, tgt));
    }
    let mut paths = paths.into_iter();
    Ok(SynthSplits {
        train: paths.next().expect("three splits"),
        valid: paths.next().expect("three splits"),
        test: paths.next().expect("three splits"),
        counts: [splits[0].len(), splits[1].len(), splits[2].len()],
    })
}

fn write_lines<'a>(path: &Path, lines: impl Iterator<Item = &'a str>) -> io::Result<()> {
    let mut w = BufWriter::new(File::create(path)?);
    for line in lines {
        w.write_all(line.as_bytes())?;
        w.write_all(b"\n")?;
    }
    w.flush()
}

/// Every word type the source grammar can produce, sorted (139 types).
pub fn source_vocab() -> Vec<String> {
    let mut v: Vec<String> = lexicon().into_iter().map(|e| e.src).collect();
    v.sort();
    v.dedup();
    v
}

/// Every word type the target grammar can produce, sorted (225 types).
pub fn target_vocab() -> Vec<String> {
    let mut v: Vec<String> = lexicon().into_iter().flat_map(|e| e.tgt).collect();
    v.sort();
    v.dedup();
    v
}

// ---------------------------------------------------------------------------------------------
// Lexicon
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Gender {
    Masc,
    Fem,
    Neut,
}

use Gender::{Fem, Masc, Neut};

/// Agreement endings of determiners, adjectives and relative pronouns.
fn ending(g: Gender, plural: bool) -> &'static str {
    match (g, plural) {
        (Masc, false) => "o",
        (Fem, false) => "a",
        (Neut, false) => "e",
        (Masc, true) => "os",
        (Fem, true) => "as",
        (Neut, true) => "es",
    }
}

/// `stem` + agreement ending.
fn agree(stem: &str, g: Gender, plural: bool) -> String {
    format!("{stem}{}", ending(g, plural))
}

/// Target noun: the bare stem in the singular, stem + `en` in the plural (gender is invisible
/// on the noun itself, as in German: it has to be looked up to inflect its dependents).
fn noun_form(stem: &str, plural: bool) -> String {
    if plural { format!("{stem}en") } else { stem.to_string() }
}

/// Target verb: stem + `et` with a singular subject, stem + `ont` with a plural one.
fn verb_form(stem: &str, plural: bool) -> String {
    format!("{stem}{}", if plural { "ont" } else { "et" })
}

/// Every inflected target form, built once, so rendering allocates no words.
struct Forms {
    /// `[singular, plural]` per noun.
    nouns: Vec<[String; 2]>,
    /// `[gender][singular, plural]` per agreeing stem: the adjectives, then the determiners
    /// ([`Det::agree_id`]), then the relative pronouns ([`REL_SUBJ_ID`], [`REL_OBJ_ID`]).
    agree: Vec<[[String; 2]; 3]>,
    /// `[singular, plural]` per verb: intransitive, transitive, then `say` verbs ([`verb_id`]).
    verbs: Vec<[String; 2]>,
}

/// Index of the subject relative pronoun in [`Forms::agree`].
const REL_SUBJ_ID: usize = ADJS.len() + 5;
/// Index of the object relative pronoun in [`Forms::agree`].
const REL_OBJ_ID: usize = ADJS.len() + 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VerbClass {
    Intr,
    Trans,
    Say,
}

/// Index of a verb in [`Forms::verbs`].
fn verb_id(class: VerbClass, v: usize) -> usize {
    match class {
        VerbClass::Intr => v,
        VerbClass::Trans => INTR.len() + v,
        VerbClass::Say => INTR.len() + TRANS.len() + v,
    }
}

fn verb_lex(id: usize) -> &'static VerbLex {
    INTR.iter().chain(&TRANS).chain(&SAY).nth(id).expect("verb id")
}

fn forms() -> &'static Forms {
    static FORMS: std::sync::OnceLock<Forms> = std::sync::OnceLock::new();
    FORMS.get_or_init(|| {
        let dets = [Det::The, Det::A, Det::This, Det::Some, Det::Every];
        let stems = ADJS
            .iter()
            .map(|a| a.1)
            .chain(dets.iter().map(|d| d.stem()))
            .chain([REL_SUBJ_STEM, REL_OBJ_STEM]);
        let agree_all = |stem: &str| [Masc, Fem, Neut].map(|g| [false, true].map(|pl| agree(stem, g, pl)));
        Forms {
            nouns: NOUNS.iter().map(|n| [false, true].map(|pl| noun_form(n.xx, pl))).collect(),
            agree: stems.map(agree_all).collect(),
            verbs: INTR
                .iter()
                .chain(&TRANS)
                .chain(&SAY)
                .map(|v| [false, true].map(|pl| verb_form(v.2, pl)))
                .collect(),
        }
    })
}

fn agree_form(id: usize, g: Gender, plural: bool) -> &'static str {
    &forms().agree[id][g as usize][usize::from(plural)]
}

struct NounLex {
    sg: &'static str,
    pl: &'static str,
    xx: &'static str,
    gender: Gender,
    animate: bool,
}

const fn noun(
    sg: &'static str,
    pl: &'static str,
    xx: &'static str,
    gender: Gender,
    animate: bool,
) -> NounLex {
    NounLex { sg, pl, xx, gender, animate }
}

/// The first `ANIMATE` nouns are animate (the only possible subjects and subject-relative
/// antecedents), the others inanimate (the only nouns in prepositional phrases).
const ANIMATE: usize = 12;

/// 24 nouns: 12 animate, 12 inanimate; 8 of each gender.
const NOUNS: [NounLex; 24] = [
    noun("dog", "dogs", "vark", Masc, true),
    noun("horse", "horses", "hrosk", Masc, true),
    noun("man", "men", "drom", Masc, true),
    noun("king", "kings", "ruvald", Masc, true),
    noun("cat", "cats", "mirl", Fem, true),
    noun("woman", "women", "selv", Fem, true),
    noun("queen", "queens", "ravin", Fem, true),
    noun("bird", "birds", "fjul", Fem, true),
    noun("child", "children", "tukk", Neut, true),
    noun("teacher", "teachers", "lernik", Neut, true),
    noun("farmer", "farmers", "bondel", Neut, true),
    noun("girl", "girls", "jentik", Neut, true),
    noun("house", "houses", "dust", Masc, false),
    noun("tree", "trees", "bjark", Masc, false),
    noun("river", "rivers", "flom", Masc, false),
    noun("stone", "stones", "stenk", Masc, false),
    noun("book", "books", "bokel", Fem, false),
    noun("garden", "gardens", "gardol", Fem, false),
    noun("ball", "balls", "kulp", Fem, false),
    noun("table", "tables", "tavl", Fem, false),
    noun("car", "cars", "vogn", Neut, false),
    noun("letter", "letters", "brevt", Neut, false),
    noun("apple", "apples", "aplet", Neut, false),
    noun("window", "windows", "fenst", Neut, false),
];

/// 12 adjectives: (English, target stem).
const ADJS: [(&str, &str); 12] = [
    ("big", "grend"),
    ("small", "pik"),
    ("old", "vetr"),
    ("young", "nuv"),
    ("red", "rub"),
    ("black", "swart"),
    ("white", "alb"),
    ("happy", "fel"),
    ("angry", "grim"),
    ("quiet", "stil"),
    ("strong", "fort"),
    ("clever", "sagh"),
];

/// Verbs: (English singular, English plural, target stem).
type VerbLex = (&'static str, &'static str, &'static str);

/// 8 intransitive verbs.
const INTR: [VerbLex; 8] = [
    ("sleeps", "sleep", "dorm"),
    ("runs", "run", "kurr"),
    ("laughs", "laugh", "rid"),
    ("sings", "sing", "kant"),
    ("waits", "wait", "atend"),
    ("swims", "swim", "nat"),
    ("dances", "dance", "bal"),
    ("cries", "cry", "plor"),
];

/// 14 transitive verbs.
const TRANS: [VerbLex; 14] = [
    ("sees", "see", "vid"),
    ("likes", "like", "am"),
    ("hears", "hear", "aud"),
    ("finds", "find", "trov"),
    ("follows", "follow", "sek"),
    ("helps", "help", "jut"),
    ("calls", "call", "vok"),
    ("paints", "paint", "ping"),
    ("carries", "carry", "port"),
    ("watches", "watch", "spek"),
    ("visits", "visit", "visk"),
    ("feeds", "feed", "nutr"),
    ("chases", "chase", "jag"),
    ("buys", "buy", "kop"),
];

/// 4 verbs taking a `that`-clause.
const SAY: [VerbLex; 4] = [
    ("says", "say", "dik"),
    ("thinks", "think", "pens"),
    ("believes", "believe", "kred"),
    ("hopes", "hope", "sper"),
];

/// 6 adverbs of frequency.
const ADVS: [(&str, &str); 6] = [
    ("often", "spes"),
    ("never", "nunk"),
    ("always", "semp"),
    ("sometimes", "kwalv"),
    ("rarely", "rarl"),
    ("usually", "solit"),
];

/// 6 prepositions.
const PREPS: [(&str, &str); 6] =
    [("in", "ind"), ("with", "kon"), ("near", "pres"), ("behind", "post"), ("under", "unt"), ("on", "sur")];

/// 4 subordinating conjunctions.
const SUBORDS: [(&str, &str); 4] =
    [("because", "kar"), ("when", "kwan"), ("if", "se"), ("although", "malgr")];

/// 2 coordinating conjunctions.
const CONJS: [(&str, &str); 2] = [("and", "ok"), ("but", "sed")];

/// `that` introducing a complement clause.
const COMP: (&str, &str) = ("that", "dat");
/// Stems of the relative pronoun (source `that`): subject and object relatives.
const REL_SUBJ_STEM: &str = "wel";
const REL_OBJ_STEM: &str = "wen";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Det {
    /// No determiner (plural only): `dogs sleep .`
    Bare,
    /// `the` → `l-`
    The,
    /// `a`/`an` → `un-` (singular only)
    A,
    /// `this`/`these` → `est-`
    This,
    /// `some` → `kel-` (plural only)
    Some,
    /// `every` → `tot-` (singular only)
    Every,
}

impl Det {
    fn source(self, plural: bool, next: &str) -> &'static str {
        match self {
            Det::Bare => unreachable!("a bare noun phrase has no determiner"),
            Det::The => "the",
            Det::A if next.starts_with(['a', 'e', 'i', 'o', 'u']) => "an",
            Det::A => "a",
            Det::This if plural => "these",
            Det::This => "this",
            Det::Some => "some",
            Det::Every => "every",
        }
    }

    /// Index in [`Forms::agree`].
    fn agree_id(self) -> usize {
        ADJS.len()
            + match self {
                Det::Bare => unreachable!("a bare noun phrase has no determiner"),
                Det::The => 0,
                Det::A => 1,
                Det::This => 2,
                Det::Some => 3,
                Det::Every => 4,
            }
    }

    fn stem(self) -> &'static str {
        match self {
            Det::Bare => unreachable!("a bare noun phrase has no determiner"),
            Det::The => "l",
            Det::A => "un",
            Det::This => "est",
            Det::Some => "kel",
            Det::Every => "tot",
        }
    }
}

/// One lexicon entry: a source word and the target words it can become.
struct LexEntry {
    src: String,
    tgt: Vec<String>,
}

/// The whole lexicon (every source form with all its target forms).
fn lexicon() -> Vec<LexEntry> {
    let e = |src: &str, tgt: Vec<String>| LexEntry { src: src.to_string(), tgt };
    let genders = [Masc, Fem, Neut];
    let all_forms = |stem: &str, numbers: &[bool]| -> Vec<String> {
        let mut v = Vec::new();
        for &pl in numbers {
            for g in genders {
                v.push(agree(stem, g, pl));
            }
        }
        v
    };
    let mut lex = Vec::new();
    for n in &NOUNS {
        lex.push(e(n.sg, vec![noun_form(n.xx, false)]));
        lex.push(e(n.pl, vec![noun_form(n.xx, true)]));
    }
    for (en, stem) in ADJS {
        lex.push(e(en, all_forms(stem, &[false, true])));
    }
    for (sg, pl, stem) in INTR.iter().chain(&TRANS).chain(&SAY) {
        lex.push(e(sg, vec![verb_form(stem, false)]));
        lex.push(e(pl, vec![verb_form(stem, true)]));
    }
    for (en, xx) in ADVS.iter().chain(&PREPS).chain(&SUBORDS).chain(&CONJS) {
        lex.push(e(en, vec![xx.to_string()]));
    }
    let mut that = vec![COMP.1.to_string()];
    that.extend(all_forms(REL_SUBJ_STEM, &[false, true]));
    that.extend(all_forms(REL_OBJ_STEM, &[false, true]));
    lex.push(e(COMP.0, that));
    lex.push(e("the", all_forms(Det::The.stem(), &[false, true])));
    lex.push(e("a", all_forms(Det::A.stem(), &[false])));
    lex.push(e("an", all_forms(Det::A.stem(), &[false])));
    lex.push(e("this", all_forms(Det::This.stem(), &[false])));
    lex.push(e("these", all_forms(Det::This.stem(), &[true])));
    lex.push(e("some", all_forms(Det::Some.stem(), &[true])));
    lex.push(e("every", all_forms(Det::Every.stem(), &[false])));
    lex.push(e(".", vec![".".to_string()]));
    lex
}

// ---------------------------------------------------------------------------------------------
// Syntax trees
// ---------------------------------------------------------------------------------------------

/// Noun phrase: `[det] adj* noun [relative clause]`.
#[derive(Debug, Clone)]
struct Np {
    det: Det,
    /// Adjectives in source order (at most 2, distinct).
    adjs: Vec<usize>,
    noun: usize,
    plural: bool,
    rel: Option<Box<Rel>>,
}

/// Predicate of a clause.
#[derive(Debug, Clone)]
enum Pred {
    /// Intransitive verb.
    Intr(usize),
    /// Transitive verb and object.
    Trans(usize, Np),
    /// `says that …`: a verb with a complement clause (never in relative clauses).
    Say(usize, Box<Clause>),
}

/// Main, subordinate or complement clause: `subject [adverb] predicate [pp]`.
#[derive(Debug, Clone)]
struct Clause {
    subj: Np,
    adv: Option<usize>,
    pred: Pred,
    /// Prepositional phrase (never with a `Say` predicate, never in relative clauses).
    pp: Option<Pp>,
}

/// `preposition np` (the np has no relative clause).
#[derive(Debug, Clone)]
struct Pp {
    prep: usize,
    np: Np,
}

/// Relative clause, attached to a noun phrase (its antecedent).
#[derive(Debug, Clone)]
enum Rel {
    /// `that [adverb] verb [object]`: the antecedent is the subject (animate antecedents only).
    Subj { adv: Option<usize>, pred: Pred },
    /// `that subject [adverb] verb`: the antecedent is the object of a transitive verb.
    Obj { subj: Np, adv: Option<usize>, verb: usize },
}

/// A main clause with an optional subordinate clause after it.
#[derive(Debug, Clone)]
struct Main {
    /// Coordinating conjunction before this clause (ignored for the first one).
    conj: usize,
    clause: Clause,
    sub: Option<(usize, Clause)>,
}

/// `main (conj main)* .`
#[derive(Debug, Clone)]
struct Sentence {
    mains: Vec<Main>,
}

// ---------------------------------------------------------------------------------------------
// Growing sentences
// ---------------------------------------------------------------------------------------------

/// Relative clauses nest at most this deep (`the dog that sees the cat that the man likes`).
const MAX_REL_DEPTH: u8 = 2;
/// Complement clauses nest at most this deep (`… says that … thinks that …`).
const MAX_COMP_DEPTH: u8 = 2;

/// The operations that grow a sentence; each adds a fixed number of source tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// bare plural np → `det …` (+1)
    Det,
    /// np with < 2 adjectives → one more (+1)
    Adj,
    /// clause or relative clause without an adverb → one (+1)
    Adv,
    /// intransitive clause or subject relative → transitive with a bare object (+1)
    Trans,
    /// clause → clause with `prep nouns` (+2)
    Pp,
    /// animate np → np `that verb` (+2)
    RelSubj,
    /// np → np `that nouns verb` (+3)
    RelObj,
    /// intransitive clause → `… says that nouns verb` (+3)
    Say,
    /// main clause → `… because nouns verb` (+3)
    Sub,
    /// sentence → one more main clause `and nouns verb` (+3)
    Coord,
}

const OPS: [Op; 10] =
    [Op::Det, Op::Adj, Op::Adv, Op::Trans, Op::Pp, Op::RelSubj, Op::RelObj, Op::Say, Op::Sub, Op::Coord];

impl Op {
    fn cost(self) -> usize {
        match self {
            Op::Det | Op::Adj | Op::Adv | Op::Trans => 1,
            Op::Pp | Op::RelSubj => 2,
            Op::RelObj | Op::Say | Op::Sub | Op::Coord => 3,
        }
    }

    /// Relative frequency of the operation, given its number of sites (> 0), among those
    /// that fit. Per operation, except `Det`, which is per bare noun phrase so that most noun
    /// phrases get a determiner however many the other operations create.
    fn weight(self, sites: usize) -> u64 {
        match self {
            Op::Det => 4 * sites as u64,
            Op::Adj => 4,
            Op::Adv => 2,
            Op::Trans => 8,
            Op::Pp => 3,
            Op::RelSubj => 2,
            Op::RelObj => 1,
            Op::Say => 2,
            Op::Sub => 3,
            Op::Coord => 5,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct NpCtx {
    /// Number of relative clauses around this np.
    rel_depth: u8,
    in_pp: bool,
}

#[derive(Debug, Clone, Copy)]
struct ClauseCtx {
    /// Number of complement clauses around (and including) this clause.
    comp_depth: u8,
}

/// A place where an operation may apply.
type Flow = std::ops::ControlFlow<()>;

enum Site<'a> {
    Np(&'a mut Np, NpCtx),
    Clause(&'a mut Clause, ClauseCtx),
    Rel(&'a mut Rel),
    Main(&'a mut Main),
}

fn eligible(site: &Site<'_>, op: Op) -> bool {
    match (site, op) {
        (Site::Np(np, _), Op::Det) => np.det == Det::Bare,
        (Site::Np(np, _), Op::Adj) => np.adjs.len() < 2,
        (Site::Np(np, ctx), Op::RelSubj) => {
            np.rel.is_none() && !ctx.in_pp && ctx.rel_depth < MAX_REL_DEPTH && NOUNS[np.noun].animate
        }
        (Site::Np(np, ctx), Op::RelObj) => np.rel.is_none() && !ctx.in_pp && ctx.rel_depth < MAX_REL_DEPTH,
        (Site::Clause(c, _), Op::Adv) => c.adv.is_none(),
        (Site::Clause(c, _), Op::Trans) => matches!(c.pred, Pred::Intr(_)),
        (Site::Clause(c, _), Op::Pp) => c.pp.is_none() && !matches!(c.pred, Pred::Say(..)),
        (Site::Clause(c, ctx), Op::Say) => {
            matches!(c.pred, Pred::Intr(_)) && c.pp.is_none() && ctx.comp_depth < MAX_COMP_DEPTH
        }
        (Site::Rel(Rel::Subj { adv, .. } | Rel::Obj { adv, .. }), Op::Adv) => adv.is_none(),
        (Site::Rel(Rel::Subj { pred, .. }), Op::Trans) => matches!(pred, Pred::Intr(_)),
        (Site::Main(m), Op::Sub) => m.sub.is_none(),
        _ => false,
    }
}

/// Visits every site in a fixed order (the order defines "the k-th site"); `f` may stop the
/// walk, and must when it changed the tree.
fn walk_sentence(s: &mut Sentence, f: &mut dyn FnMut(Site<'_>) -> Flow) -> Flow {
    for m in &mut s.mains {
        f(Site::Main(&mut *m))?;
        walk_clause(&mut m.clause, ClauseCtx { comp_depth: 0 }, f)?;
        if let Some((_, c)) = &mut m.sub {
            walk_clause(c, ClauseCtx { comp_depth: 0 }, f)?;
        }
    }
    Flow::Continue(())
}

fn walk_clause(c: &mut Clause, ctx: ClauseCtx, f: &mut dyn FnMut(Site<'_>) -> Flow) -> Flow {
    f(Site::Clause(&mut *c, ctx))?;
    let top = NpCtx { rel_depth: 0, in_pp: false };
    walk_np(&mut c.subj, top, f)?;
    match &mut c.pred {
        Pred::Intr(_) => {}
        Pred::Trans(_, obj) => walk_np(obj, top, f)?,
        Pred::Say(_, comp) => walk_clause(comp, ClauseCtx { comp_depth: ctx.comp_depth + 1 }, f)?,
    }
    if let Some(pp) = &mut c.pp {
        walk_np(&mut pp.np, NpCtx { rel_depth: 0, in_pp: true }, f)?;
    }
    Flow::Continue(())
}

fn walk_np(np: &mut Np, ctx: NpCtx, f: &mut dyn FnMut(Site<'_>) -> Flow) -> Flow {
    f(Site::Np(&mut *np, ctx))?;
    if let Some(rel) = np.rel.as_deref_mut() {
        let inner = NpCtx { rel_depth: ctx.rel_depth + 1, in_pp: false };
        f(Site::Rel(&mut *rel))?;
        match rel {
            Rel::Subj { pred, .. } => match pred {
                Pred::Intr(_) => {}
                Pred::Trans(_, obj) => walk_np(obj, inner, f)?,
                Pred::Say(..) => unreachable!("no complement clauses in relative clauses"),
            },
            Rel::Obj { subj, .. } => walk_np(subj, inner, f)?,
        }
    }
    Flow::Continue(())
}

fn pick(rng: &mut SplitMix64, n: usize) -> usize {
    rng.below(n as u64) as usize
}

/// A bare plural np (`dogs`), animate or inanimate as asked, or any noun (`None`).
fn bare_np(rng: &mut SplitMix64, animate: Option<bool>) -> Np {
    let noun = match animate {
        Some(true) => pick(rng, ANIMATE),
        Some(false) => ANIMATE + pick(rng, NOUNS.len() - ANIMATE),
        None => pick(rng, NOUNS.len()),
    };
    Np { det: Det::Bare, adjs: Vec::new(), noun, plural: true, rel: None }
}

/// `nouns verb`, the smallest clause.
fn minimal_clause(rng: &mut SplitMix64) -> Clause {
    let subj = bare_np(rng, Some(true));
    Clause { subj, adv: None, pred: Pred::Intr(pick(rng, INTR.len())), pp: None }
}

fn conj(rng: &mut SplitMix64) -> usize {
    // `and` three times as often as `but`.
    usize::from(pick(rng, 4) == 0)
}

fn mutate(site: Site<'_>, op: Op, rng: &mut SplitMix64) {
    match (site, op) {
        (Site::Np(np, _), Op::Det) => {
            np.plural = pick(rng, 2) == 1;
            np.det = determiner(np.plural, pick(rng, 20));
        }
        (Site::Np(np, _), Op::Adj) => add_adj(np, rng),
        (Site::Np(np, _), Op::RelSubj) => {
            np.rel = Some(Box::new(Rel::Subj { adv: None, pred: Pred::Intr(pick(rng, INTR.len())) }));
        }
        (Site::Np(np, _), Op::RelObj) => {
            let subj = bare_np(rng, Some(true));
            np.rel = Some(Box::new(Rel::Obj { subj, adv: None, verb: pick(rng, TRANS.len()) }));
        }
        (Site::Clause(c, _), Op::Adv) => c.adv = Some(pick(rng, ADVS.len())),
        (Site::Clause(c, _), Op::Trans) => {
            let verb = pick(rng, TRANS.len());
            c.pred = Pred::Trans(verb, bare_np(rng, None));
        }
        (Site::Clause(c, _), Op::Pp) => {
            let prep = pick(rng, PREPS.len());
            c.pp = Some(Pp { prep, np: bare_np(rng, Some(false)) });
        }
        (Site::Clause(c, _), Op::Say) => {
            let verb = pick(rng, SAY.len());
            c.pred = Pred::Say(verb, Box::new(minimal_clause(rng)));
        }
        (Site::Rel(Rel::Subj { adv, .. } | Rel::Obj { adv, .. }), Op::Adv) => {
            *adv = Some(pick(rng, ADVS.len()));
        }
        (Site::Rel(Rel::Subj { pred, .. }), Op::Trans) => {
            let verb = pick(rng, TRANS.len());
            *pred = Pred::Trans(verb, bare_np(rng, None));
        }
        (Site::Main(m), Op::Sub) => {
            let sub = pick(rng, SUBORDS.len());
            m.sub = Some((sub, minimal_clause(rng)));
        }
        _ => unreachable!("operation applied to an ineligible site"),
    }
}

/// The determiner a draw `r` (`0..20`) gives a plural or a singular np: `the` half the time.
fn determiner(plural: bool, r: usize) -> Det {
    if plural {
        match r {
            0..10 => Det::The,
            10..14 => Det::Some,
            _ => Det::This,
        }
    } else {
        match r {
            0..10 => Det::The,
            10..15 => Det::A,
            15..18 => Det::This,
            _ => Det::Every,
        }
    }
}

/// Inserts an adjective `np` does not have yet at a random place among its adjectives.
fn add_adj(np: &mut Np, rng: &mut SplitMix64) {
    let adj = loop {
        let a = pick(rng, ADJS.len());
        if !np.adjs.contains(&a) {
            break a;
        }
    };
    let at = pick(rng, np.adjs.len() + 1);
    np.adjs.insert(at, adj);
}

/// Counts, for every operation, the sites where it may apply.
fn count_sites(s: &mut Sentence) -> [usize; OPS.len()] {
    let mut counts = [0usize; OPS.len()];
    counts[OPS.len() - 1] = 1; // Coord: always possible, at the sentence
    let _always_continues = walk_sentence(s, &mut |site| {
        // The same conditions as `eligible`, unrolled (this is the hot loop); the test
        // `count_sites_agrees_with_eligible` keeps the two in step.
        let mut add = |op: Op, yes: bool| counts[op as usize] += usize::from(yes);
        match site {
            Site::Np(np, ctx) => {
                add(Op::Det, np.det == Det::Bare);
                add(Op::Adj, np.adjs.len() < 2);
                let rel = np.rel.is_none() && !ctx.in_pp && ctx.rel_depth < MAX_REL_DEPTH;
                add(Op::RelObj, rel);
                add(Op::RelSubj, rel && NOUNS[np.noun].animate);
            }
            Site::Clause(c, ctx) => {
                let intr = matches!(c.pred, Pred::Intr(_));
                add(Op::Adv, c.adv.is_none());
                add(Op::Trans, intr);
                add(Op::Pp, c.pp.is_none() && !matches!(c.pred, Pred::Say(..)));
                add(Op::Say, intr && c.pp.is_none() && ctx.comp_depth < MAX_COMP_DEPTH);
            }
            Site::Rel(Rel::Subj { adv, pred }) => {
                add(Op::Adv, adv.is_none());
                add(Op::Trans, matches!(pred, Pred::Intr(_)));
            }
            Site::Rel(Rel::Obj { adv, .. }) => add(Op::Adv, adv.is_none()),
            Site::Main(m) => add(Op::Sub, m.sub.is_none()),
        }
        Flow::Continue(())
    });
    counts
}

/// Applies `op` at its `k`-th eligible site (in walk order).
fn apply(s: &mut Sentence, op: Op, mut k: usize, rng: &mut SplitMix64) {
    if op == Op::Coord {
        let at = pick(rng, s.mains.len() + 1);
        let main = Main { conj: conj(rng), clause: minimal_clause(rng), sub: None };
        s.mains.insert(at, main);
        return;
    }
    let flow = walk_sentence(s, &mut |site| {
        if !eligible(&site, op) {
            return Flow::Continue(());
        }
        if k > 0 {
            k -= 1;
            return Flow::Continue(());
        }
        mutate(site, op, rng);
        Flow::Break(())
    });
    debug_assert!(flow.is_break(), "site index out of range");
}

/// Grows a sentence of `len` source tokens (fewer only if no operation fits, which the
/// cost-1 operations make rare).
fn grow(rng: &mut SplitMix64, len: usize) -> Sentence {
    let mut s = Sentence { mains: vec![Main { conj: 0, clause: minimal_clause(rng), sub: None }] };
    let mut have = MIN_POSSIBLE_TOKENS;
    while have < len {
        let room = len - have;
        let counts = count_sites(&mut s);
        let mut weights = [0u64; OPS.len()];
        for (i, op) in OPS.iter().enumerate() {
            if counts[i] > 0 && op.cost() <= room {
                weights[i] = op.weight(counts[i]);
            }
        }
        let total: u64 = weights.iter().sum();
        if total == 0 {
            break;
        }
        let mut r = rng.below(total);
        let i = weights.iter().position(|&w| {
            if r < w {
                true
            } else {
                r -= w;
                false
            }
        });
        let i = i.expect("r < total");
        let k = pick(rng, counts[i]);
        apply(&mut s, OPS[i], k, rng);
        have += OPS[i].cost();
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Rendering both sides
// ---------------------------------------------------------------------------------------------

/// What a token is, for the tests (and the alignment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Det,
    Adj,
    Noun,
    RelPron,
    Verb,
    Adv,
    Prep,
    Comp,
    Subord,
    Conj,
    Period,
}

/// The kind of a clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClauseKind {
    Main,
    Sub,
    Comp,
    SubjRel,
    ObjRel,
}

impl ClauseKind {
    fn verb_final(self) -> bool {
        self != ClauseKind::Main
    }
}

#[derive(Debug, Clone)]
#[cfg_attr(not(test), allow(dead_code))] // the annotations are read by the tests
struct SrcTok {
    word: &'static str,
    role: Role,
    /// Innermost clause containing the token (`usize::MAX` for the period and conjunctions).
    clause: usize,
    /// Innermost noun phrase containing the token (det, adj, noun; the relative pronoun
    /// points to its antecedent).
    np: Option<usize>,
}

#[derive(Debug, Clone)]
#[cfg_attr(not(test), allow(dead_code))] // the annotations are read by the tests
struct NpInfo {
    gender: Gender,
    plural: bool,
}

#[derive(Debug, Clone)]
#[cfg_attr(not(test), allow(dead_code))] // the annotations are read by the tests
struct ClauseInfo {
    kind: ClauseKind,
    parent: Option<usize>,
    /// Source index of the finite verb.
    verb: usize,
}

/// A rendered pair: source tokens in order and target tokens as (source index, word).
#[derive(Debug, Clone, Default)]
struct Rendered {
    src: Vec<SrcTok>,
    tgt: Vec<(usize, &'static str)>,
    nps: Vec<NpInfo>,
    clauses: Vec<ClauseInfo>,
}

impl Rendered {
    fn source_string(&self) -> String {
        self.src.iter().map(|t| t.word).collect::<Vec<_>>().join(" ")
    }

    fn target_string(&self) -> String {
        self.tgt.iter().map(|&(_, w)| w).collect::<Vec<_>>().join(" ")
    }

    fn alignment(&self) -> Vec<usize> {
        self.tgt.iter().map(|&(i, _)| i).collect()
    }

    fn push(&mut self, word: &'static str, role: Role, clause: usize, np: Option<usize>) -> usize {
        self.src.push(SrcTok { word, role, clause, np });
        self.src.len() - 1
    }

    fn new_clause(&mut self, kind: ClauseKind, parent: Option<usize>) -> usize {
        self.clauses.push(ClauseInfo { kind, parent, verb: usize::MAX });
        self.clauses.len() - 1
    }

    /// Appends a target token translating source token `i`.
    fn emit(&mut self, i: usize, word: &'static str) {
        self.tgt.push((i, word));
    }

    /// Source: `[det] adj* noun [rel]`; target: `[det] noun adj*(mirrored) [rel]`.
    fn np(&mut self, np: &Np, clause: usize) {
        let lex = &NOUNS[np.noun];
        let (g, pl) = (lex.gender, np.plural);
        let id = self.nps.len();
        self.nps.push(NpInfo { gender: g, plural: pl });
        let noun_src = if pl { lex.pl } else { lex.sg };
        if np.det != Det::Bare {
            let next = np.adjs.first().map_or(noun_src, |&a| ADJS[a].0);
            let i = self.push(np.det.source(pl, next), Role::Det, clause, Some(id));
            self.emit(i, agree_form(np.det.agree_id(), g, pl));
        }
        let first_adj = self.src.len();
        for &a in &np.adjs {
            self.push(ADJS[a].0, Role::Adj, clause, Some(id));
        }
        let i = self.push(noun_src, Role::Noun, clause, Some(id));
        self.emit(i, forms().nouns[np.noun][usize::from(pl)].as_str());
        for (k, &a) in np.adjs.iter().enumerate().rev() {
            self.emit(first_adj + k, agree_form(a, g, pl));
        }
        if let Some(rel) = &np.rel {
            self.rel(rel, id, g, pl, clause);
        }
    }

    /// Subject relative: `that [adv] verb [obj]` → `wel- [obj] [adv] verb`;
    /// object relative: `that subj [adv] verb` → `wen- subj [adv] verb`.
    fn rel(&mut self, rel: &Rel, antecedent: usize, g: Gender, pl: bool, parent: usize) {
        let (kind, pron) = match rel {
            Rel::Subj { .. } => (ClauseKind::SubjRel, REL_SUBJ_ID),
            Rel::Obj { .. } => (ClauseKind::ObjRel, REL_OBJ_ID),
        };
        let c = self.new_clause(kind, Some(parent));
        let i = self.push(COMP.0, Role::RelPron, c, Some(antecedent));
        self.emit(i, agree_form(pron, g, pl));
        match rel {
            Rel::Subj { adv, pred } => {
                let adv = self.adverb(*adv, c);
                let (verb, obj) = match pred {
                    Pred::Intr(v) => (self.verb(verb_id(VerbClass::Intr, *v), pl, c), None),
                    Pred::Trans(v, o) => (self.verb(verb_id(VerbClass::Trans, *v), pl, c), Some(o)),
                    Pred::Say(..) => unreachable!("no complement clauses in relative clauses"),
                };
                if let Some(o) = obj {
                    self.np(o, c);
                }
                self.emit_all([adv, Some(verb)]);
            }
            Rel::Obj { subj, adv, verb } => {
                self.np(subj, c);
                let adv = self.adverb(*adv, c);
                let verb = self.verb(verb_id(VerbClass::Trans, *verb), subj.plural, c);
                self.emit_all([adv, Some(verb)]);
            }
        }
    }

    fn emit_all<const N: usize>(&mut self, toks: [Option<(usize, &'static str)>; N]) {
        for (i, w) in toks.into_iter().flatten() {
            self.emit(i, w);
        }
    }

    /// Pushes the source adverb; returns its target token.
    fn adverb(&mut self, adv: Option<usize>, clause: usize) -> Option<(usize, &'static str)> {
        adv.map(|a| (self.push(ADVS[a].0, Role::Adv, clause, None), ADVS[a].1))
    }

    /// Pushes the source verb; returns its target token.
    fn verb(&mut self, id: usize, plural: bool, clause: usize) -> (usize, &'static str) {
        let v = verb_lex(id);
        let i = self.push(if plural { v.1 } else { v.0 }, Role::Verb, clause, None);
        self.clauses[clause].verb = i;
        (i, forms().verbs[id][usize::from(plural)].as_str())
    }

    /// Source: `[intro] subj [adv] verb (obj | that clause) [pp]`.
    /// Target, main clause: `subj verb [adv] (obj | dat clause) [pp]` (verb second);
    /// other clauses: `[intro] subj [obj] [pp] [adv] verb [dat clause]` (verb final, a
    /// complement clause extraposed after it). A clause has a pp or a complement, never both.
    fn clause(
        &mut self,
        cl: &Clause,
        kind: ClauseKind,
        parent: Option<usize>,
        intro: Option<(&'static str, &'static str)>,
    ) {
        let c = self.new_clause(kind, parent);
        if let Some((en, xx)) = intro {
            let role = if kind == ClauseKind::Comp { Role::Comp } else { Role::Subord };
            let i = self.push(en, role, c, None);
            self.emit(i, xx);
        }
        self.np(&cl.subj, c);
        let adv = self.adverb(cl.adv, c);
        let pl = cl.subj.plural;
        let (class, v) = match &cl.pred {
            Pred::Intr(v) => (VerbClass::Intr, *v),
            Pred::Trans(v, _) => (VerbClass::Trans, *v),
            Pred::Say(v, _) => (VerbClass::Say, *v),
        };
        let verb = self.verb(verb_id(class, v), pl, c);
        if !kind.verb_final() {
            self.emit_all([Some(verb), adv]);
            self.object_complement_pp(cl, c);
        } else if matches!(cl.pred, Pred::Say(..)) {
            // Extraposition: the complement clause follows the clause-final verb.
            self.emit_all([adv, Some(verb)]);
            self.object_complement_pp(cl, c);
        } else {
            self.object_complement_pp(cl, c);
            self.emit_all([adv, Some(verb)]);
        }
    }

    /// Renders, in source order, the object or the complement clause, then the pp.
    fn object_complement_pp(&mut self, cl: &Clause, c: usize) {
        match &cl.pred {
            Pred::Intr(_) => {}
            Pred::Trans(_, o) => self.np(o, c),
            Pred::Say(_, inner) => self.clause(inner, ClauseKind::Comp, Some(c), Some(COMP)),
        }
        if let Some(pp) = &cl.pp {
            let i = self.push(PREPS[pp.prep].0, Role::Prep, c, None);
            self.emit(i, PREPS[pp.prep].1);
            self.np(&pp.np, c);
        }
    }

    fn sentence(&mut self, s: &Sentence) {
        for (k, m) in s.mains.iter().enumerate() {
            if k > 0 {
                let (en, xx) = CONJS[m.conj];
                let i = self.push(en, Role::Conj, usize::MAX, None);
                self.emit(i, xx);
            }
            self.clause(&m.clause, ClauseKind::Main, None, None);
            if let Some((sub, cl)) = &m.sub {
                self.clause(cl, ClauseKind::Sub, None, Some(SUBORDS[*sub]));
            }
        }
        let i = self.push(".", Role::Period, usize::MAX, None);
        self.emit(i, ".");
    }
}

fn render(s: &Sentence) -> Rendered {
    let mut r = Rendered::default();
    r.sentence(s);
    debug_assert_eq!(r.src.len(), r.tgt.len());
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: usize, seed: u64) -> SynthConfig {
        SynthConfig { pairs, seed, ..SynthConfig::default() }
    }

    fn default_corpus() -> &'static Vec<AlignedPair> {
        static CORPUS: std::sync::OnceLock<Vec<AlignedPair>> = std::sync::OnceLock::new();
        CORPUS.get_or_init(|| generate_aligned(&SynthConfig::default()))
    }

    /// Re-grows the first `n` sentences of a config with their annotations (the same stream
    /// as `generate_aligned`, without dedup — fine for property checks).
    fn rendered(n: usize, seed: u64) -> Vec<Rendered> {
        let (lo, hi) = SynthConfig::default().length_range();
        let mut rng = SplitMix64::new(seed);
        (0..n)
            .map(|_| {
                let len = lo + rng.below((hi - lo + 1) as u64) as usize;
                render(&grow(&mut rng, len))
            })
            .collect()
    }

    fn np(det: Det, adjs: &[&str], noun: &str, rel: Option<Rel>) -> Np {
        let (noun, plural) = NOUNS
            .iter()
            .enumerate()
            .find_map(|(i, n)| {
                if n.sg == noun {
                    Some((i, false))
                } else if n.pl == noun {
                    Some((i, true))
                } else {
                    None
                }
            })
            .expect("known noun");
        let adjs =
            adjs.iter().map(|a| ADJS.iter().position(|x| x.0 == *a).expect("known adjective")).collect();
        Np { det, adjs, noun, plural, rel: rel.map(Box::new) }
    }

    fn idx(list: &[VerbLex], w: &str) -> usize {
        list.iter().position(|v| v.0 == w || v.1 == w).expect("known verb")
    }

    fn clause(subj: Np, pred: Pred) -> Clause {
        Clause { subj, adv: None, pred, pp: None }
    }

    fn both(s: &Sentence) -> (String, String) {
        let r = render(s);
        (r.source_string(), r.target_string())
    }

    fn one(c: Clause) -> Sentence {
        Sentence { mains: vec![Main { conj: 0, clause: c, sub: None }] }
    }

    // --- determinism ------------------------------------------------------------------------

    #[test]
    fn same_config_same_corpus_and_seed_matters() {
        let a = generate(&cfg(2_000, 7));
        let b = generate(&cfg(2_000, 7));
        assert_eq!(a, b);
        let c = generate(&cfg(2_000, 8));
        assert_ne!(a, c);
        let same = a.iter().zip(&c).filter(|(x, y)| x == y).count();
        assert!(same < 100, "{same} identical pairs at the same positions for two seeds");
    }

    #[test]
    fn fewer_pairs_is_a_prefix() {
        let small = generate(&cfg(300, 3));
        let big = generate(&cfg(1_000, 3));
        assert_eq!(small[..], big[..300]);
    }

    #[test]
    fn golden_pairs_for_seed_1() {
        let got = generate(&cfg(4, 1));
        let want: [(&str, &str); 4] = GOLDEN;
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.0.as_str(), g.1.as_str()), w);
        }
        assert_eq!(got.len(), 4);
    }

    /// The first pairs for seed 1: any change to the generator (lexicon, weights, random
    /// stream) changes them. Update only on purpose, and say so in the changelog: the corpus
    /// of every earlier run changes with it.
    const GOLDEN: [(&str, &str); 4] = [
        (
            "these happy young children sometimes visit a letter that dogs see under these books because these dogs rarely call these queens on tables and birds believe that men sing but teachers hear the tables although teachers run .",
            "estes tukken nuves feles viskont kwalv une brevt wene varken vidont unt estas bokelen kar estos varken estas ravinen sur tavlen rarl vokont ok fjulen kredont dat dromen kantont sed lerniken audont las tavlen malgr lerniken kurront .",
        ),
        ("the girls carry the stones on the tables .", "les jentiken portont los stenken sur las tavlen ."),
        (
            "a horse always sings and girls watch gardens .",
            "uno hrosk kantet semp ok jentiken spekont gardolen .",
        ),
        ("these birds chase women .", "estas fjulen jagont selven ."),
    ];

    #[test]
    fn count_sites_agrees_with_eligible() {
        for (i, op) in OPS.iter().enumerate() {
            assert_eq!(*op as usize, i);
        }
        let mut rng = SplitMix64::new(5);
        for len in 3..=80 {
            for _ in 0..20 {
                let mut s = grow(&mut rng, len);
                let mut slow = [0usize; OPS.len()];
                slow[Op::Coord as usize] = 1;
                let _ = walk_sentence(&mut s, &mut |site| {
                    for op in OPS {
                        slow[op as usize] += usize::from(eligible(&site, op));
                    }
                    Flow::Continue(())
                });
                assert_eq!(count_sites(&mut s), slow);
            }
        }
    }

    // --- lengths ------------------------------------------------------------------------------

    fn bucket(len: usize) -> usize {
        ((len - 1) / 10).min(6)
    }

    #[test]
    fn lengths_cover_3_to_60_plus_and_respect_the_limits() {
        let corpus = default_corpus();
        assert_eq!(corpus.len(), 20_000);
        let lens: Vec<usize> = corpus.iter().map(|p| p.src.split(' ').count()).collect();
        let (min, max) = (*lens.iter().min().unwrap(), *lens.iter().max().unwrap());
        assert_eq!(min, 3);
        assert!((60..=64).contains(&max), "max {max}");
        let mut hist = [0usize; 7];
        for &l in &lens {
            hist[bucket(l)] += 1;
        }
        // Roughly uniform: every 10-token bucket holds 12–20 % of the corpus (3–10, with only
        // 8 lengths and a few hundred distinct 3-token sentences, 10–13 %).
        assert!(hist[0] > 2_000 && hist[0] < 2_700, "{hist:?}");
        for (b, &n) in hist.iter().enumerate().take(6).skip(1) {
            assert!(n > 2_400 && n < 4_000, "bucket {b}: {n} ({hist:?})");
        }
        assert!(hist[6] > 600, "61+: {hist:?}");
        for p in corpus {
            assert_eq!(p.src.split(' ').count(), p.tgt.split(' ').count());
        }
    }

    #[test]
    fn custom_length_range_is_respected() {
        let c = SynthConfig { pairs: 2_000, seed: 5, min_tokens: 12, max_tokens: 20 };
        let pairs = generate(&c);
        assert_eq!(pairs.len(), 2_000);
        for (s, _) in &pairs {
            let n = s.split(' ').count();
            assert!((12..=20).contains(&n), "{n}: {s}");
        }
        // Degenerate range: only so many 3-token sentences exist (12 animate nouns × 8 verbs).
        let tiny = generate(&SynthConfig { pairs: 500, seed: 1, min_tokens: 0, max_tokens: 3 });
        assert_eq!(tiny.len(), 96);
    }

    #[test]
    fn grown_sentences_have_the_asked_length() {
        let mut rng = SplitMix64::new(11);
        let mut short = 0;
        for len in 3..=200 {
            for _ in 0..20 {
                let r = render(&grow(&mut rng, len));
                assert!(r.src.len() <= len);
                short += usize::from(r.src.len() < len);
            }
        }
        assert!(short < 10, "{short} sentences came out shorter than asked");
    }

    // --- the phenomena, on hand-built sentences -----------------------------------------------

    #[test]
    fn readme_examples() {
        // Adjectives after the noun, mirrored; agreement; object relative clause.
        let cat = np(
            Det::A,
            &["small"],
            "cat",
            Some(Rel::Obj { subj: np(Det::The, &[], "man", None), adv: None, verb: idx(&TRANS, "likes") }),
        );
        let s =
            one(clause(np(Det::The, &["big", "black"], "dog", None), Pred::Trans(idx(&TRANS, "sees"), cat)));
        assert_eq!(
            both(&s),
            (
                "the big black dog sees a small cat that the man likes .".into(),
                "lo vark swarto grendo videt una mirl pika wena lo drom amet .".into()
            )
        );

        // Shortest sentence, plural agreement.
        let s = one(clause(np(Det::Bare, &[], "dogs", None), Pred::Intr(idx(&INTR, "sleep"))));
        assert_eq!(both(&s), ("dogs sleep .".into(), "varken dormont .".into()));

        // Gender: the same adjective on a masculine, a feminine and a neuter noun; a/an.
        for (noun, want_src, want_tgt) in [
            ("horse", "an old horse runs .", "uno hrosk vetro kurret ."),
            ("queen", "an old queen runs .", "una ravin vetra kurret ."),
            ("child", "an old child runs .", "une tukk vetre kurret ."),
        ] {
            let s = one(clause(np(Det::A, &["old"], noun, None), Pred::Intr(idx(&INTR, "runs"))));
            assert_eq!(both(&s), (want_src.into(), want_tgt.into()));
        }

        // Verb second with an adverb in a main clause; verb final after object, pp and adverb
        // in a subordinate clause.
        let sub = Clause {
            subj: np(Det::This, &[], "women", None),
            adv: Some(0),
            pred: Pred::Trans(idx(&TRANS, "feed"), np(Det::The, &["white"], "horses", None)),
            pp: Some(Pp { prep: 3, np: np(Det::The, &[], "house", None) }),
        };
        let main = Clause {
            adv: Some(1),
            ..clause(np(Det::The, &[], "king", None), Pred::Intr(idx(&INTR, "laughs")))
        };
        let s = Sentence { mains: vec![Main { conj: 0, clause: main, sub: Some((0, sub)) }] };
        assert_eq!(
            both(&s),
            (
                "the king never laughs because these women often feed the white horses behind the house ."
                    .into(),
                "lo ruvald ridet nunk kar estas selven los hrosken albos post lo dust spes nutront .".into()
            )
        );

        // Complement clause: verb final, the verb before the extraposed complement.
        let inner = clause(
            np(Det::Every, &[], "farmer", None),
            Pred::Trans(idx(&TRANS, "buys"), np(Det::Some, &["red"], "apples", None)),
        );
        let mid = clause(np(Det::The, &[], "girls", None), Pred::Say(idx(&SAY, "think"), Box::new(inner)));
        let top = clause(np(Det::The, &[], "queen", None), Pred::Say(idx(&SAY, "says"), Box::new(mid)));
        assert_eq!(
            both(&one(top)),
            (
                "the queen says that the girls think that every farmer buys some red apples .".into(),
                "la ravin diket dat les jentiken pensont dat tote bondel keles apleten rubes kopet .".into()
            )
        );
    }

    #[test]
    fn coordination_keeps_main_clause_order() {
        let cat = np(Det::A, &[], "cat", Some(Rel::Subj { adv: None, pred: Pred::Intr(idx(&INTR, "runs")) }));
        let first = Main {
            conj: 0,
            clause: clause(np(Det::Bare, &[], "girls", None), Pred::Intr(idx(&INTR, "sing"))),
            sub: None,
        };
        let second = Main {
            conj: 1,
            clause: clause(cat, Pred::Trans(idx(&TRANS, "chases"), np(Det::The, &[], "birds", None))),
            sub: None,
        };
        let s = Sentence { mains: vec![first, second] };
        assert_eq!(
            both(&s),
            (
                "girls sing but a cat that runs chases the birds .".into(),
                "jentiken kantont sed una mirl wela kurret jaget las fjulen .".into()
            )
        );
    }

    #[test]
    fn nested_relatives_stack_verbs_at_the_end() {
        // the dog that sees the cat that the man likes sleeps .
        let cat = np(
            Det::The,
            &[],
            "cat",
            Some(Rel::Obj { subj: np(Det::The, &[], "man", None), adv: None, verb: idx(&TRANS, "likes") }),
        );
        let dog = np(
            Det::The,
            &[],
            "dog",
            Some(Rel::Subj { adv: None, pred: Pred::Trans(idx(&TRANS, "sees"), cat) }),
        );
        let s = one(clause(dog, Pred::Intr(idx(&INTR, "sleeps"))));
        assert_eq!(
            both(&s),
            (
                "the dog that sees the cat that the man likes sleeps .".into(),
                "lo vark welo la mirl wena lo drom amet videt dormet .".into()
            )
        );
    }

    // --- the phenomena, on the generated corpus ----------------------------------------------

    fn check_ending(word: &str, g: Gender, pl: bool) {
        // Independent of `ending`: the table as documented in the README.
        let want = match (g, pl) {
            (Masc, false) => "o",
            (Fem, false) => "a",
            (Neut, false) => "e",
            (Masc, true) => "os",
            (Fem, true) => "as",
            (Neut, true) => "es",
        };
        let ok = word.ends_with(want) && (pl || !word.ends_with('s'));
        assert!(ok, "{word} should end in -{want} ({g:?}, plural {pl})");
    }

    #[test]
    fn adjectives_follow_their_noun_in_mirror_order() {
        let mut seen = 0;
        for r in rendered(3_000, 21) {
            let tpos: HashMap<usize, usize> = r.tgt.iter().enumerate().map(|(j, &(i, _))| (i, j)).collect();
            for id in 0..r.nps.len() {
                let toks: Vec<usize> = (0..r.src.len())
                    .filter(|&i| r.src[i].np == Some(id) && r.src[i].role != Role::RelPron)
                    .collect();
                let noun = *toks.iter().find(|&&i| r.src[i].role == Role::Noun).unwrap();
                let adjs: Vec<usize> = toks.iter().copied().filter(|&i| r.src[i].role == Role::Adj).collect();
                for (k, &a) in adjs.iter().enumerate() {
                    seen += 1;
                    assert!(a < noun, "source adjective before its noun");
                    // target: noun, then the adjectives mirrored, contiguous
                    assert_eq!(tpos[&a], tpos[&noun] + adjs.len() - k, "{}", r.target_string());
                }
            }
        }
        assert!(seen > 1_000);
    }

    #[test]
    fn determiners_adjectives_and_relative_pronouns_agree_with_the_noun() {
        let mut checked = 0;
        for r in rendered(3_000, 22) {
            for &(i, word) in &r.tgt {
                let t = &r.src[i];
                if matches!(t.role, Role::Det | Role::Adj | Role::RelPron) {
                    let info = &r.nps[t.np.unwrap()];
                    check_ending(word, info.gender, info.plural);
                    checked += 1;
                }
                if t.role == Role::Noun {
                    let lex = NOUNS.iter().find(|n| n.sg == t.word || n.pl == t.word).unwrap();
                    let pl = lex.pl == t.word;
                    assert_eq!(pl, r.nps[t.np.unwrap()].plural);
                    assert_eq!(word, if pl { format!("{}en", lex.xx) } else { lex.xx.to_string() });
                }
            }
        }
        assert!(checked > 10_000);
    }

    #[test]
    fn subordinate_complement_and_relative_clauses_are_verb_final() {
        let mut checked = [0usize; 5];
        for r in rendered(3_000, 23) {
            let tpos: Vec<usize> = {
                let mut v = vec![0; r.src.len()];
                for (j, &(i, _)) in r.tgt.iter().enumerate() {
                    v[i] = j;
                }
                v
            };
            // Is clause `c` inside clause `a` (or equal)?
            let within = |mut c: usize, a: usize| loop {
                if c == a {
                    return true;
                }
                match r.clauses.get(c).and_then(|x| x.parent) {
                    Some(p) => c = p,
                    None => return false,
                }
            };
            for (c, info) in r.clauses.iter().enumerate() {
                let v = tpos[info.verb];
                let toks: Vec<usize> = (0..r.src.len()).filter(|&i| within(r.src[i].clause, c)).collect();
                // Tokens inside a complement clause of `c` (extraposed after its verb).
                let in_comp = |i: usize| {
                    let mut x = r.src[i].clause;
                    while let Some(p) = r.clauses[x].parent {
                        if p == c {
                            return r.clauses[x].kind == ClauseKind::Comp;
                        }
                        x = p;
                    }
                    false
                };
                checked[info.kind as usize] += 1;
                if info.kind.verb_final() {
                    for &i in &toks {
                        if i == info.verb {
                            continue;
                        }
                        if in_comp(i) {
                            assert!(tpos[i] > v, "complement after the verb: {}", r.target_string());
                        } else {
                            assert!(tpos[i] < v, "verb final ({:?}): {}", info.kind, r.target_string());
                        }
                    }
                } else {
                    // main clause: the verb follows the whole subject
                    let subj_end = toks
                        .iter()
                        .copied()
                        .filter(|&i| i < info.verb && r.src[i].role != Role::Adv)
                        .map(|i| tpos[i])
                        .max()
                        .unwrap();
                    assert_eq!(v, subj_end + 1, "verb second: {}", r.target_string());
                }
            }
        }
        assert!(checked.iter().all(|&n| n > 300), "{checked:?}");
    }

    #[test]
    fn alignment_is_a_permutation_that_translates_word_by_word() {
        let lex: HashMap<String, Vec<String>> = lexicon().into_iter().map(|e| (e.src, e.tgt)).collect();
        for p in default_corpus().iter().take(3_000) {
            let src: Vec<&str> = p.src.split(' ').collect();
            let tgt: Vec<&str> = p.tgt.split(' ').collect();
            let mut sorted = p.alignment.clone();
            sorted.sort();
            assert_eq!(sorted, (0..src.len()).collect::<Vec<_>>());
            for (j, &i) in p.alignment.iter().enumerate() {
                assert!(lex[src[i]].iter().any(|t| t == tgt[j]), "{} ↛ {}", src[i], tgt[j]);
            }
        }
    }

    // --- translation is a function, splits ----------------------------------------------------

    #[test]
    fn translation_is_a_function_and_sources_are_distinct() {
        let mut map: HashMap<&str, &str> = HashMap::new();
        for p in default_corpus() {
            assert!(map.insert(&p.src, &p.tgt).is_none(), "duplicate source {}", p.src);
        }
        // Across seeds too: the same source sentence always gets the same target.
        for p in generate_aligned(&cfg(20_000, 99)) {
            if let Some(t) = map.get(p.src.as_str()) {
                assert_eq!(*t, p.tgt, "{}", p.src);
            }
        }
    }

    #[test]
    fn output_is_normalised_lowercase_ascii() {
        for p in default_corpus().iter().take(2_000) {
            for side in [&p.src, &p.tgt] {
                assert_eq!(crate::normalize(side), *side);
                assert!(side.bytes().all(|b| b.is_ascii_lowercase() || b == b' ' || b == b'.'));
                assert!(side.ends_with(" ."));
                assert_eq!(side.matches('.').count(), 1);
            }
        }
    }

    #[test]
    fn lexicon_tables_are_consistent() {
        assert!(NOUNS[..ANIMATE].iter().all(|n| n.animate));
        assert!(NOUNS[ANIMATE..].iter().all(|n| !n.animate));
        for g in [Masc, Fem, Neut] {
            assert_eq!(NOUNS.iter().filter(|n| n.gender == g).count(), 8);
        }
        assert_eq!(agree_form(REL_SUBJ_ID, Fem, true), "welas");
        assert_eq!(agree_form(REL_OBJ_ID, Neut, false), "wene");
        assert_eq!(agree_form(Det::Every.agree_id(), Masc, false), "toto");
        assert_eq!(agree_form(Det::A.agree_id(), Fem, false), "una");
        assert_eq!(forms().verbs[verb_id(VerbClass::Say, 3)], ["speret", "speront"]);
        assert_eq!(verb_lex(verb_id(VerbClass::Trans, 13)).0, "buys");
    }

    #[test]
    fn vocabularies_are_small_and_unambiguous() {
        let (sv, tv) = (source_vocab(), target_vocab());
        assert_eq!((sv.len(), tv.len()), (139, 225));
        // No homographs: every target form belongs to exactly one source word, except that the
        // English determiner `a`/`an` share theirs.
        let mut sources = HashSet::new();
        for e in lexicon() {
            assert!(sources.insert(e.src.clone()), "{} has two lexicon entries", e.src);
        }
        let mut owner: HashMap<String, String> = HashMap::new();
        for e in lexicon() {
            for t in e.tgt {
                if let Some(prev) = owner.insert(t.clone(), e.src.clone()) {
                    assert!(prev == "a" && e.src == "an", "{t} translates both {prev} and {}", e.src);
                }
            }
        }
        // The corpus uses (almost) all of it.
        let mut used_s = HashSet::new();
        let mut used_t = HashSet::new();
        for p in default_corpus() {
            used_s.extend(p.src.split(' '));
            used_t.extend(p.tgt.split(' '));
        }
        assert!(used_s.iter().all(|w| sv.binary_search(&w.to_string()).is_ok()));
        assert!(used_t.iter().all(|w| tv.binary_search(&w.to_string()).is_ok()));
        assert_eq!(used_s.len(), sv.len());
        assert_eq!(used_t.len(), tv.len());
    }

    #[test]
    fn split_sizes_and_stratification() {
        assert_eq!(split_sizes(20_000), [18_000, 1_000, 1_000]);
        assert_eq!(split_sizes(3), [1, 1, 1]);
        assert_eq!(split_sizes(39), [37, 1, 1]);
        for n in (3..400).chain([1_000, 1_017, 4_321, 20_000, 20_019]) {
            let pairs: Vec<(String, String)> =
                (0..n).map(|i| (format!("w{} .", "x ".repeat(i % 37)), String::new())).collect();
            let s = split_indices(&pairs);
            assert_eq!([s[0].len(), s[1].len(), s[2].len()], split_sizes(n), "n = {n}");
            let mut all: Vec<usize> = s.concat();
            all.sort();
            assert_eq!(all, (0..n).collect::<Vec<_>>());
        }
    }

    #[test]
    fn write_splits_writes_disjoint_length_stratified_files() {
        let dir = std::env::temp_dir().join(format!("s2s-synth-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let c = SynthConfig::default();
        let out = write_splits(&c, &dir.join("nested")).unwrap();
        assert_eq!(out.counts, [18_000, 1_000, 1_000]);
        let read = |p: &Path| -> Vec<String> {
            std::fs::read_to_string(p).unwrap().lines().map(str::to_string).collect()
        };
        let mut sets = Vec::new();
        for (k, (s, t)) in [&out.train, &out.valid, &out.test].into_iter().enumerate() {
            assert!(s.ends_with(format!("{}.src", ["train", "valid", "test"][k])));
            let (src, tgt) = (read(s), read(t));
            assert_eq!(src.len(), out.counts[k]);
            assert_eq!(tgt.len(), out.counts[k]);
            assert!(std::fs::read_to_string(s).unwrap().ends_with(" .\n"));
            let pairs: HashSet<(String, String)> = src.into_iter().zip(tgt).collect();
            sets.push(pairs);
        }
        assert!(
            sets[0].is_disjoint(&sets[2]) && sets[0].is_disjoint(&sets[1]) && sets[1].is_disjoint(&sets[2])
        );
        // Every 10-token bucket (3–10, 11–20, …, 51–60, 61+) is in valid and test.
        for set in &sets[1..] {
            let mut hist = [0usize; 7];
            for (s, _) in set {
                hist[bucket(s.split(' ').count())] += 1;
            }
            assert!(hist.iter().all(|&n| n >= 40), "{hist:?}");
        }
        // The files hold exactly the generated corpus.
        let mut all: Vec<(String, String)> = sets.into_iter().flatten().collect();
        let mut want = generate(&c);
        all.sort();
        want.sort();
        assert_eq!(all, want);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn too_few_pairs_is_an_error() {
        let dir = std::env::temp_dir().join(format!("s2s-synth-few-{}", std::process::id()));
        let err = write_splits(&cfg(2, 1), &dir).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(!dir.exists());
    }
}
