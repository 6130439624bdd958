//! Text of labels: control characters made visible, long labels cut, titles wrapped, and
//! category labels placed so that no two overlap.

use super::{TICK_PX, line_height, text_width};

/// `s` as one line of a label: newline as ⏎, tab as ⇥, carriage return as ↵, any other
/// control character as `\u{..}`; at most `max_chars` characters, a cut marked by `…`.
pub fn escape_label(s: &str, max_chars: usize) -> String {
    let mut out: Vec<char> = Vec::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push('⏎'),
            '\t' => out.push('⇥'),
            '\r' => out.push('↵'),
            c if c.is_control() => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    if out.len() > max_chars {
        out.truncate(max_chars.saturating_sub(1));
        out.push('…');
    }
    out.into_iter().collect()
}

/// `text` broken at spaces into lines at most `max_w` px wide at `px` (a word longer than
/// that stays whole on its line).
pub(super) fn wrap(text: &str, px: u32, max_w: u32) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(l) if text_width(&format!("{l} {word}"), px) <= max_w => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// Pixels between the centres of two vertical labels of [`TICK_PX`] text.
pub(super) const VERTICAL_PITCH: u32 = TICK_PX + 3;

/// The smallest of 1, 2, 5, 10, 20, 50, … that is at least `k`.
fn nice_count(k: usize) -> usize {
    let mut step = 1;
    loop {
        for m in [1, 2, 5] {
            if m * step >= k {
                return m * step;
            }
        }
        step *= 10;
    }
}

/// Labels of categories `pitch` px apart along a horizontal axis (category `i` centred at
/// `(i + 0.5) · pitch`): horizontal when every label fits beside its neighbours, else vertical
/// (read top to bottom from the axis), and thinned to every 2nd, 5th, 10th … when even that
/// does not fit.
#[derive(Debug, Clone)]
pub(super) struct Categories {
    /// (category, label) of the labels drawn.
    pub shown: Vec<(usize, String)>,
    pub vertical: bool,
    /// Pixels the labels take below the axis.
    pub extent: u32,
    pub pitch: f64,
}

impl Categories {
    pub fn new(labels: &[String], pitch: f64) -> Self {
        let widths: Vec<u32> = labels.iter().map(|l| text_width(l, TICK_PX)).collect();
        let widest = widths.iter().copied().max().unwrap_or(0);
        let across = f64::from(widest + 6);
        let along = f64::from(VERTICAL_PITCH);
        let fits = |need: f64| (need / pitch).ceil().max(1.0) as usize;
        let (vertical, step) = if across <= pitch {
            (false, 1)
        } else if along <= pitch {
            (true, 1)
        } else if widest <= 3 * TICK_PX {
            // short labels (numbers): horizontal, thinned
            (false, nice_count(fits(across)))
        } else {
            (true, nice_count(fits(along)))
        };
        let shown: Vec<(usize, String)> = labels
            .iter()
            .enumerate()
            .step_by(step)
            .map(|(i, l)| (i, l.clone()))
            .collect();
        let extent = if vertical {
            shown.iter().map(|(i, _)| widths[*i]).max().unwrap_or(0) + 4
        } else {
            line_height(TICK_PX)
        };
        Self {
            shown,
            vertical,
            extent,
            pitch,
        }
    }

    /// The horizontal pixel span `[a, b)` of each shown label, relative to the axis start.
    #[cfg(test)]
    pub fn spans(&self) -> Vec<(f64, f64)> {
        self.shown
            .iter()
            .map(|(i, l)| {
                let c = (*i as f64 + 0.5) * self.pitch;
                let half = if self.vertical {
                    f64::from(TICK_PX) / 2.0
                } else {
                    f64::from(text_width(l, TICK_PX)) / 2.0
                };
                (c - half, c + half)
            })
            .collect()
    }
}

/// Every how many rows `pitch` px high a horizontal label goes.
pub(super) fn row_step(pitch: f64) -> usize {
    nice_count(
        (f64::from(line_height(TICK_PX) - 2) / pitch)
            .ceil()
            .max(1.0) as usize,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_visible_and_long_labels_cut() {
        assert_eq!(escape_label("a\nb\tc\rd", 20), "a⏎b⇥c↵d");
        assert_eq!(escape_label("\u{1b}[0m", 20), "\\u{1b}[0m");
        assert_eq!(escape_label(" the", 20), " the");
        assert_eq!(escape_label("abcdefghijklmnop", 8), "abcdefg…");
        assert_eq!(escape_label("abcdefgh", 8), "abcdefgh");
        assert!(!escape_label("x\ny\u{7}", 20).chars().any(char::is_control));
    }

    #[test]
    fn titles_wrap_at_spaces_within_the_width() {
        let t = "attention received (mean ± std over later queries), layer 0 head 2, sequence 0";
        let lines = wrap(t, 16, 300);
        assert!(lines.len() >= 2, "{lines:?}");
        assert_eq!(lines.join(" "), t);
        assert!(lines.iter().all(|l| text_width(l, 16) <= 300), "{lines:?}");
        assert_eq!(wrap("short", 16, 300), ["short"]);
    }

    /// Shown labels never overlap: at least 2 px between neighbours.
    fn assert_apart(c: &Categories) {
        for w in c.spans().windows(2) {
            assert!(w[1].0 - w[0].1 >= 2.0, "{w:?} in {c:?}");
        }
    }

    #[test]
    fn category_labels_turn_vertical_then_thin_and_never_overlap() {
        let short: Vec<String> = (0..4).map(|i| i.to_string()).collect();
        let c = Categories::new(&short, 64.0);
        assert!(!c.vertical);
        assert_eq!(c.shown.len(), 4);
        assert_apart(&c);
        // 64 tokens of up to 12 characters at 15 px: all of them, vertical.
        let tokens: Vec<String> = (0..64)
            .map(|i| escape_label(&format!("tok{i}\n{}", "x".repeat(i % 13)), 12))
            .collect();
        let c = Categories::new(&tokens, 15.0);
        assert!(c.vertical);
        assert_eq!(c.shown.len(), 64);
        assert_apart(&c);
        assert!(c.extent > text_width("tok1", TICK_PX) && c.extent < 12 * TICK_PX);
        // At 6 px per token: every 5th (15 px needs 3 → 5).
        let c = Categories::new(&tokens, 6.0);
        assert!(c.vertical);
        assert_eq!(
            c.shown.iter().map(|s| s.0).take(3).collect::<Vec<_>>(),
            [0, 5, 10]
        );
        assert_apart(&c);
        // Positions 0..63 at 12 px: horizontal numbers, thinned.
        let pos: Vec<String> = (0..64).map(|i| i.to_string()).collect();
        let c = Categories::new(&pos, 12.0);
        assert!(!c.vertical && c.shown.len() < 64 && c.shown.len() >= 16);
        assert_apart(&c);
        assert_eq!(row_step(60.0), 1);
        assert_eq!(row_step(8.0), 2);
    }
}
