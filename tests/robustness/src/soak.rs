//! Soak runs: many generations in one process with resident memory sampled after each, to show
//! that nothing accumulates per run. Two processes are soaked: the CLI chat loop (one `unmask
//! chat` fed line after line) and an in-process generate loop that drives the engine the way
//! the app's state does (model loaded once, a CPU backend per run).
//!
//! The figure is growth: after a warm-up, the mean RSS of the last [`WINDOW`] runs over the mean
//! of the first [`WINDOW`], minus one. Flat memory passes at [`MAX_GROWTH`] or less.

use std::io::{BufRead, BufReader, Read, Write};
use std::ops::ControlFlow;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use unmask_engine::decode::CancelFlag;
use unmask_engine::model::ChatMessage;
use unmask_engine::run::{BackendSpec, ModelParts, RunPrompt, Session, SettingsOverrides};

use crate::runner::status_kib;

/// Runs discarded before the first window (allocator pools, caches and lazy tables fill up).
pub const WARMUP: usize = 10;
/// Runs averaged at each end.
pub const WINDOW: usize = 20;
/// Largest growth that counts as flat.
pub const MAX_GROWTH: f64 = 0.05;
/// Longest wait for one chat reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// Chat turns between `/reset`s, so the conversation stays inside the tiny model's context.
const TURNS_PER_CONVERSATION: usize = 4;

const PROMPTS: &[&str] = &[
    "hello there",
    "what is the capital of france",
    "count from one to five",
    "tell me a short story about a fox",
    "reverse the words: fig pear plum",
    "12 + 7 = ?",
    "name three colours",
    "why is the sky blue",
    "write a haiku about rain",
    "translate 'good morning' to french",
    "what comes after tuesday",
    "summarise: the cat sat on the mat",
];

/// Resident memory over one soak.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    /// `cli_chat_loop` or `in_process_generate`.
    pub name: String,
    pub requested: usize,
    /// Runs that completed.
    pub runs: usize,
    pub warmup: usize,
    pub window: usize,
    /// VmRSS after each run, MiB.
    pub rss_mib: Vec<f64>,
    pub first_window_mib: f64,
    pub last_window_mib: f64,
    /// last / first - 1.
    pub growth: f64,
    /// VmHWM (peak resident) at the end, MiB.
    pub peak_rss_mib: f64,
    pub wall_s: f64,
    pub max_growth: f64,
    pub passed: bool,
    /// Why the soak stopped early, if it did.
    pub error: Option<String>,
}

impl SoakReport {
    fn new(name: &str, requested: usize) -> SoakReport {
        SoakReport {
            name: name.to_owned(),
            requested,
            runs: 0,
            warmup: WARMUP,
            window: WINDOW,
            rss_mib: Vec::new(),
            first_window_mib: 0.0,
            last_window_mib: 0.0,
            growth: f64::NAN,
            peak_rss_mib: 0.0,
            wall_s: 0.0,
            max_growth: MAX_GROWTH,
            passed: false,
            error: None,
        }
    }

    /// Fills the windows, growth and verdict from the samples.
    fn finish(mut self, started: Instant, peak_kib: Option<u64>) -> SoakReport {
        self.wall_s = started.elapsed().as_secs_f64();
        self.runs = self.rss_mib.len();
        self.peak_rss_mib = peak_kib.map(|k| k as f64 / 1024.0).unwrap_or(0.0);
        match windows(&self.rss_mib, WARMUP, WINDOW) {
            Some((first, last)) => {
                self.first_window_mib = first;
                self.last_window_mib = last;
                self.growth = last / first - 1.0;
            }
            None => {
                self.error
                    .get_or_insert_with(|| format!("{} runs are too few for two windows after the warm-up", self.runs));
            }
        }
        self.passed = self.error.is_none() && self.growth <= MAX_GROWTH;
        self
    }

    /// One line for logs.
    pub fn summary(&self) -> String {
        format!(
            "{}: {}/{} runs, RSS {:.1} -> {:.1} MiB ({:+.2} %), peak {:.1} MiB, {:.1} s{}{}",
            self.name,
            self.runs,
            self.requested,
            self.first_window_mib,
            self.last_window_mib,
            self.growth * 100.0,
            self.peak_rss_mib,
            self.wall_s,
            if self.passed { ", flat" } else { ", NOT FLAT" },
            self.error.as_deref().map(|e| format!(" (error: {e})")).unwrap_or_default()
        )
    }
}

/// Means of the first and last `window` samples after `warmup` (windows shrink, without
/// overlapping, when there are fewer than `warmup + 2 * window` samples).
pub fn windows(samples: &[f64], warmup: usize, window: usize) -> Option<(f64, f64)> {
    let rest = samples.get(warmup..)?;
    let w = window.min(rest.len() / 2);
    if w == 0 {
        return None;
    }
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    Some((mean(&rest[..w]), mean(&rest[rest.len() - w..])))
}

fn proc_status(pid: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
}

