//! The model interface's promises that search relies on, checked for every model kind:
//! incremental decoding equals the teacher-forced forward, padding changes nothing, attention
//! is a distribution that ignores padding, and reordering a state's rows
//! ([`s2s_decode::reorder`]) reorders what the next steps compute.

use burn::tensor::{Device, Int, Tensor, TensorData};
use s2s_decode::reorder;
use s2s_models::attention::LuongScore;
use s2s_models::cell::CellKind;
use s2s_models::{AttentionRnnSpec, LstmSpec, Model, ModelSpec, Source, TransformerSpec};

fn specs() -> Vec<ModelSpec> {
    let small = AttentionRnnSpec {
        emb: 8,
        hidden: 12,
        dropout: 0.0,
        attention_dim: 6,
        rank: 3,
        ..Default::default()
    };
    let mut v = vec![
        ModelSpec::Lstm(LstmSpec { emb: 8, hidden: 12, layers: 2, dropout: 0.0, ..Default::default() }),
        ModelSpec::Lstm(LstmSpec {
            emb: 8,
            hidden: 12,
            layers: 1,
            bidirectional: true,
            reverse_source: true,
            cell: CellKind::Gru,
            dropout: 0.0,
        }),
        ModelSpec::Bahdanau(small.clone()),
        ModelSpec::Bahdanau(AttentionRnnSpec { cell: CellKind::Rnn, layers: 2, ..small.clone() }),
    ];
    for score in [LuongScore::Dot, LuongScore::General, LuongScore::Concat, LuongScore::LowRank] {
        v.push(ModelSpec::Luong(AttentionRnnSpec {
            score,
            layers: 2,
            bidirectional: false,
            ..small.clone()
        }));
    }
    v.push(ModelSpec::Luong(AttentionRnnSpec { input_feeding: false, ..small }));
    let tiny = s2s_models::testing::tiny_transformer(0.0);
    v.push(ModelSpec::Transformer(tiny.clone()));
    v.push(ModelSpec::Transformer(TransformerSpec { pre_norm: false, tie_output: false, ..tiny }));
    v
}

fn model(spec: &ModelSpec, d: &Device) -> Model {
    // Tests run on parallel threads and share the device's generator: seed and draw under a
    // lock so the weights do not depend on scheduling.
    static INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = INIT.lock().unwrap_or_else(|e| e.into_inner());
    d.seed(7);
    spec.init(20, 17, d).unwrap()
}

fn ids(v: Vec<i64>, shape: [usize; 2], d: &Device) -> Tensor<2, Int> {
    Tensor::from_data(TensorData::new(v, shape), d)
}

fn max_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
    (a - b).abs().max().into_scalar::<f32>()
}

/// Two sources (lengths 5 and 3, padded) and a 4-token target prefix.
fn batch(d: &Device) -> (Source, Tensor<2, Int>) {
    let src = Source::new(&[5, 6, 7, 8, 3, 9, 10, 3, 0, 0], &[5, 3], 5, d);
    let tgt = ids(vec![2, 4, 5, 6, 2, 7, 8, 9], [2, 4], d);
    (src, tgt)
}

#[test]
fn incremental_decoding_equals_teacher_forcing() {
    let d = Device::flex();
    for spec in specs() {
        let m = model(&spec, &d);
        let (src, tgt) = batch(&d);
        let full = m.forward(&src, tgt.clone());
        let logp = burn::tensor::activation::log_softmax(full.logits, 2);
        let mut state = m.encode(&src);
        for t in 0..4 {
            let last = tgt.clone().narrow(1, t, 1).squeeze_dim::<1>(1);
            let (step, next) = m.decode_step(state, last);
            state = next;
            let want = logp.clone().narrow(1, t, 1).squeeze_dim::<2>(1);
            let diff = max_diff(step.log_probs(), want);
            assert!(diff < 1e-5, "{spec:?} step {t}: {diff}");
            if let (Some(a), Some(all)) = (step.attention, &full.attention) {
                assert!(
                    max_diff(a, all.clone().narrow(1, t, 1).squeeze_dim::<2>(1)) < 1e-5,
                    "{spec:?} attention"
                );
            }
        }
    }
}

