//! Heat maps: cell `(r, c)` is a block of viridis colour `r` blocks down and `c` right of the
//! grid's top-left corner, with its value written in it when annotated, a tick and label per
//! row and column (thinned only when they cannot all be read), and a colour bar.

use super::axis::{Axis, Scale, axis};
use super::labels::{Categories, escape_label, row_step, wrap};
use super::{
    AXIS, DESC_PX, Rect, TICK_PX, TITLE_PX, VALUE_PX, draw_title, err, line_height, rdbu, render,
    style, title_height, viridis, widest,
};
use anyhow::{Result, bail};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

/// A heat map.
pub struct Heatmap<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// rows[y][x]; row 0 is drawn at the top. NaN cells are left blank.
    pub rows: &'a [Vec<f64>],
    /// Column labels (default: the column index).
    pub x_ticks: Option<&'a [String]>,
    /// Row labels (default: the row index).
    pub y_ticks: Option<&'a [String]>,
    /// Colour range; None = data min..max.
    pub range: Option<(f64, f64)>,
    /// Write each cell's value (when the grid has at most [`MAX_ANNOTATED`] cells a side).
    pub annotate: bool,
    /// The colour map.
    pub colours: Colours,
}

/// A heat map's colours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colours {
    /// Viridis from the lowest value to the highest: magnitudes, shares, scores.
    Sequential,
    /// Blue through white to red, white at 0 and the range symmetric about it (±the largest
    /// |value| unless `range` says otherwise): signed differences, whose sign matters.
    Diverging,
}

impl Colours {
    fn at(self, t: f64) -> [u8; 3] {
        match self {
            Colours::Sequential => viridis(t),
            Colours::Diverging => rdbu(t),
        }
    }
}

/// Largest side of a grid whose values are written in its cells.
pub const MAX_ANNOTATED: usize = 24;
/// Characters of a row or column label (tokens are cut with `…`).
const LABEL_CHARS: usize = 12;
/// Neither side of a grid is drawn shorter than this (a one-row map is a strip, not a line).
const MIN_SIDE: u32 = 64;
const BAR_W: i32 = 18;
/// Luminance (0..255) above which a cell's value is written in black, else in white: black
/// from viridis(0.6) up.
const INK_SWITCH: f64 = 120.0;
const BAR_MIN_H: u32 = 120;

/// Where everything of a heat map goes, in pixels.
#[derive(Debug)]
struct Frame {
    pub w: u32,
    pub h: u32,
    pub title: Vec<String>,
    pub grid: Rect,
    /// Cell width and height.
    pub cell: (i32, i32),
    pub x: Categories,
    /// (row, label) of the row labels drawn.
    pub y: Vec<(usize, String)>,
    y_w: u32,
    pub annotate: bool,
    pub bar: Rect,
    bar_axis: Axis,
    pub range: (f64, f64),
}

fn value_text(v: f64) -> String {
    format!("{v:.2}")
}

