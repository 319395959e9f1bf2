//! On the CPU `translate` cuts each batch by sentence and decodes the parts side by side
//! (`s2s_train::evaluate::decode_split`, two parts by default): the same hypotheses as each
//! sentence decoded alone.
//! A test binary of its own, so that the split is made from the two-thread pool below and
//! its parts really run at once.

use burn::tensor::Device;
use s2s_data::BatchConfig;
use s2s_decode::{BeamConfig, MaxLength, beam_search, greedy};
use s2s_models::{AttentionRnnSpec, ModelSpec, Source, TransformerSpec};
use s2s_train::evaluate::{Search, decode_split, translate};

#[test]
fn batches_decoded_side_by_side_give_each_sentence_its_own_translation() {
    assert!(std::env::var_os("S2S_DECODE_PARTS").is_none(), "the default split is tested");
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
    pool.install(|| {
        assert!(decode_split().parallel(), "two threads: by default the parts run at once");
        let d = Device::flex();
        let sources: Vec<Vec<u32>> =
            (0..9u32).map(|i| (0..3 + i % 5).map(|j| 4 + (i * 7 + j * 3) % 40).collect()).collect();
        let limit = MaxLength { a: 0.0, b: 8 };
        let specs = [
            ModelSpec::Transformer(TransformerSpec { d_model: 16, heads: 2, ffn: 32, ..Default::default() }),
            ModelSpec::Luong(AttentionRnnSpec { emb: 16, hidden: 16, ..Default::default() }),
        ];
        for spec in specs {
            d.seed(7);
            let model = spec.init(48, 48, &d).expect("model");
            let alone = |s: &Vec<u32>, beam: usize| -> Vec<u32> {
                // As a batch collates it: `</s>` after the source.
                let s: Vec<u32> = s.iter().copied().chain([s2s_data::EOS]).collect();
                let src = Source::new(&s, &[s.len()], s.len(), &d);
                if beam == 1 {
                    greedy(&model, &src, limit, false).remove(0).tokens
                } else {
                    let cfg = BeamConfig { beam, max_length: limit, ..Default::default() };
                    beam_search(&model, &src, &cfg).remove(0).remove(0).tokens
                }
            };
            for beam in [1, 3] {
                let search = if beam == 1 {
                    Search::Greedy { limit, attention: false }
                } else {
                    Search::Beam(BeamConfig { beam, max_length: limit, ..Default::default() })
                };
                // Batches of a few sentences: several batches, each cut in two.
                let batch = BatchConfig { max_tokens: 30, ..Default::default() };
                let got = translate(&model, &sources, batch, &search, &d, false);
                let got: Vec<Vec<u32>> = got.into_iter().map(|h| h[0].tokens.clone()).collect();
                let want: Vec<Vec<u32>> = sources.iter().map(|s| alone(s, beam)).collect();
                assert!(want.iter().any(|t| t.len() >= 2), "{}: trivial outputs {want:?}", spec.kind());
                assert_eq!(got, want, "{} beam {beam}", spec.kind());
            }
        }
    });
}
