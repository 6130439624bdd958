//! PNG plots readable without TensorBoard: line charts (optionally with error bars and log
//! axes), heat maps with a colour bar, and bar charts. Drawn with `plotters` into an RGB
//! buffer and encoded with `png`; text uses DejaVu Sans embedded in the binary (no system
//! fonts). Every function returns PNG bytes; [`save`] writes them.
//!
//! Log axes plot `log10` of the positive values and label ticks with the original values.

use crate::tensorboard::viridis;
use anyhow::{Result, anyhow, bail};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

const FONT: &str = "sans-serif";
/// tab10.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
            .unwrap_or_else(|_| panic!("the embedded DejaVu Sans font is valid"));
    });
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plot: {e:?}")
}

/// Render with `draw` into a `w × h` RGB image and encode it as PNG.
fn render(
    w: u32,
    h: u32,
    draw: impl FnOnce(&DrawingArea<BitMapBackend, Shift>) -> Result<()>,
) -> Result<Vec<u8>> {
    fonts();
    let mut buf = vec![255u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        draw(&root)?;
        root.present().map_err(err)?;
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        // Charts are mostly flat colour: best deflate with per-row adaptive filters makes them
        // several times smaller than the defaults.
        enc.set_compression(png::Compression::Best);
        enc.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
        enc.write_header()?.write_image_data(&buf)?;
    }
    Ok(out)
}

/// Write PNG bytes to `path`, creating its directory.
pub fn save(path: &Path, png: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, png).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// Width and height of a PNG.
pub fn png_size(png: &[u8]) -> Result<(usize, usize)> {
    let dec = png::Decoder::new(png);
    let reader = dec.read_info()?;
    let info = reader.info();
    Ok((info.width as usize, info.height as usize))
}

/// One line of a [`LinePlot`].
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Optional symmetric error bar per point (same length as `points`).
    pub err: Option<Vec<f64>>,
}

/// A line chart.
pub struct LinePlot<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub series: &'a [Series],
    pub log_x: bool,
    pub log_y: bool,
    /// Horizontal reference lines (label, y), drawn dashed in their own colour.
    pub hlines: &'a [(String, f64)],
    /// Vertical reference lines (label, x), drawn dotted in grey shades.
    pub vlines: &'a [(String, f64)],
    pub markers: bool,
}

