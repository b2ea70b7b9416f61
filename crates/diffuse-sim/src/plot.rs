//! SVG figures of a run, in the layout of the paper's figures: throughput against demand, queue
//! length and nodes allocated, and the local/peer/miss split of accesses over time.

use crate::report::SeriesRow;
use plotters::prelude::*;
use std::path::Path;

/// A line of a panel: legend label, colour, and the column it plots.
type Line = (&'static str, RGBColor, fn(&SeriesRow) -> f64);

/// Draw `rows` into an SVG file at `path`, titled `title`.
pub fn plot(rows: &[SeriesRow], title: &str, path: &Path) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    let root = SVGBackend::new(path, (1000, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| err(&e))?;
    let panels = root.split_evenly((3, 1));
    let t_max = rows.last().map_or(1.0, |r| r.t).max(1.0);

    let tp_max = rows
        .iter()
        .map(|r| r.throughput_gbps.max(r.demand_gbps))
        .fold(1.0, f64::max)
        * 1.05;
    let mut c = ChartBuilder::on(&panels[0])
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..t_max, 0.0..tp_max)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("time (s)")
        .y_desc("Gb/s")
        .draw()
        .map_err(|e| err(&e))?;
    let lines: [Line; 5] = [
        ("demand", BLACK, |r| r.demand_gbps),
        ("throughput", BLUE, |r| r.throughput_gbps),
        ("local", GREEN, |r| r.local_gbps),
        ("peer", RGBColor(200, 160, 0), |r| r.peer_gbps),
        ("storage", RED, |r| r.storage_gbps),
    ];
    for (name, color, f) in lines {
        c.draw_series(LineSeries::new(rows.iter().map(|r| (r.t, f(r))), color))
            .map_err(|e| err(&e))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;

    let q_max = rows.iter().map(|r| r.queue as f64).fold(1.0, f64::max) * 1.05;
    let n_max = rows.iter().map(|r| r.nodes as f64).fold(1.0, f64::max) * 1.05;
    let mut c = ChartBuilder::on(&panels[1])
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .right_y_label_area_size(50)
        .build_cartesian_2d(0.0..t_max, 0.0..q_max)
        .map_err(|e| err(&e))?
        .set_secondary_coord(0.0..t_max, 0.0..n_max);
    c.configure_mesh()
        .x_desc("time (s)")
        .y_desc("queue length")
        .draw()
        .map_err(|e| err(&e))?;
    c.configure_secondary_axes()
        .y_desc("nodes allocated")
        .draw()
        .map_err(|e| err(&e))?;
    c.draw_series(LineSeries::new(
        rows.iter().map(|r| (r.t, r.queue as f64)),
        MAGENTA,
    ))
    .map_err(|e| err(&e))?
    .label("queue")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], MAGENTA));
    c.draw_secondary_series(LineSeries::new(
        rows.iter().map(|r| (r.t, r.nodes as f64)),
        CYAN,
    ))
    .map_err(|e| err(&e))?
    .label("nodes")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], CYAN));
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;

    let mut c = ChartBuilder::on(&panels[2])
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..t_max, 0.0..1.0)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("time (s)")
        .y_desc("fraction of accesses")
        .draw()
        .map_err(|e| err(&e))?;
    let hits: [Line; 3] = [
        ("hit local", GREEN, |r| r.hit_local),
        ("hit peer", RGBColor(200, 160, 0), |r| r.hit_peer),
        ("miss", RED, |r| r.miss),
    ];
    for (name, color, f) in hits {
        c.draw_series(LineSeries::new(rows.iter().map(|r| (r.t, f(r))), color))
            .map_err(|e| err(&e))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
