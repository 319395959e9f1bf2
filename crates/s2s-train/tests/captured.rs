//! A training step captured as a graph and replayed gives the eager step's losses and
//! parameters to the bit (see [`bits`]), for every model kind with dropout on (wgpu; lavapipe where there is no GPU: the same
//! launches, executed on the CPU). Without a Vulkan adapter the test fails under `CI=true` and
//! is skipped (with a message) elsewhere.

use s2s_kernels::ops::FusedAdam;
use s2s_models::{LstmSpec, ModelSpec, TransformerSpec};
use s2s_train::bench::{BatchShape, random_batch};
use s2s_train::captured::FixedBatchTrainer;
use s2s_train::step::StepSettings;

/// Tiny models of the four kinds, every dropout site on.
fn specs() -> Vec<(&'static str, ModelSpec)> {
    s2s_models::testing::tiny_specs(0.2)
}

/// Steps compared: 2 eager, the capture's warm-up (eager), then replays.
const STEPS: usize = 50;

const SHAPE: BatchShape = BatchShape { sentences: 4, src_len: 5, tgt_len: 6, src_vocab: 20, tgt_vocab: 24 };

/// The losses of `steps` steps from the same start, eager, or captured after `capture_after`
/// eager steps, and the trained model.
fn losses(
    spec: &ModelSpec,
    gpu: &burn::tensor::Device,
    steps: usize,
    capture_after: Option<usize>,
) -> (Vec<f32>, s2s_models::Model) {
    let ad = gpu.clone().autodiff();
    ad.seed(3);
    let model = spec.init(SHAPE.src_vocab, SHAPE.tgt_vocab, &ad).unwrap();
    let batch = random_batch(SHAPE, 0..SHAPE.sentences, &ad);
    let settings = StepSettings { lr: 3e-3, clip: 1.0, label_smoothing: 0.1 };
    let mut t =
        FixedBatchTrainer::new(model, &ad, batch, FusedAdam::new(0.9, 0.999, 1e-8, 0.0), settings, 77);
    let mut out = Vec::new();
    while out.len() < steps {
        if Some(out.len()) == capture_after {
            // The capture's warm-up is a real step, eager.
            out.push(t.capture().unwrap());
            continue;
        }
        t.step(true, None).unwrap();
        out.push(t.loss());
    }
    assert_eq!(t.captured(), capture_after.is_some());
    (out, t.into_model())
}

/// Every parameter's values, in visiting order, flat.
fn parameters(model: &s2s_models::Model) -> Vec<f32> {
    struct Values(Vec<f32>);
    impl burn::module::ModuleVisitor for Values {
        fn visit_float<const D: usize>(&mut self, p: &burn::module::Param<burn::tensor::Tensor<D>>) {
            self.0.extend(p.val().into_data().convert::<f32>().try_to_vec::<f32>().unwrap());
        }
    }
    let mut v = Values(Vec::new());
    burn::module::Module::visit(model, &mut v);
    v.0
}

/// Replay runs the step's kernels with the values the eager step would use, so it equals eager
/// training to the bit: every loss and, after the last step, every parameter. That needs a
/// deterministic step: burn's `sum` of a whole tensor on a GPU adds its workgroups' partial
/// sums with atomic additions in whatever order they finish, so the loss and the clip's norm
/// took it through `ops::sum_all`, a one-axis reduction of fixed order. With the atomic sum the
/// Transformer's run differed from itself now and then (40 of 50 losses and 1,547 of 3,392
/// parameters apart in one run of two). Freezing the seeds, or Adam's coefficients, at their
/// captured values fails the lstm's first losses.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The tests of this file one at a time: a device's random stream (`Device::seed`) is shared by
/// every thread using it.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn replayed_training_equals_eager_training() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() else { return };
    for (name, spec) in specs() {
        let (eager, eager_model) = losses(&spec, &gpu, STEPS, None);
        let (replayed, replayed_model) = losses(&spec, &gpu, STEPS, Some(2));
        assert_eq!(bits(&replayed), bits(&eager), "{name}: eager {eager:?}\nreplayed {replayed:?}");
        let (p, q) = (parameters(&replayed_model), parameters(&eager_model));
        let apart = p.iter().zip(&q).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(apart, 0, "{name}: {apart} of {} parameters differ", p.len());
        // The steps learn (the same batch each step): the replay is not stuck on one step.
        assert!(eager[STEPS - 1] < eager[3], "{name}: {eager:?}");
    }
}