fn tick(v: f64, log: bool) -> String {
    let x = if log { 10f64.powf(v) } else { v };
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{x:.1e}")
    } else if a >= 100.0 || (x - x.round()).abs() < 1e-9 {
        format!("{x:.0}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// A line chart (900 × 560).
pub fn lines(p: &LinePlot) -> Result<Vec<u8>> {
    let tx = |x: f64| if p.log_x { x.log10() } else { x };
    let ty = |y: f64| if p.log_y { y.log10() } else { y };
    let ok = |x: f64, y: f64| {
        x.is_finite() && y.is_finite() && (!p.log_x || x > 0.0) && (!p.log_y || y > 0.0)
    };
    let mut pts: Vec<(f64, f64)> = Vec::new();
    for s in p.series {
        for (i, &(x, y)) in s.points.iter().enumerate() {
            if ok(x, y) {
                let e = s
                    .err
                    .as_ref()
                    .and_then(|e| e.get(i))
                    .copied()
                    .unwrap_or(0.0);
                let e = if e.is_finite() { e.abs() } else { 0.0 };
                pts.push((tx(x), ty(y)));
                if e > 0.0 {
                    if ok(x, y + e) {
                        pts.push((tx(x), ty(y + e)));
                    }
                    if ok(x, y - e) {
                        pts.push((tx(x), ty(y - e)));
                    }
                }
            }
        }
    }
    for (_, y) in p.hlines {
        if y.is_finite()
            && (!p.log_y || *y > 0.0)
            && let Some(&(x, _)) = pts.first()
        {
            pts.push((x, ty(*y)));
        }
    }
    if pts.is_empty() {
        bail!("plot {:?}: no finite points to draw", p.title);
    }
    let bounds = |v: Vec<f64>| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let pad = if hi > lo {
            0.05 * (hi - lo)
        } else {
            0.5 * lo.abs().max(1.0)
        };
        (lo - pad, hi + pad)
    };
    let (x0, x1) = bounds(pts.iter().map(|p| p.0).collect());
    let (y0, y1) = bounds(pts.iter().map(|p| p.1).collect());
    render(900, 560, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(p.title, (FONT, 20))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(p.x_label)
            .y_desc(p.y_label)
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .x_label_formatter(&|v| tick(*v, p.log_x))
            .y_label_formatter(&|v| tick(*v, p.log_y))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(err)?;
        for (i, s) in p.series.iter().enumerate() {
            let c = PALETTE[i % PALETTE.len()];
            let line: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|&&(x, y)| ok(x, y))
                .map(|&(x, y)| (tx(x), ty(y)))
                .collect();
            chart
                .draw_series(LineSeries::new(line.clone(), c.stroke_width(2)))
                .map_err(err)?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            if p.markers {
                chart
                    .draw_series(line.iter().map(|&pt| Circle::new(pt, 3, c.filled())))
                    .map_err(err)?;
            }
            if let Some(e) = &s.err {
                let whiskers = s
                    .points
                    .iter()
                    .zip(e)
                    .filter(|&(&(x, y), &e)| ok(x, y) && e.is_finite() && e > 0.0)
                    .map(|(&(x, y), &e)| {
                        let lo = if p.log_y {
                            (y - e).max(y * 1e-3)
                        } else {
                            y - e
                        };
                        PathElement::new(
                            vec![(tx(x), ty(lo)), (tx(x), ty(y + e))],
                            c.stroke_width(1),
                        )
                    });
                chart.draw_series(whiskers).map_err(err)?;
            }
        }
        for (j, (name, y)) in p.hlines.iter().enumerate() {
            if !(y.is_finite() && (!p.log_y || *y > 0.0)) {
                continue;
            }
            let c = PALETTE[(p.series.len() + j) % PALETTE.len()];
            let yy = ty(*y);
            let n = 60;
            let dashes = (0..n).step_by(2).map(move |k| {
                let a = x0 + (x1 - x0) * k as f64 / n as f64;
                let b = x0 + (x1 - x0) * (k + 1) as f64 / n as f64;
                PathElement::new(vec![(a, yy), (b, yy)], c.stroke_width(2))
            });
            chart
                .draw_series(dashes)
                .map_err(err)?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
        for (j, (name, x)) in p.vlines.iter().enumerate() {
            if !(x.is_finite() && (!p.log_x || *x > 0.0)) {
                continue;
            }
            let shade = 90 + 50 * (j as u8 % 3);
            let c = RGBColor(shade, shade, shade);
            let xx = tx(*x);
            if !(x0..=x1).contains(&xx) {
                continue;
            }
            let n = 80;
            let dots = (0..n).step_by(2).map(move |k| {
                let a = y0 + (y1 - y0) * k as f64 / n as f64;
                let b = y0 + (y1 - y0) * (k + 1) as f64 / n as f64;
                PathElement::new(vec![(xx, a), (xx, b)], c.stroke_width(2))
            });
            chart
                .draw_series(dots)
                .map_err(err)?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
        if p.series.len() > 1 || !p.hlines.is_empty() || !p.vlines.is_empty() {
            chart
                .configure_series_labels()
                .label_font((FONT, 14))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(err)?;
        }
        Ok(())
    })
}

/// A heat map.
pub struct Heatmap<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// rows[y][x]; row 0 is drawn at the top. NaN cells are left blank.
    pub rows: &'a [Vec<f64>],
    pub x_ticks: Option<&'a [String]>,
    pub y_ticks: Option<&'a [String]>,
    /// Colour range; None = data min..max.
    pub range: Option<(f64, f64)>,
    /// Write each cell's value (when the grid has at most 24 × 24 cells).
    pub annotate: bool,
}

fn thin(n: usize, max: usize) -> usize {
    n.div_ceil(max).max(1)
}

