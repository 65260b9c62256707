//! A deterministic structured mutation fuzzer on stable Rust for every parser of untrusted model
//! files and settings: safetensors headers and indexes, the GGUF reader (header, metadata, tensor
//! infos, data), `config.json` of every family, `tokenizer.json` and GGUF tokenizers, the chat
//! templates and `DecodeSettings` validation.
//!
//! Invariants checked on every execution:
//! - no panic (caught with `catch_unwind`; a panic is a crash, minimised and saved);
//! - no abort and allocation bounded by the input size (see [`alloc`]: requests above 1 GiB and
//!   peaks above `64 × input + allowance + 64 MiB` are violations; needs [`TrackingAlloc`] as the
//!   binary's global allocator);
//! - every rejection is a typed `EngineError` whose message reads as one line of prose
//!   ([`wording`] findings are reported, not failures).
//!
//! Runs are reproducible: the seed alone fixes the sequence of inputs.
//!
//! ```no_run
//! use unmask_robustness::fuzz::{run_all, FuzzConfig};
//! let report = run_all(&FuzzConfig::from_env()).unwrap();
//! println!("{}", report.summary());
//! assert_eq!(report.total_crashes + report.total_violations, 0);
//! ```

pub mod alloc;
pub mod bundle;
pub mod bytes;
pub mod driver;
pub mod exec;
pub mod gguf_format;
pub mod json;
pub mod panics;
pub mod regressions;
pub mod report;
pub mod rng;
pub mod safetensors_format;
pub mod seeds;
pub mod targets;
pub mod watchdog;
pub mod wording;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use alloc::TrackingAlloc;
pub use report::{Finding, FindingKind, FuzzReport, TargetReport, WordingExample};
pub use targets::NAMES as TARGETS;

/// Seed used when none is given.
pub const DEFAULT_SEED: u64 = 0x756e_6d61_736b;

/// Why a fuzz run could not start.
#[derive(Debug, thiserror::Error)]
pub enum FuzzError {
    #[error("fuzz harness I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("building fuzz seeds: {0}")]
    Seeds(String),
    #[error("unknown fuzz target `{0}` (known: {list})", list = TARGETS.join(", "))]
    UnknownTarget(String),
}

/// What to run and for how long.
#[derive(Debug, Clone)]
pub struct FuzzConfig {
    /// Fixes every random choice of the run.
    pub seed: u64,
    /// Wall-clock budget of each target.
    pub time_per_target: Duration,
    /// Stop a target after this many executions (None: time only).
    pub max_execs_per_target: Option<u64>,
    /// Targets to run (empty: all of [`TARGETS`]).
    pub targets: Vec<String>,
    /// Where new crashing inputs are saved (`<dir>/<target>/<kind>-<hash>.bin`).
    pub save_dir: Option<PathBuf>,
    /// Time spent shrinking each new finding's input.
    pub minimize_time: Duration,
    /// One execution longer than this aborts the run (after saving the input).
    pub exec_timeout: Duration,
    /// Resident-memory growth that aborts the run (after saving the input).
    pub rss_growth_limit: u64,
    /// Executions slower than this are reported as slow inputs.
    pub slow_exec: Duration,
    /// Recognises open bugs already on file: their findings are reported (marked `known`) but
    /// not minimised or saved again.
    pub known: Option<fn(&Finding) -> bool>,
}

impl Default for FuzzConfig {
    fn default() -> Self {
        FuzzConfig {
            seed: DEFAULT_SEED,
            time_per_target: Duration::from_secs(4),
            max_execs_per_target: None,
            targets: Vec::new(),
            save_dir: None,
            minimize_time: Duration::from_secs(2),
            exec_timeout: Duration::from_secs(120),
            rss_growth_limit: 2 << 30,
            slow_exec: Duration::from_secs(1),
            known: None,
        }
    }
}

impl FuzzConfig {
    /// Defaults, with `UNMASK_FUZZ_SECS` (seconds per target), `UNMASK_FUZZ_SEED` (decimal or
    /// `0x` hex) and `UNMASK_FUZZ_MINIMIZE_SECS` (per new finding) applied when set.
    pub fn from_env() -> Self {
        let mut cfg = FuzzConfig::default();
        if let Some(t) = env_secs("UNMASK_FUZZ_SECS") {
            cfg.time_per_target = t;
        }
        if let Some(t) = env_secs("UNMASK_FUZZ_MINIMIZE_SECS") {
            cfg.minimize_time = t;
        }
        if let Some(seed) = std::env::var("UNMASK_FUZZ_SEED").ok().and_then(|s| parse_seed(&s)) {
            cfg.seed = seed;
        }
        cfg
    }
}

