//! PNG plots readable without TensorBoard: line charts (optionally with error bars and log
//! axes), heat maps with a colour bar, and bar charts. Drawn with `plotters` into an RGB
//! buffer and encoded with `png`; text uses DejaVu Sans embedded in the binary (no system
//! fonts). Every function returns PNG bytes; [`save`] writes them.
//!
//! Conventions every chart keeps, each tested in its file:
//! - axes: ticks at 1, 2 or 5 × 10^k labelled with just the digits their step needs
//!   ([`Scale::Linear`]); decades (and 2, 5 within few decades) on log axes ([`Scale::Log`]),
//!   labelled with the values; integers only, with half a unit beyond the data, for layers and
//!   positions ([`Scale::Integer`]: a one-layer model is one labelled category, not a range
//!   from −0.5 to 0.5);
//! - legends sit outside the plot area, to the right, so they never hide data;
//! - every curve of a line chart has its own (colour, dash, marker) style, up to
//!   [`DISTINCT_STYLES`] curves;
//! - every label is drawn with its control characters made visible and long ones cut
//!   ([`escape_label`]); category labels (tokens, sweep settings) are turned vertical when
//!   they do not fit beside each other and thinned when they do not fit at all, so no two
//!   overlap;
//! - heat maps draw every cell, and every value when they are annotated.

mod axis;
mod bars;
mod heatmap;
mod labels;
mod lines;

pub use axis::Scale;
pub use bars::{Bars, bars};
pub use heatmap::{Colours, Heatmap, heatmap};
pub use labels::escape_label;
pub use lines::{CurveStyle, DISTINCT_STYLES, Dash, LinePlot, Marker, Series, curve_style, lines};

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;
use std::sync::Once;

const FONT: &str = "sans-serif";
/// Font sizes (px): chart titles, axis titles, tick and legend labels, values in cells.
const TITLE_PX: u32 = 17;
const DESC_PX: u32 = 14;
const TICK_PX: u32 = 12;
const VALUE_PX: u32 = 12;
/// Light grey of grid lines and frames.
const GRID: RGBColor = RGBColor(225, 225, 225);
const AXIS: RGBColor = RGBColor(60, 60, 60);

/// tab10, the qualitative palette of matplotlib.
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

/// Nine samples of matplotlib's *viridis* colormap at `t = 0, 1/8, ..., 1`.
pub const VIRIDIS: [[u8; 3]; 9] = [
    [0x44, 0x01, 0x54],
    [0x47, 0x2d, 0x7b],
    [0x3b, 0x52, 0x8b],
    [0x2c, 0x72, 0x8e],
    [0x21, 0x91, 0x8c],
    [0x28, 0xae, 0x80],
    [0x5e, 0xc9, 0x62],
    [0xad, 0xdc, 0x30],
    [0xfd, 0xe7, 0x25],
];

/// Maps `t` in `[0, 1]` (clamped; NaN as 0) to an approximate viridis colour by linear
/// interpolation in [`VIRIDIS`].
pub fn viridis(t: f64) -> [u8; 3] {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    let x = t * (VIRIDIS.len() - 1) as f64;
    let i = (x.floor() as usize).min(VIRIDIS.len() - 2);
    let f = x - i as f64;
    let (a, b) = (VIRIDIS[i], VIRIDIS[i + 1]);
    std::array::from_fn(|c| (f64::from(a[c]) * (1.0 - f) + f64::from(b[c]) * f).round() as u8)
}

/// ColorBrewer's RdBu (9 classes) from blue to red: a diverging map whose middle is white.
pub const RDBU: [[u8; 3]; 9] = [
    [33, 102, 172],
    [67, 147, 195],
    [146, 197, 222],
    [209, 229, 240],
    [247, 247, 247],
    [253, 219, 199],
    [244, 165, 130],
    [214, 96, 77],
    [178, 24, 43],
];

/// The diverging colour at `t` in [0, 1] (0 blue, ½ white, 1 red), by linear interpolation in
/// [`RDBU`].
pub fn rdbu(t: f64) -> [u8; 3] {
    let t = if t.is_nan() { 0.5 } else { t.clamp(0.0, 1.0) };
    let x = t * (RDBU.len() - 1) as f64;
    let i = (x.floor() as usize).min(RDBU.len() - 2);
    let f = x - i as f64;
    let (a, b) = (RDBU[i], RDBU[i + 1]);
    std::array::from_fn(|c| (f64::from(a[c]) * (1.0 - f) + f64::from(b[c]) * f).round() as u8)
}

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

/// Width in pixels of the widest of `texts` at `px` (0 for none).
fn widest<S: AsRef<str>>(texts: impl IntoIterator<Item = S>, px: u32) -> u32 {
    texts
        .into_iter()
        .map(|t| text_width(t.as_ref(), px))
        .max()
        .unwrap_or(0)
}

/// Width in pixels of `text` at `px`.
fn text_width(text: &str, px: u32) -> u32 {
    fonts();
    if text.is_empty() {
        return 0;
    }
    (FONT, px).into_font().box_size(text).map_or(
        // a font error only on text the font cannot lay out: a generous estimate
        px * text.chars().count() as u32,
        |(w, _)| w,
    )
}

/// Height of a line of text at `px`, ascenders to descenders with a little room.
fn line_height(px: u32) -> u32 {
    px + px / 4 + 2
}

/// Height of a title of `lines` lines with its margins, the top of what follows it.
fn title_height(lines: usize) -> u32 {
    10 + lines as u32 * (line_height(TITLE_PX) + 2) + 14
}

/// A text style at `px` in `colour`, anchored at `(h, v)`.
fn style(px: u32, colour: &'static RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    TextStyle::from((FONT, px).into_font())
        .color(colour)
        .pos(Pos::new(h, v))
}

/// Draw a (wrapped) title centred at the top of `area` ([`title_height`] high).
fn draw_title(area: &DrawingArea<BitMapBackend, Shift>, lines: &[String]) -> Result<()> {
    let w = area.dim_in_pixel().0 as i32;
    let lh = line_height(TITLE_PX) as i32 + 2;
    let st = style(TITLE_PX, &BLACK, HPos::Center, VPos::Top);
    for (i, l) in lines.iter().enumerate() {
        area.draw_text(l, &st, (w / 2, 10 + i as i32 * lh))
            .map_err(err)?;
    }
    Ok(())
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

/// A pixel rectangle `[x0, x1) × [y0, y1)` of a rendered chart (what the tests check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rect {
    pub x0: i32,
    pub y0: i32,
    pub x1: i32,
    pub y1: i32,
}

#[cfg(test)]
impl Rect {
    fn overlaps(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
}

#[cfg(test)]
mod test_util;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viridis_runs_from_purple_to_yellow_and_interpolates() {
        assert_eq!(viridis(0.0), VIRIDIS[0]);
        assert_eq!(viridis(0.5), VIRIDIS[4]);
        assert_eq!(viridis(1.0), VIRIDIS[8]);
        assert_eq!(viridis(2.0), VIRIDIS[8]); // clamped
        assert_eq!(viridis(-1.0), VIRIDIS[0]);
        assert_eq!(viridis(f64::NAN), VIRIDIS[0]);
        // halfway between two table entries
        let mid = viridis(1.0 / 16.0);
        for c in 0..3 {
            let expect = (f64::from(VIRIDIS[0][c]) + f64::from(VIRIDIS[1][c])) / 2.0;
            assert!((f64::from(mid[c]) - expect).abs() <= 0.5);
        }
    }
}
