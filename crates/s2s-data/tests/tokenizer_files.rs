//! Tokenizers brought from files: a SentencePiece model segments as `spm_encode` does, and
//! `tokenizer.json` files of each model kind load with their specials found by name.
//!
//! The fixtures (`tests/fixtures/spm/`) are made by `scripts/make-spm-fixture.py` with the
//! `sentencepiece` package: two Unigram models trained on the built-in pair (`pair`: the
//! defaults; `extras`: byte fallback, user-defined and control symbols) and two BPE models
//! (`bpe`, `bpe-extras`), lines (1,013 for `pair` and `bpe`), and the pieces SentencePiece gives
//! each line.

use std::path::{Path, PathBuf};

use s2s_data::spm::SentencePiece;
use s2s_data::{BOS, DataError, EOS, PAD, SPECIALS, Tokenizer, TokenizerConfig, Tokenizers, UNK};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spm").join(name)
}

fn lines(name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    text.split_terminator('\n').map(str::to_string).collect()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("s2s-tokfiles-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Segments `LINES-lines.txt` with `NAME.model` and checks every line's pieces against
/// `NAME-pieces.txt`; returns the lines and how many pieces were unknown.
fn segments_as_spm_encode(name: &str, lines_of: &str) -> (Vec<String>, usize) {
    let model = fixture(&format!("{name}.model"));
    let sp = SentencePiece::from_file(&model).unwrap();
    let tok = Tokenizer::from_file(&model).unwrap();
    let (inputs, expected) = (lines(&format!("{lines_of}-lines.txt")), lines(&format!("{name}-pieces.txt")));
    assert_eq!(inputs.len(), expected.len());
    let mut unknown = 0;
    for (i, (line, want)) in inputs.iter().zip(&expected).enumerate() {
        let want: Vec<&str> = want.split(' ').filter(|p| !p.is_empty()).collect();
        let got: Vec<(u32, String)> = sp.encode_pieces(line);
        let pieces: Vec<&str> = got.iter().map(|(_, p)| p.as_str()).collect();
        assert_eq!(pieces, want, "{name} line {}: {line:?}", i + 1);
        // Through the toolkit's ids: the same pieces, <unk> where SentencePiece's is unknown.
        let ids = tok.encode(line);
        assert_eq!(ids.len(), want.len(), "{name} line {}", i + 1);
        for (&id, w) in ids.iter().zip(&want) {
            if sp.piece_id(w).is_some() {
                assert_eq!(tok.token(id), *w, "{name} line {}", i + 1);
            } else {
                assert_eq!(id, UNK, "{name} line {}: {w} is not a piece", i + 1);
                unknown += 1;
            }
        }
    }
    (inputs, unknown)
}

#[test]
fn a_sentencepiece_model_segments_every_line_as_spm_encode_does() {
    let (lines, unknown) = segments_as_spm_encode("pair", "pair");
    assert!(lines.len() >= 1000, "{} lines", lines.len());
    assert!(unknown > 0, "the fixture's extra lines hold characters the model never saw");
}

/// User-defined symbols (always one piece), a control symbol (never matched in text), byte
/// fallback (no unknown piece at all), `<pad>` at 3 and no character map.
#[test]
fn user_defined_control_and_byte_pieces_segment_as_spm_encode_does() {
    let (lines, unknown) = segments_as_spm_encode("extras", "extras");
    assert_eq!(unknown, 0, "byte fallback leaves nothing unknown");
    let tok = Tokenizer::from_file(&fixture("extras.model")).unwrap();
    let sp = SentencePiece::from_file(&fixture("extras.model")).unwrap();
    assert_eq!(tok.vocab_size(), sp.len(), "its own <pad> is used");
    // Every character comes back (as bytes where no piece has it); spaces are collapsed (and
    // a `▁` in the text is one, as in SentencePiece and in our own normalisation).
    for line in lines.iter().filter(|l| !l.contains('▁')) {
        let spaced: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
        assert_eq!(tok.decode(&tok.encode(line)), spaced.join(" "), "{line:?}");
    }
}

/// A BPE model: merges by score, not the Unigram search; unknown characters stay unknown (no
/// byte fallback, and the identity normaliser keeps the full-width and other odd characters).
#[test]
fn a_sentencepiece_bpe_model_segments_every_line_as_spm_encode_does() {
    let (lines, unknown) = segments_as_spm_encode("bpe", "pair");
    assert!(lines.len() >= 1000, "{} lines", lines.len());
    assert!(unknown > 0, "the fixture's extra lines hold characters the model never saw");
    // Not what the Unigram model of the same text makes of it: the merges are tested.
    let (bpe, uni) = (
        SentencePiece::from_file(&fixture("bpe.model")).unwrap(),
        SentencePiece::from_file(&fixture("pair.model")).unwrap(),
    );
    assert_eq!(bpe.proto().trainer.model_type, 2);
    let differ = lines.iter().filter(|l| {
        let pieces = |sp: &SentencePiece| sp.encode_pieces(l).into_iter().map(|(_, p)| p).collect::<Vec<_>>();
        pieces(&bpe) != pieces(&uni)
    });
    assert!(differ.count() > 100);
}

/// BPE with user-defined symbols (never merged with their neighbours), a control symbol and
/// byte fallback.
#[test]
fn bpe_with_user_defined_control_and_byte_pieces_segments_as_spm_encode_does() {
    let (lines, unknown) = segments_as_spm_encode("bpe-extras", "extras");
    assert_eq!(unknown, 0, "byte fallback leaves nothing unknown");
    let tok = Tokenizer::from_file(&fixture("bpe-extras.model")).unwrap();
    for line in lines.iter().filter(|l| !l.contains('▁')) {
        let spaced: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
        assert_eq!(tok.decode(&tok.encode(line)), spaced.join(" "), "{line:?}");
    }
}

#[test]
fn the_specials_are_ids_0_to_3_and_a_missing_pad_is_added() {
    let tok = Tokenizer::from_file(&fixture("pair.model")).unwrap();
    let sp = SentencePiece::from_file(&fixture("pair.model")).unwrap();
    // Trained with SentencePiece's defaults: <unk> 0, <s> 1, </s> 2, no <pad>.
    assert_eq!(tok.vocab_size(), sp.len() + 1);
    for (i, s) in SPECIALS.iter().enumerate() {
        assert_eq!(tok.token(i as u32), *s);
    }
    // Every piece of the file keeps its text under its new id.
    let mut seen: Vec<String> = (0..tok.vocab_size() as u32).map(|i| tok.token(i)).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), tok.vocab_size());
    let line = "the queen dances .";
    let mut ids = vec![BOS];
    ids.extend(tok.encode(line));
    ids.extend([EOS, PAD]);
    assert!(ids[1..ids.len() - 2].iter().all(|&i| i >= 4));
    assert_eq!(tok.decode(&ids), line);
    assert!(!tok.encode("<s> </s> <pad>").contains(&BOS), "text spelled like a special is text");
}

