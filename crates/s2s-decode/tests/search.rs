//! Search over real (small, randomly initialised) models of every kind: beam 1 is greedy,
//! results do not depend on batch size or order, and the Transformer's cached decoding gives
//! what recomputing the whole prefix gives.

mod common;

use burn::tensor::{Device, Int, Tensor, TensorData};
use common::{LIMIT, source};
use s2s_decode::{
    BeamConfig, Hypothesis, Incremental, MaxLength, beam_search, beam_search_prefixed, beam_search_with,
    greedy, greedy_chunked, greedy_chunked_prefixed, greedy_prefixed,
};
use s2s_models::attention::LuongScore;
use s2s_models::{AttentionRnnSpec, LstmSpec, Model, ModelSpec, Source, Step};

fn models(d: &Device) -> Vec<(String, Model)> {
    let rnn = AttentionRnnSpec { emb: 8, hidden: 12, dropout: 0.0, ..Default::default() };
    let specs = [
        ModelSpec::Lstm(LstmSpec { emb: 8, hidden: 12, layers: 2, dropout: 0.0, ..Default::default() }),
        ModelSpec::Bahdanau(rnn.clone()),
        ModelSpec::Luong(AttentionRnnSpec { score: LuongScore::Dot, layers: 2, bidirectional: false, ..rnn }),
        ModelSpec::Transformer(s2s_models::testing::tiny_transformer(0.0)),
    ];
    // Tests run on parallel threads and the device's generator is shared: seed and draw under
    // one lock so every test gets the same weights.
    static INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = INIT.lock().unwrap_or_else(|e| e.into_inner());
    specs
        .into_iter()
        .map(|s| {
            d.seed(3);
            (s.kind().to_string(), s.init(16, 16, d).unwrap())
        })
        .collect()
}

/// Six sources of different lengths (ids 4..15, each ending in `</s>` = 3).
fn sentences() -> Vec<Vec<u32>> {
    vec![
        vec![4, 5, 6, 3],
        vec![7, 3],
        vec![8, 9, 10, 11, 12, 13, 3],
        vec![14, 15, 4, 3],
        vec![5, 3],
        vec![6, 7, 8, 9, 10, 3],
    ]
}

fn tokens(h: &[Hypothesis]) -> Vec<u32> {
    h[0].tokens.clone()
}

#[test]
fn beam_of_one_is_greedy() {
    let d = Device::flex();
    let src = source(&sentences(), &d);
    for (kind, m) in models(&d) {
        let g = greedy(&m, &src, LIMIT, false);
        let cfg = BeamConfig { beam: 1, alpha: 0.0, max_length: LIMIT, ..Default::default() };
        let b = beam_search(&m, &src, &cfg);
        for (gs, bs) in g.iter().zip(&b) {
            assert_eq!(gs.tokens, bs[0].tokens, "{kind}");
            assert!((gs.score - bs[0].score).abs() < 1e-4, "{kind}: {} vs {}", gs.score, bs[0].score);
        }
    }
}

/// Greedy search reading choices back every `k` steps (as on a GPU) gives what reading back
/// every step gives: rows that end inside a chunk, by `</s>` or by their limit, keep exactly
/// their tokens, score and attention.
#[test]
fn greedy_in_chunks_equals_greedy_step_by_step() {
    let d = Device::flex();
    let src = source(&sentences(), &d);
    let limit = MaxLength { a: 1.0, b: 3 };
    for (kind, model) in models(&d) {
        let m = NoEarlyEos(&model, 2);
        let one = greedy_chunked(&m, &src, limit, true, 1);
        let lens: Vec<usize> = one.iter().map(|h| h.tokens.len()).collect();
        assert!(lens.iter().any(|&l| l != lens[0]), "{kind}: rows should end at different steps {lens:?}");
        for k in [2, 3, 8, 64] {
            let chunked = greedy_chunked(&m, &src, limit, true, k);
            for (i, (a, b)) in one.iter().zip(&chunked).enumerate() {
                assert_eq!(a.tokens, b.tokens, "{kind} k={k} sentence {i}");
                assert!((a.score - b.score).abs() < 1e-6, "{kind} k={k}: {} vs {}", a.score, b.score);
                assert_eq!(a.attention, b.attention, "{kind} k={k} sentence {i} attention");
            }
        }
    }
}