fn env_secs(name: &str) -> Option<Duration> {
    let secs = std::env::var(name).ok()?.trim().parse::<f64>().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

fn parse_seed(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The regression folder of this crate (`tests/robustness/fuzz-regressions`).
pub fn regressions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz-regressions")
}

fn start_watchdog(cfg: &FuzzConfig) -> watchdog::Watchdog {
    watchdog::Watchdog::start(watchdog::Limits {
        exec_timeout: cfg.exec_timeout,
        rss_growth: cfg.rss_growth_limit,
        save_dir: cfg.save_dir.clone(),
    })
}

/// Runs every selected target for its budget.
pub fn run_all(cfg: &FuzzConfig) -> Result<FuzzReport, FuzzError> {
    let names: Vec<String> =
        if cfg.targets.is_empty() { TARGETS.iter().map(|s| (*s).to_owned()).collect() } else { cfg.targets.clone() };
    let tracking = alloc::is_installed();
    let _guard = start_watchdog(cfg);
    let mut report = FuzzReport {
        seed: cfg.seed,
        seconds_per_target: cfg.time_per_target.as_secs_f64(),
        alloc_tracking: tracking,
        ..FuzzReport::default()
    };
    for name in &names {
        let mut target = targets::build(name)?;
        report.push(driver::run_target(target.as_mut(), cfg, tracking));
    }
    Ok(report)
}

/// Runs one target for its budget.
pub fn run_target(name: &str, cfg: &FuzzConfig) -> Result<TargetReport, FuzzError> {
    let tracking = alloc::is_installed();
    let _guard = start_watchdog(cfg);
    let mut target = targets::build(name)?;
    Ok(driver::run_target(target.as_mut(), cfg, tracking))
}

/// The result of replaying one stored input.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Replay {
    pub target: String,
    pub path: Option<PathBuf>,
    /// `accepted`, `rejected <Kind>: <message>` or `panicked: <message>`.
    pub verdict: String,
    /// The crash or violation it still shows, if any.
    pub finding: Option<Finding>,
}

/// Replays `input` through the target called `name`.
pub fn replay(name: &str, input: &[u8]) -> Result<Replay, FuzzError> {
    let mut target = targets::build(name)?;
    Ok(replay_with(target.as_mut(), input, None))
}

fn replay_with(target: &mut dyn targets::Target, input: &[u8], path: Option<PathBuf>) -> Replay {
    let tracking = alloc::is_installed();
    let ex = exec::execute(target, input);
    let verdict = match &ex.verdict {
        exec::Verdict::Accepted => "accepted".to_owned(),
        exec::Verdict::Rejected { kind, message } => format!("rejected {kind}: {message}"),
        exec::Verdict::Panicked(p) => format!("panicked: {} at {}", p.message, p.location),
    };
    let finding = driver::classify(target, input, &ex, tracking);
    Replay { target: target.name().to_owned(), path, verdict, finding }
}

/// Replays every `<dir>/<target>/*.bin`, skipping files whose name (relative to `dir`) is in
/// `skip`. A folder naming no known target is an error.
pub fn replay_regressions(dir: &Path, skip: &[&str]) -> Result<Vec<Replay>, FuzzError> {
    let _guard = start_watchdog(&FuzzConfig { save_dir: None, ..FuzzConfig::default() });
    let mut built: HashMap<String, Box<dyn targets::Target>> = HashMap::new();
    let mut out = Vec::new();
    for r in regressions::load_all(dir)? {
        let rel = r.path.strip_prefix(dir).unwrap_or(&r.path).to_string_lossy().replace('\\', "/");
        if skip.contains(&rel.as_str()) {
            continue;
        }
        let target = match built.entry(r.target.clone()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(targets::build(&r.target)?),
        };
        out.push(replay_with(target.as_mut(), &r.input, Some(r.path.clone())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_in_both_bases() {
        assert_eq!(parse_seed("0x10"), Some(16));
        assert_eq!(parse_seed(" 42 "), Some(42));
        assert_eq!(parse_seed("x"), None);
    }
}
