//! Progress bars on standard error (indicatif), hidden when stderr is not a terminal so that
//! scripts and logs get no escape sequences.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether progress bars are drawn at all.
pub fn enabled() -> bool {
    std::io::stderr().is_terminal()
}

/// A container for several bars (one per suite or file).
pub fn multi() -> MultiProgress {
    if enabled() {
        MultiProgress::with_draw_target(ProgressDrawTarget::stderr())
    } else {
        MultiProgress::with_draw_target(ProgressDrawTarget::hidden())
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// A byte-count bar (`total` may be unknown: then a spinner with the bytes so far).
pub fn bytes(m: &MultiProgress, total: Option<u64>, label: &str) -> ProgressBar {
    let bar = match total {
        Some(t) => ProgressBar::new(t).with_style(style(
            "{prefix:.bold} {bar:30.cyan/blue} {bytes}/{total_bytes} · {bytes_per_sec} · eta {eta} {msg}",
        )),
        None => ProgressBar::new_spinner().with_style(style("{prefix:.bold} {spinner} {bytes} · {bytes_per_sec} {msg}")),
    };
    let bar = m.add(bar);
    bar.set_prefix(label.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// A spinner with elapsed time and a message (work whose length is unknown).
pub fn spinner(m: &MultiProgress, label: &str) -> ProgressBar {
    let bar = m.add(ProgressBar::new_spinner().with_style(style("{prefix:.bold} {spinner} [{elapsed_precise}] {wide_msg}")));
    bar.set_prefix(label.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// A bar over a known number of items.
pub fn count(m: &MultiProgress, total: u64, label: &str) -> ProgressBar {
    let bar = m.add(ProgressBar::new(total).with_style(style("{prefix:.bold} {bar:30.cyan/blue} {pos}/{len} · eta {eta}")));
    bar.set_prefix(label.to_owned());
    bar
}