fn frame(h: &Heatmap) -> Result<Frame> {
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
    let (lo, hi) = h.range.unwrap_or_else(|| match h.colours {
        Colours::Sequential => (
            finite.iter().copied().fold(f64::INFINITY, f64::min),
            finite.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ),
        Colours::Diverging => {
            let m = finite.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            (-m, m)
        }
    });
    let (lo, hi) = match (lo.is_finite(), hi.is_finite()) {
        (true, true) if hi > lo => (lo, hi),
        (true, true) => (lo, lo + 1.0),
        _ => (0.0, 1.0),
    };
    let names = |t: Option<&[String]>, n: usize| -> Vec<String> {
        (0..n)
            .map(|i| match t {
                Some(t) => t
                    .get(i)
                    .map_or(String::new(), |s| escape_label(s, LABEL_CHARS)),
                None => i.to_string(),
            })
            .collect()
    };
    let (x_names, y_names) = (names(h.x_ticks, nx), names(h.y_ticks, ny));
    // Square cells of 800 px / the longer side (1..64 px); named rows and columns (tokens) get
    // room for a label each up to 100 of them; annotated cells room for their value.
    let want = |n: usize, named: bool| -> u32 {
        let c = (800 / n as u32).clamp(1, 64);
        if named && n <= 100 {
            c.max(super::labels::VERTICAL_PITCH)
        } else {
            c
        }
    };
    let mut c = want(nx, h.x_ticks.is_some()).min(want(ny, h.y_ticks.is_some()));
    let annotate = h.annotate && nx <= MAX_ANNOTATED && ny <= MAX_ANNOTATED;
    if annotate {
        let value_w = widest(finite.iter().map(|&v| value_text(v)), VALUE_PX);
        c = c.max(value_w + 10).max(line_height(VALUE_PX) + 8);
    }
    let cw = c.max(MIN_SIDE.div_ceil(nx as u32));
    let ch = c.max(MIN_SIDE.div_ceil(ny as u32));
    let (gw, gh) = (cw * nx as u32, ch * ny as u32);
    let x = Categories::new(&x_names, f64::from(cw));
    let y: Vec<(usize, String)> = y_names
        .into_iter()
        .enumerate()
        .step_by(row_step(f64::from(ch)))
        .collect();
    let y_w = widest(y.iter().map(|r| &r.1), TICK_PX);
    let bar_h = gh.max(BAR_MIN_H);
    let bar_axis = axis(
        Scale::Linear,
        &[lo, hi],
        (bar_h / 30).clamp(2, 8) as usize,
        false,
    );
    let bar_label_w = widest(bar_axis.ticks.iter().map(|t| &t.1), TICK_PX);
    let left = 12 + line_height(DESC_PX) + 8 + y_w + 10;
    let right = 24 + BAR_W as u32 + 10 + bar_label_w + 14;
    let body = left + gw + right;
    let title = wrap(h.title, TITLE_PX, (body - 20).max(520));
    let w = body.max(widest(&title, TITLE_PX) + 24);
    let top = title_height(title.len()) as i32;
    let x0 = ((w - body) / 2 + left) as i32;
    let grid = Rect {
        x0,
        y0: top,
        x1: x0 + gw as i32,
        y1: top + gh as i32,
    };
    let bottom = 6 + x.extent + 10 + line_height(DESC_PX) + 10;
    let hgt = top as u32 + (gh + bottom).max(bar_h + 20);
    let bar = Rect {
        x0: grid.x1 + 24,
        y0: top,
        x1: grid.x1 + 24 + BAR_W,
        y1: top + bar_h as i32,
    };
    Ok(Frame {
        w,
        h: hgt,
        title,
        grid,
        cell: (cw as i32, ch as i32),
        x,
        y,
        y_w,
        annotate,
        bar,
        bar_axis,
        range: (lo, hi),
    })
}

/// A heat map (viridis) with a colour bar.
pub fn heatmap(h: &Heatmap) -> Result<Vec<u8>> {
    Ok(draw(h)?.0)
}

