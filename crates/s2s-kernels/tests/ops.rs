//! Every operation of `s2s_kernels::ops`, its kernel against its reference: the output and the
//! gradient of a random linear function of it with respect to every input, on flex and on
//! wgpu (lavapipe where there is no GPU), with and without autodiff where the kernels differ.

use burn::nn::{Dropout, DropoutConfig, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use s2s_kernels::mode::{Kernels, with};
use s2s_kernels::{ops, testing};

/// Random leaves, flat: each case reshapes them inside the graph, so their gradients come
/// back flat too.
struct Leaves {
    device: Device,
    values: Vec<Tensor<1>>,
}

impl Leaves {
    fn new(device: &Device, seed: u64, sizes: &[usize]) -> Self {
        device.seed(seed);
        let values =
            sizes.iter().map(|&n| Tensor::random([n], Distribution::Normal(0.0, 1.0), device)).collect();
        Self { device: device.clone(), values }
    }

    /// Fresh leaves, requiring gradients under autodiff (one set per run).
    fn fresh(&self) -> Vec<Tensor<1>> {
        let leaf = |v: &Tensor<1>| {
            let t = Tensor::<1>::from_data(v.to_data(), &self.device);
            if self.device.is_autodiff() { t.require_grad() } else { t }
        };
        self.values.iter().map(leaf).collect()
    }
}

/// The output of a case flattened, then the gradient of `Σ out ⊙ r` with respect to each leaf
/// (`r` a fixed pseudo-random weighting). Without autodiff: the output alone.
fn outputs(out: Tensor<1>, leaves: &[Tensor<1>]) -> Vec<Vec<f32>> {
    let n = out.dims()[0];
    let r: Vec<f32> = (0..n).map(|i| ((i as f32 + 1.0) * 0.618).sin()).collect();
    let r = Tensor::<1>::from_data(TensorData::new(r, [n]), &out.device());
    let mut v = vec![out.clone().into_data().convert::<f32>().try_to_vec::<f32>().unwrap()];
    if out.is_autodiff() {
        let g = (out * r).sum().backward();
        for l in leaves {
            let grad = l.grad(&g).map(|g| g.into_data().convert::<f32>().try_to_vec::<f32>().unwrap());
            v.push(grad.unwrap_or_default());
        }
    }
    v
}

/// Runs `case` with the kernels and with the references, reseeding both random streams the
/// same way before each (dropout draws its seed from them), and compares every output and
/// gradient to `tol`, relative to the reference's magnitude (at least 1).
fn same(name: &str, device: &Device, tol: f32, case: impl Fn() -> Vec<Vec<f32>>) {
    let run = |k: Kernels| {
        with(k, || {
            device.seed(99);
            ops::reseed(99);
            case()
        })
    };
    let (fast, reference) = (run(Kernels::Fast), run(Kernels::Reference));
    assert_eq!(fast.len(), reference.len(), "{name}: number of outputs");
    for (i, (a, b)) in fast.iter().zip(&reference).enumerate() {
        assert_eq!(a.len(), b.len(), "{name}: output {i} length");
        let scale = b.iter().fold(1f32, |m, x| m.max(x.abs()));
        let worst = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(
            worst <= tol * scale,
            "{name}: output {i} (0: value, then ∂inputs) off by {worst} (scale {scale})"
        );
    }
}

fn linear(device: &Device, d_in: usize, d_out: usize) -> Linear {
    LinearConfig::new(d_in, d_out).init(device)
}

/// `[b, t, width]` columns `offset..offset + heads·d_k` as `[b, heads, t, d_k]`.
fn heads_of(x: Tensor<3>, offset: usize, heads: usize, dk: usize) -> Tensor<4> {
    let [b, t, _] = x.dims();
    x.narrow(2, offset, heads * dk).reshape([b, t, heads, dk]).swap_dims(1, 2)
}

/// Multi-head attention's equation, what the fused kernels are held to (the models' own is
/// `scaled_dot_product` in `transformer/mha.rs`): `softmax(QKᵀ/√d_k + M) V` (unscaled:
/// without `/√d_k`), dropout on the weights, the heads side by side `[b, t_q, h·d_k]`, and
/// the weights.
fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    mask: &Tensor<4>,
    scaled: bool,
    drop: &Dropout,
) -> (Tensor<3>, Tensor<4>) {
    let [b, h, tq, dk] = q.dims();
    let tk = k.dims()[2];
    let mut scores = q.matmul(k.swap_dims(2, 3));
    if scaled {
        scores = scores / (dk as f32).sqrt();
    }
    let weights = ops::softmax(scores + mask.clone().expand([b, h, tq, tk]));
    let out = ops::dropout(drop, weights.clone()).matmul(v);
    (out.swap_dims(1, 2).reshape([b, tq, h * dk]), weights)
}

