//! Reading rendered charts back in the tests: pixels by position and colour.

use super::Rect;

/// A decoded RGB PNG.
pub struct Image {
    pub w: i32,
    pub h: i32,
    px: Vec<u8>,
}

impl Image {
    pub fn decode(png: &[u8]) -> Self {
        let mut reader = png::Decoder::new(png).read_info().unwrap();
        let mut px = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut px).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        px.truncate(info.buffer_size());
        Self {
            w: info.width as i32,
            h: info.height as i32,
            px,
        }
    }

    pub fn at(&self, x: i32, y: i32) -> [u8; 3] {
        assert!(
            (0..self.w).contains(&x) && (0..self.h).contains(&y),
            "({x}, {y})"
        );
        let i = (y * self.w + x) as usize * 3;
        [self.px[i], self.px[i + 1], self.px[i + 2]]
    }

    /// Pixels of `r` (clipped to the image) for which `f` holds.
    pub fn count(&self, r: Rect, f: impl Fn([u8; 3]) -> bool) -> usize {
        let mut n = 0;
        for y in r.y0.max(0)..r.y1.min(self.h) {
            for x in r.x0.max(0)..r.x1.min(self.w) {
                n += usize::from(f(self.at(x, y)));
            }
        }
        n
    }
}

/// Whether two colours are within `tol` in every channel.
pub fn near(a: [u8; 3], b: [u8; 3], tol: u8) -> bool {
    a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= tol)
}

/// Dark pixels: text and axes.
pub fn dark(c: [u8; 3]) -> bool {
    c.iter().all(|&x| x < 110)
}

/// Black text on white, anti-aliased: grey pixels.
pub fn ink(c: [u8; 3]) -> bool {
    let (lo, hi) = (c.iter().min().unwrap(), c.iter().max().unwrap());
    *hi < 200 && hi - lo < 30
}

/// With `SINKLAB_PLOT_OUT=DIR`, keep a test's chart as DIR/NAME.png to look at.
pub fn keep(name: &str, png: &[u8]) {
    if let Ok(dir) = std::env::var("SINKLAB_PLOT_OUT") {
        super::save(&std::path::Path::new(&dir).join(format!("{name}.png")), png).unwrap();
    }
}
