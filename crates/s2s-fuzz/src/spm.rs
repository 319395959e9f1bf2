//! SentencePiece `.model` files from any bytes (`s2s_data::spm`): reading never panics, and a
//! model that reads encodes and decodes any text without panicking, every id one of its pieces.

use s2s_data::spm::SentencePiece;

/// The property: `data` as a model file, then texts (fixed ones, and `data` read as text).
pub fn check(data: &[u8]) {
    let Ok(sp) = SentencePiece::from_bytes(data) else { return };
    let own = String::from_utf8_lossy(&data[data.len().saturating_sub(64)..]).into_owned();
    for text in ["", " ", "a b  c ", "<s> </s> <unk>", "\u{ff76}\u{ff9e} \u{2581}\t\u{0}x", own.as_str()] {
        let ids = sp.encode(text);
        assert!(ids.iter().all(|&i| (i as usize) < sp.len()), "an id outside the model for {text:?}");
        let _ = sp.decode(&ids);
        let _ = sp.normalize(text);
    }
}
