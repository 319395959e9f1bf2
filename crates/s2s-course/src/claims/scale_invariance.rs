//! "Scale invariance": the notes say that multiplying every input by a constant leaves the
//! attention weights unchanged, thanks to the softmax. The softmax is invariant to a constant
//! *added* to every score, not to a factor: scaling the inputs by `c` scales the scores
//! `(cX W^Q)(cX W^K)ᵀ` by `c²`, and the weights sharpen or flatten.

use burn::tensor::activation::softmax;
use burn::tensor::{Device, Distribution, Tensor};

use super::{figure, series};
use crate::{Claim, Context, Finding, Table, num};

pub const CLAIM: Claim = Claim {
    name: "scale-invariance",
    why: "The notes give attention a 'scale invariance' that the softmax does not have: it ignores a \
          constant added to every score, not a factor. Knowing which is what tells you why the √d_k \
          scaling matters at all.",
    statement: "Multiplying every input by a constant leaves the attention weights unchanged (softmax normalisation)",
    lecture: "self-attention-guide.md § Invarianze e Simmetrie",
    criterion: "holds when, for every seed's draw and every factor c measured, the attention weights of c·X differ \
                from those of X by less than 1e-5",
    method: "scaled dot-product attention weights softmax((X W^Q)(X W^K)ᵀ/√d) of 8 random sequences of 12 \
             inputs drawn from each seed (d = 32, W^Q and W^K without bias, entries N(0, 1/d)), for X scaled by c ∈ {0.25, 0.5, 2, \
             4}: the largest change of a weight and the weights' mean entropy; beside it, the same scores with \
             a constant k ∈ {−10, 10, 100} added to each, the softmax's true invariance",
    run,
};

/// Attention weights `[8, 12, 12]` of `x` `[8, 12, 32]` through `wq`, `wk`.
fn weights(x: Tensor<3>, wq: &Tensor<2>, wk: &Tensor<2>) -> Tensor<3> {
    softmax(scores(x, wq, wk), 2)
}

/// Scores `(X W^Q)(X W^K)ᵀ/√d`, `[8, 12, 12]`.
fn scores(x: Tensor<3>, wq: &Tensor<2>, wk: &Tensor<2>) -> Tensor<3> {
    let d = wq.dims()[0];
    let q = x.clone().matmul(wq.clone().unsqueeze::<3>());
    let k = x.matmul(wk.clone().unsqueeze::<3>());
    q.matmul(k.swap_dims(1, 2)).div_scalar((d as f64).sqrt())
}

/// Mean entropy of the rows of `w`, in nats.
fn entropy(w: Tensor<3>) -> f64 {
    let h = (w.clone() * w.clamp_min(1e-30).log()).sum_dim(2).neg();
    h.mean().into_scalar::<f32>() as f64
}

fn largest_change(a: Tensor<3>, b: Tensor<3>) -> f64 {
    (a - b).abs().max().into_scalar::<f32>() as f64
}

/// One seed's draw: the entropy of the weights of X; by scale c, the largest change of a weight and
/// the entropy; by shift k of the scores, the largest change.
struct Draw {
    h0: f64,
    scaled: Vec<(f64, f64, f64)>,
    shifted: Vec<(f64, f64)>,
}

/// The inputs and projections drawn from `seed`, scaled and shifted.
fn draw(seed: u64) -> Draw {
    let device = Device::flex();
    device.seed(10 + seed);
    let d = 32;
    let normal = Distribution::Normal(0.0, 1.0 / (d as f64).sqrt());
    let x = Tensor::<3>::random([8, 12, d], Distribution::Normal(0.0, 1.0), &device);
    let (wq, wk) =
        (Tensor::<2>::random([d, d], normal, &device), Tensor::<2>::random([d, d], normal, &device));
    let base = weights(x.clone(), &wq, &wk);
    let h0 = entropy(base.clone());
    let scaled: Vec<(f64, f64, f64)> = [0.25, 0.5, 2.0, 4.0]
        .iter()
        .map(|&c| {
            let w = weights(x.clone().mul_scalar(c), &wq, &wk);
            (c, largest_change(w.clone(), base.clone()), entropy(w))
        })
        .collect();
    let s = scores(x, &wq, &wk);
    let shifted: Vec<(f64, f64)> = [-10.0, 10.0, 100.0]
        .iter()
        .map(|&k| (k, largest_change(softmax(s.clone().add_scalar(k), 2), base.clone())))
        .collect();
    Draw { h0, scaled, shifted }
}