fn draw(h: &Heatmap) -> Result<(Vec<u8>, Frame)> {
    let f = frame(h)?;
    let (lo, hi) = f.range;
    let span = hi - lo;
    let (g, (cw, ch)) = (f.grid, f.cell);
    let png = render(f.w, f.h, |root| {
        draw_title(root, &f.title)?;
        let line = |a: (i32, i32), b: (i32, i32)| {
            root.draw(&PathElement::new(vec![a, b], AXIS.stroke_width(1)))
                .map_err(err)
        };
        for (r, row) in h.rows.iter().enumerate() {
            for (c, &v) in row.iter().enumerate().filter(|(_, v)| v.is_finite()) {
                let [cr, cg, cb] = h.colours.at((v - lo) / span);
                let (x0, y0) = (g.x0 + c as i32 * cw, g.y0 + r as i32 * ch);
                root.draw(&Rectangle::new(
                    [(x0, y0), (x0 + cw, y0 + ch)],
                    RGBColor(cr, cg, cb).filled(),
                ))
                .map_err(err)?;
                if f.annotate {
                    // dark text on the light end of the map, white on the dark end
                    let light =
                        0.299 * f64::from(cr) + 0.587 * f64::from(cg) + 0.114 * f64::from(cb);
                    let ink = if light > INK_SWITCH { &BLACK } else { &WHITE };
                    root.draw_text(
                        &value_text(v),
                        &style(VALUE_PX, ink, HPos::Center, VPos::Center),
                        (x0 + cw / 2, y0 + ch / 2),
                    )
                    .map_err(err)?;
                }
            }
        }
        root.draw(&Rectangle::new(
            [(g.x0 - 1, g.y0 - 1), (g.x1, g.y1)],
            AXIS.stroke_width(1),
        ))
        .map_err(err)?;
        let tick = style(TICK_PX, &BLACK, HPos::Center, VPos::Top);
        let down =
            style(TICK_PX, &BLACK, HPos::Left, VPos::Center).transform(FontTransform::Rotate90);
        for (i, s) in &f.x.shown {
            let cx = g.x0 + *i as i32 * cw + cw / 2;
            line((cx, g.y1), (cx, g.y1 + 4))?;
            let st = if f.x.vertical { &down } else { &tick };
            root.draw_text(s, st, (cx, g.y1 + 7)).map_err(err)?;
        }
        let right = style(TICK_PX, &BLACK, HPos::Right, VPos::Center);
        for (r, s) in &f.y {
            let cy = g.y0 + *r as i32 * ch + ch / 2;
            line((g.x0 - 5, cy), (g.x0 - 1, cy))?;
            root.draw_text(s, &right, (g.x0 - 8, cy)).map_err(err)?;
        }
        let desc = style(DESC_PX, &BLACK, HPos::Center, VPos::Top);
        root.draw_text(
            h.x_label,
            &desc,
            ((g.x0 + g.x1) / 2, g.y1 + 7 + f.x.extent as i32 + 8),
        )
        .map_err(err)?;
        let up =
            style(DESC_PX, &BLACK, HPos::Center, VPos::Center).transform(FontTransform::Rotate270);
        let y_desc_x = g.x0 - 10 - f.y_w as i32 - 8 - line_height(DESC_PX) as i32 / 2;
        root.draw_text(h.y_label, &up, (y_desc_x, (g.y0 + g.y1) / 2))
            .map_err(err)?;
        // Colour bar: bottom row lo, top row hi.
        let b = f.bar;
        let rows = b.y1 - b.y0;
        for py in b.y0..b.y1 {
            let [r, gg, bl] = h.colours.at(f64::from(b.y1 - 1 - py) / f64::from(rows - 1));
            root.draw(&Rectangle::new(
                [(b.x0, py), (b.x1, py + 1)],
                RGBColor(r, gg, bl).filled(),
            ))
            .map_err(err)?;
        }
        root.draw(&Rectangle::new(
            [(b.x0 - 1, b.y0 - 1), (b.x1, b.y1)],
            AXIS.stroke_width(1),
        ))
        .map_err(err)?;
        let left = style(TICK_PX, &BLACK, HPos::Left, VPos::Center);
        for (v, s) in &f.bar_axis.ticks {
            let py = b.y1 - 1 - ((v - lo) / span * f64::from(rows - 1)).round() as i32;
            line((b.x1, py), (b.x1 + 4, py))?;
            root.draw_text(s, &left, (b.x1 + 7, py)).map_err(err)?;
        }
        Ok(())
    })?;
    Ok((png, f))
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{Image, dark, ink, keep, near};
    use super::*;

    fn one_layer(annotate: bool) -> (Image, Frame, Vec<f64>) {
        let values = vec![0.66, 0.67, 0.73, 0.12];
        let rows = vec![values.clone()];
        let (png, f) = draw(&Heatmap {
            title: "first-token importance α₁ (natural text)",
            x_label: "head",
            y_label: "layer",
            rows: &rows,
            x_ticks: None,
            y_ticks: None,
            range: Some((0.0, 1.0)),
            annotate,
            colours: Colours::Sequential,
        })
        .unwrap();
        keep(&format!("heatmap_one_row_{annotate}"), &png);
        (Image::decode(&png), f, values)
    }

    fn cell(f: &Frame, r: usize, c: usize) -> Rect {
        let (cw, ch) = f.cell;
        let (x0, y0) = (f.grid.x0 + c as i32 * cw, f.grid.y0 + r as i32 * ch);
        Rect {
            x0,
            y0,
            x1: x0 + cw,
            y1: y0 + ch,
        }
    }

    #[test]
    fn a_one_row_map_draws_every_cell_value_and_tick() {
        // The quickstart's importance_first.png: 1 layer × 4 heads showed 3 values, no cell
        // and no layer tick.
        let (img, f, values) = one_layer(true);
        assert_eq!((img.w as u32, img.h as u32), (f.w, f.h));
        assert!(f.annotate);
        assert!(f.cell.0 >= 40 && f.cell.1 >= 40, "{:?}", f.cell);
        for (c, &v) in values.iter().enumerate() {
            let r = cell(&f, 0, c);
            let area = ((r.x1 - r.x0) * (r.y1 - r.y0)) as usize;
            let colour = viridis(v);
            let fill = img.count(r, |p| p == colour);
            // filled, apart from the value written in it
            assert!(
                fill > area * 6 / 10 && fill < area,
                "cell {c}: {fill} of {area}"
            );
            let ink = if v > 0.6 { [0, 0, 0] } else { [255, 255, 255] };
            let text = img.count(r, |p| near(p, ink, 60));
            assert!(
                text > 15 && text < area / 4,
                "cell {c}: value pixels {text}"
            );
        }
        assert_eq!(
            f.x.shown,
            (0..4).map(|i| (i, i.to_string())).collect::<Vec<_>>()
        );
        assert_eq!(f.y, vec![(0, "0".to_string())]);
        // tick labels: ink below each column and left of the row
        for c in 0..4 {
            let r = cell(&f, 0, c);
            let below = Rect {
                x0: r.x0,
                y0: f.grid.y1 + 6,
                x1: r.x1,
                y1: f.grid.y1 + 6 + f.x.extent as i32,
            };
            assert!(img.count(below, ink) > 10, "column label {c}");
        }
        let left = Rect {
            x0: f.grid.x0 - 30,
            y0: f.grid.y0,
            x1: f.grid.x0 - 6,
            y1: f.grid.y1,
        };
        assert!(img.count(left, ink) > 10, "row label");
        // the colour bar runs from the bottom colour to the top colour
        let b = f.bar;
        assert!(near(img.at(b.x0 + 5, b.y1 - 1), viridis(0.0), 2));
        assert!(near(img.at(b.x0 + 5, b.y0), viridis(1.0), 2));
        // nothing is cut: the right-most ink is inside the image with a margin
        let right_strip = Rect {
            x0: img.w - 4,
            y0: 0,
            x1: img.w,
            y1: img.h,
        };
        assert_eq!(img.count(right_strip, dark), 0);
    }

    #[test]
    fn without_annotations_the_cells_are_plain_colour() {
        let (img, f, values) = one_layer(false);
        for (c, &v) in values.iter().enumerate() {
            let r = cell(&f, 0, c);
            let area = ((r.x1 - r.x0) * (r.y1 - r.y0)) as usize;
            assert_eq!(img.count(r, |p| p == viridis(v)), area, "cell {c}");
        }
    }

    /// A signed map (ablation Δ, patching effects): white at 0, blue below, red above, the
    /// range symmetric so that equal magnitudes of either sign get equally strong colours.
    #[test]
    fn a_diverging_map_is_white_at_zero_and_symmetric() {
        let rows = vec![vec![-2.0, 0.0, 1.0, 2.0]];
        let (png, f) = draw(&Heatmap {
            title: "Δ",
            x_label: "head",
            y_label: "layer",
            rows: &rows,
            x_ticks: None,
            y_ticks: None,
            range: None,
            annotate: false,
            colours: Colours::Diverging,
        })
        .unwrap();
        assert_eq!(f.range, (-2.0, 2.0));
        let img = Image::decode(&png);
        let colour = |c: usize| {
            let r = cell(&f, 0, c);
            img.at((r.x0 + r.x1) / 2, (r.y0 + r.y1) / 2)
        };
        assert_eq!(colour(0), rdbu(0.0), "−2: the blue end");
        assert_eq!(colour(1), [247, 247, 247], "0: white");
        assert_eq!(colour(3), rdbu(1.0), "+2: the red end");
        let [r, _, b] = colour(2);
        assert!(r > b, "+1 is reddish: {:?}", colour(2));
    }

    #[test]
    fn a_one_column_map_and_nan_cells() {
        let rows = vec![vec![0.0], vec![f64::NAN], vec![1.0]];
        let (png, f) = draw(&Heatmap {
            title: "t",
            x_label: "x",
            y_label: "y",
            rows: &rows,
            x_ticks: Some(&["only".to_string()]),
            y_ticks: None,
            range: None,
            annotate: true,
            colours: Colours::Sequential,
        })
        .unwrap();
        let img = Image::decode(&png);
        assert_eq!(f.y.len(), 3);
        assert_eq!(f.x.shown, vec![(0, "only".to_string())]);
        assert!(f.grid.x1 - f.grid.x0 >= MIN_SIDE as i32);
        let nan = cell(&f, 1, 0);
        assert_eq!(
            img.count(nan, |p| p != [255, 255, 255]),
            0,
            "NaN stays blank"
        );
        let top = cell(&f, 0, 0);
        assert!(img.count(top, |p| p == viridis(0.0)) > 0);
        let bottom = cell(&f, 2, 0);
        assert!(img.count(bottom, |p| p == viridis(1.0)) > 0);
    }

    #[test]
    fn token_labels_are_escaped_vertical_and_apart() {
        let tokens: Vec<String> = (0..64)
            .map(|i| match i % 4 {
                0 => "\n".to_string(),
                1 => " the".to_string(),
                2 => "a_very_long_token_indeed".to_string(),
                _ => format!("t{i}"),
            })
            .collect();
        let rows: Vec<Vec<f64>> = (0..64)
            .map(|q| {
                (0..64)
                    .map(|k| {
                        if k <= q {
                            1.0 / (q + 1) as f64
                        } else {
                            f64::NAN
                        }
                    })
                    .collect()
            })
            .collect();
        let (png, f) = draw(&Heatmap {
            title: "attention, layer 0 head 2",
            x_label: "key",
            y_label: "query",
            rows: &rows,
            x_ticks: Some(&tokens),
            y_ticks: Some(&tokens),
            range: Some((0.0, 1.0)),
            annotate: false,
            colours: Colours::Sequential,
        })
        .unwrap();
        keep("heatmap_tokens", &png);
        Image::decode(&png);
        assert!(f.x.vertical);
        assert_eq!(f.x.shown.len(), 64, "every token labelled");
        assert_eq!(f.y.len(), 64);
        assert_eq!(f.x.shown[0].1, "⏎");
        assert_eq!(f.x.shown[2].1, "a_very_long…");
        for (_, s) in f.x.shown.iter().chain(&f.y) {
            assert!(!s.chars().any(char::is_control) && s.chars().count() <= LABEL_CHARS);
        }
        // rows: label pitch at least a line of text
        assert!(f.cell.1 as u32 >= line_height(TICK_PX) - 2);
    }
}