#[test]
fn a_sentence_alone_or_padded_in_a_batch_gives_the_same_output() {
    let d = Device::flex();
    for spec in specs() {
        let m = model(&spec, &d);
        let (src, tgt) = batch(&d);
        let together = m.forward(&src, tgt.clone()).logits.narrow(0, 1, 1);
        let alone_src = Source::new(&[9, 10, 3], &[3], 3, &d);
        let alone = m.forward(&alone_src, tgt.narrow(0, 1, 1)).logits;
        let diff = max_diff(together, alone);
        assert!(diff < 1e-5, "{spec:?}: {diff}");
    }
}

#[test]
fn attention_is_a_distribution_with_zero_weight_on_padding() {
    let d = Device::flex();
    for spec in specs().into_iter().filter(|s| !matches!(s, ModelSpec::Lstm(_))) {
        let m = model(&spec, &d);
        let (src, tgt) = batch(&d);
        let att = m.forward(&src, tgt).attention.expect("attention models return weights"); // [2, 4, 5]
        let sums: Vec<f32> = att.clone().sum_dim(2).into_data().try_to_vec::<f32>().unwrap();
        assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-5), "{spec:?}: {sums:?}");
        let pad: Vec<f32> = att.narrow(0, 1, 1).narrow(2, 3, 2).into_data().try_to_vec::<f32>().unwrap();
        assert!(pad.iter().all(|&w| w == 0.0), "{spec:?}: {pad:?}");
    }
}

#[test]
fn selecting_rows_reorders_the_state() {
    let d = Device::flex();
    for spec in specs() {
        let m = model(&spec, &d);
        let (src, _) = batch(&d);
        let state = m.encode(&src);
        let swap = Tensor::<1, Int>::from_data(TensorData::new(vec![1i64, 0, 1], [3]), &d);
        let last = Tensor::<1, Int>::from_data(TensorData::new(vec![2i64, 2], [2]), &d);
        let (a, _) = m.decode_step(state.clone(), last);
        let last3 = Tensor::<1, Int>::from_data(TensorData::new(vec![2i64, 2, 2], [3]), &d);
        let (b, _) = m.decode_step(reorder::select(state, &swap, &[1, 0, 1]), last3);
        let a = a.log_probs();
        let want =
            Tensor::cat(vec![a.clone().narrow(0, 1, 1), a.clone().narrow(0, 0, 1), a.narrow(0, 1, 1)], 0);
        assert!(max_diff(b.log_probs(), want) < 1e-6, "{spec:?}");
    }
}

#[test]
fn no_position_sees_the_future() {
    let d = Device::flex();
    for spec in specs() {
        let m = model(&spec, &d);
        let (src, tgt) = batch(&d);
        let a = m.forward(&src, tgt.clone()).logits.narrow(1, 0, 2);
        let changed =
            Tensor::cat(vec![tgt.clone().narrow(1, 0, 2), ids(vec![11, 12, 13, 14], [2, 2], &d)], 1);
        let b = m.forward(&src, changed).logits.narrow(1, 0, 2);
        assert!(max_diff(a, b) < 1e-6, "{spec:?}");
    }
}

#[test]
fn decoding_after_a_reorder_equals_teacher_forcing_of_the_reordered_rows() {
    let d = Device::flex();
    for spec in specs() {
        let m = model(&spec, &d);
        let (src, tgt) = batch(&d);
        let swap = Tensor::<1, Int>::from_data(TensorData::new(vec![1i64, 0], [2]), &d);
        // Reference: the full masked forward of the two rows, swapped.
        let src_swapped = Source::new(&[9, 10, 3, 0, 0, 5, 6, 7, 8, 3], &[3, 5], 5, &d);
        let tgt_swapped = tgt.clone().select(0, swap.clone());
        let logp =
            burn::tensor::activation::log_softmax(m.forward(&src_swapped, tgt_swapped.clone()).logits, 2);
        let mut state = m.encode(&src);
        for t in 0..4 {
            if t == 2 {
                state = reorder::select(state, &swap, &[1, 0]);
            }
            let rows = if t < 2 { tgt.clone() } else { tgt_swapped.clone() };
            let (step, next) = m.decode_step(state, rows.narrow(1, t, 1).squeeze_dim::<1>(1));
            state = next;
            if t >= 2 {
                let want = logp.clone().narrow(1, t, 1).squeeze_dim::<2>(1);
                let diff = max_diff(step.log_probs(), want);
                assert!(diff < 1e-5, "{spec:?} step {t}: {diff}");
            }
        }
    }
}
