//! Line charts: one curve per [`Series`], each in its own [`CurveStyle`], optional error
//! whiskers, dashed horizontal and dotted vertical reference lines, and a legend to the right
//! of the plot area (never over the data).

use super::axis::{Axis, Scale, axis};
use super::labels::{escape_label, wrap};
use super::{
    AXIS, DESC_PX, GRID, PALETTE, Rect, TICK_PX, TITLE_PX, draw_title, err, line_height, render,
    style, title_height, widest,
};
use anyhow::{Result, bail};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

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
    pub x_scale: Scale,
    pub y_scale: Scale,
    /// Horizontal reference lines (label, y), drawn dashed in grey.
    pub hlines: &'a [(String, f64)],
    /// Vertical reference lines (label, x), drawn dotted in grey.
    pub vlines: &'a [(String, f64)],
    /// A marker on every point.
    pub markers: bool,
}

/// Stroke pattern of a curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dash {
    Solid,
    /// (dash, gap) in pixels.
    Dashed(u8, u8),
}

const DASHES: [Dash; 4] = [
    Dash::Solid,
    Dash::Dashed(9, 5),
    Dash::Dashed(2, 4),
    Dash::Dashed(18, 5),
];

/// Marker drawn on the points of a curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Marker {
    None,
    Circle,
    Square,
    Triangle,
    Cross,
}

/// How one curve is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CurveStyle {
    pub colour: [u8; 3],
    pub dash: Dash,
    pub marker: Marker,
}

/// Curves with pairwise different styles: 10 colours × 4 dash patterns × 4 marker kinds.
pub const DISTINCT_STYLES: usize = PALETTE.len() * DASHES.len() * 4;

/// The style of curve `i` of a chart: the colour cycles fastest (tab10), then the dash
/// pattern (solid, dashed, dotted, long dashes), then the marker (none or circles as the
/// chart asks, then squares, triangles, crosses). Curves `i ≠ j` below [`DISTINCT_STYLES`]
/// differ.
pub fn curve_style(i: usize, markers: bool) -> CurveStyle {
    let c = PALETTE[i % PALETTE.len()];
    let marker = match (i / (PALETTE.len() * DASHES.len())) % 4 {
        0 if markers => Marker::Circle,
        0 => Marker::None,
        1 => Marker::Square,
        2 => Marker::Triangle,
        _ => Marker::Cross,
    };
    CurveStyle {
        colour: [c.0, c.1, c.2],
        dash: DASHES[(i / PALETTE.len()) % DASHES.len()],
        marker,
    }
}

/// Width of the chart without its legend, and its height.
const CHART_W: u32 = 820;
const CHART_H: u32 = 540;
const LEGEND_ROW: i32 = 20;
const LEGEND_SAMPLE: i32 = 36;
/// Characters of a legend entry.
const LEGEND_CHARS: usize = 48;

/// Where everything of a line chart goes, in pixels.
#[derive(Debug)]
struct Frame {
    pub w: u32,
    pub h: u32,
    title: Vec<String>,
    pub plot: Rect,
    pub legend: Option<Rect>,
    /// Legend entries per column, and the width of a column.
    legend_rows: usize,
    legend_col_w: i32,
    pub x: Axis,
    pub y: Axis,
    y_w: i32,
}

impl Frame {
    /// The pixel of the plotted point `(x, y)` (plotted coordinates).
    pub fn pixel(&self, x: f64, y: f64) -> (i32, i32) {
        let p = self.plot;
        let fx = (x - self.x.lo) / (self.x.hi - self.x.lo);
        let fy = (y - self.y.lo) / (self.y.hi - self.y.lo);
        (
            p.x0 + (fx * f64::from(p.x1 - p.x0 - 1)).round() as i32,
            p.y1 - 1 - (fy * f64::from(p.y1 - p.y0 - 1)).round() as i32,
        )
    }
}

/// One legend entry: label, colour, dash, marker.
struct Entry {
    label: String,
    colour: RGBColor,
    dash: Dash,
    marker: Marker,
}

/// Reference lines in greys, dashed (horizontal) or dotted (vertical).
fn grey(j: usize) -> RGBColor {
    let s = 70 + 45 * (j % 3) as u8;
    RGBColor(s, s, s)
}

