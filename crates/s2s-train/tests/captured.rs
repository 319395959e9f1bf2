//! A training step captured as a graph and replayed gives the eager step's losses, to the bit,
//! for every model kind with dropout on (wgpu; lavapipe where there is no GPU: the same
//! launches, executed on the CPU). Without a Vulkan adapter the test fails under `CI=true` and
//! is skipped (with a message) elsewhere.

use s2s_kernels::ops::FusedAdam;
use s2s_models::attention::LuongScore;
use s2s_models::{AttentionRnnSpec, LstmSpec, ModelSpec, TransformerSpec};
use s2s_train::bench::BatchShape;
use s2s_train::captured::{FixedBatch, FixedBatchTrainer};

/// Tiny models of the four kinds, every dropout site on.
fn specs() -> Vec<(&'static str, ModelSpec)> {
    let rnn = AttentionRnnSpec { emb: 8, hidden: 12, dropout: 0.2, ..Default::default() };
    vec![
        (
            "lstm",
            ModelSpec::Lstm(LstmSpec { emb: 8, hidden: 12, layers: 2, dropout: 0.2, ..Default::default() }),
        ),
        ("bahdanau", ModelSpec::Bahdanau(AttentionRnnSpec { bidirectional: true, ..rnn.clone() })),
        ("luong", ModelSpec::Luong(AttentionRnnSpec { layers: 2, score: LuongScore::General, ..rnn })),
        (
            "transformer",
            ModelSpec::Transformer(TransformerSpec {
                d_model: 8,
                heads: 2,
                ffn: 16,
                enc_layers: 2,
                dec_layers: 2,
                dropout: 0.2,
                attention_dropout: 0.2,
                ..Default::default()
            }),
        ),
    ]
}

/// Steps compared: 2 eager, the capture's warm-up (eager), then replays.
const STEPS: usize = 50;

const SHAPE: BatchShape = BatchShape { sentences: 4, src_len: 5, tgt_len: 6, src_vocab: 20, tgt_vocab: 24 };

/// The losses' bits of `steps` steps from the same start, eager, or captured after
/// `capture_after` eager steps.
fn losses(
    spec: &ModelSpec,
    gpu: &burn::tensor::Device,
    steps: usize,
    capture_after: Option<usize>,
) -> Vec<u32> {
    let ad = gpu.clone().autodiff();
    ad.seed(3);
    let model = spec.init(SHAPE.src_vocab, SHAPE.tgt_vocab, &ad).unwrap();
    let batch = FixedBatch::random(SHAPE, &ad);
    let mut t =
        FixedBatchTrainer::new(model, &ad, batch, FusedAdam::new(0.9, 0.999, 1e-8, 0.0), 3e-3, 1.0, 77);
    let mut out = Vec::new();
    while out.len() < steps {
        if Some(out.len()) == capture_after {
            // The capture's warm-up is a real step, eager.
            out.push(t.capture().unwrap().to_bits());
            continue;
        }
        t.step(true, None).unwrap();
        out.push(t.loss().to_bits());
    }
    assert_eq!(t.captured(), capture_after.is_some());
    out
}

#[test]
fn replayed_training_equals_eager_training_to_the_bit() {
    let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() else { return };
    for (name, spec) in specs() {
        let eager = losses(&spec, &gpu, STEPS, None);
        let replayed = losses(&spec, &gpu, STEPS, Some(2));
        let f = |v: &[u32]| v.iter().map(|&b| f32::from_bits(b)).collect::<Vec<_>>();
        assert_eq!(eager, replayed, "{name}: eager {:?}\nreplayed {:?}", f(&eager), f(&replayed));
        // The steps learn (the same batch each step): the replay is not stuck on one step.
        let l = f(&eager);
        assert!(l[STEPS - 1] < l[3], "{name}: {l:?}");
    }
}
