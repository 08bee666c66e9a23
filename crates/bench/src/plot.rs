//! SVG line charts for the reference experiments (`--plot FILE.svg`): one
//! or more panels stacked vertically, each with one line per configuration.

use std::path::Path;

use anyhow::{Context, anyhow};
use plotters::prelude::*;

/// Width of the whole image, px.
const WIDTH_PX: u32 = 900;
/// Height of one panel, px.
const PANEL_HEIGHT_PX: u32 = 420;

/// One line.
pub struct Series {
    /// Legend entry.
    pub label: String,
    /// Points in x order.
    pub points: Vec<(f64, f64)>,
}

/// One chart.
pub struct Panel {
    /// Title above the chart.
    pub title: String,
    /// x axis name.
    pub x_label: String,
    /// y axis name.
    pub y_label: String,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// Vertical marks: (x, label), e.g. zone boundaries.
    pub marks: Vec<(f64, String)>,
    /// The lines.
    pub series: Vec<Series>,
}

/// Draws `panels` into the SVG file at `path`.
pub fn draw(path: &Path, panels: &[Panel]) -> anyhow::Result<()> {
    let height = PANEL_HEIGHT_PX * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (WIDTH_PX, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (panel, area) in panels.iter().zip(areas.iter()) {
        draw_panel(area, panel).with_context(|| format!("drawing {:?}", panel.title))?;
    }
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

fn bounds(panel: &Panel) -> ((f64, f64), (f64, f64)) {
    let xs = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1));
    let (x_min, x_max) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let ys: Vec<f64> = ys.filter(|y| !panel.log_y || *y > 0.0).collect();
    let (y_min, y_max) = ys
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(*y), b.max(*y)));
    let (x_min, x_max) = if x_min < x_max {
        (x_min, x_max)
    } else {
        (x_min.min(1.0) * 0.5, x_max.max(1.0) * 2.0)
    };
    let (y_min, y_max) = if panel.log_y {
        let lo = if y_min.is_finite() && y_min > 0.0 {
            y_min * 0.7
        } else {
            1.0
        };
        (lo, (y_max * 1.5).max(lo * 10.0))
    } else {
        let lo = if y_min.is_finite() {
            y_min.min(0.0)
        } else {
            0.0
        };
        let hi = if y_max.is_finite() && y_max > lo {
            y_max * 1.05
        } else {
            lo + 1.0
        };
        (lo, hi)
    };
    ((x_min, x_max), (y_min, y_max))
}

fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    panel: &Panel,
) -> anyhow::Result<()> {
    let ((x0, x1), (y0, y1)) = bounds(panel);
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&panel.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    match (panel.log_x, panel.log_y) {
        (true, true) => {
            let chart = builder
                .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
                .map_err(|e| anyhow!("{e}"))?;
            fill(chart, panel, (y0, y1))
        }
        (true, false) => {
            let chart = builder
                .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
                .map_err(|e| anyhow!("{e}"))?;
            fill(chart, panel, (y0, y1))
        }
        (false, true) => {
            let chart = builder
                .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
                .map_err(|e| anyhow!("{e}"))?;
            fill(chart, panel, (y0, y1))
        }
        (false, false) => {
            let chart = builder
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(|e| anyhow!("{e}"))?;
            fill(chart, panel, (y0, y1))
        }
    }
}

fn fill<'a, X, Y>(
    mut chart: ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    panel: &Panel,
    (y0, y1): (f64, f64),
) -> anyhow::Result<()>
where
    X: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(&panel.x_label)
        .y_desc(&panel.y_label)
        .x_label_formatter(&|x| short(*x))
        .y_label_formatter(&|y| short(*y))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for (x, label) in &panel.marks {
        let style = ShapeStyle::from(&BLACK.mix(0.4)).stroke_width(1);
        chart
            .draw_series(LineSeries::new(vec![(*x, y0), (*x, y1)], style))
            .map_err(|e| anyhow!("{e}"))?;
        chart
            .draw_series(std::iter::once(Text::new(
                label.clone(),
                (*x, y1),
                ("sans-serif", 13),
            )))
            .map_err(|e| anyhow!("{e}"))?;
    }
    for (i, series) in panel.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let style = ShapeStyle::from(&color).stroke_width(2);
        chart
            .draw_series(LineSeries::new(series.points.iter().copied(), style))
            .map_err(|e| anyhow!("{e}"))?
            .label(series.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart
            .draw_series(
                series
                    .points
                    .iter()
                    .map(|p| Circle::new(*p, 3, ShapeStyle::from(&color).filled())),
            )
            .map_err(|e| anyhow!("{e}"))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// 1234567 -> "1.23M".
fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.3}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// One series per configuration, in the order configurations first appear:
/// the points of each configuration as `(x, y)`.
pub fn series_by_config<P>(
    points: &[P],
    config: impl Fn(&P) -> &str,
    x: impl Fn(&P) -> f64,
    y: impl Fn(&P) -> f64,
) -> Vec<Series> {
    let mut configs: Vec<&str> = points.iter().map(&config).collect();
    configs.dedup();
    configs
        .iter()
        .map(|c| Series {
            label: (*c).to_string(),
            points: points
                .iter()
                .filter(|p| config(p) == *c)
                .map(|p| (x(p), y(p)))
                .collect(),
        })
        .collect()
}

/// A chart with a logarithmic x axis whose title states the added latency.
pub fn log_x_panel(
    title: &str,
    latency: &str,
    (x_label, y_label): (&str, &str),
    log_y: bool,
    marks: &[(f64, String)],
    series: Vec<Series>,
) -> Panel {
    Panel {
        title: format!("{title} ({latency})"),
        x_label: x_label.into(),
        y_label: y_label.into(),
        log_x: true,
        log_y,
        marks: marks.to_vec(),
        series,
    }
}