fn run(ctx: &Context) -> Finding {
    let draws: Vec<(u64, Draw)> = ctx.seeds().iter().map(|&s| (s, draw(s))).collect();
    let (verdict, seeds) =
        crate::by_seed(draws.iter().map(|(s, d)| (*s, d.scaled.iter().all(|r| r.1 < 1e-5))).collect());
    let (seed, Draw { h0, scaled, shifted }) = &draws[0];
    let h0 = *h0;
    let worst_shift = draws.iter().flat_map(|d| d.1.shifted.iter().map(|r| r.1)).fold(0.0, f64::max);
    let least_scale_change = draws.iter().map(|d| d.1.scaled[3].1).fold(f64::INFINITY, f64::min);
    let mut table = Table {
        header: ["inputs", "largest change of a weight", "mean entropy (nats)"].map(String::from).to_vec(),
        rows: vec![vec!["X".into(), "0".into(), num(h0)]],
    };
    for (c, change, h) in scaled {
        table.rows.push(vec![format!("{c}·X"), num(*change), num(*h)]);
    }
    let mut curve: Vec<(f64, f64)> =
        std::iter::once((1.0, h0)).chain(scaled.iter().map(|r| (r.0, r.2))).collect();
    curve.sort_by(|a, b| a.0.total_cmp(&b.0));
    let shifts = Table {
        header: ["scores", "largest change of a weight"].map(String::from).to_vec(),
        rows: shifted.iter().map(|(k, change)| vec![format!("S + {k}"), num(*change)]).collect(),
    };
    let reason = format!(
        "the notes are wrong: inputs scaled by 4 change a weight by {} or more, scores shifted by a constant by at most \
         {}: softmax is invariant to shifts, not scales",
        num(least_scale_change),
        num(worst_shift)
    );
    Finding {
        runs: Vec::new(),
        seeds,
        verdict,
        reason,
        because: format!(
            "the notes are wrong here: scaling the inputs by c scales the scores by c², so at c = 4 a weight changes \
             by up to {} (seed {seed}; at least {} for every seed) and the mean entropy goes {} → {} nats (at \
             c = 0.25, {} nats: flatter); adding a constant to every score changes no weight by more than {} for \
             any seed — the softmax is invariant to shifts, not to scales",
            num(scaled[3].1),
            num(least_scale_change),
            num(h0),
            num(scaled[3].2),
            num(scaled[0].2),
            num(worst_shift)
        ),
        not_measured: String::new(),
        table,
        more: vec![shifts],
        figures: vec![figure(
            "scale-invariance.svg",
            &format!("Mean entropy of the attention weights when the inputs are scaled by c (seed {seed})"),
            "c",
            "entropy (nats)",
            vec![series("entropy", curve)],
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scaling changes the weights (the notes' claim does not hold); shifting the scores does
    /// not, to rounding.
    #[test]
    fn scaling_changes_the_weights_and_shifting_does_not() {
        let ctx = Context::new(crate::Budget::Quick, std::env::temp_dir());
        let f = run(&ctx);
        assert_eq!(f.verdict, crate::Verdict::DoesNotHold, "{}", f.because);
        let change = |row: &Vec<String>| row[1].parse::<f64>().unwrap();
        assert!(f.table.rows[1..].iter().all(|r| change(r) > 1e-2), "{:?}", f.table.rows);
        assert!(f.more[0].rows.iter().all(|r| change(r) < 1e-5), "{:?}", f.more[0].rows);
        let h = |row: usize| f.table.rows[row][2].parse::<f64>().unwrap();
        assert!(h(1) > h(0) && h(4) < h(0), "flatter below c = 1, sharper above: {:?}", f.table.rows);
    }
}
