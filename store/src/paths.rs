//! Where things live: the data folder, and names that are safe to turn into paths inside it.

use std::path::{Component, Path, PathBuf};

use crate::error::{Result, StoreError};

/// Environment variable that overrides the data folder.
pub const DATA_DIR_ENV: &str = "UNMASK_DATA_DIR";
/// File name of the database inside the data folder.
pub const DATABASE_FILE: &str = "unmask.db";
/// Folder of managed models inside the data folder.
pub const MODELS_DIR: &str = "models";
/// Folder (inside `models/`) holding partial downloads, one subfolder per repo and revision.
pub const DOWNLOADS_DIR: &str = ".downloads";
/// Folder holding one lock file per open store session (used to detect dead writers).
pub const SESSIONS_DIR: &str = "sessions";

/// The platform's data folder for Unmask, or `$UNMASK_DATA_DIR` when set.
///
/// Linux: `$XDG_DATA_HOME/unmask` or `~/.local/share/unmask`; macOS:
/// `~/Library/Application Support/unmask`; Windows: `%APPDATA%\unmask` (roaming AppData).
/// Android and iOS have no such folder for a native library: the app passes its own data
/// directory to [`crate::Store::open`] (Tauri's `app_data_dir()`), so this returns
/// [`StoreError::NoDataDir`] there unless `UNMASK_DATA_DIR` is set.
pub fn default_data_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(DATA_DIR_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    platform_data_dir().ok_or(StoreError::NoDataDir)
}

#[cfg(not(any(target_os = "android", target_os = "ios")))]
fn platform_data_dir() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("unmask"))
}

#[cfg(any(target_os = "android", target_os = "ios"))]
fn platform_data_dir() -> Option<PathBuf> {
    None
}

/// Checks a model or repo name component: 1–128 characters from `[A-Za-z0-9._-]`, not starting
/// with `.` (hidden) and not `.`/`..`.
fn check_component(name: &str, whole: &str) -> Result<()> {
    if name.is_empty() {
        return Err(StoreError::unsafe_name(whole, "empty path component"));
    }
    if name.len() > 128 {
        return Err(StoreError::unsafe_name(whole, "component longer than 128 characters"));
    }
    if name.starts_with('.') {
        return Err(StoreError::unsafe_name(whole, "component starts with `.`"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(StoreError::unsafe_name(whole, format!("character {c:?} not allowed")));
    }
    if is_windows_reserved(name) {
        return Err(StoreError::unsafe_name(whole, "reserved file name on Windows"));
    }
    Ok(())
}

fn is_windows_reserved(name: &str) -> bool {
    let stem = name.split('.').next().unwrap_or("").to_ascii_uppercase();
    matches!(stem.as_str(), "CON" | "PRN" | "AUX" | "NUL")
        || ((stem.starts_with("COM") || stem.starts_with("LPT"))
            && stem.len() == 4
            && stem.as_bytes()[3].is_ascii_digit())
}

/// A relative path from a remote listing (`"model.safetensors"`, `"onnx/model.bin"`), checked so
/// that joining it to a folder stays inside that folder: `/`-separated components that each pass
/// the name rules (no `..`, no absolute paths, no drive letters, no backslashes, no hidden files).
pub fn safe_relative_path(path: &str) -> Result<PathBuf> {
    if path.is_empty() {
        return Err(StoreError::unsafe_name(path, "empty path"));
    }
    if path.starts_with('/') {
        return Err(StoreError::unsafe_name(path, "absolute path"));
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts.len() > 8 {
        return Err(StoreError::unsafe_name(path, "more than 8 levels of folders"));
    }
    let mut out = PathBuf::new();
    for p in parts {
        if p == ".." || p == "." {
            return Err(StoreError::unsafe_name(path, "`.` or `..` component"));
        }
        check_component(p, path)?;
        out.push(p);
    }
    // Defence in depth: the result must consist of normal components only.
    if !out.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(StoreError::unsafe_name(path, "not a plain relative path"));
    }
    Ok(out)
}

/// A Hugging Face repo id `owner/name` (or a bare `name`), checked with the name rules.
pub fn check_repo_id(repo: &str) -> Result<()> {
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.is_empty() || parts.len() > 2 {
        return Err(StoreError::unsafe_name(repo, "repo id must be `owner/name` or `name`"));
    }
    for p in parts {
        check_component(p, repo)?;
    }
    Ok(())
}

/// Checks a model name given by the user. It doubles as the model's folder name under
/// `models/`, so it follows the name rules (letters, digits, `.`, `_`, `-`).
pub fn check_model_name(name: &str) -> Result<()> {
    check_component(name, name)
}

/// A model name derived from a file or folder name: disallowed characters become `-`.
pub fn model_name_from(raw: &str) -> String {
    let mut s: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' }).collect();
    while s.starts_with('.') || s.starts_with('-') {
        s.remove(0);
    }
    s.truncate(128);
    if s.is_empty() || is_windows_reserved(&s) {
        s = format!("model-{s}");
    }
    s
}

/// Turns a stored model path (relative to the data folder, or absolute for in-place models)
/// into an absolute path.
pub fn resolve_stored(data_dir: &Path, stored: &str) -> PathBuf {
    let p = Path::new(stored);
    if p.is_absolute() {
        p.to_owned()
    } else {
        // Stored relative paths always use `/`.
        stored.split('/').fold(data_dir.to_owned(), |acc, c| acc.join(c))
    }
}

/// The stored form of a path relative to the data folder: components joined with `/`.
pub fn to_stored(rel: &Path) -> String {
    rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect::<Vec<_>>().join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_cannot_escape() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/./b",
            "a//b",
            "a\\..\\b",
            "C:/x",
            "c:x",
            ".hidden",
            "a/.git/config",
            "nul",
            "COM1.txt",
            "a\0b",
            "a b",
            "x/",
        ] {
            assert!(safe_relative_path(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(safe_relative_path("model.safetensors").unwrap(), PathBuf::from("model.safetensors"));
        assert_eq!(safe_relative_path("onnx/model-00001.bin").unwrap(), Path::new("onnx").join("model-00001.bin"));
    }

    #[test]
    fn repo_ids_and_names() {
        assert!(check_repo_id("GSAI-ML/LLaDA-8B-Instruct").is_ok());
        assert!(check_repo_id("gpt2").is_ok());
        assert!(check_repo_id("a/b/c").is_err());
        assert!(check_repo_id("../x").is_err());
        assert!(check_repo_id("a/..").is_err());
        assert!(check_model_name("tiny-llada").is_ok());
        assert!(check_model_name("a/b").is_err());
        assert!(check_model_name("..").is_err());
        assert_eq!(model_name_from("My Model (Q8)"), "My-Model--Q8-");
        assert_eq!(model_name_from("..."), "model-");
        assert_eq!(model_name_from("CON"), "model-CON");
    }

    #[test]
    fn stored_paths_round_trip() {
        let base = Path::new("/data");
        let rel = Path::new("models").join("m").join("x.gguf");
        let s = to_stored(&rel);
        assert_eq!(s, "models/m/x.gguf");
        assert_eq!(resolve_stored(base, &s), base.join("models").join("m").join("x.gguf"));
        assert_eq!(resolve_stored(base, "/abs/m"), PathBuf::from("/abs/m"));
    }
}
