//! Bar charts: bar `i` fills the middle of slot `[i, i + 1)` of `n` slots (no slot without a
//! bar), with optional error whiskers, its value written above it when there is room, and its
//! label below (vertical, thinned, as [`Categories`] decides).

use super::axis::{Axis, Scale, axis};
use super::labels::{Categories, VERTICAL_PITCH, escape_label, wrap};
use super::{
    AXIS, DESC_PX, GRID, PALETTE, Rect, TICK_PX, TITLE_PX, draw_title, err, line_height, render,
    style, text_width, title_height, widest,
};
use anyhow::{Result, bail};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

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

/// Characters of a bar label.
const LABEL_CHARS: usize = 48;
const PLOT_H: i32 = 380;
const VALUE_PX: u32 = 11;

/// Where everything of a bar chart goes, in pixels.
#[derive(Debug)]
struct Frame {
    pub w: u32,
    pub h: u32,
    title: Vec<String>,
    pub plot: Rect,
    pub x: Categories,
    y: Axis,
    y_w: u32,
    /// The value written above each bar, if there is room for all of them.
    pub values: Option<Vec<String>>,
}

/// Three significant digits, the way a reader quotes a bar.
fn value_text(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    let a = v.abs();
    let decimals = if a == 0.0 || a >= 100.0 {
        0
    } else {
        (2 - a.log10().floor() as i32).clamp(0, 6) as usize
    };
    format!("{v:.decimals$}")
}

fn frame(b: &Bars) -> Result<Frame> {
    let n = b.values.len();
    if n == 0 || b.labels.len() != n {
        bail!("bar chart {:?}: needs one label per value", b.title);
    }
    let labels: Vec<String> = b
        .labels
        .iter()
        .map(|l| escape_label(l, LABEL_CHARS))
        .collect();
    // Room for a vertical label per bar up to 100 bars, then thinner bars.
    let pitch = if n <= 100 {
        (800.0 / n as f64).clamp(f64::from(VERTICAL_PITCH), 90.0)
    } else if n <= 150 {
        (800.0 / n as f64).clamp(8.0, 90.0)
    } else {
        (1800.0 / n as f64).max(4.0)
    };
    let pw = (pitch * n as f64).ceil() as i32;
    let x = Categories::new(&labels, pitch);
    let err_at = |i: usize| {
        b.err
            .and_then(|e| e.get(i))
            .copied()
            .filter(|e| e.is_finite())
            .unwrap_or(0.0)
            .abs()
    };
    // From 0 (or the lowest bar) to the highest whisker; whiskers below are cut at the axis.
    let (mut lo, mut hi) = (0.0f64, 0.0f64);
    for (i, &v) in b.values.iter().enumerate().filter(|(_, v)| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v + err_at(i));
    }
    if hi <= lo {
        hi = lo + 1.0;
    }
    let texts: Vec<String> = b.values.iter().map(|&v| value_text(v)).collect();
    let room = texts
        .iter()
        .all(|t| f64::from(text_width(t, VALUE_PX) + 4) <= pitch);
    let values = (n <= 40 && room).then_some(texts);
    // Headroom above the highest bar for its value (and a little beyond).
    let text_room = if values.is_some() {
        f64::from(line_height(VALUE_PX) + 4) / f64::from(PLOT_H)
    } else {
        0.0
    };
    let top = hi + (hi - lo) * (0.04 + text_room);
    let y = axis(Scale::Linear, &[lo, top], 8, false);
    let y_w = widest(y.ticks.iter().map(|t| &t.1), TICK_PX);
    let left = (12 + line_height(DESC_PX) + 8 + y_w + 10) as i32;
    let body = left as u32 + pw as u32 + 24;
    let title = wrap(b.title, TITLE_PX, (body - 20).max(560));
    let w = body.max(widest(&title, TITLE_PX) + 24);
    let top_px = title_height(title.len()) as i32;
    let x0 = (w - body) as i32 / 2 + left;
    let plot = Rect {
        x0,
        y0: top_px,
        x1: x0 + pw,
        y1: top_px + PLOT_H,
    };
    let h = plot.y1 as u32 + 8 + x.extent + 10 + line_height(DESC_PX) + 10;
    Ok(Frame {
        w,
        h,
        title,
        plot,
        x,
        y,
        y_w,
        values,
    })
}

