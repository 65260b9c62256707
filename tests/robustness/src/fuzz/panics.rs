//! Panic capture: while an execution runs, a panic on its thread or on an unnamed worker thread
//! (rayon's) is recorded (message, location and the engine frame it came from) instead of
//! printed; other panics, e.g. a failing test on another thread, go to the previous hook.

use std::collections::HashMap;
use std::panic::PanicHookInfo;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Mutex, Once};
use std::thread::ThreadId;

/// A captured panic.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PanicRecord {
    /// The panic message.
    pub message: String,
    /// `file:line` where `panic!` was called (may be inside std, e.g. for a capacity overflow).
    pub location: String,
    /// The innermost `engine/src/…:line` frame of the panicking stack, if any.
    pub engine_frame: Option<String>,
}

static INSTALL: Once = Once::new();
static CAPTURING: AtomicBool = AtomicBool::new(false);
static SLOT: Mutex<Option<PanicRecord>> = Mutex::new(None);
static EXEC_THREAD: Mutex<Option<ThreadId>> = Mutex::new(None);
/// Engine frame per panic location, so a bug hit thousands of times is symbolised once.
static FRAMES: Mutex<Option<HashMap<String, Option<String>>>> = Mutex::new(None);

/// Installs the capturing hook (once per process), chaining to the previous one.
pub fn install() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CAPTURING.load(SeqCst) && belongs_to_execution() {
                record(info);
            } else {
                previous(info);
            }
        }));
    });
}

fn belongs_to_execution() -> bool {
    let me = std::thread::current();
    me.name().is_none_or(|n| n.starts_with("rayon"))
        || EXEC_THREAD.try_lock().ok().and_then(|t| *t).is_some_and(|id| id == me.id())
}

/// Starts capturing panics of the calling thread's execution.
pub fn begin() {
    if let Ok(mut slot) = SLOT.lock() {
        *slot = None;
    }
    if let Ok(mut t) = EXEC_THREAD.lock() {
        *t = Some(std::thread::current().id());
    }
    CAPTURING.store(true, SeqCst);
}

/// Stops capturing and returns the first panic seen, if any.
pub fn end() -> Option<PanicRecord> {
    CAPTURING.store(false, SeqCst);
    SLOT.lock().ok().and_then(|mut s| s.take())
}

/// The text of a panic payload.
pub fn payload_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}

fn record(info: &PanicHookInfo<'_>) {
    let message = payload_text(info.payload());
    let location = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
    let engine_frame = engine_frame_for(&location);
    // try_lock: a panic while the slot is held (another thread recording) must not deadlock.
    if let Ok(mut slot) = SLOT.try_lock() {
        if slot.is_none() {
            *slot = Some(PanicRecord { message, location, engine_frame });
        }
    }
}

fn engine_frame_for(location: &str) -> Option<String> {
    if let Some(rel) = engine_relative(location) {
        return Some(rel);
    }
    let mut frames = FRAMES.try_lock().ok()?;
    let cache = frames.get_or_insert_with(HashMap::new);
    if let Some(hit) = cache.get(location) {
        return hit.clone();
    }
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    let found = trace.lines().filter_map(|l| l.trim().strip_prefix("at ")).find_map(engine_relative);
    cache.insert(location.to_owned(), found.clone());
    found
}

/// `engine/src/…:line` of a path that lies in the engine crate.
fn engine_relative(path: &str) -> Option<String> {
    let at = path.find("engine/src/")?;
    let rel = &path[at..];
    // Backtraces print `file:line:column`; keep `file:line`.
    let mut parts = rel.splitn(3, ':');
    match (parts.next(), parts.next()) {
        (Some(file), Some(line)) => Some(format!("{file}:{line}")),
        _ => Some(rel.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_paths_are_recognised() {
        assert_eq!(
            engine_relative("/home/dev/unmask/engine/src/model/weights.rs:137:25").as_deref(),
            Some("engine/src/model/weights.rs:137")
        );
        assert_eq!(engine_relative("library/alloc/src/raw_vec.rs:25"), None);
    }
}