/// Beam search picking each row's best tokens on the device (as on a GPU) finds what picking
/// them on the host finds: the same n-best lists, scores and attention, for a beam whose
/// `2·beam` candidates a row are fewer than the vocabulary and for one whose are more.
#[test]
fn beam_with_top_k_on_the_device_equals_on_the_host() {
    let d = Device::flex();
    let src = source(&sentences(), &d);
    for (kind, model) in models(&d) {
        let m = NoEarlyEos(&model, 2);
        for beam in [3, 10] {
            let cfg =
                BeamConfig { beam, nbest: beam, max_length: LIMIT, attention: true, ..Default::default() };
            let host = beam_search_with(&m, &src, &cfg, false);
            let device = beam_search_with(&m, &src, &cfg, true);
            assert!(host.iter().all(|h| h.len() == beam), "{kind} beam {beam}: full n-best lists");
            assert_eq!(host, device, "{kind} beam {beam}");
        }
    }
}

/// A model whose `</s>` is forbidden for the first `min` steps, so that untrained weights
/// still give outputs long enough for the invariance checks to mean something.
struct NoEarlyEos<'a>(&'a Model, usize);

impl Incremental for NoEarlyEos<'_> {
    type State = (s2s_models::DecodeState, usize);
    fn encode(&self, src: &Source) -> Self::State {
        (self.0.encode(src), 0)
    }
    fn step(&self, (state, t): Self::State, last: Tensor<1, Int>) -> (Step, Self::State) {
        let (mut step, next) = self.0.decode_step(state, last);
        if t < self.1 {
            let [_, v] = step.logits.dims();
            let mut bias = vec![0f32; v];
            bias[3] = -1e4; // </s>
            let bias = Tensor::<1>::from_data(TensorData::new(bias, [v]), &step.logits.device());
            step.logits = step.logits + bias.unsqueeze::<2>();
        }
        (step, (next, t + 1))
    }
    fn select(&self, (state, t): Self::State, indices: &Tensor<1, Int>, picked: &[usize]) -> Self::State {
        (s2s_decode::reorder::select(state, indices, picked), t)
    }
}

#[test]
fn translations_do_not_depend_on_batch_size_or_order() {
    let d = Device::flex();
    let all = sentences();
    for (kind, model) in models(&d) {
        let m = NoEarlyEos(&model, 3);
        for beam in [1, 4] {
            let cfg = BeamConfig { beam, max_length: LIMIT, ..Default::default() };
            let together: Vec<Vec<u32>> =
                beam_search(&m, &source(&all, &d), &cfg).iter().map(|h| tokens(h)).collect();
            assert!(
                together.iter().filter(|t| t.len() >= 2).count() >= 3,
                "{kind}: trivial outputs {together:?}"
            );
            for (i, s) in all.iter().enumerate() {
                let alone = beam_search(&m, &source(std::slice::from_ref(s), &d), &cfg);
                assert_eq!(tokens(&alone[0]), together[i], "{kind} beam {beam} sentence {i} alone");
            }
            let reversed: Vec<Vec<u32>> = all.iter().rev().cloned().collect();
            let back: Vec<Vec<u32>> =
                beam_search(&m, &source(&reversed, &d), &cfg).iter().rev().map(|h| tokens(h)).collect();
            assert_eq!(back, together, "{kind} beam {beam} reversed order");
        }
    }
}

/// Decoding that recomputes the full masked forward pass over the prefix at every step.
struct Uncached<'a>(&'a Model);

#[derive(Clone)]
struct Prefixes {
    src: Vec<Vec<u32>>,
    prefix: Vec<Vec<i64>>,
}

impl Incremental for Uncached<'_> {
    type State = Prefixes;
    fn encode(&self, _: &Source) -> Prefixes {
        unreachable!("built by the test")
    }
    fn step(&self, mut s: Prefixes, last: Tensor<1, Int>) -> (Step, Prefixes) {
        let d = last.device();
        let last: Vec<i64> = last.into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
        for (p, t) in s.prefix.iter_mut().zip(last) {
            p.push(t);
        }
        let t = s.prefix[0].len();
        let n = s.prefix.len();
        let tgt = Tensor::<2, Int>::from_data(TensorData::new(s.prefix.concat(), [n, t]), &d);
        let f = self.0.forward(&source(&s.src, &d), tgt);
        let v = f.logits.dims()[2];
        let logits = f.logits.narrow(1, t - 1, 1).reshape([n, v]);
        (Step { logits, attention: None }, s)
    }
    fn select(&self, s: Prefixes, _: &Tensor<1, Int>, picked: &[usize]) -> Prefixes {
        Prefixes {
            src: picked.iter().map(|&i| s.src[i].clone()).collect(),
            prefix: picked.iter().map(|&i| s.prefix[i].clone()).collect(),
        }
    }
}

/// Wraps [`Uncached`] so `encode` knows the sentences.
struct WithSource<'a>(Uncached<'a>, Vec<Vec<u32>>);

