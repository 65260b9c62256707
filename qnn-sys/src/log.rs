//! Routes QNN's log callback into `tracing`.
//!
//! The callback receives a printf format plus a `va_list`. Stable Rust cannot name
//! `va_list`, but on x86-64 and AArch64 (Linux/Android) it crosses the call
//! boundary as one pointer-sized value, which `vsnprintf` accepts unchanged; on
//! other targets we log the raw format string.

use crate::ffi::{
    QNN_LOG_LEVEL_DEBUG, QNN_LOG_LEVEL_ERROR, QNN_LOG_LEVEL_INFO, QNN_LOG_LEVEL_VERBOSE, QNN_LOG_LEVEL_WARN,
};
use std::ffi::{c_char, c_void, CStr};

/// QNN log verbosity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings and errors (the reference bring-up default).
    Warn,
    /// Info.
    Info,
    /// Verbose.
    Verbose,
    /// Debug.
    Debug,
}

impl LogLevel {
    /// The QNN numeric level.
    pub fn raw(self) -> u32 {
        match self {
            LogLevel::Error => QNN_LOG_LEVEL_ERROR,
            LogLevel::Warn => QNN_LOG_LEVEL_WARN,
            LogLevel::Info => QNN_LOG_LEVEL_INFO,
            LogLevel::Verbose => QNN_LOG_LEVEL_VERBOSE,
            LogLevel::Debug => QNN_LOG_LEVEL_DEBUG,
        }
    }
}

#[cfg(all(any(target_os = "linux", target_os = "android"), any(target_arch = "x86_64", target_arch = "aarch64")))]
extern "C" {
    // `va_list` declared as an opaque pointer: see module docs for why this is sound here.
    fn vsnprintf(buf: *mut c_char, size: usize, fmt: *const c_char, args: *mut c_void) -> i32;
}

/// Formats `fmt` with `args` into a `String`.
///
/// # Safety
/// `fmt` is a valid C string and `args` the matching `va_list` from the caller.
unsafe fn format_message(fmt: *const c_char, args: *mut c_void) -> String {
    #[cfg(all(any(target_os = "linux", target_os = "android"), any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let mut buf = vec![0u8; 1024];
        // SAFETY: buf is writable for its length; fmt/args come straight from QNN. The va_list is
        // consumed once, so a truncated message stays truncated rather than being re-formatted.
        let n = unsafe { vsnprintf(buf.as_mut_ptr().cast(), buf.len(), fmt, args) };
        if n >= 0 {
            let end = (n as usize).min(buf.len() - 1);
            return String::from_utf8_lossy(&buf[..end]).into_owned();
        }
    }
    #[cfg(not(all(
        any(target_os = "linux", target_os = "android"),
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    let _ = args;
    // SAFETY: fmt is a valid C string per the contract.
    unsafe { CStr::from_ptr(fmt) }.to_string_lossy().into_owned()
}

/// The `extern "C"` callback handed to `logCreate`.
pub(crate) unsafe extern "C" fn log_callback(fmt: *const c_char, level: u32, timestamp: u64, args: *mut c_void) {
    if fmt.is_null() {
        return;
    }
    // Never unwind across the FFI boundary.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: fmt is non-null and NUL-terminated, args is the caller's va_list.
        let msg = unsafe { format_message(fmt, args) };
        let msg = msg.trim_end();
        match level {
            QNN_LOG_LEVEL_ERROR => tracing::error!(target: "qnn", timestamp, "{msg}"),
            QNN_LOG_LEVEL_WARN => tracing::warn!(target: "qnn", timestamp, "{msg}"),
            QNN_LOG_LEVEL_INFO => tracing::info!(target: "qnn", timestamp, "{msg}"),
            QNN_LOG_LEVEL_VERBOSE => tracing::debug!(target: "qnn", timestamp, "{msg}"),
            _ => tracing::trace!(target: "qnn", timestamp, "{msg}"),
        }
    });
}
