//! SVG line charts (plotters): validation curves and BLEU against source length.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// One named line.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// (x, y) points in x order.
    pub points: Vec<(f64, f64)>,
}

/// Axis labels and title.
pub struct Chart<'a> {
    /// Title.
    pub title: &'a str,
    /// x-axis description.
    pub x: &'a str,
    /// y-axis description.
    pub y: &'a str,
    /// Tick labels for integer x positions (categorical x), if any.
    pub x_labels: Option<&'a [String]>,
    /// Upper y limit (None: from the data).
    pub y_max: Option<f64>,
}

fn range(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for x in v.filter(|x| x.is_finite()) {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-9 {
        return (lo - 0.5, hi + 0.5);
    }
    (lo, hi)
}

/// The chart context `line_chart` draws into: an SVG with f64 x and y axes.
type Plot<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The plotted area's x and y limits.
struct Bounds {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

/// Draws `series` as lines through their points, an SVG string (640 × 400).
pub fn line_chart(c: &Chart, series: &[Series]) -> String {
    chart(c, series, true)
}

/// Draws `series` as points only, an SVG string (640 × 400): for values that are not a
/// sequence (one per seed), where a line would suggest a trend between them.
pub fn point_chart(c: &Chart, series: &[Series]) -> String {
    chart(c, series, false)
}

fn chart(c: &Chart, series: &[Series], lines: bool) -> String {
    let mut buf = String::new();
    let b = bounds(c, series);
    {
        let root = SVGBackend::with_string(&mut buf, (640, 400)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let built = ChartBuilder::on(&root)
            .caption(c.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(b.x0..b.x1, b.y0..b.y1);
        if let Ok(mut chart) = built {
            draw_mesh(&mut chart, c);
            draw_series(&mut chart, series, b.y1, lines);
            let _ = chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .border_style(BLACK)
                .background_style(WHITE.mix(0.85))
                .draw();
        }
        let _ = root.present();
    }
    buf
}

/// The limits: x from the categories or the data, y from 0 (or below) to the top (capped) plus 5%.
fn bounds(c: &Chart, series: &[Series]) -> Bounds {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let (x0, x1) = match c.x_labels {
        Some(l) => (-0.3, l.len() as f64 - 0.7),
        None => range(all().map(|p| p.0)),
    };
    let (y0, mut y1) = range(all().map(|p| p.1));
    if let Some(m) = c.y_max {
        y1 = y1.min(m);
    }
    let y0 = if y0 >= 0.0 { 0.0 } else { y0 };
    let y1 = y1 + (y1 - y0) * 0.05;
    Bounds { x0, x1, y0, y1 }
}

/// The x tick label at `x`: its category (at integer positions only), else the trimmed number.
fn tick_label(labels: Option<&[String]>, x: f64) -> String {
    match labels {
        Some(l) => {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                l.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        }
        None => {
            if x.abs() >= 1000.0 {
                format!("{x:.0}")
            } else {
                format!("{x:.3}").trim_end_matches('0').trim_end_matches('.').to_string()
            }
        }
    }
}

/// Draws the axes with their descriptions and tick labels (one per category when `c` has them).
fn draw_mesh<'a, 'b: 'a>(chart: &mut Plot<'a, 'b>, c: &Chart) {
    let labels = c.x_labels.map(|l| l.to_vec());
    let fmt = move |x: &f64| tick_label(labels.as_deref(), *x);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(c.x).y_desc(c.y).x_label_formatter(&fmt);
    if let Some(l) = c.x_labels {
        mesh.x_labels(l.len() * 2 + 1);
    }
    let _ = mesh.draw();
}

/// Draws each series as dots, joined by a line when `lines` (with its legend entry: the line,
/// or a dot), y clipped at `y1`.
fn draw_series<'a, 'b: 'a>(chart: &mut Plot<'a, 'b>, series: &[Series], y1: f64, lines: bool) {
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (x, y.min(y1))).collect();
        if lines {
            if let Ok(drawn) = chart.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2))) {
                drawn
                    .label(s.name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            }
            let _ = chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())));
        } else if let Ok(drawn) =
            chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 5, color.filled())))
        {
            drawn.label(s.name.clone()).legend(move |(x, y)| Circle::new((x + 10, y), 5, color.filled()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_series_with_a_legend() {
        let s = vec![
            Series { name: "lstm".into(), points: vec![(0.0, 1.0), (1.0, 5.0)] },
            Series { name: "bahdanau".into(), points: vec![(0.0, 2.0), (1.0, 9.0)] },
        ];
        let labels = vec!["0-9".to_string(), "10-19".to_string()];
        let svg = line_chart(&Chart { title: "t", x: "x", y: "y", x_labels: Some(&labels), y_max: None }, &s);
        assert!(svg.starts_with("<svg") && svg.contains("lstm") && svg.contains("bahdanau"));
        assert!(svg.contains("10-19"));
        assert!(svg.matches("<polyline").count() >= 2, "{svg}");
        let plain = Chart { title: "t", x: "x", y: "y", x_labels: None, y_max: None };
        let (dots, lines) = (point_chart(&plain, &s), line_chart(&plain, &s));
        assert!(dots.contains("lstm") && dots.contains("bahdanau"));
        // The axes are polylines in both; the series' lines and their legend marks only in one.
        assert_eq!(dots.matches("<polyline").count() + 4, lines.matches("<polyline").count(), "{dots}");
        assert!(dots.matches("<circle").count() >= 4, "{dots}");
    }
}
