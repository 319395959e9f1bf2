//! Whole models on the kernels and on the references (`--kernels reference`): each of the four
//! model kinds, with dropout, trained a few steps with the trainer's loss, clipping and Adam,
//! gives the same losses, gradients and parameters both ways — on flex, and on wgpu (lavapipe
//! where there is no GPU).

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Int, Tensor, TensorData};
use s2s_kernels::mode::{Kernels, with};
use s2s_kernels::ops::{FusedAdam, adam_step, clip_global_norm};
use s2s_models::{AttentionRnnSpec, LstmSpec, ModelSpec, Source, TransformerSpec};
use s2s_train::loss::label_smoothed_loss;

fn specs() -> Vec<(&'static str, ModelSpec)> {
    vec![
        (
            "lstm",
            ModelSpec::Lstm(LstmSpec { emb: 8, hidden: 12, layers: 2, dropout: 0.2, ..Default::default() }),
        ),
        (
            "bahdanau",
            ModelSpec::Bahdanau(AttentionRnnSpec { emb: 8, hidden: 12, dropout: 0.2, ..Default::default() }),
        ),
        (
            "luong",
            ModelSpec::Luong(AttentionRnnSpec {
                emb: 8,
                hidden: 12,
                layers: 2,
                dropout: 0.2,
                ..Default::default()
            }),
        ),
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

/// Every parameter's values (or, with `grads`, its gradient) in visiting order, flat.
struct Collect<'a> {
    grads: Option<&'a GradientsParams>,
    out: Vec<Vec<f32>>,
}

impl ModuleVisitor for Collect<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let t = match self.grads {
            Some(g) => match g.get::<D>(param.id) {
                Some(t) => t,
                None => return,
            },
            None => param.val(),
        };
        self.out.push(t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap());
    }
}

/// Three clipped Adam steps of `spec` on a fixed batch (two sentences, padded), the model and
/// the dropout masks seeded alike: the losses, the first step's gradients and the last
/// parameters.
fn train(spec: &ModelSpec, plain: &Device) -> (Vec<f32>, Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let d = plain.clone().autodiff();
    d.seed(11);
    let mut model = spec.init(16, 16, &d).unwrap();
    let src = Source::new(&[4, 5, 6, 3, 7, 8, 3, 0], &[4, 3], 4, &d);
    let tgt_in = Tensor::<2, Int>::from_data(TensorData::new(vec![2i64, 9, 10, 2, 11, 0], [2, 3]), &d);
    let tgt_out = Tensor::<2, Int>::from_data(TensorData::new(vec![9i64, 10, 3, 11, 3, 0], [2, 3]), &d);
    let keep = Tensor::<2>::from_data(TensorData::new(vec![1f32, 1., 1., 1., 1., 0.], [2, 3]), &d);
    let mut optim = burn::optim::ModuleOptimizer::from(FusedAdam::new(0.9, 0.98, 1e-9, 0.0).batched());
    let (mut losses, mut first_grads) = (Vec::new(), Vec::new());
    for step in 0..3u64 {
        d.seed(100 + step);
        s2s_kernels::ops::reseed(100 + step);
        let f = model.forward(&src, tgt_in.clone());
        let loss = label_smoothed_loss(f.logits, tgt_out.clone(), &keep, 0.1).smoothed.div_scalar(5.0);
        losses.push(loss.clone().into_scalar::<f32>());
        let mut grads = GradientsParams::from_grads(loss.backward(), &model);
        if step == 0 {
            let mut c = Collect { grads: Some(&grads), out: Vec::new() };
            model.visit(&mut c);
            first_grads = c.out;
        }
        clip_global_norm(&model, &mut grads, 1.0);
        model = adam_step(&mut optim, 1e-2, model, grads);
    }
    let mut c = Collect { grads: None, out: Vec::new() };
    model.visit(&mut c);
    (losses, first_grads, c.out)
}

fn close(name: &str, what: &str, a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len(), "{name}: {what}: lengths");
    let scale = b.iter().fold(1f32, |m, x| m.max(x.abs()));
    let worst = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(worst <= tol * scale, "{name}: {what} off by {worst} (scale {scale})");
}

fn every_model_trains_alike_on(plain: &Device) {
    for (name, spec) in specs() {
        let (l1, g1, p1) = with(Kernels::Fast, || train(&spec, plain));
        let (l2, g2, p2) = with(Kernels::Reference, || train(&spec, plain));
        close(name, "losses", &l1, &l2, 1e-4);
        assert_eq!(g1.len(), g2.len(), "{name}: parameters with a gradient");
        for (i, (a, b)) in g1.iter().zip(&g2).enumerate() {
            close(name, &format!("gradient of parameter {i}"), a, b, 1e-3);
        }
        // A parameter whose gradient is zero by symmetry (the key bias of an attention: it adds
        // the same score to every key) has only rounding noise for a gradient, which Adam's
        // `m / √v` turns into full steps of either sign: its values are not compared.
        let mut compared = 0;
        for (i, ((a, b), g)) in p1.iter().zip(&p2).zip(&g1).enumerate() {
            if g.iter().all(|x| x.abs() < 1e-6) {
                continue;
            }
            close(name, &format!("parameter {i} after 3 steps"), a, b, 1e-3);
            compared += 1;
        }
        // At most one key bias per attention: the Transformer's 2 + 2·2 here.
        assert!(compared + 6 >= p1.len(), "{name}: only {compared} of {} parameters compared", p1.len());
    }
}

#[test]
fn every_model_trains_alike_on_kernels_and_references_on_flex() {
    every_model_trains_alike_on(&Device::flex());
}

#[test]
fn every_model_trains_alike_on_kernels_and_references_on_wgpu() {
    let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() else { return };
    every_model_trains_alike_on(&gpu);
}