/// A training run of `model` on the built-in pair (batches of many shapes) with captured
/// steps and at most `graphs` graphs alive (0: the same padded batches, every step eager):
/// its metrics (train loss, validation perplexity and BLEU a row) and what capture did.
fn captured_run(
    model: ModelSpec,
    gpu: &burn::tensor::Device,
    graphs: usize,
    dir: &std::path::Path,
) -> (Vec<[f64; 3]>, s2s_train::captured::CaptureStats) {
    use s2s_train::config::Capture;
    use s2s_train::run::{DataSpec, RunConfig};
    let cfg = RunConfig {
        data: DataSpec::Builtin { pairs: 300, seed: 3, max_tokens: 12 },
        tokenizer: s2s_data::TokenizerConfig {
            level: s2s_data::Level::Word,
            vocab_size: 0,
            joint: false,
            min_freq: 1,
            ..Default::default()
        },
        model,
        train: s2s_train::TrainSpec {
            budget: s2s_train::Budget { steps: Some(STEPS as u64), epochs: None, minutes: None },
            valid_every: 25,
            valid_bleu_sentences: 8,
            batch: s2s_data::BatchConfig { max_tokens: 96, ..Default::default() },
            capture: Capture::On,
            capture_graphs: graphs,
            seed: 5,
            ..Default::default()
        },
    };
    let _ = std::fs::remove_dir_all(dir);
    let search = s2s_train::testset::greedy(cfg.train.max_output);
    let out = s2s_train::pipeline::run_and_test(
        &cfg,
        dir,
        std::slice::from_ref(gpu),
        "wgpu",
        false,
        &search,
        s2s_train::pipeline::Tested::Best,
        &|_| {},
    )
    .expect("training runs");
    let rows = csv::Reader::from_path(dir.join("metrics.csv"))
        .expect("metrics.csv")
        .deserialize::<std::collections::HashMap<String, String>>()
        .map(|r| {
            let r = r.expect("a row");
            ["train_loss", "val_ppl", "val_bleu"].map(|k| r[k].parse::<f64>().expect("a number"))
        })
        .collect();
    (rows, out.train.capture.expect("captured steps were on"))
}

/// The trainer's captured steps — batches of many shapes padded to buckets, a graph per
/// bucket, inputs rewritten in place — train as the same padded batches do eagerly: the LSTM
/// with its source reversed on the device, and the Transformer, dropout on.
#[test]
fn captured_training_in_buckets_equals_eager_training_of_the_same_batches() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() else { return };
    let models = [
        ModelSpec::Lstm(LstmSpec {
            emb: 8,
            hidden: 12,
            layers: 2,
            dropout: 0.2,
            reverse_source: true,
            ..Default::default()
        }),
        ModelSpec::Transformer(TransformerSpec {
            d_model: 8,
            heads: 2,
            ffn: 16,
            enc_layers: 1,
            dec_layers: 1,
            dropout: 0.2,
            attention_dropout: 0.2,
            ..Default::default()
        }),
    ];
    let base = std::env::temp_dir().join(format!("s2s-captured-training-{}", std::process::id()));
    for (i, model) in models.into_iter().enumerate() {
        let (replayed, stats) = captured_run(model.clone(), &gpu, 4, &base.join(format!("{i}-replayed")));
        let (eager, none) = captured_run(model, &gpu, 0, &base.join(format!("{i}-eager")));
        assert!(stats.replayed >= 10 && stats.captures >= 2, "{i}: replays across shapes: {stats:?}");
        assert!(stats.graphs_alive <= 4, "{i}: {stats:?}");
        assert_eq!((none.replayed, none.eager), (0, STEPS as u64), "{i}");
        assert_eq!(replayed.len(), eager.len());
        // Training loss, validation perplexity and BLEU of every validation, to the bit.
        assert_eq!(replayed, eager, "{i}");
    }
    let _ = std::fs::remove_dir_all(&base);
}
