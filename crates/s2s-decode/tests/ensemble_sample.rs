//! Ensembles and sampling over real (small, randomly initialised) models of every kind.

mod common;

use burn::tensor::{Device, Int, Tensor, TensorData};
use common::{LIMIT, source};
use s2s_decode::{BeamConfig, Ensemble, Incremental, SampleConfig, beam_search, greedy, sample};
use s2s_models::{AttentionRnnSpec, LstmSpec, Model, ModelSpec, TransformerSpec};

fn models(d: &Device) -> Vec<Model> {
    let rnn = AttentionRnnSpec { emb: 8, hidden: 12, dropout: 0.0, ..Default::default() };
    let specs = [
        ModelSpec::Lstm(LstmSpec { emb: 8, hidden: 12, layers: 1, dropout: 0.0, ..Default::default() }),
        ModelSpec::Bahdanau(rnn),
        ModelSpec::Transformer(TransformerSpec {
            d_model: 8,
            heads: 2,
            ffn: 16,
            enc_layers: 1,
            dec_layers: 1,
            dropout: 0.0,
            attention_dropout: 0.0,
            ..Default::default()
        }),
    ];
    static INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = INIT.lock().unwrap_or_else(|e| e.into_inner());
    specs
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            d.seed(5 + i as u64);
            s.init(16, 16, d).unwrap()
        })
        .collect()
}

fn sentences() -> Vec<Vec<u32>> {
    vec![vec![4, 5, 6, 3], vec![7, 3], vec![8, 9, 10, 11, 12, 13, 3], vec![14, 15, 4, 3], vec![5, 3]]
}

fn host(t: Tensor<2>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

#[test]
fn an_ensemble_step_is_the_mean_of_its_members_log_probabilities() {
    let d = Device::flex();
    let ms = models(&d);
    let src = source(&sentences(), &d);
    let e = Ensemble::new(ms.iter().collect());
    let last = Tensor::<1, Int>::from_data(TensorData::new(vec![2i64; 5], [5]), &d);
    let (step, _) = e.step(e.encode(&src), last.clone());
    // The LSTM does not attend: the ensemble reports no attention.
    assert!(step.attention.is_none());
    let got = host(step.logits);
    let mut want = vec![0f32; got.len()];
    for m in &ms {
        let (s, _) = m.step(m.encode(&src), last.clone());
        for (w, v) in want.iter_mut().zip(host(s.log_probs())) {
            *w += v / ms.len() as f32;
        }
    }
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "{g} vs {w}");
    }
}

#[test]
fn an_ensemble_of_one_model_decodes_as_the_model() {
    let d = Device::flex();
    let src = source(&sentences(), &d);
    for m in models(&d) {
        let alone = greedy(&m, &src, LIMIT, false);
        let one = greedy(&Ensemble::new(vec![&m]), &src, LIMIT, false);
        let twice = greedy(&Ensemble::new(vec![&m, &m]), &src, LIMIT, false);
        for ((a, b), c) in alone.iter().zip(&one).zip(&twice) {
            assert_eq!(a.tokens, b.tokens);
            assert_eq!(a.tokens, c.tokens);
            assert!((a.score - b.score).abs() < 1e-4 && (a.score - c.score).abs() < 1e-4);
        }
    }
}

#[test]
fn an_ensemble_searches_with_beams_and_its_beam_of_one_is_its_greedy() {
    let d = Device::flex();
    let ms = models(&d);
    let src = source(&sentences(), &d);
    let e = Ensemble::new(ms.iter().collect());
    let g = greedy(&e, &src, LIMIT, false);
    let b1 =
        beam_search(&e, &src, &BeamConfig { beam: 1, alpha: 0.0, max_length: LIMIT, ..Default::default() });
    for (gs, bs) in g.iter().zip(&b1) {
        assert_eq!(gs.tokens, bs[0].tokens);
        assert!((gs.score - bs[0].score).abs() < 1e-4);
    }
    let b4 =
        beam_search(&e, &src, &BeamConfig { beam: 4, nbest: 4, max_length: LIMIT, ..Default::default() });
    assert!(b4.iter().all(|h| h.len() == 4));
}

#[test]
fn sampling_is_reproducible_and_does_not_depend_on_batching() {
    let d = Device::flex();
    let rows = sentences();
    for m in models(&d) {
        let cfg = SampleConfig { seed: 9, max_length: LIMIT, ..Default::default() };
        let all = sample(&m, &source(&rows, &d), &cfg, &[0, 1, 2, 3, 4]);
        let again = sample(&m, &source(&rows, &d), &cfg, &[0, 1, 2, 3, 4]);
        assert_eq!(all, again);
        // Each sentence alone, on its own index: the same draws (scores to rounding: a batch
        // of one sums its products in another order).
        for (i, r) in rows.iter().enumerate() {
            let one = sample(&m, &source(std::slice::from_ref(r), &d), &cfg, &[i as u64]);
            assert_eq!(one[0].tokens, all[i].tokens);
            assert!((one[0].score - all[i].score).abs() < 1e-4);
        }
        // Another seed gives other samples somewhere (random weights: a flat distribution).
        let other = sample(&m, &source(&rows, &d), &SampleConfig { seed: 10, ..cfg }, &[0, 1, 2, 3, 4]);
        assert_ne!(all, other);
        // Top-k 1 is greedy search, with the same score.
        let k1 = sample(&m, &source(&rows, &d), &SampleConfig { top_k: 1, ..cfg }, &[0, 1, 2, 3, 4]);
        let g = greedy(&m, &source(&rows, &d), LIMIT, false);
        for (a, b) in k1.iter().zip(&g) {
            assert_eq!(a.tokens, b.tokens);
            assert!((a.score - b.score).abs() < 1e-4);
        }
    }
}