#[test]
fn a_brought_tokenizer_is_saved_whole_and_reads_back_the_same() {
    let dir = tmp("saved");
    let user = dir.join("user.model");
    std::fs::copy(fixture("pair.model"), &user).unwrap();
    let cfg = TokenizerConfig { file: Some(user.clone()), ..Default::default() };
    let toks = Tokenizers::from_config(&cfg).unwrap().unwrap();
    assert!(toks.joint);
    toks.save(&dir.join("run")).unwrap();
    // The run's copy needs nothing else: the user's file is gone when it is read.
    std::fs::remove_file(&user).unwrap();
    let dir = dir.join("run");
    let back = Tokenizers::load(&dir).unwrap();
    assert!(back.src.same_as(&toks.src).unwrap());
    for line in lines("pair-lines.txt").iter().take(50) {
        assert_eq!(back.src.encode(line), toks.src.encode(line));
    }
    // A saved tokenizer file can be brought again as it is.
    let again = Tokenizer::from_file(&dir.join("joint.json")).unwrap();
    assert!(again.same_as(&toks.src).unwrap());
    // Truncated: corrupt, naming the file.
    let f = dir.join("joint.json");
    let bytes = std::fs::read(&f).unwrap();
    std::fs::write(&f, &bytes[..bytes.len() / 2]).unwrap();
    let e = Tokenizers::load(&dir).unwrap_err();
    assert!(matches!(e, DataError::Corrupt { .. }) && e.to_string().contains("joint.json"), "{e}");
}

