//! A latency-by-percentile chart as a hand-written SVG: one line per bench phase,
//! the x axis in "nines" (50%, 90%, 99%, 99.9%) so the tail gets as much room as
//! the median, the y axis linear from zero.

use std::fmt::Write;
use std::time::Duration;

const WIDTH: f64 = 860.0;
const HEIGHT: f64 = 480.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 220.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 60.0;
const COLORS: &[&str] = &["#7f7f7f", "#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
/// The highest percentile plotted: 99.9% (three nines).
const MAX_NINES: f64 = 3.0;

/// Percentiles to sample for a smooth curve: evenly spaced in nines up to 99.9.
pub fn percentile_points() -> Vec<f64> {
    (0..=60)
        .map(|i| f64::from(i) * MAX_NINES / 60.0)
        .map(|nines| 100.0 * (1.0 - 10f64.powf(-nines)))
        .collect()
}

fn nines(percentile: f64) -> f64 {
    let rest = (1.0 - percentile / 100.0).max(10f64.powf(-MAX_NINES));
    -rest.log10()
}

/// A chart of each `(label, [(percentile, latency)])` series.
pub fn latency_chart(title: &str, series: &[(String, Vec<(f64, Duration)>)]) -> String {
    let max = series
        .iter()
        .flat_map(|(_, points)| points.iter().map(|(_, d)| d.as_secs_f64()))
        .fold(0.0, f64::max);
    let (unit, scale) = if max < 1e-3 {
        ("µs", 1e6)
    } else {
        ("ms", 1e3)
    };
    let step = nice_step(max * scale * 1.1 / 5.0);
    let top_value = (max * scale / step).ceil().max(1.0) * step;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x_of = |p: f64| LEFT + nines(p) / MAX_NINES * plot_w;
    let y_of = |secs: f64| TOP + plot_h - (secs * scale / top_value) * plot_h;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="30" font-size="16" font-weight="bold">{}</text>"#,
        LEFT,
        escape(title)
    );
    // Horizontal grid and latency labels.
    let mut value = 0.0;
    while value <= top_value + step / 2.0 {
        let y = TOP + plot_h - value / top_value * plot_h;
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{} {unit}</text>"##,
            LEFT + plot_w,
            LEFT - 8.0,
            y + 4.0,
            trim(value)
        );
        value += step;
    }
    // Vertical grid at the usual percentiles.
    for (p, label) in [
        (0.0, "0%"),
        (50.0, "p50"),
        (90.0, "p90"),
        (99.0, "p99"),
        (99.9, "p99.9"),
    ] {
        let x = x_of(p);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 20.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile (share of operations at or below the latency)</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 15.0
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">latency ({unit})</text>"#,
        TOP + plot_h / 2.0
    );
    for (i, (label, points)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = points
            .iter()
            .map(|(p, d)| format!("{:.1},{:.1}", x_of(*p), y_of(d.as_secs_f64())))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2.5" points="{}"/>"#,
            path.join(" ")
        );
        let y = TOP + 10.0 + i as f64 * 24.0;
        let x = LEFT + plot_w + 16.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{color}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            x + 24.0,
            x + 30.0,
            y + 4.0,
            escape(label)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|step| *step >= raw)
        .unwrap_or(10.0 * magnitude)
}

fn trim(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_has_a_line_and_legend_per_series_and_readable_axes() {
        let curve = |ms: u64| {
            percentile_points()
                .into_iter()
                .map(|p| {
                    (
                        p,
                        Duration::from_millis(ms) + Duration::from_micros((p * 10.0) as u64),
                    )
                })
                .collect()
        };
        let svg = latency_chart(
            "redis <bench>",
            &[("raw".into(), curve(1)), ("hand-off".into(), curve(3))],
        );
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">hand-off</text>") && svg.contains("redis &lt;bench&gt;"));
        assert!(svg.contains(">p99.9</text>") && svg.contains(" ms</text>"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn steps_are_round_numbers() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.3), 2.0);
        assert_eq!(nice_step(31.0), 50.0);
    }
}
