//! One execution of a target on one input: serialised with every other execution in the process
//! (so allocation windows and panic capture see only it), under `catch_unwind`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use unmask_engine::EngineError;

use super::alloc::{self, AllocStats};
use super::panics::{self, PanicRecord};
use super::targets::Target;
use super::watchdog;

static EXEC_LOCK: Mutex<()> = Mutex::new(());

/// How an execution ended.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// The input was accepted.
    Accepted,
    /// The engine refused it with a typed error.
    Rejected {
        /// The `EngineError` variant.
        kind: String,
        /// Its Display text.
        message: String,
    },
    /// The engine panicked: a crash.
    Panicked(PanicRecord),
}

/// One execution's outcome and cost.
#[derive(Debug, Clone)]
pub struct Execution {
    pub verdict: Verdict,
    pub alloc: AllocStats,
    /// Where the first over-cap request came from (`engine/src/…:line` when it is the engine's).
    pub over_cap_site: Option<String>,
    pub elapsed: Duration,
}

/// Runs `target` on `input`.
pub fn execute(target: &mut dyn Target, input: &[u8]) -> Execution {
    let _serial = EXEC_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    panics::install();
    watchdog::enter(target.name(), input);
    let started = Instant::now();
    panics::begin();
    let (result, alloc) = alloc::measure(|| catch_unwind(AssertUnwindSafe(|| target.execute(input))));
    let captured = panics::end();
    // Resolved before the next window overwrites the captured frames.
    let over_cap_site = alloc.over_cap_request.and_then(|_| alloc::over_cap_site());
    let elapsed = started.elapsed();
    watchdog::leave();
    let verdict = match result {
        Ok(Ok(())) => Verdict::Accepted,
        Ok(Err(e)) => Verdict::Rejected { kind: error_kind(&e), message: e.to_string() },
        Err(payload) => Verdict::Panicked(captured.unwrap_or_else(|| PanicRecord {
            message: panics::payload_text(payload.as_ref()),
            location: String::new(),
            engine_frame: None,
        })),
    };
    Execution { verdict, alloc, over_cap_site, elapsed }
}

/// The variant name of an engine error (the "kind" of a rejection), read from its Debug form so
/// new variants need no change here.
pub fn error_kind(e: &EngineError) -> String {
    format!("{e:?}").chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}
