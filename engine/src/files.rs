//! Opening the files of a model: only regular files (a folder, a FIFO or a device under a model's
//! name would fail obscurely or block forever), and text files only up to a size no real one
//! reaches, checked before they are read.

use std::io::{Error, ErrorKind};
use std::path::Path;

use crate::error::{EngineError, Result};

/// Largest JSON side file (config, tokenizer, index) read into memory.
pub const MAX_TEXT_FILE: u64 = 256 << 20;

/// Refuses anything but an existing regular file, naming what it is instead.
pub fn require_regular(path: &Path) -> Result<std::fs::Metadata> {
    let meta = std::fs::metadata(path).map_err(|e| EngineError::io(path, e))?;
    if meta.is_dir() {
        return Err(EngineError::io(path, Error::new(ErrorKind::InvalidInput, "is a folder, not a file")));
    }
    if !meta.is_file() {
        return Err(EngineError::io(
            path,
            Error::new(ErrorKind::InvalidInput, "is not a regular file (a pipe, socket or device)"),
        ));
    }
    Ok(meta)
}

/// Reads a text file of a model, refusing non-files and absurd sizes before reading.
pub fn read_text(path: &Path) -> Result<String> {
    let meta = require_regular(path)?;
    if meta.len() > MAX_TEXT_FILE {
        return Err(EngineError::io(
            path,
            Error::new(
                ErrorKind::InvalidData,
                format!("is {} MiB, more than the {} MiB a model's text file may have", meta.len() >> 20, MAX_TEXT_FILE >> 20),
            ),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| EngineError::io(path, e))?;
    String::from_utf8(bytes)
        .map_err(|e| EngineError::io(path, Error::new(ErrorKind::InvalidData, format!("is not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))))
}
