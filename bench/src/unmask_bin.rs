//! The `unmask` binary the server and robustness suites run: built in the dev profile (like this
//! harness) and found next to the harness's own executable.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Builds `unmask` and returns its path.
pub fn build_unmask(root: &Path) -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-q", "-p", "unmask-cli", "--bin", "unmask"])
        .current_dir(root)
        .status()
        .context("running cargo build for unmask")?;
    if !status.success() {
        bail!("cargo build -p unmask-cli failed ({status})");
    }
    let bin = std::env::current_exe()?.parent().map(|d| d.join("unmask")).context("locating the target folder")?;
    if !bin.exists() {
        bail!("{} missing after cargo build", bin.display());
    }
    Ok(bin)
}
