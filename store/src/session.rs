//! Store sessions: each open [`crate::Store`] holds an exclusive OS lock on its own file under
//! `sessions/`. The OS drops the lock when the process dies (even by SIGKILL), so a run still
//! marked `running` whose session file can be locked by someone else belongs to a dead writer.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Result, StoreError};

/// The lock held by one open store.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) id: String,
    path: PathBuf,
    _file: File,
}

impl Session {
    /// Creates and locks a fresh session file in `dir`.
    pub(crate) fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        // Unique per process and per open (the counter separates two stores in one process).
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{}-{:x}-{n}", std::process::id(), nanos);
        let path = dir.join(format!("{id}.lock"));
        let file = OpenOptions::new().write(true).create_new(true).open(&path).map_err(|e| StoreError::io(&path, e))?;
        file.try_lock().map_err(|e| match e {
            TryLockError::Error(e) => StoreError::io(&path, e),
            TryLockError::WouldBlock => {
                StoreError::Internal(format!("{}: fresh session file is locked", path.display()))
            }
        })?;
        Ok(Session { id, path, _file: file })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Best effort: a leftover file is harmless (it can be locked, so it reads as dead).
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether session ids look like ours (digits, hex and `-`), so they are safe as file names.
fn is_session_id(id: &str) -> bool {
    !id.is_empty() && id.len() < 80 && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

/// Whether the session `id` is held by a live store (its lock file is locked by someone).
/// A dead session's file is removed.
pub(crate) fn is_alive(dir: &Path, id: &str) -> bool {
    if !is_session_id(id) {
        return false;
    }
    let path = dir.join(format!("{id}.lock"));
    let Ok(file) = OpenOptions::new().write(true).open(&path) else {
        return false;
    };
    match file.try_lock() {
        Ok(()) => {
            drop(file);
            let _ = std::fs::remove_file(&path);
            false
        }
        Err(TryLockError::WouldBlock) => true,
        // Cannot tell: assume alive rather than interrupt someone else's run.
        Err(TryLockError::Error(_)) => true,
    }
}

/// Removes session files left by dead processes.
pub(crate) fn sweep_dead(dir: &Path, own: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(id) = name.strip_suffix(".lock") {
            if id != own {
                is_alive(dir, id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_and_dead_sessions() {
        let dir = tempfile::tempdir().unwrap();
        let s = Session::create(dir.path()).unwrap();
        let t = Session::create(dir.path()).unwrap();
        assert_ne!(s.id, t.id);
        assert!(is_alive(dir.path(), &s.id));
        let id = t.id.clone();
        drop(t);
        assert!(!is_alive(dir.path(), &id));
        // A file left behind (as after a crash, where Drop never ran) can be locked: dead.
        std::fs::write(dir.path().join("123-abc-0.lock"), b"").unwrap();
        assert!(!is_alive(dir.path(), "123-abc-0"));
        assert!(!dir.path().join("123-abc-0.lock").exists());
        assert!(!is_alive(dir.path(), "../etc"));
        assert!(is_alive(dir.path(), &s.id));
    }
}
