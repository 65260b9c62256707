//! Last-resort guard for what `catch_unwind` cannot catch: an execution that hangs or really
//! fills gigabytes of memory. A background thread checks the running execution; past the time
//! or resident-memory limit it saves the input (so the finding survives) and aborts the process.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

struct Running {
    target: &'static str,
    input: Vec<u8>,
    started: Instant,
}

static RUNNING: Mutex<Option<Running>> = Mutex::new(None);

/// Marks `input` as the execution in progress.
pub fn enter(target: &'static str, input: &[u8]) {
    if let Ok(mut r) = RUNNING.lock() {
        *r = Some(Running { target, input: input.to_vec(), started: Instant::now() });
    }
}

/// Marks the execution as finished.
pub fn leave() {
    if let Ok(mut r) = RUNNING.lock() {
        *r = None;
    }
}

/// Limits the watchdog enforces.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Longest a single execution may run.
    pub exec_timeout: Duration,
    /// Resident memory the process may gain over its level when the watchdog started.
    pub rss_growth: u64,
    /// Where to save the input that tripped a limit (`<dir>/<target>/<kind>-<hash>.bin`).
    pub save_dir: Option<PathBuf>,
}

/// A running watchdog; stops when dropped.
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts the guard thread.
    pub fn start(limits: Limits) -> Watchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let baseline = resident_bytes().unwrap_or(0);
        let handle = std::thread::Builder::new()
            .name("fuzz-watchdog".into())
            .spawn(move || {
                while !flag.load(SeqCst) {
                    std::thread::sleep(Duration::from_millis(100));
                    check(&limits, baseline);
                }
            })
            .ok();
        Watchdog { stop, handle }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn check(limits: &Limits, baseline: u64) {
    let Ok(guard) = RUNNING.try_lock() else { return };
    let Some(run) = guard.as_ref() else { return };
    let elapsed = run.started.elapsed();
    let rss = resident_bytes().unwrap_or(0);
    let kind = if elapsed > limits.exec_timeout {
        "hang"
    } else if rss.saturating_sub(baseline) > limits.rss_growth {
        "oom"
    } else {
        return;
    };
    let saved = limits
        .save_dir
        .as_ref()
        .and_then(|dir| super::regressions::save(dir, run.target, kind, &run.input).ok())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "(not saved)".into());
    eprintln!(
        "fuzz watchdog: target `{}` {kind}: {:.1} s, resident {} MiB; input ({} bytes) saved as {saved}; aborting",
        run.target,
        elapsed.as_secs_f64(),
        rss >> 20,
        run.input.len()
    );
    std::process::abort();
}

/// Resident set size of this process (Linux).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