/// One LSTM step's equations, what the step kernels are held to (the models' own is
/// `RecurrentCell::step` in `cell.rs`): gates `[i f g o] = xw + h W_h`,
/// `c' = σ(f)⊙c + σ(i)⊙tanh(g)`, `h' = σ(o)⊙tanh(c')` → `(h', c')`.
fn lstm_step(xw: Tensor<2>, h: Tensor<2>, w: Tensor<2>, c: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
    use burn::tensor::activation::{sigmoid, tanh};
    let n = c.dims()[1];
    let gates = xw + h.matmul(w);
    let gate = |k: usize| gates.clone().narrow(1, k * n, n);
    let c = sigmoid(gate(1)) * c + sigmoid(gate(0)) * tanh(gate(2));
    (sigmoid(gate(3)) * tanh(c.clone()), c)
}

/// An LSTM layer over a padded sequence, what the layer kernels are held to (the models' own is
/// `run_steps` in `rnn.rs`): [`lstm_step`] at every step, in order or reversed; where `keep` is
/// 0 the state stays and the output is 0. Returns (outputs `[b, t, h]`, final `h`, `c`).
fn lstm_layer(
    xw: Tensor<3>,
    w: Tensor<2>,
    h0: Tensor<2>,
    c0: Tensor<2>,
    keep: &Tensor<2>,
    reverse: bool,
) -> (Tensor<3>, Tensor<2>, Tensor<2>) {
    let t = xw.dims()[1];
    let (mut h, mut c) = (h0, c0);
    let mut outs = vec![None; t];
    let order: Vec<usize> = if reverse { (0..t).rev().collect() } else { (0..t).collect() };
    for i in order {
        let k = keep.clone().narrow(1, i, 1); // [b, 1]
        let (h1, c1) =
            lstm_step(xw.clone().narrow(1, i, 1).squeeze_dim::<2>(1), h.clone(), w.clone(), c.clone());
        h = h.clone() + (h1 - h) * k.clone();
        c = c.clone() + (c1 - c) * k.clone();
        outs[i] = Some(h.clone() * k);
    }
    let outs: Vec<Tensor<2>> = outs.into_iter().map(Option::unwrap).collect();
    (Tensor::stack(outs, 1), h, c)
}

fn padding_keep(b: usize, t: usize, device: &Device) -> (Tensor<2>, Tensor<2>) {
    // Row r keeps its first t − r positions.
    let keep: Vec<f32> =
        (0..b).flat_map(|r| (0..t).map(move |j| if j + r < t { 1.0 } else { 0.0 })).collect();
    let mask: Vec<f32> = keep.iter().map(|&k| if k > 0.0 { 0.0 } else { f32::NEG_INFINITY }).collect();
    (
        Tensor::from_data(TensorData::new(keep, [b, t]), device),
        Tensor::from_data(TensorData::new(mask, [b, t]), device),
    )
}

