//! Progress on stderr and counted nouns for terminal output. [`Progress`] is a bar on a
//! terminal and, without one (CI, `> log`, `nohup`, a sweep child), a few plain lines with the
//! rate and the time left, as training prints its steps.

use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

/// Plain progress lines over a whole task when stderr is not a terminal (training prints about
/// as many step lines).
pub const PLAIN_LINES: u64 = 20;

/// "1 layer", "2 layers": `n` and the noun, plural unless n = 1 (`plural` spells irregular
/// ones; `None` adds an "s").
pub fn count<N>(n: N, singular: &str, plural: Option<&str>) -> String
where
    N: Copy + PartialEq + From<u8> + std::fmt::Display,
{
    match plural {
        _ if n == N::from(1) => format!("1 {singular}"),
        Some(p) => format!("{n} {p}"),
        None => format!("{n} {singular}s"),
    }
}

/// Progress of `total` units of one task, safe to advance from several threads: a bar on
/// stderr when stderr is a terminal, otherwise about [`PLAIN_LINES`] (or the number asked for)
/// evenly spaced lines `WHAT: DONE/TOTAL (P%), R/s, eta S s`.
pub struct Progress {
    bar: indicatif::ProgressBar,
    plain: Option<Plain>,
}

/// The plain-line state.
struct Plain {
    what: String,
    total: u64,
    lines: u64,
    started: Instant,
    state: Mutex<PlainState>,
}

struct PlainState {
    done: u64,
    /// Lines written so far (line i is due once done ≥ i · total / lines).
    written: u64,
    out: Box<dyn Write + Send>,
}

impl Progress {
    /// Progress of `total` units of `what` with [`PLAIN_LINES`] plain lines.
    pub fn new(total: u64, what: &str) -> Self {
        Self::with_lines(total, what, PLAIN_LINES)
    }

    /// [`Progress::new`] with `lines` plain lines instead.
    pub fn with_lines(total: u64, what: &str, lines: u64) -> Self {
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            Self {
                bar: progress_bar(total, what),
                plain: None,
            }
        } else {
            Self::plain(total, what, lines, Box::new(std::io::stderr()))
        }
    }

    /// Plain lines only, written to `out` (what a run without a terminal gets).
    pub fn plain(total: u64, what: &str, lines: u64, out: Box<dyn Write + Send>) -> Self {
        Self {
            bar: indicatif::ProgressBar::hidden(),
            plain: Some(Plain {
                what: what.to_string(),
                total: total.max(1),
                lines: lines.max(1),
                started: Instant::now(),
                state: Mutex::new(PlainState {
                    done: 0,
                    written: 0,
                    out,
                }),
            }),
        }
    }

    /// `k` more units done.
    pub fn inc(&self, k: u64) {
        self.bar.inc(k);
        let Some(p) = &self.plain else {
            return;
        };
        let mut s = p.state.lock().unwrap_or_else(|e| e.into_inner());
        s.done = (s.done + k).min(p.total);
        // the last line due at this count (line `lines` is due at the end)
        let due = s.done * p.lines / p.total;
        if due > s.written {
            s.written = due;
            let secs = p.started.elapsed().as_secs_f64().max(1e-9);
            let rate = s.done as f64 / secs;
            let eta = (p.total - s.done) as f64 / rate.max(1e-9);
            let line = format!(
                "{}: {}/{} ({:.0}%), {}/s, eta {eta:.0} s",
                p.what,
                s.done,
                p.total,
                100.0 * s.done as f64 / p.total as f64,
                rate_text(rate)
            );
            // progress is best effort: a closed stderr must not stop the work
            let _ = writeln!(s.out, "{line}");
        }
    }

    /// A message above the bar (or a plain line).
    pub fn println(&self, msg: &str) {
        match &self.plain {
            None => self.bar.println(msg),
            Some(p) => {
                let mut s = p.state.lock().unwrap_or_else(|e| e.into_inner());
                let _ = writeln!(s.out, "{msg}");
            }
        }
    }

    /// Remove the bar (plain lines stay as written).
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// A rate with three significant figures at most (`1234/s`, `12.3/s`, `0.123/s`).
fn rate_text(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}")
    } else if r >= 1.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.3}")
    }
}

