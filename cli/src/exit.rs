//! Exit codes scripts can rely on, and the mapping from errors to them.

use unmask_engine::EngineError;
use unmask_store::StoreError;

/// Success.
pub const OK: u8 = 0;
/// Anything not covered below (internal failures).
pub const OTHER: u8 = 1;
/// Bad command line: unknown flag, bad value, missing argument (clap's own code).
pub const USAGE: u8 = 2;
/// A model, file, backend or stored record that is missing or unusable (corrupt file, unknown
/// device, QNN library not found, unknown run).
pub const UNAVAILABLE: u8 = 3;
/// A request that does not fit: settings invalid for the model or prompt, name taken, unsafe name.
pub const INVALID: u8 = 4;
/// Cancelled (Ctrl-C); a partial download is kept and the same command resumes it.
pub const CANCELLED: u8 = 5;
/// The store or the network failed: database error, download failed after its retries,
/// checksum or size mismatch of downloaded data.
pub const STORE: u8 = 6;

/// Text for `--help`.
pub const HELP: &str = "Exit codes: 0 ok · 1 other failure · 2 bad command line · 3 model, file, backend or run \
missing or unusable (incl. corrupt files) · 4 request does not fit (settings vs model/prompt, name taken) · \
5 cancelled (a partial download resumes on the next call) · 6 store or download failure (database, network, checksum)";

/// An error that carries its own exit code.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// An error with an explicit exit code.
pub fn fail(code: u8, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(CliError { code, message: message.into() })
}

fn engine_code(e: &EngineError) -> u8 {
    match e {
        EngineError::InvalidRequest(_) | EngineError::ContextOverflow { .. } => INVALID,
        EngineError::Cancelled => CANCELLED,
        _ => UNAVAILABLE,
    }
}

fn store_code(e: &StoreError) -> u8 {
    match e {
        StoreError::InvalidModel(inner) => engine_code(inner),
        StoreError::Io { .. } | StoreError::NotFound { .. } | StoreError::NoDataDir => UNAVAILABLE,
        StoreError::DuplicateName(_)
        | StoreError::DuplicateModel { .. }
        | StoreError::UnsafeName { .. }
        | StoreError::InvalidRequest(_) => INVALID,
        StoreError::Cancelled => CANCELLED,
        StoreError::Database(_)
        | StoreError::Migration(_)
        | StoreError::Corrupt { .. }
        | StoreError::Download { .. }
        | StoreError::HttpStatus { .. }
        | StoreError::SizeMismatch { .. }
        | StoreError::ChecksumMismatch { .. }
        | StoreError::Stalled { .. } => STORE,
        StoreError::Internal(_) => OTHER,
    }
}

/// An error and its causes on one line, each cause shown once: many errors already include
/// their source's text, which a plain `{:#}` would repeat ("...(os error 2): ...(os error 2)").
pub fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The exit code of an error: the first typed cause in the chain decides.
pub fn code_of(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if let Some(c) = cause.downcast_ref::<CliError>() {
            return c.code;
        }
        if let Some(s) = cause.downcast_ref::<StoreError>() {
            return store_code(s);
        }
        if let Some(en) = cause.downcast_ref::<EngineError>() {
            return engine_code(en);
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::NotFound {
                return UNAVAILABLE;
            }
        }
    }
    OTHER
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_causes_decide_through_context() {
        let e = anyhow::Error::new(EngineError::InvalidRequest("x".into())).context("decoding");
        assert_eq!(code_of(&e), INVALID);
        let e = anyhow::Error::new(StoreError::Cancelled).context("download");
        assert_eq!(code_of(&e), CANCELLED);
        let e = anyhow::Error::new(StoreError::HttpStatus { url: "u".into(), status: 500 });
        assert_eq!(code_of(&e), STORE);
        let e = anyhow::Error::new(StoreError::InvalidModel(EngineError::Cancelled));
        assert_eq!(code_of(&e), CANCELLED);
        assert_eq!(code_of(&fail(UNAVAILABLE, "no such run")), UNAVAILABLE);
        assert_eq!(code_of(&anyhow::anyhow!("plain")), OTHER);
    }

    #[test]
    fn one_line_shows_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = anyhow::Error::new(EngineError::io("/m/config.json", io)).context("loading model");
        assert_eq!(one_line(&e), "loading model: /m/config.json: gone");
        let e = anyhow::anyhow!("two\nlines").context("ctx");
        assert_eq!(one_line(&e), "ctx: two lines");
    }
}
