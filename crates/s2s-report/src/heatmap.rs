//! Attention heatmaps as self-contained SVG: source tokens across, output tokens down, one
//! cell per weight, darker for more weight.

use std::fmt::Write;

/// Escapes text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// An SVG heatmap of `weights[t][i]` (output token `t` attending to source token `i`).
pub fn svg(src: &[String], out: &[String], weights: &[Vec<f32>]) -> String {
    let cell = 22;
    let left = 10 + 7 * out.iter().map(|s| s.chars().count()).max().unwrap_or(1).min(24) as i32;
    let top = 10 + 7 * src.iter().map(|s| s.chars().count()).max().unwrap_or(1).min(24) as i32;
    let (w, h) = (left + cell * src.len() as i32 + 10, top + cell * out.len() as i32 + 10);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="monospace" font-size="11">"#
    );
    for (i, tok) in src.iter().enumerate() {
        let x = left + cell * i as i32 + cell / 2 + 4;
        let _ =
            writeln!(s, r#"<text transform="translate({x},{}) rotate(-90)">{}</text>"#, top - 4, esc(tok));
    }
    for (t, row) in weights.iter().enumerate() {
        let y = top + cell * t as i32;
        if let Some(tok) = out.get(t) {
            let _ =
                writeln!(s, r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#, left - 4, y + 15, esc(tok));
        }
        for (i, &a) in row.iter().enumerate() {
            let shade = (255.0 * (1.0 - a.clamp(0.0, 1.0))).round() as u8;
            let _ = writeln!(
                s,
                r#"<rect x="{}" y="{y}" width="{cell}" height="{cell}" fill="rgb({shade},{shade},255)"><title>{a:.3}</title></rect>"#,
                left + cell * i as i32
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cell_per_weight_and_escaped_labels() {
        let src = vec!["a<b".to_string(), "</s>".to_string()];
        let out = vec!["x".to_string()];
        let s = svg(&src, &out, &[vec![1.0, 0.0]]);
        assert_eq!(s.matches("<rect").count(), 2);
        assert!(s.contains("a&lt;b") && s.contains("&lt;/s&gt;"));
        assert!(s.contains("rgb(0,0,255)") && s.contains("rgb(255,255,255)"));
    }
}