/// A progress bar on stderr for `total` units of `what` (hidden when stderr is not a terminal).
pub fn progress_bar(total: u64, what: &str) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(total);
    b.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {what} {{pos}}/{{len}} [{{bar:30}}] eta {{eta}}"
        ))
        .expect("template")
        .progress_chars("=> "),
    );
    b
}

/// A progress bar on stderr over `total` bytes of `what`, with the throughput (hidden when
/// stderr is not a terminal).
pub fn bytes_bar(total: u64, what: &str) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(total);
    b.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {what} {{binary_bytes}}/{{binary_total_bytes}} [{{bar:30}}] \
             {{binary_bytes_per_sec}} eta {{eta}}"
        ))
        .expect("template")
        .progress_chars("=> "),
    );
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A writer whose bytes the test reads back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Shared {
        fn lines(&self) -> Vec<String> {
            String::from_utf8(self.0.lock().unwrap().clone())
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect()
        }
    }

    /// (done, total, percent, rate, eta) of a line `WHAT: D/T (P%), R/s, eta S s`.
    fn parse(line: &str, what: &str) -> (u64, u64, f64, f64, f64) {
        let rest = line.strip_prefix(&format!("{what}: ")).expect(line);
        let (frac, rest) = rest.split_once(" (").expect(line);
        let (d, t) = frac.split_once('/').expect(line);
        let (pct, rest) = rest.split_once("%), ").expect(line);
        let (rate, rest) = rest.split_once("/s, eta ").expect(line);
        let eta = rest.strip_suffix(" s").expect(line);
        (
            d.parse().unwrap(),
            t.parse().unwrap(),
            pct.parse().unwrap(),
            rate.parse().unwrap(),
            eta.parse().unwrap(),
        )
    }

    #[test]
    fn plain_lines_are_evenly_spaced_with_rate_and_eta() {
        let out = Shared::default();
        let p = Progress::plain(1000, "tokens", 20, Box::new(out.clone()));
        for _ in 0..1000 {
            p.inc(1);
        }
        let lines = out.lines();
        assert_eq!(lines.len(), 20, "{lines:?}");
        for (i, l) in lines.iter().enumerate() {
            let (d, t, pct, rate, eta) = parse(l, "tokens");
            assert_eq!((d, t), (50 * (i as u64 + 1), 1000), "{l}");
            assert!((pct - 5.0 * (i + 1) as f64).abs() <= 0.5, "{l}");
            assert!(rate > 0.0 && rate.is_finite(), "{l}");
            assert!(eta >= 0.0 && eta.is_finite(), "{l}");
        }
        assert!(lines[19].contains("(100%)") && lines[19].ends_with("eta 0 s"));
    }

    #[test]
    fn plain_lines_from_large_steps_and_threads_never_exceed_the_count() {
        // steps of 7 over 100 units, 5 lines: one line per fifth crossed, the last at 100/100
        let out = Shared::default();
        let p = Progress::plain(100, "windows", 5, Box::new(out.clone()));
        for _ in 0..15 {
            p.inc(7);
        }
        let done: Vec<u64> = out.lines().iter().map(|l| parse(l, "windows").0).collect();
        assert_eq!(done, [21, 42, 63, 84, 100]);
        // several threads advancing one progress: still exactly `lines` lines, the last at total
        let out = Shared::default();
        let p = Progress::plain(4000, "tokens", 20, Box::new(out.clone()));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..1000).for_each(|_| p.inc(1)));
            }
        });
        let lines = out.lines();
        assert_eq!(lines.len(), 20);
        assert_eq!(parse(&lines[19], "tokens").0, 4000);
        // fewer units than lines: one line per unit
        let out = Shared::default();
        let p = Progress::plain(3, "layers", 20, Box::new(out.clone()));
        (0..3).for_each(|_| p.inc(1));
        assert_eq!(out.lines().len(), 3);
    }

    #[test]
    fn counted_nouns_are_singular_only_for_one() {
        assert_eq!(count(1usize, "layer", None), "1 layer");
        assert_eq!(count(0usize, "layer", None), "0 layers");
        assert_eq!(count(12u64, "step", None), "12 steps");
        assert_eq!(count(1u64, "file has", Some("files have")), "1 file has");
        assert_eq!(count(3u64, "file has", Some("files have")), "3 files have");
    }
}