/// `turns` chat turns through one `unmask chat` process (`--json`: one reply line each), its
/// VmRSS read after every reply.
pub fn chat_loop_soak(unmask: &Path, turns: usize) -> SoakReport {
    let report = SoakReport::new("cli_chat_loop", turns);
    let started = Instant::now();
    let data = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return fail(report, started, None, format!("temporary folder: {e}")),
    };
    let spawned = Command::new(unmask)
        .args(["chat", "--no-record", "--no-live", "--json", "-m", "tiny-llada", "--gen-length", "16", "--steps", "4"])
        .arg("--data-dir")
        .arg(data.path())
        .env_remove("UNMASK_MODEL")
        .env_remove("UNMASK_DATA_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return fail(report, started, None, format!("spawning {}: {e}", unmask.display())),
    };
    let pid = child.id().to_string();
    let replies = line_channel(child.stdout.take());
    let stderr = child.stderr.take().map(|mut s| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            text
        })
    });
    let (report, peak) = chat_turns(report, &mut child, &pid, &replies, turns);
    drop(child.stdin.take());
    let status = wait_or_kill(&mut child, Duration::from_secs(10));
    let err_text = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    let mut report = report;
    if report.error.is_none() && !matches!(status, Some(s) if s.success()) {
        report.error = Some(format!("chat ended with {status:?}: {}", last_line(&err_text)));
    } else if let Some(e) = &mut report.error {
        if !err_text.trim().is_empty() {
            e.push_str(&format!(" (stderr: {})", last_line(&err_text)));
        }
    }
    report.finish(started, peak)
}

fn chat_turns(
    mut report: SoakReport,
    child: &mut Child,
    pid: &str,
    replies: &mpsc::Receiver<String>,
    turns: usize,
) -> (SoakReport, Option<u64>) {
    let mut peak = None;
    let Some(stdin) = child.stdin.as_mut() else {
        report.error = Some("no standard input".into());
        return (report, peak);
    };
    for i in 0..turns {
        let mut input = String::new();
        if i > 0 && i % TURNS_PER_CONVERSATION == 0 {
            input.push_str("/reset\n");
        }
        input.push_str(&format!("{} ({i})\n", PROMPTS[i % PROMPTS.len()]));
        if let Err(e) = stdin.write_all(input.as_bytes()).and_then(|_| stdin.flush()) {
            report.error = Some(format!("turn {i}: writing to chat: {e}"));
            break;
        }
        match replies.recv_timeout(REPLY_TIMEOUT) {
            Ok(line) if serde_json::from_str::<serde_json::Value>(&line).is_ok_and(|v| v.get("text").is_some()) => {}
            Ok(line) => {
                report.error = Some(format!("turn {i}: reply is not a JSON object with `text`: {line}"));
                break;
            }
            Err(_) => {
                report.error = Some(format!("turn {i}: no reply within {} s", REPLY_TIMEOUT.as_secs()));
                break;
            }
        }
        let Some(status) = proc_status(pid) else {
            report.error = Some(format!("turn {i}: /proc/{pid}/status unreadable"));
            break;
        };
        if let Some(kib) = status_kib(&status, "VmRSS:") {
            report.rss_mib.push(kib as f64 / 1024.0);
        }
        peak = status_kib(&status, "VmHWM:");
    }
    (report, peak)
}

/// Lines of a stream, delivered through a channel so a hung process cannot block the reader.
fn line_channel<R: Read + Send + 'static>(stream: Option<R>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(s) = stream {
        std::thread::spawn(move || {
            for line in BufReader::new(s).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

fn wait_or_kill(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if started.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

fn last_line(s: &str) -> String {
    s.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_owned()
}

fn fail(mut report: SoakReport, started: Instant, peak: Option<u64>, error: String) -> SoakReport {
    report.error = Some(error);
    report.finish(started, peak)
}

/// `runs` calls of `run_once(i)` inside this process, this process's VmRSS read after each:
/// the soak of any in-process front end (the engine's run session, the app's state).
pub fn in_process_soak(name: &str, runs: usize, mut run_once: impl FnMut(usize) -> Result<(), String>) -> SoakReport {
    let mut report = SoakReport::new(name, runs);
    let started = Instant::now();
    for i in 0..runs {
        if let Err(e) = run_once(i) {
            report.error = Some(format!("run {i}: {e}"));
            break;
        }
        if let Some(kib) = proc_status("self").and_then(|s| status_kib(&s, "VmRSS:")) {
            report.rss_mib.push(kib as f64 / 1024.0);
        }
    }
    let peak = proc_status("self").and_then(|s| status_kib(&s, "VmHWM:"));
    report.finish(started, peak)
}

/// A varied user prompt for soak run `i`.
pub fn soak_prompt(i: usize) -> String {
    format!("{} ({i})", PROMPTS[i % PROMPTS.len()])
}

/// `runs` generations of the model in `model_dir` through the engine's run pipeline (the one
/// the CLI and the app use): the model loaded once, a session per run on the CPU backend, the
/// prompt rendered and encoded, a short decode, the answer cut at the stop tokens.
pub fn in_process_generate_soak(model_dir: &Path, runs: usize) -> SoakReport {
    let model = match ModelParts::load(model_dir) {
        Ok(m) => Arc::new(m),
        Err(e) => {
            let mut r = SoakReport::new("in_process_generate", runs);
            r.error = Some(format!("loading {}: {e}", model_dir.display()));
            return r.finish(Instant::now(), None);
        }
    };
    let overrides = SettingsOverrides { gen_length: Some(16), block_length: Some(16), steps: Some(4), ..Default::default() };
    in_process_soak("in_process_generate", runs, |i| {
        let mut session = Session::open(model.clone(), &BackendSpec::Cpu).map_err(|e| e.to_string())?;
        let settings = session.settings(&overrides).map_err(|e| e.to_string())?;
        let messages = [ChatMessage::user(soak_prompt(i))];
        let ids = session.prompt_ids(RunPrompt::Chat(&messages)).map_err(|e| e.to_string())?;
        let out = session.run(&ids, &settings, &CancelFlag::new(), &mut |_| ControlFlow::Continue(())).map_err(|e| e.to_string())?;
        std::hint::black_box(out.text);
        Ok(())
    })
}