/// A heat map (viridis) with a colour bar; cells of 6–60 px.
pub fn heatmap(h: &Heatmap) -> Result<Vec<u8>> {
    let ny = h.rows.len();
    let nx = h.rows.first().map_or(0, Vec::len);
    if ny == 0 || nx == 0 || h.rows.iter().any(|r| r.len() != nx) {
        bail!("heat map {:?}: needs a non-empty rectangular grid", h.title);
    }
    let finite: Vec<f64> = h
        .rows
        .iter()
        .flatten()
        .copied()
        .filter(|v| v.is_finite())
        .collect();
    let (lo, hi) = h.range.unwrap_or_else(|| {
        (
            finite.iter().copied().fold(f64::INFINITY, f64::min),
            finite.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        )
    });
    let (lo, hi) = if lo.is_finite() && hi.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    };
    let cell = (800 / nx.max(ny)).clamp(6, 60) as u32;
    let (gw, gh) = (
        (nx as u32 * cell).clamp(240, 1400),
        (ny as u32 * cell).clamp(120, 1400),
    );
    let tick_room = |t: Option<&[String]>| {
        t.map_or(30, |t| {
            14 + 7 * t
                .iter()
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(1)
                .min(16) as u32
        })
    };
    let (left, bottom) = (tick_room(h.y_ticks) + 30, tick_room(h.x_ticks).min(60) + 30);
    let (w, ht) = (gw + left + 130, gh + bottom + 60);
    let annotate = h.annotate && nx <= 24 && ny <= 24;
    let label = |t: Option<&[String]>, i: usize, n: usize| -> String {
        if !i.is_multiple_of(thin(n, 32)) {
            return String::new();
        }
        match t {
            Some(t) => t
                .get(i)
                .map(|s| s.chars().take(16).collect())
                .unwrap_or_default(),
            None => i.to_string(),
        }
    };
    render(w, ht, |root| {
        let (main, bar) = root.split_horizontally(w - 110);
        let mut chart = ChartBuilder::on(&main)
            .caption(h.title, (FONT, 18))
            .margin(10)
            .x_label_area_size(bottom)
            .y_label_area_size(left)
            .build_cartesian_2d((0..nx - 1).into_segmented(), (0..ny - 1).into_segmented())
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc(h.x_label)
            .y_desc(h.y_label)
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 14))
            .x_labels(nx.min(64))
            .y_labels(ny.min(64))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) if *i < nx => label(h.x_ticks, *i, nx),
                _ => String::new(),
            })
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) if *i < ny => label(h.y_ticks, ny - 1 - *i, ny),
                _ => String::new(),
            })
            .draw()
            .map_err(err)?;
        let span = if hi > lo { hi - lo } else { 1.0 };
        let cells = h.rows.iter().enumerate().flat_map(|(r, row)| {
            row.iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(move |(c, &v)| {
                    let [cr, cg, cb] = viridis((v - lo) / span);
                    let y = ny - 1 - r;
                    Rectangle::new(
                        [
                            (SegmentValue::Exact(c), SegmentValue::Exact(y)),
                            (SegmentValue::Exact(c + 1), SegmentValue::Exact(y + 1)),
                        ],
                        RGBColor(cr, cg, cb).filled(),
                    )
                })
        });
        chart.draw_series(cells).map_err(err)?;
        if annotate {
            let texts = h.rows.iter().enumerate().flat_map(|(r, row)| {
                row.iter()
                    .enumerate()
                    .filter(|(_, v)| v.is_finite())
                    .map(move |(c, &v)| {
                        let dark = (v - lo) / span > 0.6;
                        let colour = if dark { BLACK } else { WHITE };
                        Text::new(
                            format!("{v:.2}"),
                            (
                                SegmentValue::CenterOf(c),
                                SegmentValue::CenterOf(ny - 1 - r),
                            ),
                            (FONT, 11).into_font().color(&colour).pos(
                                plotters::style::text_anchor::Pos::new(
                                    plotters::style::text_anchor::HPos::Center,
                                    plotters::style::text_anchor::VPos::Center,
                                ),
                            ),
                        )
                    })
            });
            chart.draw_series(texts).map_err(err)?;
        }
        // Colour bar.
        let mut cb = ChartBuilder::on(&bar)
            .margin_top(50)
            .margin_bottom(bottom as i32 + 10)
            .margin_right(10)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..1f64, lo..if hi > lo { hi } else { lo + 1.0 })
            .map_err(err)?;
        cb.configure_mesh()
            .disable_mesh()
            .disable_x_axis()
            .y_labels(5)
            .label_style((FONT, 12))
            .y_label_formatter(&|v| tick(*v, false))
            .draw()
            .map_err(err)?;
        let steps = 100;
        cb.draw_series((0..steps).map(|i| {
            let a = lo + span * i as f64 / steps as f64;
            let b = lo + span * (i + 1) as f64 / steps as f64;
            let [r, g, bl] = viridis(i as f64 / (steps - 1) as f64);
            Rectangle::new([(0.0, a), (1.0, b)], RGBColor(r, g, bl).filled())
        }))
        .map_err(err)?;
        Ok(())
    })
}

