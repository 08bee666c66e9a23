//! The bar chart: every row of every workload, each engine's result
//! relative to the row's best (1 = best, 2 = twice as slow or large).

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use crate::workloads::Measurement;

/// Colours of the engines, in column order.
const PALETTE: &[RGBColor] = &[
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// The ratio axis stops here: slower engines are drawn cut off.
const RATIO_AXIS_MAX: f64 = 5.0;

/// Times under this count as this, the tables' resolution (they print
/// whole milliseconds): `len()` takes 0.3 to 1.4 µs in the engines that
/// keep a count, and a ratio of those would draw a stored count 5x slower
/// than another.
const TIME_RESOLUTION_MS: f64 = 1.0;

type Workloads = [(String, Vec<(String, Vec<Measurement>)>)];

/// Draws one panel per workload into `path`.
pub fn bar_chart(workloads: &Workloads, path: &Path) -> Result<()> {
    let panel_height = 420;
    let root =
        SVGBackend::new(path, (1400, panel_height * workloads.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let panels = root.split_evenly((workloads.len(), 1));
    for (panel, (title, engines)) in panels.iter().zip(workloads) {
        draw_panel(panel, title, engines)?;
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

fn ratios(engines: &[(String, Vec<Measurement>)], row: usize) -> Vec<Option<f64>> {
    let unit = engines[0].1[row].unit.as_str();
    let values: Vec<Option<f64>> = engines
        .iter()
        .map(|(_, rows)| rows.get(row).and_then(|m| m.value))
        .map(|v| match unit {
            "ms" => v.map(|v| v.max(TIME_RESOLUTION_MS)),
            _ => v,
        })
        .collect();
    let higher_is_better = unit == "ops/s";
    let present = values.iter().flatten().copied();
    let best = if higher_is_better {
        present.fold(f64::MIN, f64::max)
    } else {
        present.fold(f64::MAX, f64::min)
    };
    values
        .iter()
        .map(|v| {
            v.filter(|v| *v > 0.0)
                .map(|v| if higher_is_better { best / v } else { v / best })
        })
        .collect()
}

fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    engines: &[(String, Vec<Measurement>)],
) -> Result<()> {
    let rows: Vec<String> = engines[0].1.iter().map(|m| m.row.clone()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "{title}: time, size or 1/throughput relative to the best engine (lower is better; rows as numbered in the table)"
            ),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..rows.len() as f64, 0.0..RATIO_AXIS_MAX)
        .map_err(|e| anyhow!("{e}"))?;
    let labels = rows.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(rows.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 {
                labels
                    .get(i)
                    .map(|_| format!("row {}", i + 1))
                    .unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 13))
        .light_line_style(WHITE)
        .y_desc("x best")
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    let width = 0.8 / engines.len() as f64;
    for (j, (engine, _)) in engines.iter().enumerate() {
        let color = PALETTE[j % PALETTE.len()];
        let bars: Vec<Rectangle<(f64, f64)>> = (0..rows.len())
            .filter_map(|i| {
                let ratio = ratios(engines, i)[j]?;
                let x = i as f64 + 0.1 + j as f64 * width;
                Some(Rectangle::new(
                    [(x, 0.0), (x + width, ratio.min(RATIO_AXIS_MAX))],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|e| anyhow!("{e}"))?
            .label(engine.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn column(engine: &str, value: f64, unit: &str) -> (String, Vec<Measurement>) {
        let m = Measurement {
            row: "row".into(),
            value: Some(value),
            unit: unit.into(),
            range: None,
        };
        (engine.into(), vec![m])
    }

    #[test]
    fn times_under_the_tables_resolution_tie() {
        let engines = [
            column("a", 0.0014, "ms"),
            column("b", 0.0003, "ms"),
            column("c", 64.0, "ms"),
        ];
        assert_eq!(ratios(&engines, 0), vec![Some(1.0), Some(1.0), Some(64.0)]);
        let engines = [column("a", 2.0, "bytes"), column("b", 1.0, "bytes")];
        assert_eq!(ratios(&engines, 0), vec![Some(2.0), Some(1.0)]);
        let engines = [column("a", 100.0, "ops/s"), column("b", 50.0, "ops/s")];
        assert_eq!(ratios(&engines, 0), vec![Some(1.0), Some(2.0)]);
    }
}