/// A line chart, with its legend (when it has more than one curve or any reference line) to
/// the right of the plot area.
pub fn lines(p: &LinePlot) -> Result<Vec<u8>> {
    Ok(draw(p)?.0)
}

/// What a chart draws, in plotted coordinates: the curves' valid points, every value the axes
/// must hold, the reference lines, and the legend entries (curves, then reference lines).
struct Content {
    curves: Vec<Vec<(f64, f64)>>,
    xs: Vec<f64>,
    ys: Vec<f64>,
    hlines: Vec<f64>,
    vlines: Vec<f64>,
    entries: Vec<Entry>,
}

fn content(p: &LinePlot) -> Result<Content> {
    let (sx, sy) = (p.x_scale, p.y_scale);
    let ok = |&(x, y): &(f64, f64)| sx.valid(x) && sy.valid(y);
    let curves: Vec<Vec<(f64, f64)>> = p
        .series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .filter(|q| ok(q))
                .map(|&(x, y)| (sx.to_plot(x), sy.to_plot(y)))
                .collect()
        })
        .collect();
    let (mut xs, mut ys): (Vec<f64>, Vec<f64>) = curves.iter().flatten().copied().unzip();
    if xs.is_empty() {
        bail!("plot {:?}: no finite points to draw", p.title);
    }
    for s in p.series {
        let errs = s.err.as_deref().unwrap_or(&[]);
        for (&(_, y), &e) in s.points.iter().zip(errs).filter(|(q, _)| ok(q)) {
            if e.is_finite() && e > 0.0 {
                ys.extend(
                    [y + e, y - e]
                        .into_iter()
                        .filter(|&v| sy.valid(v))
                        .map(|v| sy.to_plot(v)),
                );
            }
        }
    }
    let mut entries: Vec<Entry> = p
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let st = curve_style(i, p.markers);
            Entry {
                label: escape_label(&s.name, LEGEND_CHARS),
                colour: RGBColor(st.colour[0], st.colour[1], st.colour[2]),
                dash: st.dash,
                marker: st.marker,
            }
        })
        .collect();
    let mut reference = |lines: &[(String, f64)], scale: Scale, dash: Dash, first_grey: usize| {
        let kept: Vec<&(String, f64)> = lines.iter().filter(|l| scale.valid(l.1)).collect();
        for (j, (name, _)) in kept.iter().enumerate() {
            entries.push(Entry {
                label: escape_label(name, LEGEND_CHARS),
                colour: grey(first_grey + j),
                dash,
                marker: Marker::None,
            });
        }
        kept.iter()
            .map(|l| scale.to_plot(l.1))
            .collect::<Vec<f64>>()
    };
    let hlines = reference(p.hlines, sy, DASHES[1], 0);
    let vlines = reference(p.vlines, sx, DASHES[2], 1);
    ys.extend(&hlines);
    xs.extend(&vlines);
    Ok(Content {
        curves,
        xs,
        ys,
        hlines,
        vlines,
        entries,
    })
}