impl Incremental for WithSource<'_> {
    type State = Prefixes;
    fn encode(&self, _: &Source) -> Prefixes {
        Prefixes { src: self.1.clone(), prefix: vec![Vec::new(); self.1.len()] }
    }
    fn step(&self, s: Prefixes, last: Tensor<1, Int>) -> (Step, Prefixes) {
        self.0.step(s, last)
    }
    fn select(&self, s: Prefixes, indices: &Tensor<1, Int>, picked: &[usize]) -> Prefixes {
        self.0.select(s, indices, picked)
    }
}

#[test]
fn cached_decoding_equals_recomputing_the_prefix() {
    let d = Device::flex();
    let all = sentences();
    let src = source(&all, &d);
    for (kind, m) in models(&d) {
        let cfg = BeamConfig { beam: 3, nbest: 3, max_length: LIMIT, ..Default::default() };
        let cached = beam_search(&m, &src, &cfg);
        let uncached = beam_search(&WithSource(Uncached(&m), all.clone()), &src, &cfg);
        for (a, b) in cached.iter().zip(&uncached) {
            for (x, y) in a.iter().zip(b) {
                assert_eq!(x.tokens, y.tokens, "{kind}");
                assert!((x.score - y.score).abs() < 1e-4, "{kind}: {} vs {}", x.score, y.score);
            }
        }
    }
}

#[test]
fn attention_is_captured_per_output_token() {
    let d = Device::flex();
    let all = sentences();
    let src = source(&all, &d);
    for (kind, m) in models(&d).into_iter().skip(1) {
        let cfg = BeamConfig { beam: 2, attention: true, max_length: LIMIT, ..Default::default() };
        for (s, hyps) in all.iter().zip(beam_search(&m, &src, &cfg)) {
            let h = &hyps[0];
            let att = h.attention.as_ref().expect("attention asked for");
            assert!(att.len() == h.tokens.len() || att.len() == h.tokens.len() + 1, "{kind}");
            for row in att {
                assert_eq!(row.len(), s.len(), "{kind}");
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-4, "{kind}");
            }
        }
    }
}

/// Prefixes: every output starts with its row's prefix, however improbable (the same token
/// three times), by greedy search, greedy search in chunks and beam search (beam 1 without a
/// length penalty being greedy search, prefix and score included); a row without one searches
/// as without prefixes; greedy search given its own first tokens gives its output.
#[test]
fn outputs_start_with_their_prefixes() {
    let d = Device::flex();
    let src = source(&sentences(), &d);
    let limit = MaxLength { a: 1.0, b: 6 };
    let prefixes: Vec<Vec<u32>> =
        vec![vec![9, 9, 9], vec![], vec![4], vec![15, 14], vec![], vec![6, 6, 6, 6]];
    for (kind, model) in models(&d) {
        let m = NoEarlyEos(&model, 1);
        let plain = greedy(&m, &src, limit, false);
        let g = greedy_prefixed(&m, &src, limit, true, &prefixes);
        for (i, (h, p)) in g.iter().zip(&prefixes).enumerate() {
            assert!(h.tokens.starts_with(p), "{kind} {i}: {:?} vs {p:?}", h.tokens);
            if p.is_empty() {
                assert_eq!(h.tokens, plain[i].tokens, "{kind} {i}");
                assert!((h.score - plain[i].score).abs() < 1e-6, "{kind} {i}");
            }
        }
        for k in [2, 3, 8] {
            let chunked = greedy_chunked_prefixed(&m, &src, limit, true, k, &prefixes);
            for (a, b) in g.iter().zip(&chunked) {
                assert_eq!(a.tokens, b.tokens, "{kind} k={k}");
                assert!((a.score - b.score).abs() < 1e-6, "{kind} k={k}");
                assert_eq!(a.attention, b.attention, "{kind} k={k}");
            }
        }
        let cfg = BeamConfig { beam: 1, alpha: 0.0, max_length: limit, ..Default::default() };
        for (a, b) in g.iter().zip(beam_search_prefixed(&m, &src, &cfg, &prefixes)) {
            assert_eq!(a.tokens, b[0].tokens, "{kind}");
            assert!((a.score - b[0].score).abs() < 1e-4, "{kind}: {} vs {}", a.score, b[0].score);
        }
        let cfg = BeamConfig { beam: 4, nbest: 4, max_length: limit, ..Default::default() };
        for (n, p) in beam_search_prefixed(&m, &src, &cfg, &prefixes).iter().zip(&prefixes) {
            assert!(!n.is_empty() && n.iter().all(|h| h.tokens.starts_with(p)), "{kind}: {n:?} vs {p:?}");
        }
        let own: Vec<Vec<u32>> = plain.iter().map(|h| h.tokens.iter().take(2).copied().collect()).collect();
        for (a, b) in plain.iter().zip(greedy_prefixed(&m, &src, limit, false, &own)) {
            assert_eq!(a.tokens, b.tokens, "{kind}");
            assert!((a.score - b.score).abs() < 1e-6, "{kind}");
        }
    }
}
