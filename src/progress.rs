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