/// A `tokenizer.json` with the given model and added tokens.
fn tokenizer_json(
    model: serde_json::Value,
    specials: &[(&str, u32)],
    pre: &str,
    decoder: serde_json::Value,
) -> String {
    let added: Vec<serde_json::Value> = specials
        .iter()
        .map(|(t, id)| {
            serde_json::json!({"id": id, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": serde_json::from_str::<serde_json::Value>(pre).unwrap(),
        "post_processor": null, "decoder": decoder, "model": model,
    })
    .to_string()
}

#[test]
fn a_wordpiece_tokenizer_json_with_bert_specials_elsewhere() {
    let vocab = serde_json::json!({"the": 0, "dog": 1, "##s": 2, "[UNK]": 3, "run": 4, "[SEP]": 5,
        "[CLS]": 6, "[PAD]": 7, ".": 8, "cat": 9});
    let model = serde_json::json!({"type": "WordPiece", "unk_token": "[UNK]",
        "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": vocab});
    let specials = [("[UNK]", 3), ("[SEP]", 5), ("[CLS]", 6), ("[PAD]", 7)];
    let decoder = serde_json::json!({"type": "WordPiece", "prefix": "##", "cleanup": true});
    let dir = tmp("wordpiece");
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, tokenizer_json(model, &specials, r#"{"type": "BertPreTokenizer"}"#, decoder))
        .unwrap();
    let tok = Tokenizer::from_file(&path).unwrap();
    assert_eq!(tok.vocab_size(), 10);
    assert_eq!([0, 1, 2, 3].map(|i| tok.token(i)), ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]);
    let ids = tok.encode("the dogs run .");
    assert_eq!(ids.iter().map(|&i| tok.token(i)).collect::<Vec<_>>(), ["the", "dog", "##s", "run", "."]);
    assert_eq!(tok.decode(&ids), "the dogs run.");
    assert_eq!(tok.encode("the bird"), [tok.encode("the")[0], UNK]);
    assert!(tok.encode("[CLS] [SEP]").iter().all(|&i| i == UNK), "special added tokens in text are text");
}

#[test]
fn a_unigram_and_a_bpe_tokenizer_json() {
    let dir = tmp("unigram");
    let meta = r#"{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}"#;
    let decoder: serde_json::Value = serde_json::from_str(meta).unwrap();
    let vocab = serde_json::json!([
        ["<unk>", 0.0],
        ["▁the", -1.0],
        ["▁dog", -2.0],
        ["s", -3.0],
        ["<s>", 0.0],
        ["</s>", 0.0],
        ["▁", -4.0],
        ["d", -5.0],
        ["o", -5.0],
        ["g", -5.0]
    ]);
    let model = serde_json::json!({"type": "Unigram", "unk_id": 0, "vocab": vocab, "byte_fallback": false});
    let path = dir.join("unigram.json");
    std::fs::write(
        &path,
        tokenizer_json(model, &[("<unk>", 0), ("<s>", 4), ("</s>", 5)], meta, decoder.clone()),
    )
    .unwrap();
    let tok = Tokenizer::from_file(&path).unwrap();
    assert_eq!(tok.vocab_size(), 11, "ten pieces and an added <pad>");
    let ids = tok.encode("the dogs");
    assert_eq!(ids.iter().map(|&i| tok.token(i)).collect::<Vec<_>>(), ["▁the", "▁dog", "s"]);
    assert_eq!(tok.decode(&ids), "the dogs");

    let vocab = serde_json::json!({"<s>": 0, "</s>": 1, "<pad>": 2, "▁": 3, "a": 4, "b": 5, "▁a": 6});
    let model = serde_json::json!({"type": "BPE", "dropout": null, "unk_token": null,
        "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
        "byte_fallback": false, "vocab": vocab, "merges": [["▁", "a"]]});
    let path = dir.join("no-unk.json");
    std::fs::write(&path, tokenizer_json(model, &[("<s>", 0), ("</s>", 1), ("<pad>", 2)], meta, decoder))
        .unwrap();
    let e = Tokenizer::from_file(&path).unwrap_err().to_string();
    assert!(e.contains("no-unk.json") && e.contains("no unknown token") && e.contains("<unk>"), "{e}");
}

#[test]
fn files_that_are_no_tokenizer_are_refused_naming_the_file() {
    let dir = tmp("bad");
    for (name, bytes) in [
        ("empty.model", &b""[..]),
        ("text.model", b"the dog sings\n"),
        ("other.json", b"{\"level\": 3}"),
        ("plain.json", b"{\"vocab\": []}"),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let e = Tokenizer::from_file(&p).unwrap_err().to_string();
        assert!(e.contains(name), "{e}");
    }
    let half = dir.join("half.model");
    let bytes = std::fs::read(fixture("pair.model")).unwrap();
    std::fs::write(&half, &bytes[..bytes.len() / 3]).unwrap();
    let e = Tokenizer::from_file(&half).unwrap_err().to_string();
    assert!(e.contains("half.model"), "{e}");
    let both = TokenizerConfig { file: Some(half.clone()), src_file: Some(half), ..Default::default() };
    let e = Tokenizers::from_config(&both).unwrap_err().to_string();
    assert!(e.contains("--tokenizer") && e.contains("src_file"), "{e}");
}
