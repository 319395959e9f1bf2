//! Helpers shared by the training tests.

use std::path::Path;

/// The tensor bytes of `dir`'s last checkpoint: its burnpack file after the header, which
/// carries per-run metadata.
pub fn last_weights(dir: &Path) -> Vec<u8> {
    let last = s2s_train::checkpoint::Checkpoints::new(dir).pointed("last").expect("pointer").expect("last");
    let w = std::fs::read(last.join("model.bpk")).expect("weights");
    let header = u32::from_le_bytes(w[6..10].try_into().expect("burnpack header")) as usize;
    w[10 + header..].to_vec()
}
