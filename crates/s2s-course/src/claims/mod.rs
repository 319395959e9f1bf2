//! One module per claim: its statement, lecture section, criterion and experiment.

pub mod alignment;
pub mod beam;
pub mod bidirectional;
pub mod bottleneck;
pub mod causal;
pub mod complexity;
pub mod exploding;
pub mod head_removal;
pub mod heads;
pub mod memory;
pub mod parallel;
pub mod permutation;
pub mod ppl_bleu;
pub mod scale_invariance;
pub mod scaling;
pub mod scores;
pub mod specialise;
pub mod trained;
pub mod vanishing;
pub mod word_order;

use s2s_report::plot::{Chart, Series, line_chart, point_chart};

use crate::Figure;

/// A line chart as a [`Figure`].
pub(crate) fn figure(file: &str, caption: &str, x: &str, y: &str, series: Vec<Series>) -> Figure {
    let chart = Chart { title: caption, x, y, x_labels: None, y_max: None };
    Figure { file: file.into(), caption: caption.into(), svg: line_chart(&chart, &series) }
}

/// A chart of points only as a [`Figure`]: per-seed results, which no line should join.
pub(crate) fn points_figure(file: &str, caption: &str, x: &str, y: &str, series: Vec<Series>) -> Figure {
    let chart = Chart { title: caption, x, y, x_labels: None, y_max: None };
    Figure { file: file.into(), caption: caption.into(), svg: point_chart(&chart, &series) }
}

/// A named series.
pub(crate) fn series(name: &str, points: Vec<(f64, f64)>) -> Series {
    Series { name: name.into(), points }
}

/// The median of `f`'s wall time over `runs` runs, in ms (after one untimed run).
pub(crate) fn median_ms(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let t0 = std::time::Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}