/// The sizes: the title over the chart, the plot area, the legend in columns to its right.
fn frame(p: &LinePlot, c: &Content) -> Frame {
    let legend = c.entries.len() > 1;
    let legend_rows = ((CHART_H - title_height(1) - 60) as i32 / LEGEND_ROW).max(1) as usize;
    let legend_col_w =
        widest(c.entries.iter().map(|e| &e.label), TICK_PX) as i32 + LEGEND_SAMPLE + 32;
    let legend_w = if legend {
        c.entries.len().div_ceil(legend_rows) as i32 * legend_col_w + 8
    } else {
        0
    };
    // One title line where the chart's full width allows it (else more, and the plot is
    // that much shorter).
    let title = wrap(p.title, TITLE_PX, CHART_W + legend_w as u32 - 40);
    let top = title_height(title.len()) as i32;
    let x_area = (6 + line_height(TICK_PX) + 8 + line_height(DESC_PX) + 6) as i32;
    let plot_h = CHART_H as i32 - top - x_area - 10;
    let y = axis(p.y_scale, &c.ys, (plot_h / 45).max(2) as usize, true);
    let y_w = widest(y.ticks.iter().map(|t| &t.1), TICK_PX) as i32;
    let left = 12 + line_height(DESC_PX) as i32 + 8 + y_w + 8;
    let full = CHART_W as i32 - left - 24;
    // integers are short: one every 40 px (every layer of a 16-layer model)
    let room = if p.x_scale == Scale::Integer { 40 } else { 90 };
    let x = axis(p.x_scale, &c.xs, (full / room).max(2) as usize, true);
    // An integer axis with few categories (the layers of a small model): a narrower plot.
    let plot_w = match p.x_scale {
        Scale::Integer => (((x.hi - x.lo).round() as i32) * 110).clamp(300, full),
        _ => full,
    };
    let plot = Rect {
        x0: left,
        y0: top,
        x1: left + plot_w,
        y1: top + plot_h,
    };
    let w = (plot.x1 + 24 + legend_w).max(widest(&title, TITLE_PX) as i32 + 40) as u32;
    let legend = legend.then(|| Rect {
        x0: plot.x1 + 24,
        y0: plot.y0 + 4,
        x1: plot.x1 + 24 + legend_w,
        y1: plot.y0 + 4 + c.entries.len().min(legend_rows) as i32 * LEGEND_ROW,
    });
    Frame {
        w,
        h: CHART_H,
        title,
        plot,
        legend,
        legend_rows,
        legend_col_w,
        x,
        y,
        y_w,
    }
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// A path in pixels, solid or dashed.
fn path(area: &Area, pts: Vec<(i32, i32)>, dash: Dash, st: ShapeStyle) -> Result<()> {
    match dash {
        Dash::Solid => area.draw(&PathElement::new(pts, st)).map_err(err),
        Dash::Dashed(on, off) => area
            .draw(&DashedPathElement::new(
                pts,
                i32::from(on),
                i32::from(off),
                st,
            ))
            .map_err(err),
    }
}

/// A marker at `at` (pixels).
fn marker(area: &Area, at: (i32, i32), m: Marker, c: RGBColor) -> Result<()> {
    match m {
        Marker::None => Ok(()),
        Marker::Circle => area.draw(&Circle::new(at, 3, c.filled())).map_err(err),
        Marker::Square => area
            .draw(&Rectangle::new(
                [(at.0 - 3, at.1 - 3), (at.0 + 3, at.1 + 3)],
                c.filled(),
            ))
            .map_err(err),
        Marker::Triangle => area
            .draw(&TriangleMarker::new(at, 5, c.filled()))
            .map_err(err),
        Marker::Cross => area
            .draw(&Cross::new(at, 4, c.stroke_width(2)))
            .map_err(err),
    }
}

/// Grid lines, axes, ticks, tick labels and axis titles.
fn draw_axes(root: &Area, p: &LinePlot, f: &Frame) -> Result<()> {
    let r = f.plot;
    let line = |a: (i32, i32), b: (i32, i32), c: RGBColor| {
        root.draw(&PathElement::new(vec![a, b], c.stroke_width(1)))
            .map_err(err)
    };
    let below = style(TICK_PX, &BLACK, HPos::Center, VPos::Top);
    for (x, s) in &f.x.ticks {
        let px = f.pixel(*x, f.y.lo).0;
        line((px, r.y0), (px, r.y1 - 1), GRID)?;
        line((px, r.y1), (px, r.y1 + 4), AXIS)?;
        root.draw_text(s, &below, (px, r.y1 + 7)).map_err(err)?;
    }
    let left = style(TICK_PX, &BLACK, HPos::Right, VPos::Center);
    for (y, s) in &f.y.ticks {
        let py = f.pixel(f.x.lo, *y).1;
        line((r.x0, py), (r.x1 - 1, py), GRID)?;
        line((r.x0 - 5, py), (r.x0 - 1, py), AXIS)?;
        root.draw_text(s, &left, (r.x0 - 8, py)).map_err(err)?;
    }
    line((r.x0 - 1, r.y0), (r.x0 - 1, r.y1), AXIS)?;
    line((r.x0 - 1, r.y1), (r.x1 - 1, r.y1), AXIS)?;
    let desc = style(DESC_PX, &BLACK, HPos::Center, VPos::Top);
    let under = r.y1 + 7 + line_height(TICK_PX) as i32 + 4;
    root.draw_text(p.x_label, &desc, ((r.x0 + r.x1) / 2, under))
        .map_err(err)?;
    let up = style(DESC_PX, &BLACK, HPos::Center, VPos::Center).transform(FontTransform::Rotate270);
    let y_desc_x = r.x0 - 10 - f.y_w - 8 - line_height(DESC_PX) as i32 / 2;
    root.draw_text(p.y_label, &up, (y_desc_x, (r.y0 + r.y1) / 2))
        .map_err(err)
}

fn draw(p: &LinePlot) -> Result<(Vec<u8>, Frame)> {
    let c = content(p)?;
    let f = frame(p, &c);
    let png = render(f.w, f.h, |root| {
        draw_title(root, &f.title)?;
        draw_axes(root, p, &f)?;
        let (sx, sy) = (p.x_scale, p.y_scale);
        let px = |(x, y): (f64, f64)| f.pixel(x, y);
        for (i, (s, pts)) in p.series.iter().zip(&c.curves).enumerate() {
            let e = &c.entries[i];
            path(
                root,
                pts.iter().map(|&q| px(q)).collect(),
                e.dash,
                e.colour.stroke_width(2),
            )?;
            // A marker on every point when asked (and on a lone point, which has no line);
            // the marker kinds of curves 40 and on on every k-th point, about 12 a curve.
            let m = match e.marker {
                Marker::None if pts.len() == 1 => Marker::Circle,
                m => m,
            };
            let every = if p.markers || pts.len() == 1 {
                1
            } else {
                pts.len().div_ceil(12).max(1) // a curve without points (a setting that never probed)
            };
            for &q in pts.iter().step_by(every) {
                marker(root, px(q), m, e.colour)?;
            }
            // Whiskers, cut at the plot's edges.
            let errs = s.err.as_deref().unwrap_or(&[]);
            for (&(x, y), &d) in s.points.iter().zip(errs) {
                if !(sx.valid(x) && sy.valid(y) && d.is_finite() && d > 0.0) {
                    continue;
                }
                let end = |v: f64| {
                    let t = if sy.valid(v) { sy.to_plot(v) } else { f.y.lo };
                    px((sx.to_plot(x), t.clamp(f.y.lo, f.y.hi)))
                };
                path(
                    root,
                    vec![end(y - d), end(y + d)],
                    Dash::Solid,
                    e.colour.stroke_width(1),
                )?;
            }
        }
        let k = p.series.len();
        for (j, &y) in c.hlines.iter().enumerate() {
            let e = &c.entries[k + j];
            let pts = vec![px((f.x.lo, y)), px((f.x.hi, y))];
            path(root, pts, e.dash, e.colour.stroke_width(2))?;
        }
        for (j, &x) in c.vlines.iter().enumerate() {
            let e = &c.entries[k + c.hlines.len() + j];
            let pts = vec![px((x, f.y.lo)), px((x, f.y.hi))];
            path(root, pts, e.dash, e.colour.stroke_width(2))?;
        }
        if let Some(l) = f.legend {
            let text = style(TICK_PX, &BLACK, HPos::Left, VPos::Center);
            for (n, e) in c.entries.iter().enumerate() {
                let (col, row) = ((n / f.legend_rows) as i32, (n % f.legend_rows) as i32);
                let (x, y) = (
                    l.x0 + 8 + col * f.legend_col_w,
                    l.y0 + row * LEGEND_ROW + LEGEND_ROW / 2,
                );
                path(
                    root,
                    vec![(x, y), (x + LEGEND_SAMPLE, y)],
                    e.dash,
                    e.colour.stroke_width(2),
                )?;
                marker(root, (x + LEGEND_SAMPLE / 2, y), e.marker, e.colour)?;
                root.draw_text(&e.label, &text, (x + LEGEND_SAMPLE + 8, y))
                    .map_err(err)?;
            }
        }
        Ok(())
    })?;
    Ok((png, f))
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{Image, keep, near};
    use super::*;
    use std::collections::HashSet;

    fn plot<'a>(series: &'a [Series], x_scale: Scale, markers: bool) -> LinePlot<'a> {
        LinePlot {
            title: "t",
            x_label: "x",
            y_label: "y",
            series,
            x_scale,
            y_scale: Scale::Linear,
            hlines: &[],
            vlines: &[],
            markers,
        }
    }

    fn flat(name: &str, y: f64) -> Series {
        Series {
            name: name.into(),
            points: (0..=20).map(|x| (f64::from(x), y)).collect(),
            err: None,
        }
    }

    #[test]
    fn n_curves_get_n_distinct_styles() {
        for markers in [false, true] {
            for n in [1, 2, 10, 11, 16, 40, 41, 100, DISTINCT_STYLES] {
                let styles: HashSet<CurveStyle> = (0..n).map(|i| curve_style(i, markers)).collect();
                assert_eq!(styles.len(), n, "{n} curves, markers {markers}");
            }
        }
        // The report's per-head chart of a 4 × 4 model: L00 H00 and L02 H02 (curves 0 and 10)
        // were both solid blue.
        assert_eq!(curve_style(0, false).colour, curve_style(10, false).colour);
        assert_ne!(curve_style(0, false).dash, curve_style(10, false).dash);
        // Neighbours differ in colour.
        for i in 0..DISTINCT_STYLES {
            assert_ne!(
                curve_style(i, false).colour,
                curve_style(i + 1, false).colour
            );
        }
    }

    #[test]
    fn a_dashed_curve_is_drawn_dashed() {
        // 12 curves: curve 10 has curve 0's colour, dashed.
        let series: Vec<Series> = (0..12)
            .map(|i| flat(&format!("L{:02} H{:02}", i / 4, i % 4), f64::from(i)))
            .collect();
        let (png, f) = draw(&plot(&series, Scale::Linear, false)).unwrap();
        keep("lines_dashed", &png);
        let img = Image::decode(&png);
        let blue = curve_style(0, false).colour;
        let band = |i: usize| {
            // the row band of curve i inside the plot area
            let span = 11.0 * 1.1;
            let y = f.plot.y1 as f64
                - (f64::from(i as u32) + 0.55) / span * f64::from(f.plot.y1 - f.plot.y0);
            Rect {
                x0: f.plot.x0 + 2,
                y0: y as i32 - 4,
                x1: f.plot.x1 - 2,
                y1: y as i32 + 4,
            }
        };
        let solid = img.count(band(0), |p| p == blue);
        let dashed = img.count(band(10), |p| p == blue);
        assert!(
            solid > 2 * (f.plot.x1 - f.plot.x0) as usize * 8 / 10,
            "solid {solid}"
        );
        assert!(
            dashed > solid / 3 && dashed < solid * 8 / 10,
            "dashed {dashed} vs solid {solid}"
        );
    }

    #[test]
    fn the_legend_sits_beside_the_plot_and_hides_no_data() {
        // A curve through the top-right corner, where the legend used to be drawn.
        let series = vec![
            Series {
                name: "rising to the corner".into(),
                points: (0..=20).map(|x| (f64::from(x), f64::from(x))).collect(),
                err: None,
            },
            flat("flat", 0.0),
        ];
        let (png, f) = draw(&plot(&series, Scale::Linear, false)).unwrap();
        keep("lines_legend", &png);
        let img = Image::decode(&png);
        let legend = f.legend.expect("two curves have a legend");
        assert!(!legend.overlaps(&f.plot), "{legend:?} over {:?}", f.plot);
        assert!(legend.x0 >= f.plot.x1 && legend.x1 <= img.w);
        assert_eq!((img.w as u32, img.h as u32), (f.w, f.h));
        let blue = curve_style(0, false).colour;
        let corner = Rect {
            x0: f.plot.x1 - 60,
            y0: f.plot.y0,
            x1: f.plot.x1,
            y1: f.plot.y0 + 60,
        };
        assert!(img.count(corner, |p| p == blue) > 40);
        // one curve, no legend: the chart keeps its width
        let (_, one) = draw(&plot(&series[..1], Scale::Linear, false)).unwrap();
        assert!(one.legend.is_none() && one.w == CHART_W);
        // many curves: more legend columns, still beside the plot
        let many: Vec<Series> = (0..60)
            .map(|i| flat(&format!("curve {i}"), f64::from(i)))
            .collect();
        let (png, f) = draw(&plot(&many, Scale::Linear, false)).unwrap();
        keep("lines_many", &png);
        let legend = f.legend.unwrap();
        assert!(!legend.overlaps(&f.plot) && legend.x1 <= Image::decode(&png).w);
        assert!(legend.x1 - legend.x0 > 2 * 100, "several columns");
    }

    #[test]
    fn one_layer_is_one_category_in_the_middle() {
        let series = vec![Series {
            name: "‖h‖ token 1".into(),
            points: vec![(0.0, 70.0)],
            err: None,
        }];
        let (png, f) = draw(&plot(&series, Scale::Integer, true)).unwrap();
        keep("lines_one_layer", &png);
        let img = Image::decode(&png);
        let blue = curve_style(0, true).colour;
        let mid = (f.plot.x0 + f.plot.x1) / 2;
        let centre = Rect {
            x0: mid - 6,
            y0: f.plot.y0,
            x1: mid + 6,
            y1: f.plot.y1,
        };
        assert!(
            img.count(centre, |p| near(p, blue, 30)) >= 9,
            "the lone point is drawn"
        );
        assert_eq!(
            img.count(f.plot, |p| near(p, blue, 30)),
            img.count(centre, |p| near(p, blue, 30))
        );
    }

    #[test]
    fn error_bars_and_reference_lines_are_drawn_and_listed() {
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
        let p = LinePlot {
            y_scale: Scale::Log,
            hlines: &[("ref".into(), 3.0)],
            vlines: &[("v".into(), 2.0)],
            ..plot(&s, Scale::Linear, true)
        };
        let (png, f) = draw(&p).unwrap();
        keep("lines_reference", &png);
        let img = Image::decode(&png);
        // 2 curves, 1 horizontal and 1 vertical line in the legend
        let legend = f.legend.unwrap();
        assert_eq!(legend.y1 - legend.y0, 4 * LEGEND_ROW);
        // the dashed horizontal line crosses the plot: its grey on a third of the columns
        let g = grey(0);
        let across = img.count(f.plot, |p| p == [g.0, g.1, g.2]);
        let w = (f.plot.x1 - f.plot.x0) as usize;
        assert!(across > w / 3 && across < 3 * w, "{across}");
        // the whisker of the first point, 2 ± 0.5: below the point only the whisker is blue
        let blue = curve_style(0, true).colour;
        let (x, top) = f.pixel(1.0, 2f64.log10());
        let (_, bottom) = f.pixel(1.0, 1.5f64.log10());
        let below = Rect {
            x0: x - 3,
            y0: top + 6,
            x1: x + 4,
            y1: bottom + 1,
        };
        let n = img.count(below, |p| p == blue);
        assert!(
            n as i32 >= bottom - top - 8 && n as i32 <= 3 * (bottom - top),
            "{n}"
        );
        let (_, under) = f.pixel(1.0, 1.2f64.log10());
        let beyond = Rect {
            x0: x - 3,
            y0: bottom + 3,
            x1: x + 4,
            y1: under,
        };
        assert_eq!(img.count(beyond, |p| p == blue), 0);
    }

    #[test]
    fn empty_input_is_an_error() {
        let none = [Series {
            name: "x".into(),
            points: vec![(1.0, f64::NAN), (-1.0, 2.0)],
            err: None,
        }];
        let mut p = plot(&none, Scale::Log, false);
        assert!(lines(&p).is_err());
        p.x_scale = Scale::Linear;
        assert!(lines(&p).is_ok());
    }

    /// A sweep report draws every setting, one whose runs never probed included: a curve
    /// without points beside one with points is drawn (legend entry, no marker), not a panic.
    #[test]
    fn a_curve_without_points_beside_others_is_drawn() {
        let series = [
            flat("a", 1.0),
            Series {
                name: "unfinished".into(),
                points: vec![],
                err: None,
            },
        ];
        for markers in [false, true] {
            let png = lines(&plot(&series, Scale::Linear, markers)).unwrap();
            assert!(png.starts_with(b"\x89PNG"));
        }
    }
}
