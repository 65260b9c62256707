//! The regression folder: crashing inputs kept as `<dir>/<target>/<name>.bin` and replayed by the
//! tests forever after.

use std::path::{Path, PathBuf};

/// A stored regression input.
#[derive(Debug, Clone)]
pub struct Regression {
    /// Target it belongs to (the folder name).
    pub target: String,
    /// The file.
    pub path: PathBuf,
    /// Its bytes.
    pub input: Vec<u8>,
}

/// FNV-1a: a stable name for an input (std's hasher is not stable across releases).
pub fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// Saves `input` as `<dir>/<target>/<kind>-<fingerprint>.bin` and returns the path.
pub fn save(dir: &Path, target: &str, kind: &str, input: &[u8]) -> std::io::Result<PathBuf> {
    let folder = dir.join(target);
    std::fs::create_dir_all(&folder)?;
    let path = folder.join(format!("{kind}-{:016x}.bin", fingerprint(input)));
    std::fs::write(&path, input)?;
    Ok(path)
}

/// Every `*.bin` under `<dir>/<target>/`, sorted by path (a missing folder holds none).
pub fn load_all(dir: &Path) -> std::io::Result<Vec<Regression>> {
    let mut out = Vec::new();
    let Ok(targets) = std::fs::read_dir(dir) else { return Ok(out) };
    for t in targets {
        let t = t?;
        if !t.file_type()?.is_dir() {
            continue;
        }
        let target = t.file_name().to_string_lossy().into_owned();
        for f in std::fs::read_dir(t.path())? {
            let path = f?.path();
            if path.extension().and_then(|e| e.to_str()) == Some("bin") {
                let input = std::fs::read(&path)?;
                out.push(Regression { target: target.clone(), path, input });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}