/// A vertical bar chart with optional error whiskers.
pub fn bars(b: &Bars) -> Result<Vec<u8>> {
    Ok(draw(b)?.0)
}

fn draw(b: &Bars) -> Result<(Vec<u8>, Frame)> {
    let f = frame(b)?;
    let p = f.plot;
    let py = |v: f64| -> i32 {
        p.y1 - ((v - f.y.lo) / (f.y.hi - f.y.lo) * f64::from(p.y1 - p.y0)).round() as i32
    };
    let px = |x: f64| -> i32 { p.x0 + (x * f.x.pitch).round() as i32 };
    let png = render(f.w, f.h, |root| {
        draw_title(root, &f.title)?;
        let line = |a: (i32, i32), c: (i32, i32), colour: RGBColor| {
            root.draw(&PathElement::new(vec![a, c], colour.stroke_width(1)))
                .map_err(err)
        };
        let right = style(TICK_PX, &BLACK, HPos::Right, VPos::Center);
        for (v, s) in &f.y.ticks {
            let y = py(*v);
            line((p.x0, y), (p.x1, y), GRID)?;
            line((p.x0 - 5, y), (p.x0 - 1, y), AXIS)?;
            root.draw_text(s, &right, (p.x0 - 8, y)).map_err(err)?;
        }
        // Bars fill the middle 80% of their slot (at least 1 px apart).
        let gap = (0.1 * f.x.pitch).max(1.0) / f.x.pitch;
        let zero = py(0.0);
        for (i, &v) in b.values.iter().enumerate() {
            let (a, c) = (px(i as f64 + gap), px(i as f64 + 1.0 - gap) - 1);
            if v.is_finite() {
                let colour = if b.highlight.get(i).copied().unwrap_or(false) {
                    PALETTE[3]
                } else {
                    PALETTE[0]
                };
                let (y0, y1) = (py(v).min(zero), py(v).max(zero));
                root.draw(&Rectangle::new([(a, y0), (c, y1)], colour.filled()))
                    .map_err(err)?;
            }
            let e = b.err.and_then(|e| e.get(i)).copied().unwrap_or(0.0);
            let whisker = v.is_finite() && e.is_finite() && e > 0.0;
            let mid = px(i as f64 + 0.5);
            if whisker {
                let (low, high) = (py((v - e.abs()).max(f.y.lo)), py(v + e.abs()));
                line((mid, low), (mid, high), BLACK)?;
                let cap = ((c - a) / 6).clamp(1, 6);
                if v - e.abs() >= f.y.lo {
                    line((mid - cap, low), (mid + cap, low), BLACK)?;
                }
                line((mid - cap, high), (mid + cap, high), BLACK)?;
            }
            if let Some(t) = &f.values {
                let over = if v.is_finite() { v.max(0.0) } else { 0.0 };
                let over = if whisker { over.max(v + e.abs()) } else { over };
                let st = style(VALUE_PX, &BLACK, HPos::Center, VPos::Bottom);
                root.draw_text(&t[i], &st, (mid, py(over) - 3))
                    .map_err(err)?;
            }
        }
        line((p.x0 - 1, p.y0), (p.x0 - 1, p.y1), AXIS)?;
        line((p.x0 - 1, zero), (p.x1, zero), AXIS)?;
        line((p.x0 - 1, p.y1), (p.x1, p.y1), AXIS)?;
        let tick = style(TICK_PX, &BLACK, HPos::Center, VPos::Top);
        let down =
            style(TICK_PX, &BLACK, HPos::Left, VPos::Center).transform(FontTransform::Rotate90);
        for (i, s) in &f.x.shown {
            let cx = px(*i as f64 + 0.5);
            line((cx, p.y1), (cx, p.y1 + 4), AXIS)?;
            let st = if f.x.vertical { &down } else { &tick };
            root.draw_text(s, st, (cx, p.y1 + 7)).map_err(err)?;
        }
        let desc = style(DESC_PX, &BLACK, HPos::Center, VPos::Top);
        root.draw_text(
            b.x_label,
            &desc,
            ((p.x0 + p.x1) / 2, p.y1 + 7 + f.x.extent as i32 + 8),
        )
        .map_err(err)?;
        let up =
            style(DESC_PX, &BLACK, HPos::Center, VPos::Center).transform(FontTransform::Rotate270);
        let y_desc_x = p.x0 - 10 - f.y_w as i32 - 8 - line_height(DESC_PX) as i32 / 2;
        root.draw_text(b.y_label, &up, (y_desc_x, (p.y0 + p.y1) / 2))
            .map_err(err)?;
        Ok(())
    })?;
    Ok((png, f))
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{Image, dark, ink, keep};
    use super::*;

    fn sweep(values: &[f64], err: Option<&[f64]>) -> (Image, Frame) {
        let labels: Vec<String> = [
            "softmax",
            "softmax_n-n1.0",
            "sigmoid",
            "sigmoid-bias-ln(T)",
            "sigmoid_normalised",
            "elu1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (png, f) = draw(&Bars {
            title: "final Sink (ε = 0.3) against attn, mean ± std over seeds",
            x_label: "attn",
            y_label: "Sink₁ (%)",
            labels: &labels,
            values,
            err,
            highlight: &[],
        })
        .unwrap();
        keep(&format!("bars_{}", values[2]), &png);
        (Image::decode(&png), f)
    }

    #[test]
    fn n_bars_fill_n_slots_with_no_empty_slot() {
        // The sweep report's bar chart had a 7th, empty slot after 6 settings.
        let (img, f) = sweep(&[1.0; 6], None);
        let bar = |p: [u8; 3]| p == [PALETTE[0].0, PALETTE[0].1, PALETTE[0].2];
        let p = f.plot;
        let columns: Vec<i32> = (p.x0..p.x1)
            .filter(|&x| {
                img.count(
                    Rect {
                        x0: x,
                        y0: p.y1 - 5,
                        x1: x + 1,
                        y1: p.y1 - 4,
                    },
                    bar,
                ) == 1
            })
            .collect();
        let (first, last) = (columns[0], *columns.last().unwrap());
        let slot = f64::from(p.x1 - p.x0) / 6.0;
        // the bars span the plot area but for half a gap at each end
        assert!(
            f64::from(first - p.x0) < 0.15 * slot,
            "first bar at {first}"
        );
        assert!(
            f64::from(p.x1 - 1 - last) < 0.15 * slot,
            "last bar ends at {last}"
        );
        // and each slot holds one bar: 6 runs of bar colour
        let runs = columns.windows(2).filter(|w| w[1] != w[0] + 1).count() + 1;
        assert_eq!(runs, 6);
    }

    #[test]
    fn zero_bars_are_labelled_with_their_value() {
        let (img, f) = sweep(
            &[1.9, 3.1, 0.0, 0.0, 0.0, 0.0],
            Some(&[0.4, 1.7, 0.0, 0.0, 0.0, 0.0]),
        );
        let values = f.values.as_ref().expect("room for values");
        assert_eq!(values[..3], ["1.90", "3.10", "0"]);
        // ink just above the axis in the slot of each zero bar (its "0")
        let slot = f64::from(f.plot.x1 - f.plot.x0) / 6.0;
        for i in 2..6 {
            let x0 = f.plot.x0 + (i as f64 * slot) as i32;
            let above = Rect {
                x0,
                y0: f.plot.y1 - 20,
                x1: x0 + slot as i32,
                y1: f.plot.y1 - 2,
            };
            assert!(img.count(above, ink) > 5, "bar {i}");
        }
        // labels fit beside each other? no: vertical, all shown, nothing cut at the bottom
        assert!(f.x.vertical);
        assert_eq!(f.x.shown.len(), 6);
        let bottom = Rect {
            x0: 0,
            y0: img.h - 4,
            x1: img.w,
            y1: img.h,
        };
        assert_eq!(img.count(bottom, dark), 0);
    }

    #[test]
    fn values_are_quoted_to_three_digits() {
        for (v, s) in [
            (62.2, "62.2"),
            (0.8412, "0.841"),
            (0.0, "0"),
            (123.4, "123"),
            (f64::NAN, "n/a"),
        ] {
            assert_eq!(value_text(v), s);
        }
    }
}