/// A bar chart.
pub struct Bars<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub labels: &'a [String],
    pub values: &'a [f64],
    pub err: Option<&'a [f64]>,
    /// Bars drawn in the highlight colour (e.g. detected attention bars).
    pub highlight: &'a [bool],
}

/// A vertical bar chart (width grows with the number of bars) with optional error whiskers.
pub fn bars(b: &Bars) -> Result<Vec<u8>> {
    let n = b.values.len();
    if n == 0 || b.labels.len() != n {
        bail!("bar chart {:?}: needs one label per value", b.title);
    }
    let top = b
        .values
        .iter()
        .zip(0..)
        .map(|(v, i)| v + b.err.and_then(|e| e.get(i)).copied().unwrap_or(0.0))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let bottom_v = b
        .values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::min);
    let top = if top > bottom_v {
        top * 1.08
    } else {
        bottom_v + 1.0
    };
    let w = (n as u32 * 22 + 160).clamp(700, 2000);
    // Labels that do not fit under their bar are drawn vertically (up to 32 characters).
    let pitch_chars = ((w as usize - 160) / n.max(1)) / 7;
    let longest = b
        .labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0);
    let vertical = longest > pitch_chars.max(4);
    let max_chars = if vertical { 32 } else { pitch_chars.max(4) };
    let label_area = if vertical {
        (longest.min(max_chars) as u32) * 7 + 30
    } else {
        60
    };
    let h = 500 + label_area;
    render(w, h, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(b.title, (FONT, 16))
            .margin(14)
            .x_label_area_size(label_area)
            .y_label_area_size(70)
            .build_cartesian_2d((0..n).into_segmented(), bottom_v..top)
            .map_err(err)?;
        let step = thin(n, (w as usize - 160) / if vertical { 16 } else { 60 });
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc(b.x_label)
            .y_desc(b.y_label)
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 14))
            .x_labels(n.min(200))
            .x_label_formatter(&|v| match v {
                // vertical labels are drawn below, by hand
                SegmentValue::CenterOf(i) if *i < n && i % step == 0 && !vertical => {
                    b.labels[*i].chars().take(max_chars).collect()
                }
                _ => String::new(),
            })
            .y_label_formatter(&|v| tick(*v, false))
            .draw()
            .map_err(err)?;
        if vertical {
            // Read top to bottom, starting just below the axis: plotters centres rotated text
            // on its anchor, so the anchor sits half the text's length below the axis.
            let style = TextStyle::from((FONT, 12).into_font())
                .transform(FontTransform::Rotate90)
                .pos(plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Center,
                ));
            for (i, label) in b.labels.iter().enumerate().filter(|(i, _)| i % step == 0) {
                let text: String = label.chars().take(max_chars).collect();
                let (tw, _) = root.estimate_text_size(&text, &style).map_err(err)?;
                let (x, y) = chart.backend_coord(&(SegmentValue::CenterOf(i), bottom_v));
                root.draw(&Text::new(text, (x, y + 8 + tw as i32 / 2), style.clone()))
                    .map_err(err)?;
            }
        }
        let rects = b
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, &v)| {
                let c = if b.highlight.get(i).copied().unwrap_or(false) {
                    PALETTE[3]
                } else {
                    PALETTE[0]
                };
                let mut r = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), v),
                    ],
                    c.filled(),
                );
                r.set_margin(0, 0, 2, 2);
                r
            });
        chart.draw_series(rects).map_err(err)?;
        if let Some(e) = b.err {
            let whiskers = b
                .values
                .iter()
                .zip(e)
                .enumerate()
                .filter(|(_, (v, e))| v.is_finite() && e.is_finite())
                .map(|(i, (&v, &e))| {
                    PathElement::new(
                        vec![
                            (SegmentValue::CenterOf(i), v - e),
                            (SegmentValue::CenterOf(i), v + e),
                        ],
                        BLACK.stroke_width(1),
                    )
                });
            chart.draw_series(whiskers).map_err(err)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(png: &[u8]) -> (usize, usize) {
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
        png_size(png).unwrap()
    }

    #[test]
    fn every_plot_kind_encodes_a_png_and_skips_non_finite_values() {
        let s = [
            Series {
                name: "a".into(),
                points: vec![(1.0, 2.0), (2.0, f64::NAN), (3.0, 8.0)],
                err: Some(vec![0.5, 0.1, f64::INFINITY]),
            },
            Series {
                name: "b".into(),
                points: vec![(1.0, 1.0), (3.0, 0.0)],
                err: None,
            },
        ];
        let png = lines(&LinePlot {
            title: "t",
            x_label: "x",
            y_label: "y",
            series: &s,
            log_x: false,
            log_y: true,
            hlines: &[("ref".into(), 3.0)],
            vlines: &[],
            markers: true,
        })
        .unwrap();
        assert_eq!(size(&png), (900, 560));
        let rows = vec![vec![0.0, 0.5, f64::NAN], vec![1.0, 0.25, 0.75]];
        let png = heatmap(&Heatmap {
            title: "h",
            x_label: "x",
            y_label: "y",
            rows: &rows,
            x_ticks: None,
            y_ticks: Some(&["r0".to_string(), "r1".to_string()]),
            range: None,
            annotate: true,
        })
        .unwrap();
        let (w, h) = size(&png);
        assert!(w >= 400 && h >= 200, "{w}x{h}");
        let labels: Vec<String> = (0..5).map(|i| i.to_string()).collect();
        let png = bars(&Bars {
            title: "b",
            x_label: "x",
            y_label: "y",
            labels: &labels,
            values: &[0.1, 0.4, f64::NAN, 0.2, 0.3],
            err: Some(&[0.01, 0.02, 0.0, 0.03, 0.01]),
            highlight: &[false, true, false, false, false],
        })
        .unwrap();
        assert_eq!(size(&png).1, 560);
        // Labels wider than their bars are drawn vertically, in a taller label area.
        let long: Vec<String> = [16, 32, 64, 128]
            .iter()
            .map(|w| format!("mask-sliding_window-w{w}"))
            .collect();
        let png = bars(&Bars {
            title: "b",
            x_label: "x",
            y_label: "y",
            labels: &long,
            values: &[1.0, 2.0, 3.0, 4.0],
            err: None,
            highlight: &[],
        })
        .unwrap();
        if let Ok(p) = std::env::var("SINKLAB_PLOT_OUT") {
            save(Path::new(&p), &png).unwrap();
        }
        assert_eq!(size(&png), (700, 500 + 24 * 7 + 30));
    }

    #[test]
    fn empty_input_is_an_error() {
        let none = [Series {
            name: "x".into(),
            points: vec![(1.0, f64::NAN)],
            err: None,
        }];
        let p = LinePlot {
            title: "t",
            x_label: "x",
            y_label: "y",
            series: &none,
            log_x: false,
            log_y: false,
            hlines: &[],
            vlines: &[],
            markers: false,
        };
        assert!(lines(&p).is_err());
        let empty: Vec<Vec<f64>> = Vec::new();
        let h = Heatmap {
            title: "h",
            x_label: "x",
            y_label: "y",
            rows: &empty,
            x_ticks: None,
            y_ticks: None,
            range: None,
            annotate: false,
        };
        assert!(heatmap(&h).is_err());
    }
}
