//! The GPU code path on wgpu gives the CPU's results: on a machine without a GPU this runs on
//! Mesa's lavapipe (`apt-get install mesa-vulkan-drivers`, which `.ci/run` does). A checkpoint
//! written on the CPU loads on wgpu; Adam steps give the same losses; beam search the same
//! translations. Without any Vulkan adapter the test fails under `CI=true` and is skipped
//! (with a message) elsewhere.

use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, DeviceKind, Int, Tensor, TensorData};
use s2s_decode::{BeamConfig, MaxLength, beam_search, greedy};
use s2s_models::{AttentionRnnSpec, ModelSpec, Source, TransformerSpec};
use s2s_train::clip::clip_global_norm;
use s2s_train::loss::label_smoothed_loss;

fn wgpu() -> Option<Device> {
    std::panic::catch_unwind(|| {
        let d = Device::wgpu(DeviceKind::DefaultDevice);
        // Touch the device: fails here when there is no adapter.
        let _ = Tensor::<1>::ones([1], &d).into_scalar::<f32>();
        d
    })
    .ok()
}

fn specs() -> Vec<ModelSpec> {
    vec![
        ModelSpec::Bahdanau(AttentionRnnSpec { emb: 8, hidden: 12, dropout: 0.0, ..Default::default() }),
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
    ]
}

/// Losses of 3 clipped Adam steps on a fixed batch.
fn losses(model: s2s_models::Model, d: &Device) -> (Vec<f32>, s2s_models::Model) {
    let src = Source::new(&[4, 5, 6, 3, 7, 8, 3, 0], &[4, 3], 4, d);
    let tgt_in = Tensor::<2, Int>::from_data(TensorData::new(vec![2i64, 9, 10, 2, 11, 0], [2, 3]), d);
    let tgt_out = Tensor::<2, Int>::from_data(TensorData::new(vec![9i64, 10, 3, 11, 3, 0], [2, 3]), d);
    let keep = Tensor::<2>::from_data(TensorData::new(vec![1f32, 1., 1., 1., 1., 0.], [2, 3]), d);
    let mut optim = AdamConfig::new().init();
    let mut model = model;
    let mut out = Vec::new();
    for _ in 0..3 {
        let f = model.forward(&src, tgt_in.clone());
        let loss = label_smoothed_loss(f.logits, tgt_out.clone(), &keep, 0.1).smoothed.div_scalar(5.0);
        out.push(loss.clone().into_scalar::<f32>());
        let mut grads = GradientsParams::from_grads(loss.backward(), &model);
        clip_global_norm(&model, &mut grads, 1.0);
        model = optim.step(1e-2, model, grads);
    }
    (out, model)
}

#[test]
fn wgpu_matches_the_cpu() {
    let Some(gpu) = wgpu() else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must provide a Vulkan adapter (lavapipe)");
        eprintln!("skipped: no wgpu adapter (apt-get install mesa-vulkan-drivers)");
        return;
    };
    let cpu = Device::flex();
    let dir = std::env::temp_dir().join(format!("s2s-wgpu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (k, spec) in specs().into_iter().enumerate() {
        cpu.seed(11);
        let on_cpu = spec.init(16, 16, &cpu.clone().autodiff()).unwrap();
        // Checkpoint round trip across devices.
        let path = dir.join(format!("m{k}.bpk"));
        on_cpu.clone().save_file(&path).unwrap();
        let on_gpu = spec.init(16, 16, &gpu.clone().autodiff()).unwrap().try_load_file(&path).unwrap();
        let (a, trained_cpu) = losses(on_cpu, &cpu.clone().autodiff());
        let (b, trained_gpu) = losses(on_gpu, &gpu.clone().autodiff());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-4, "{spec:?}: cpu {a:?} vs wgpu {b:?}");
        }
        assert!(a[2] < a[0], "training must lower the loss: {a:?}");
        // Beam search on both devices.
        let cfg = BeamConfig { beam: 3, max_length: MaxLength { a: 1.0, b: 3 }, ..Default::default() };
        let ids = [4u32, 5, 6, 3, 7, 8, 3, 0];
        let hc = beam_search(&trained_cpu.valid(), &Source::new(&ids, &[4, 3], 4, &cpu), &cfg);
        let hg = beam_search(&trained_gpu.valid(), &Source::new(&ids, &[4, 3], 4, &gpu), &cfg);
        for (x, y) in hc.iter().zip(&hg) {
            assert_eq!(x[0].tokens, y[0].tokens, "{spec:?}");
            assert!((x[0].score - y[0].score).abs() < 1e-3, "{spec:?}");
        }
        // Greedy search: on the GPU choices come back every few steps, on the CPU every step.
        let limit = MaxLength { a: 1.0, b: 3 };
        let gc = greedy(&trained_cpu.valid(), &Source::new(&ids, &[4, 3], 4, &cpu), limit, false);
        let gg = greedy(&trained_gpu.valid(), &Source::new(&ids, &[4, 3], 4, &gpu), limit, false);
        for (x, y) in gc.iter().zip(&gg) {
            assert_eq!(x.tokens, y.tokens, "{spec:?} greedy");
            assert!((x.score - y.score).abs() < 1e-3, "{spec:?} greedy");
        }
    }
}