/// Every case on `plain` (flex or wgpu), trained (autodiff) and, where the kernels differ,
/// decoding (no autodiff).
fn every_operation_on(plain: &Device) {
    let ad = plain.clone().autodiff();
    for d in [ad.clone(), plain.clone()] {
        let grad = d.is_autodiff();
        let tag = |op: &str| format!("{op} ({})", if grad { "autodiff" } else { "no autodiff" });
        let tol = 2e-5;

        // Products, with rows above and below the small-product split.
        for rows in [3, 70] {
            let l = Leaves::new(&d, 1, &[rows * 24, 24 * 40, 40, rows * 40]);
            let case = || {
                let v = l.fresh();
                let x = v[0].clone().reshape([rows, 24]);
                let w = v[1].clone().reshape([24, 40]);
                let a = ops::matmul_rows(x.clone(), w.clone());
                let b = ops::affine_rows(x.clone().reshape([1, rows, 24]), w.clone(), v[2].clone())
                    .reshape([rows, 40]);
                let c = ops::add_matmul(v[3].clone().reshape([rows, 40]), x.clone(), w.clone());
                let f = ops::matmul_rows_fresh(x, w);
                outputs(Tensor::cat(vec![a, b, c, f], 1).flatten(0, 1), &v)
            };
            same(&tag(&format!("products, {rows} rows")), &d, tol, case);
        }
        {
            let lin = linear(&d, 16, 12);
            let l = Leaves::new(&d, 2, &[5 * 16]);
            same(&tag("linear"), &d, tol, || {
                let v = l.fresh();
                outputs(ops::linear(&lin, v[0].clone().reshape([5, 16])).flatten(0, 1), &v)
            });
        }

        // Joins.
        let l = Leaves::new(&d, 3, &[6 * 5, 6 * 7, 6 * 3]);
        same(&tag("cat_columns"), &d, tol, || {
            let v = l.fresh();
            let parts = vec![
                v[0].clone().reshape([6, 5]),
                v[1].clone().reshape([6, 7]),
                v[2].clone().reshape([6, 3]),
            ];
            let two = ops::cat_columns(parts[..2].to_vec());
            let three = ops::cat_columns(parts);
            outputs(Tensor::cat(vec![two.flatten(0, 1), three.flatten(0, 1)], 0), &v)
        });
        same(&tag("cat_features"), &d, tol, || {
            let v = l.fresh();
            let parts = vec![v[0].clone().reshape([2, 3, 5]), v[1].clone().reshape([2, 3, 7])];
            outputs(ops::cat_features(parts).flatten(0, 2), &v)
        });

        // Element-wise and row-wise.
        let l = Leaves::new(&d, 4, &[7 * 37]);
        same(&tag("tanh, softmax, log_softmax"), &d, 1e-5, || {
            let v = l.fresh();
            let x = v[0].clone().reshape([7, 37]).mul_scalar(3.0);
            let parts = vec![ops::tanh(x.clone()), ops::softmax(x.clone()), ops::log_softmax(x)];
            outputs(Tensor::cat(parts, 1).flatten(0, 1), &v)
        });
        if !grad {
            same(&tag("best_log_prob_pairs"), &d, 1e-5, || {
                let x = l.values[0].clone().reshape([7, 37]).mul_scalar(3.0);
                outputs(ops::best_log_prob_pairs(x).flatten(0, 1), &[])
            });
        }
        {
            let norm = LayerNormConfig::new(24).init(&d);
            let l = Leaves::new(&d, 5, &[2 * 9 * 24]);
            same(&tag("layer_norm"), &d, 1e-4, || {
                let v = l.fresh();
                outputs(
                    ops::layer_norm(&norm, v[0].clone().reshape([2, 9, 24]).mul_scalar(2.0)).flatten(0, 2),
                    &v,
                )
            });
        }

        // The LSTM: one step, and a padded layer both ways (the kernels under `Fast`, the
        // equations under `Reference`).
        let (b, t, h) = (3, 6, 26);
        let l = Leaves::new(&d, 6, &[b * t * 4 * h, h * 4 * h, b * h, b * h]);
        let (keep, _) = padding_keep(b, t, &d);
        same(&tag("fast_lstm_step"), &d, 1e-4, || {
            let v = l.fresh();
            let xw = v[0].clone().reshape([b * t, 4 * h]).narrow(0, 0, b);
            let w = v[1].clone().reshape([h, 4 * h]).mul_scalar(0.2);
            let (h0, c0) = (v[2].clone().reshape([b, h]), v[3].clone().reshape([b, h]));
            let (h1, c1) = if s2s_kernels::mode::reference() {
                lstm_step(xw, h0, w, c0)
            } else {
                ops::fast_lstm_step(xw, h0, w, c0).expect("the kernel runs")
            };
            outputs(Tensor::cat(vec![h1, c1], 1).flatten(0, 1), &v)
        });
        for reverse in [false, true] {
            same(&tag(&format!("fast_lstm_layer, reverse {reverse}")), &d, 1e-4, || {
                let v = l.fresh();
                let xw = v[0].clone().reshape([b, t, 4 * h]);
                let w = v[1].clone().reshape([h, 4 * h]).mul_scalar(0.2);
                let (h0, c0) = (v[2].clone().reshape([b, h]), v[3].clone().reshape([b, h]));
                let dense = t - (b - 1);
                let (out, h1, c1) = if s2s_kernels::mode::reference() {
                    lstm_layer(xw, w, h0, c0, &keep, reverse)
                } else {
                    ops::fast_lstm_layer(xw, w, h0, c0, keep.clone(), dense, reverse)
                        .expect("the kernel runs")
                };
                outputs(Tensor::cat(vec![out.flatten(0, 2), h1.flatten(0, 1), c1.flatten(0, 1)], 0), &v)
            });
        }

        // The recurrent decoders' attention: scores, masked softmax and context. Their
        // equations are the models' (`attention/` there); here they are written out, and run
        // wherever no kernel applies.
        let (b, s, k) = (4, 7, 37);
        let l = Leaves::new(&d, 7, &[b * k, b * s * k, k, b * s * k]);
        let (_, key_mask) = padding_keep(b, s, &d);
        same(&tag("fast_dot_scores, fast_additive_scores, fast_attend"), &d, 1e-4, || {
            let v = l.fresh();
            let q = v[0].clone().reshape([b, k]);
            let keys = v[1].clone().reshape([b, s, k]);
            let w = v[2].clone().reshape([k, 1]);
            let values = v[3].clone().reshape([b, s, k]);
            let dot = ops::fast_dot_scores(&q, &keys).unwrap_or_else(|| {
                (keys.clone() * q.clone().unsqueeze_dim::<3>(1)).sum_dim(2).squeeze_dim::<2>(2)
            });
            let add = ops::fast_additive_scores(&q, &keys, &w).unwrap_or_else(|| {
                let h = ops::tanh(keys.clone() + q.clone().unsqueeze_dim::<3>(1));
                h.reshape([b * s, k]).matmul(w.clone()).reshape([b, s])
            });
            let e = dot.clone() + add.clone();
            let (ctx, w) = ops::fast_attend(&e, &values, &key_mask).unwrap_or_else(|| {
                let w = ops::softmax(e + key_mask.clone());
                ((w.clone().unsqueeze_dim::<3>(2) * values.clone()).sum_dim(1).squeeze_dim::<2>(1), w)
            });
            let parts = vec![dot.flatten(0, 1), add.flatten(0, 1), ctx.flatten(0, 1), w.flatten(0, 1)];
            outputs(Tensor::cat(parts, 0), &v)
        });

        // Dropout (the masks are the same for a seed) and multi-head attention.
        let drop: Dropout = DropoutConfig::new(0.3).init();
        let l = Leaves::new(&d, 8, &[5 * 40, 5 * 40]);
        same(&tag("dropout, relu_dropout, add_dropout"), &d, tol, || {
            let v = l.fresh();
            let (x, y) = (v[0].clone().reshape([5, 40]), v[1].clone().reshape([5, 40]));
            let parts = vec![
                ops::dropout(&drop, x.clone()),
                ops::relu_dropout(&drop, x.clone()),
                ops::add_dropout(&drop, x, y),
            ];
            outputs(Tensor::cat(parts, 1).flatten(0, 1), &v)
        });
        let (b, t, tq, heads, dk) = (5, 13, 4, 3, 8);
        let dm = heads * dk;
        let l = Leaves::new(&d, 9, &[b * t * 3 * dm, b * tq * dm]);
        let (_, pad) = padding_keep(b, t, &d);
        let pad4 = pad.reshape([b, 1, 1, t]);
        let causal: Vec<f32> =
            (0..t).flat_map(|i| (0..t).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 })).collect();
        let causal = Tensor::<4>::from_data(TensorData::new(causal, [1, 1, t, t]), &d);
        for (p, scaled) in [(0.0, true), (0.3, true), (0.3, false)] {
            let drop: Dropout = DropoutConfig::new(p).init();
            let scale = if scaled { 1.0 / (dk as f32).sqrt() } else { 1.0 };
            let case = |name: &str| tag(&format!("{name}, dropout {p}, scaled {scaled}"));
            for (name, mask) in [("padding", &pad4), ("causal", &causal)] {
                same(&case(&format!("fused_self_attention, {name}")), &d, 1e-4, || {
                    let v = l.fresh();
                    let qkv = v[0].clone().reshape([b, t, 3 * dm]);
                    let (out, _) = if s2s_kernels::mode::reference() {
                        let part = |i| heads_of(qkv.clone(), i * dm, heads, dk);
                        attention(part(0), part(1), part(2), mask, scaled, &drop)
                    } else {
                        ops::fused_self_attention(qkv, mask, heads, scale, &drop).expect("the kernel runs")
                    };
                    outputs(out.flatten(0, 2), &v)
                });
            }
            same(&case("fused_cross_attention"), &d, 1e-4, || {
                let v = l.fresh();
                let kv = v[0].clone().reshape([b, t, 3 * dm]).narrow(2, 0, 2 * dm);
                let q = v[1].clone().reshape([b, tq, dm]);
                let (out, w) = if s2s_kernels::mode::reference() {
                    let (k, vv) = (heads_of(kv.clone(), 0, heads, dk), heads_of(kv, dm, heads, dk));
                    attention(heads_of(q, 0, heads, dk), k, vv, &pad4, scaled, &drop)
                } else {
                    ops::fused_cross_attention(q, kv, &pad4, heads, scale, &drop).expect("the kernel runs")
                };
                // The weights are for reports: they carry no gradient (detached here).
                outputs(Tensor::cat(vec![out.flatten(0, 2), w.detach().flatten(0, 3)], 0), &v)
            });
        }

        // Steps of a sequence, and weights deferred over a decoder loop.
        let l = Leaves::new(&d, 10, &[3 * 11 * 6, 6 * 6, 6]);
        same(&tag("time_steps, stack_steps, defer_grad"), &d, 1e-4, || {
            let v = l.fresh();
            let w = ops::defer_grad(v[1].clone().reshape([6, 6]));
            let bias = ops::defer_grad(v[2].clone());
            let mut h = Tensor::<2>::zeros([3, 6], &d);
            let mut outs = Vec::new();
            for x in ops::time_steps(v[0].clone().reshape([3, 11, 6])) {
                h = ops::tanh(ops::affine_rows(h, w.clone(), bias.clone()) + x);
                outs.push(h.clone());
            }
            outputs(ops::stack_steps(outs).flatten(0, 2), &v)
        });
        // Steps the loss never reads get a zero gradient, and one read twice the sum.
        same(&tag("time_steps, some steps unread"), &d, 1e-4, || {
            let v = l.fresh();
            let steps = ops::time_steps(v[0].clone().reshape([3, 11, 6]));
            let read: Vec<Tensor<2>> =
                steps.iter().enumerate().filter(|(t, _)| t % 3 != 1).map(|(_, x)| x.clone()).collect();
            let twice = steps[4].clone() * steps[4].clone();
            let total: Tensor<1> = ops::stack_steps(read).sum() + twice.sum();
            outputs(total, &v)
        });

        // The loss.
        let (b, t, v) = (3, 4, 37);
        let l = Leaves::new(&d, 11, &[b * t * v]);
        let ids: Vec<i64> = (0..b * t).map(|i| (i * 7 % v) as i64).collect();
        let targets = Tensor::<2, Int>::from_data(TensorData::new(ids, [b, t]), &d);
        let keep_v: Vec<f32> = (0..b * t).map(|i| if i % 5 == 4 { 0.0 } else { 1.0 }).collect();
        let keep = Tensor::<2>::from_data(TensorData::new(keep_v, [b, t]), &d);
        for eps in [0.0, 0.1] {
            same(&tag(&format!("label_smoothed_xent, ε {eps}")), &d, 1e-4, || {
                let x = l.fresh();
                let (sm, nll) = ops::label_smoothed_xent(
                    x[0].clone().reshape([b, t, v]).mul_scalar(3.0),
                    targets.clone(),
                    &keep,
                    eps,
                );
                outputs(Tensor::cat(vec![sm, nll], 0), &x)
            });
        }
    }
}

#[test]
fn every_kernel_equals_its_reference_on_flex() {
    every_operation_on(&Device::flex());
}

#[test]
fn every_kernel_equals_its_reference_on_wgpu() {
    let Some(gpu) = testing::wgpu_or_skip() else { return };
    every_operation_on(&gpu);
}

/// The test above can fail: a kernel made wrong on purpose (its reference's output scaled)
/// is caught. Here the "kernel" is the reference of another operation.
#[test]
fn the_comparison_catches_a_wrong_kernel() {
    let d = Device::flex();
    let l = Leaves::new(&d, 12, &[4 * 9]);
    let caught = std::panic::catch_unwind(|| {
        same("tanh against softmax", &d, 1e-5, || {
            let x = l.values[0].clone().reshape([4, 9]);
            let out = if s2s_kernels::mode::reference() { ops::tanh(x) } else { ops::softmax(x) };
            outputs(out.flatten(0, 1), &[])
        })
    });
    assert!(caught.is_err());
}
