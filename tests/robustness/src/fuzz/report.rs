//! What a fuzz run found, serialisable for the bench suite.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// What kind of invariant an input broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// The engine panicked.
    Panic,
    /// A single allocation request above the hard cap (would abort without the harness).
    OverAllocation,
    /// Peak live heap above the bound for the input size.
    PeakAllocation,
    /// An execution slower than `FuzzConfig::slow_exec` (reported, not a failure).
    Slow,
}

/// One distinct crash or allocation violation (first input kept, later hits counted).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Finding {
    pub target: String,
    pub kind: FindingKind,
    /// Panic message, or the allocation sizes.
    pub message: String,
    /// Panic location (`file:line`, may be in std).
    pub location: String,
    /// Innermost engine frame (`engine/src/…:line`), when found.
    pub engine_frame: Option<String>,
    /// Executions that hit it.
    pub hits: u64,
    /// The (minimised) input, as bytes; not serialised.
    #[serde(skip)]
    pub input: Vec<u8>,
    pub input_len: usize,
    /// Where the input was saved as a regression file.
    pub saved_as: Option<PathBuf>,
    /// Matched `FuzzConfig::known` (an open bug already on file): not minimised or saved.
    pub known: bool,
}

impl Finding {
    /// What identifies the bug: where it happened and what kind it is.
    pub fn signature(&self) -> String {
        let place = self.engine_frame.clone().unwrap_or_else(|| self.location.clone());
        let head: String = self.message.chars().filter(|c| !c.is_ascii_digit()).take(16).collect();
        format!("{:?}@{place}:{head}", self.kind)
    }
}

/// A rejection message that reads badly.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WordingExample {
    /// Which check failed (`debug-option`, `multi-line`, …).
    pub issue: String,
    /// The `EngineError` variant.
    pub error_kind: String,
    /// The message (shortened).
    pub message: String,
}

/// Results of one target.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TargetReport {
    pub name: String,
    pub execs: u64,
    pub accepted: u64,
    pub rejected: u64,
    /// Executions that panicked (all hits).
    pub crash_execs: u64,
    /// Distinct panics.
    pub crashes: Vec<Finding>,
    /// Distinct allocation violations.
    pub violations: Vec<Finding>,
    /// The slowest executions above `FuzzConfig::slow_exec` (a few; not failures).
    pub slow: Vec<Finding>,
    pub rejections_by_kind: BTreeMap<String, u64>,
    /// Rejections whose message failed a wording check.
    pub wording_count: u64,
    pub wording_examples: Vec<WordingExample>,
    pub seconds: f64,
    pub execs_per_sec: f64,
    pub max_peak_bytes: u64,
    pub slowest_exec_ms: f64,
    pub corpus_size: usize,
}

/// Results of a whole run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FuzzReport {
    pub seed: u64,
    pub seconds_per_target: f64,
    /// Whether `TrackingAlloc` was installed (allocation checks ran).
    pub alloc_tracking: bool,
    pub total_execs: u64,
    /// Distinct panics over all targets.
    pub total_crashes: u64,
    /// Distinct allocation violations over all targets.
    pub total_violations: u64,
    pub total_wording: u64,
    pub targets: Vec<TargetReport>,
}

impl FuzzReport {
    /// Adds a target's results to the totals.
    pub fn push(&mut self, t: TargetReport) {
        self.total_execs += t.execs;
        self.total_crashes += t.crashes.len() as u64;
        self.total_violations += t.violations.len() as u64;
        self.total_wording += t.wording_count;
        self.targets.push(t);
    }

    /// Every crash and violation.
    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.targets.iter().flat_map(|t| t.crashes.iter().chain(&t.violations))
    }

    /// A human-readable table plus the findings.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "fuzz seed {:#x}, {:.1} s per target, allocation tracking {}",
            self.seed,
            self.seconds_per_target,
            if self.alloc_tracking { "on" } else { "OFF" }
        );
        let _ = writeln!(
            s,
            "{:<20} {:>8} {:>9} {:>8} {:>8} {:>7} {:>7} {:>8}",
            "target", "execs", "execs/s", "accepted", "crashes", "alloc", "wording", "peak MiB"
        );
        for t in &self.targets {
            let _ = writeln!(
                s,
                "{:<20} {:>8} {:>9.0} {:>8} {:>8} {:>7} {:>7} {:>8.1}",
                t.name,
                t.execs,
                t.execs_per_sec,
                t.accepted,
                t.crashes.len(),
                t.violations.len(),
                t.wording_count,
                t.max_peak_bytes as f64 / (1 << 20) as f64
            );
        }
        let _ = writeln!(
            s,
            "total: {} execs, {} crashes, {} allocation violations, {} wording findings",
            self.total_execs, self.total_crashes, self.total_violations, self.total_wording
        );
        for f in self.findings() {
            let _ = writeln!(
                s,
                "  {} {:?}{}: {} at {} ({}), {} hits, input {} bytes{}",
                f.target,
                f.kind,
                if f.known { " (known)" } else { "" },
                f.message,
                f.location,
                f.engine_frame.as_deref().unwrap_or("no engine frame"),
                f.hits,
                f.input_len,
                f.saved_as.as_ref().map(|p| format!(", saved as {}", p.display())).unwrap_or_default()
            );
        }
        s
    }
}
