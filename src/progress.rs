//! Progress bars on stderr (hidden when stderr is not a terminal).

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

/// Print `msg` on its own line above `bar`, or as a plain line on stderr when the bar is hidden
/// (no terminal: CI, `> log`, nohup), so that long work is never silent.
pub fn say(bar: &indicatif::ProgressBar, msg: impl AsRef<str>) {
    if bar.is_hidden() {
        eprintln!("{}", msg.as_ref());
    } else {
        bar.println(msg.as_ref());
    }
}
